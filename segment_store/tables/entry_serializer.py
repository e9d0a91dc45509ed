"""How table entries are laid out in a table segment, and reading them back from any offset range.

One entry (after Pravega's ``EntrySerializer``, plus a checksum), big-endian::

    u8   format          0
    i32  key length      1..MAX_KEY_BYTES
    i32  value length    0..MAX_VALUE_BYTES, or -1 for a removal (no value bytes follow)
    i64  entry version   NO_VERSION: the entry's version is its own offset; otherwise the version it
                         keeps after a compaction copied it
    u32  crc32           of the 17 bytes above, the key and the value
    key bytes, value bytes

An update batch is its entries back to back, written with one append, so it is all-or-nothing.
Reads (:func:`scan`) tolerate any split of the bytes: an entry spanning two reads is reassembled.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass

from segment_store.tables.entries import MAX_KEY_BYTES, MAX_VALUE_BYTES, NO_VERSION
from segment_store.tables.host import SegmentHost
from segstore_shared.table_errors import TableDataCorruptedError

FORMAT = 0
REMOVAL = -1
_FIXED = struct.Struct(">biiq")
_CRC = struct.Struct(">I")
HEADER_BYTES = _FIXED.size + _CRC.size


class EntryFormatError(ValueError):
    """Bytes that are not a table entry (the reader turns it into :class:`TableDataCorruptedError`)."""


@dataclass(frozen=True, slots=True)
class ParsedEntry:
    """An entry read from the segment: ``offset`` where it starts, ``length`` its serialized size.

    ``value`` is None for removals, and for updates when the reader was asked not to copy values.
    """

    offset: int
    length: int
    key: bytes
    value: bytes | None
    removed: bool
    explicit_version: int

    @property
    def version(self) -> int:
        return self.offset if self.explicit_version == NO_VERSION else self.explicit_version


def entry_length(key_length: int, value_length: int) -> int:
    """Serialized size of an update (``value_length`` >= 0) or a removal (``value_length`` = -1)."""
    return HEADER_BYTES + key_length + max(0, value_length)


def _put(parts: list[bytes], key: bytes, value: bytes | None, explicit_version: int) -> int:
    value_length = REMOVAL if value is None else len(value)
    fixed = _FIXED.pack(FORMAT, len(key), value_length, explicit_version)
    crc = zlib.crc32(key, zlib.crc32(fixed))
    if value:
        crc = zlib.crc32(value, crc)
    parts.append(fixed)
    parts.append(_CRC.pack(crc))
    parts.append(key)
    if value:
        parts.append(value)
    return HEADER_BYTES + len(key) + max(0, value_length)


def serialize(items: Sequence[tuple[bytes, bytes | None, int]]) -> tuple[bytes, list[int]]:
    """Serialize ``(key, value or None for a removal, explicit version)`` items back to back.

    Returns the bytes and each item's offset within them. Limits are the caller's to check.
    """
    parts: list[bytes] = []
    positions: list[int] = []
    position = 0
    for key, value, version in items:
        positions.append(position)
        position += _put(parts, key, value, version)
    return b"".join(parts), positions


def parse(buffer: bytes | memoryview, base_offset: int, with_values: bool = True) -> tuple[list[ParsedEntry], int]:
    """Parse the whole entries at the start of ``buffer`` (segment offset ``base_offset``).

    Returns them and the number of bytes they take; an incomplete entry at the end is left unparsed.
    Raises :class:`EntryFormatError` at a header or checksum that does not hold.
    """
    view = memoryview(buffer)
    entries: list[ParsedEntry] = []
    position = 0
    size = len(view)
    while size - position >= HEADER_BYTES:
        fmt, key_length, value_length, explicit_version = _FIXED.unpack_from(view, position)
        (crc,) = _CRC.unpack_from(view, position + _FIXED.size)
        if fmt != FORMAT:
            raise EntryFormatError(f"unknown entry format {fmt} at offset {base_offset + position}")
        if not 0 < key_length <= MAX_KEY_BYTES or not (value_length == REMOVAL or 0 <= value_length <= MAX_VALUE_BYTES):
            raise EntryFormatError(
                f"bad lengths (key {key_length}, value {value_length}) at offset {base_offset + position}"
            )
        length = HEADER_BYTES + key_length + max(0, value_length)
        if size - position < length:
            break
        key_start = position + HEADER_BYTES
        value_start = key_start + key_length
        end = position + length
        actual = zlib.crc32(view[key_start:end], zlib.crc32(view[position : position + _FIXED.size]))
        if actual != crc:
            raise EntryFormatError(f"checksum mismatch at offset {base_offset + position}")
        removed = value_length == REMOVAL
        value = bytes(view[value_start:end]) if with_values and not removed else None
        entries.append(
            ParsedEntry(
                offset=base_offset + position,
                length=length,
                key=bytes(view[key_start:value_start]),
                value=value,
                removed=removed,
                explicit_version=explicit_version,
            )
        )
        position = end
    return entries, position


async def read_exact(host: SegmentHost, name: str, offset: int, length: int) -> bytes:
    """Read exactly ``length`` committed bytes at ``offset`` (a read may return fewer; this repeats)."""
    parts: list[bytes] = []
    position, end = offset, offset + length
    while position < end:
        result = await host.read(name, position, end - position)
        if not result.data:
            raise TableDataCorruptedError(name, position, f"segment ended before {end}")
        parts.append(result.data)
        position += len(result.data)
    return parts[0] if len(parts) == 1 else b"".join(parts)


async def read_entry(host: SegmentHost, name: str, offset: int, length: int) -> ParsedEntry:
    """The one entry of ``length`` bytes at ``offset``."""
    data = await read_exact(host, name, offset, length)
    try:
        entries, consumed = parse(data, offset)
    except EntryFormatError as e:
        raise TableDataCorruptedError(name, offset, str(e)) from e
    if consumed != length or len(entries) != 1:
        raise TableDataCorruptedError(name, offset, f"expected one entry of {length} bytes")
    return entries[0]


async def scan(
    host: SegmentHost, name: str, start: int, end: int, chunk_bytes: int, with_values: bool = True
) -> AsyncGenerator[ParsedEntry, None]:
    """Every entry in ``[start, end)``, in segment order; ``start`` and ``end`` must be entry boundaries.

    Reads at most ``chunk_bytes`` at a time, more only to complete an entry longer than that.
    """
    pending = b""
    position = start  # segment offset of pending[0]
    read_to = start
    while read_to < end:
        want = min(end - read_to, max(chunk_bytes, HEADER_BYTES))
        result = await host.read(name, read_to, want)
        if not result.data:
            raise TableDataCorruptedError(name, read_to, f"segment ended before {end}")
        read_to += len(result.data)
        pending = pending + result.data if pending else result.data
        try:
            entries, consumed = parse(pending, position, with_values)
        except EntryFormatError as e:
            raise TableDataCorruptedError(name, position, str(e)) from e
        for entry in entries:
            yield entry
        pending = pending[consumed:]
        position += consumed
    if pending:
        raise TableDataCorruptedError(name, position, f"{len(pending)} bytes before {end} are not a whole entry")
