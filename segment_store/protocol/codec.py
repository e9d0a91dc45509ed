"""Frame encoding and the incremental frame decoder.

A frame is ``type code int32 | payload length int32 | payload``, big-endian, the payload at most
``MAX_FRAME_PAYLOAD`` (16 MiB - 1) bytes. Encoding produces whole frames; :class:`FrameDecoder` takes
bytes in arbitrary pieces and yields commands in wire order.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Iterator

from segment_store.protocol import commands as _commands  # noqa: F401  (registers every command)
from segment_store.protocol.constants import HEADER, HEADER_SIZE, MAX_FRAME_PAYLOAD
from segment_store.protocol.errors import ProtocolError, detached, next_ready
from segment_store.protocol.registry import BODY_DECODERS, WireCommand, command_class
from segment_store.protocol.types import Buffer

_DECODE_FAILURES = (ProtocolError, struct.error, ValueError, IndexError, OverflowError, TypeError)


def _encode_parts(command: WireCommand) -> list[Buffer]:
    parts: list[Buffer] = [b""]
    try:
        command.write_fields(parts)
    except ProtocolError as exc:
        raise ProtocolError(f"cannot encode {type(command).__name__}: {exc}") from None
    except (struct.error, ValueError, TypeError, OverflowError, AttributeError) as exc:
        raise ProtocolError(f"cannot encode {type(command).__name__}: {exc}") from None
    length = sum(len(p) for p in parts)
    if length > MAX_FRAME_PAYLOAD:
        raise ProtocolError(
            f"{type(command).__name__} payload of {length} bytes exceeds the {MAX_FRAME_PAYLOAD}-byte frame limit"
        )
    parts[0] = HEADER.pack(command.TYPE_CODE, length)
    return parts


def encode(command: WireCommand) -> bytes:
    """Encode one command as a complete frame (header + payload).

    Raises ProtocolError naming the command if a field cannot be encoded (integer out of range, string
    over 65535 bytes or with a lone surrogate, mismatched list lengths) or the payload exceeds the frame
    limit. Fields are written in Java's ``writeFields`` order, optional trailing fields included.
    """
    return b"".join(_encode_parts(command))


def encode_into(buffer: bytearray, command: WireCommand) -> int:
    """Append the frame of ``command`` to ``buffer``; return the number of bytes appended.

    Raises like :func:`encode`; on error ``buffer`` is left unchanged.
    """
    parts = _encode_parts(command)
    before = len(buffer)
    for part in parts:
        buffer += part
    return len(buffer) - before


def encode_many(commands: list[WireCommand]) -> bytes:
    """Encode several commands back to back, in order, as one ``bytes``. Raises like :func:`encode`."""
    out = bytearray()
    for command in commands:
        encode_into(out, command)
    return bytes(out)


def decode_body(type_code: int, body: memoryview) -> WireCommand:
    """Decode one frame payload of the given type code.

    Raises ProtocolError naming the code if it is unknown, or naming the command and field if the body
    is shorter or longer than the command's fields or holds an invalid value.
    """
    decoder = BODY_DECODERS.get(type_code)
    if decoder is None:
        raise ProtocolError(f"unknown wire command type code {type_code}")
    try:
        return decoder(body)
    except _DECODE_FAILURES as exc:
        raise _malformed(type_code, body, exc) from None


def _malformed(type_code: int, body: memoryview, exc: Exception) -> ProtocolError:
    detail = str(exc) if isinstance(exc, ProtocolError) else repr(exc)
    return ProtocolError(f"malformed {command_class(type_code).__name__} frame ({len(body)} bytes): {detail}")


def decode_all(data: Buffer, max_frame_payload: int = MAX_FRAME_PAYLOAD) -> list[WireCommand]:
    """Decode a buffer holding only whole frames. Raises ProtocolError on any bad or incomplete frame."""
    decoder = FrameDecoder(max_frame_payload)
    decoder.feed(data)
    commands = list(decoder)
    if decoder.buffered_bytes:
        raise ProtocolError(f"{decoder.buffered_bytes} trailing byte(s) do not form a whole frame")
    return commands


class FrameDecoder:
    """Sans-I/O incremental decoder: ``feed`` bytes split anywhere, iterate complete commands.

    Ordering: commands come out in wire order. A protocol error is raised by iteration at its place in
    the stream, after every command that preceded it; from then on iteration keeps raising it and
    ``feed`` raises it too (the connection is dead). ``feed`` itself never raises for new bad bytes.

    Memory: a frame whose header is complete is validated at once (type code known, length within
    ``max_frame_payload``), before its payload arrives. Whole frames are decoded straight from the
    caller's buffer; only an incomplete frame's bytes are copied, so :attr:`buffered_bytes` never exceeds
    ``HEADER_SIZE + max_frame_payload``. Payloads come out as ``bytes`` (one copy from the input).
    """

    __slots__ = ("_buf", "_error", "_expected", "_max", "_ready")

    def __init__(self, max_frame_payload: int = MAX_FRAME_PAYLOAD) -> None:
        if not 0 <= max_frame_payload <= MAX_FRAME_PAYLOAD:
            raise ValueError(f"max_frame_payload must be within 0..{MAX_FRAME_PAYLOAD}")
        self._max = max_frame_payload
        self._buf = bytearray()  # bytes of the one incomplete frame, header included
        self._expected = -1  # total size of that frame once its header is known, else -1
        self._ready: deque[WireCommand | ProtocolError] = deque()
        self._error: ProtocolError | None = None

    @property
    def buffered_bytes(self) -> int:
        """Bytes of the incomplete frame held back (at most ``HEADER_SIZE + max_frame_payload``)."""
        return len(self._buf)

    @property
    def failed(self) -> bool:
        """True once bad input has been seen (its error may still be waiting behind good commands)."""
        return self._error is not None

    def feed(self, data: Buffer) -> None:
        """Take the next bytes of the stream. Raises the stored ProtocolError if the decoder has failed."""
        if self._error is not None:
            raise self._error.with_traceback(None)
        view = memoryview(data)
        if view.ndim != 1 or view.itemsize != 1:
            view = view.cast("B")
        try:
            self._consume(view)
        except ProtocolError as exc:
            self._fail(detached(exc))

    def __iter__(self) -> Iterator[WireCommand]:
        return self

    def __next__(self) -> WireCommand:
        return next_ready(self._ready)

    def next_command(self) -> WireCommand | None:
        """The next complete command, or None if none is ready. Raises a ProtocolError in its turn."""
        return next(self, None)

    def _fail(self, error: ProtocolError) -> None:
        self._error = error
        self._ready.append(error)
        self._buf = bytearray()
        self._expected = -1

    def _header_error(self, type_code: int, length: int) -> ProtocolError:
        if length < 0 or length > self._max:
            return ProtocolError(f"frame of type {type_code} declares {length} payload bytes; allowed 0..{self._max}")
        return ProtocolError(f"unknown wire command type code {type_code}")

    def _check_header(self, type_code: int, length: int) -> int:
        if type_code not in BODY_DECODERS or not 0 <= length <= self._max:
            raise self._header_error(type_code, length)
        return HEADER_SIZE + length

    def _consume(self, view: memoryview) -> None:
        pos = 0
        size = len(view)
        if self._buf:
            pos = self._finish_buffered(view)
            if self._buf:
                return
        ready, unpack, decoders, limit = self._ready, HEADER.unpack_from, BODY_DECODERS, self._max
        while size - pos >= HEADER_SIZE:
            type_code, length = unpack(view, pos)
            decoder = decoders.get(type_code)
            if decoder is None or not 0 <= length <= limit:
                raise self._header_error(type_code, length)
            end = pos + HEADER_SIZE + length
            if end > size:
                self._expected = end - pos
                break
            body = view[pos + HEADER_SIZE : end]
            try:
                ready.append(decoder(body))
            except _DECODE_FAILURES as exc:
                raise _malformed(type_code, body, exc) from None
            pos = end
        if pos < size:
            self._buf += view[pos:]

    def _finish_buffered(self, view: memoryview) -> int:
        """Complete the buffered frame from the front of ``view``; return how many bytes were taken."""
        buf = self._buf
        pos = 0
        if self._expected < 0:
            take = min(HEADER_SIZE - len(buf), len(view))
            buf += view[:take]
            pos = take
            if len(buf) < HEADER_SIZE:
                return pos
            self._expected = self._check_header(*HEADER.unpack_from(buf, 0))
        take = min(self._expected - len(buf), len(view) - pos)
        buf += view[pos : pos + take]
        pos += take
        if len(buf) < self._expected:
            return pos
        # Swap in a fresh buffer: the one decoded from is never resized while a view of it exists.
        frame, self._buf, self._expected = buf, bytearray(), -1
        type_code = HEADER.unpack_from(frame, 0)[0]
        self._ready.append(decode_body(type_code, memoryview(frame)[HEADER_SIZE:]))
        return pos
