"""Event framing inside segment data: what appends store and what readers parse.

Each event is ``int32 0 (the Event type code) | int32 length | payload``, big-endian, back to back. The
append path stores these bytes verbatim (a block's data is already framed this way); readers split a
segment's bytes back into events with :class:`EventParser`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from typing import NamedTuple

from segment_store.protocol.constants import EVENT_TYPE_CODE, HEADER, HEADER_SIZE, MAX_FRAME_PAYLOAD
from segment_store.protocol.errors import ProtocolError, detached, next_ready
from segment_store.protocol.types import Buffer


def frame_event(payload: Buffer) -> bytes:
    """One event as stored in a segment: header + payload."""
    return HEADER.pack(EVENT_TYPE_CODE, len(payload)) + payload


def encode_events_into(buffer: bytearray, payloads: Iterable[Buffer]) -> int:
    """Append the framed ``payloads`` to ``buffer`` in order; return how many events were written."""
    count = 0
    pack = HEADER.pack
    for payload in payloads:
        buffer += pack(EVENT_TYPE_CODE, len(payload))
        buffer += payload
        count += 1
    return count


def encode_events(payloads: Iterable[Buffer]) -> bytes:
    """The framed ``payloads`` concatenated in order (the data of an append)."""
    parts: list[Buffer] = []
    pack = HEADER.pack
    for payload in payloads:
        parts.append(pack(EVENT_TYPE_CODE, len(payload)))
        parts.append(payload)
    return b"".join(parts)


class SegmentEvent(NamedTuple):
    """An event parsed from segment data; ``offset`` is the segment offset of its header.

    A named tuple rather than a dataclass: the parser makes one per event, and this is the cheapest
    immutable record Python has.
    """

    offset: int
    data: bytes


class EventParser:
    """Incremental parser of a segment's bytes into events: ``feed`` bytes, iterate events.

    Ordering: events come out in segment order with their segment offsets. Bad framing (a type code other
    than 0, a negative length or one over ``max_event_bytes``) is raised as ProtocolError by iteration at
    its place, after every event before it; ``feed`` raises it afterwards. A trailing partial event is kept
    (at most ``HEADER_SIZE + max_event_bytes`` bytes) until the rest is fed; :attr:`offset` is where it
    starts, i.e. where a reader that stops now must resume.
    """

    __slots__ = ("_buf", "_error", "_expected", "_max", "_offset", "_ready")

    def __init__(self, start_offset: int = 0, max_event_bytes: int = MAX_FRAME_PAYLOAD) -> None:
        if max_event_bytes < 0:
            raise ValueError("max_event_bytes must not be negative")
        self._offset = start_offset  # segment offset of the first byte not yet returned as an event
        self._max = max_event_bytes
        self._buf = bytearray()
        self._expected = -1
        self._ready: deque[SegmentEvent | ProtocolError] = deque()
        self._error: ProtocolError | None = None

    @property
    def offset(self) -> int:
        """Segment offset just past the last complete event parsed (start of the partial tail)."""
        return self._offset

    @property
    def pending_bytes(self) -> int:
        """Bytes of the trailing partial event held back."""
        return len(self._buf)

    def feed(self, data: Buffer) -> None:
        """Take the next bytes of the segment. Raises the stored ProtocolError if parsing already failed."""
        if self._error is not None:
            raise self._error.with_traceback(None)
        view = memoryview(data)
        if view.ndim != 1 or view.itemsize != 1:
            view = view.cast("B")
        try:
            self._consume(view)
        except ProtocolError as exc:
            self._error = detached(exc)
            self._ready.append(self._error)
            self._buf = bytearray()

    def __iter__(self) -> Iterator[SegmentEvent]:
        return self

    def __next__(self) -> SegmentEvent:
        return next_ready(self._ready)

    def _check(self, type_code: int, length: int, offset: int) -> int:
        if type_code != EVENT_TYPE_CODE:
            raise ProtocolError(f"event at segment offset {offset} has type code {type_code}, expected 0")
        if length < 0 or length > self._max:
            raise ProtocolError(f"event at segment offset {offset} has length {length}; allowed 0..{self._max}")
        return HEADER_SIZE + length

    def _emit(self, data: bytes) -> None:
        self._ready.append(SegmentEvent(self._offset, data))
        self._offset += HEADER_SIZE + len(data)

    def _consume(self, view: memoryview) -> None:
        pos, size = 0, len(view)
        if self._buf:
            pos = self._finish_buffered(view)
            if self._buf:
                return
        ready, unpack, limit = self._ready, HEADER.unpack_from, self._max
        offset = self._offset
        try:
            while size - pos >= HEADER_SIZE:
                type_code, length = unpack(view, pos)
                if type_code != EVENT_TYPE_CODE or not 0 <= length <= limit:
                    self._check(type_code, length, offset)
                end = pos + HEADER_SIZE + length
                if end > size:
                    self._expected = end - pos
                    break
                ready.append(SegmentEvent(offset, bytes(view[pos + HEADER_SIZE : end])))
                offset += end - pos
                pos = end
        finally:
            self._offset = offset
        if pos < size:
            self._buf += view[pos:]

    def _finish_buffered(self, view: memoryview) -> int:
        buf, pos = self._buf, 0
        if self._expected < 0:
            pos = min(HEADER_SIZE - len(buf), len(view))
            buf += view[:pos]
            if len(buf) < HEADER_SIZE:
                return pos
            type_code, length = HEADER.unpack_from(buf, 0)
            self._expected = self._check(type_code, length, self._offset)
        take = min(self._expected - len(buf), len(view) - pos)
        buf += view[pos : pos + take]
        pos += take
        if len(buf) == self._expected:
            self._buf, self._expected = bytearray(), -1
            self._emit(bytes(memoryview(buf)[HEADER_SIZE:]))
        return pos


def parse_events(data: Buffer, start_offset: int = 0) -> list[SegmentEvent]:
    """Split bytes holding only whole events. Raises ProtocolError on bad framing or a partial tail."""
    parser = EventParser(start_offset)
    parser.feed(data)
    events = list(parser)
    if parser.pending_bytes:
        raise ProtocolError(f"{parser.pending_bytes} trailing byte(s) at offset {parser.offset} are a partial event")
    return events


def count_events(data: Buffer) -> int:
    """Number of whole events in ``data`` (which must hold only whole events). Raises ProtocolError."""
    view = memoryview(data)
    pos, count, size = 0, 0, len(view)
    while pos < size:
        if size - pos < HEADER_SIZE:
            raise ProtocolError(f"partial event header at offset {pos}")
        type_code, length = HEADER.unpack_from(view, pos)
        if type_code != EVENT_TYPE_CODE or length < 0 or length > size - pos - HEADER_SIZE:
            raise ProtocolError(f"bad event header (type {type_code}, length {length}) at offset {pos}")
        pos += HEADER_SIZE + length
        count += 1
    return count
