"""Where events start: the walk behind ``LocateOffset`` (:meth:`SegmentContainer.event_start_at_or_after`).

An event segment is a chain of Pravega ``Event`` frames (int32 type 0, int32 length, payload): from a position
known to start an event, each header says where the next one starts, and nothing else does (a reader that starts
inside an event cannot find its way back). The container knows a few such positions for certain: the segment's
start and its length, its storage length and every Tier-2 chunk's start (chunks hold whole appends), each event
row of a Tier-2 chunk, and where recent appends and merged transactions start (:class:`IngestTimeIndex`), since
appends and transactions hold whole events. :func:`walk_to_event_start` walks the chain from the closest of them
to the event start asked for, reading only what lies between: the frames of whole buffers at once
(:func:`~segstore_shared.event_frames.find_frames`), then one header per event that crosses the end of a
buffer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from segstore_shared.contracts import InvalidOffsetError
from segstore_shared.event_frames import HEADER, HEADER_BYTES, find_frames

ReadAt = Callable[[int, int], Awaitable[bytes]]
"""``read(offset, length)``: up to ``length`` bytes of the segment at ``offset`` (at least one byte below its
length)."""

WALK_READ_BYTES = 4 * 1024 * 1024
"""Bytes read (and framed) per step of the walk."""
_THREAD_BYTES = 256 * 1024
"""Buffers at least this large are framed in a worker thread (off the container's event loop)."""


async def _read_exact(read: ReadAt, offset: int, length: int) -> bytes:
    parts: list[bytes] = []
    got = 0
    while got < length:
        data = await read(offset + got, length - got)
        if not data:
            break
        parts.append(data)
        got += len(data)
    return parts[0] if len(parts) == 1 else b"".join(parts)


async def walk_to_event_start(
    segment: str, read: ReadAt, base: int, offset: int, length: int, step_bytes: int = WALK_READ_BYTES
) -> int:
    """The first event start at or after ``offset``, walking the chain of frames from ``base`` (an event start at
    or before ``offset``) within a segment of committed length ``length`` (an event boundary), reading at most
    ``step_bytes`` at a time. Raises
    InvalidOffsetError when the bytes on the way are not events (a non-event segment)."""
    position = base
    while position < offset:
        data = await _read_exact(read, position, min(offset - position, step_bytes))
        if len(data) >= _THREAD_BYTES:
            _, consumed = await asyncio.to_thread(find_frames, data)
        else:
            _, consumed = find_frames(data)
        position += consumed
        if position >= offset:
            break
        # the frame at ``position`` runs past the bytes read (or is not a frame): its header says where it ends
        header = await _read_exact(read, position, HEADER_BYTES)
        if len(header) < HEADER_BYTES:
            raise InvalidOffsetError(segment, f"no event header at offset {position} (the segment's length: {length})")
        kind, size = HEADER.unpack(header)
        after = position + HEADER_BYTES + size
        if kind != 0 or size < 0 or after > length or after <= position + len(data) - consumed:
            raise InvalidOffsetError(segment, f"not an event at offset {position} (type {kind}, length {size})")
        position = after
    return position
