"""Stream cuts in the Pravega client's text form: what Java's ``StreamCut.asText()`` writes and ``StreamCut.from``
reads, and so what the Pravega Spark connector takes in ``start_stream_cut``/``end_stream_cut`` and gives in its
``metadata=StreamInfo`` rows.

The form (``io.pravega.client.stream.impl.StreamCutImpl.asText`` with ``ToStringUtils.compressToBase64``) is text,
gzip-compressed, then Base64 (the standard alphabet, padded)::

    0:<scope>/<stream>:<segment numbers>:<epochs>:<offsets>

``0`` is the version; each list is comma-separated, one entry per segment in the same order. A segment id is
``epoch << 32 | number`` (Pravega's ``NameUtils.computeSegmentId``). Java's ``GZIPOutputStream`` writes a header
with no time (0), no extra flags and, since JDK 16, operating system 255 (unknown; older JDKs write 0): this module
writes that header and reads any gzip. Python's ``zlib`` at its default level makes the same deflate bytes as Java's
``Deflater``, so a cut encodes to exactly the string the JVM gives for the same segments in the same order (here:
ascending segment id). ``StreamCut.UNBOUNDED`` has the text ``UNBOUNDED``, not a cut: the options take it as the
word ``unbounded``.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import io
import struct
import zlib
from collections.abc import Mapping

from controller_client.model import InvalidModelError, StreamCut
from pravega_spark.errors import StreamCutTextError

VERSION = "0"
_GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
"""magic, deflate, no flags, mtime 0, no extra flags, OS 255: as Java's GZIPOutputStream (JDK 16 on) writes it."""
_MAX_TEXT = 16 * 1024 * 1024


def encode_text(scope: str, stream: str, positions: Mapping[int, int]) -> str:
    """The Base64 text of a cut of ``scope/stream`` at ``positions`` (segment id -> offset), segments in ascending
    id order."""
    ids = sorted(positions)
    text = ":".join(
        [
            VERSION,
            f"{scope}/{stream}",
            ",".join(str(s & 0xFFFFFFFF) for s in ids),
            ",".join(str(s >> 32) for s in ids),
            ",".join(str(positions[s]) for s in ids),
        ]
    )
    data = text.encode()
    deflate = zlib.compressobj(zlib.Z_DEFAULT_COMPRESSION, zlib.DEFLATED, -zlib.MAX_WBITS)
    body = deflate.compress(data) + deflate.flush()
    trailer = struct.pack("<II", zlib.crc32(data), len(data) & 0xFFFFFFFF)
    return base64.b64encode(_GZIP_HEADER + body + trailer).decode("ascii")


def decode_text(text: str) -> tuple[str, str, dict[int, int]]:
    """``(scope, stream, positions)`` of a cut's Base64 text. Raises StreamCutTextError."""
    compact = "".join(text.split())
    try:
        packed = base64.b64decode(compact + "=" * (-len(compact) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise StreamCutTextError("not Base64") from None
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(packed)) as unpacked:
            raw = unpacked.read(_MAX_TEXT + 1)
    except (OSError, EOFError, zlib.error) as error:
        raise StreamCutTextError(f"Base64 but not gzip ({error})") from None
    if len(raw) > _MAX_TEXT:
        raise StreamCutTextError("longer than any stream cut")
    try:
        plain = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise StreamCutTextError("its text is not UTF-8") from None
    parts = plain.split(":", 4)
    if len(parts) != 5:
        raise StreamCutTextError(f"expected 'version:scope/stream:numbers:epochs:offsets', got {plain[:200]!r}")
    version, scoped, numbers, epochs, offsets = parts
    if version != VERSION:
        raise StreamCutTextError(f"version {version!r}, only {VERSION!r} is known")
    scope, slash, stream = scoped.partition("/")
    if not slash or not scope or not stream:
        raise StreamCutTextError(f"{scoped!r} is not 'scope/stream'")
    try:
        columns = [[int(v.strip()) for v in column.split(",")] for column in (numbers, epochs, offsets)]
    except ValueError:
        raise StreamCutTextError(f"segment numbers, epochs and offsets must be integers: {plain[:200]!r}") from None
    if len({len(c) for c in columns}) != 1:
        raise StreamCutTextError(f"as many segment numbers, epochs and offsets are needed: {plain[:200]!r}")
    positions: dict[int, int] = {}
    for number, epoch, offset in zip(*columns, strict=True):
        if not 0 <= epoch < 1 << 31 or not -(1 << 31) <= number < 1 << 31:
            raise StreamCutTextError(f"segment number {number} / epoch {epoch} out of range")
        segment = (epoch << 32) | (number & 0xFFFFFFFF)
        if segment in positions:
            raise StreamCutTextError(f"segment {segment} appears twice")
        positions[segment] = offset
    return scope, stream, dict(sorted(positions.items()))


def stream_cut_to_base64(cut: StreamCut) -> str:
    """``cut`` as the Pravega client's ``StreamCut.asText()`` writes it (the Pravega Spark connector's form)."""
    return encode_text(cut.scope, cut.stream, cut.positions)


def stream_cut_from_base64(text: str) -> StreamCut:
    """The stream cut of a Base64 text that Pravega's ``StreamCut.asText()`` wrote. Raises StreamCutTextError."""
    scope, stream, positions = decode_text(text)
    try:
        return StreamCut(scope, stream, positions)
    except InvalidModelError as error:
        raise StreamCutTextError(str(error)) from None
