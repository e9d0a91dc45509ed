"""Data frames: how serialized operations are packed into Tier-1 entries, and unpacked at recovery.

A frame is one Tier-1 entry of at most ``max_frame_bytes``::

    magic u32 'SSDF' | version u8 | body_length u32 | crc32(body) u32 | body
    body = record*      record = flags u8 | length u32 | bytes

An operation's serialization is written as one or more records: the first has
``FIRST``, the last has ``LAST`` (a one-record operation has both). An operation
may span frames. The builder never leaves an operation open across a failed
frame: after a Tier-1 failure the caller discards the builder, so a reader that
meets a ``FIRST`` record while an operation is still open drops the open one (it
belongs to a write that was never acknowledged).

Invariants:
- frames are emitted in the order operations were added; an operation is
  complete once the frame holding its ``LAST`` record is durable;
- :func:`read_frame` rejects any frame whose magic, version, length or CRC is
  wrong with :class:`DataFrameCorruptedError`; it never returns partial data.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from segment_store.logs.operations import Operation, deserialize, serialize
from segstore_shared.errors import SegstoreError

MAGIC = 0x53534446  # 'SSDF'
VERSION = 1
FLAG_FIRST = 0x01
FLAG_LAST = 0x02

_FRAME_HEADER = struct.Struct(">IBII")
_RECORD_HEADER = struct.Struct(">BI")
FRAME_HEADER_SIZE = _FRAME_HEADER.size
RECORD_HEADER_SIZE = _RECORD_HEADER.size


class DataFrameCorruptedError(SegstoreError):
    """A Tier-1 entry that is not a valid data frame."""


@dataclass(slots=True)
class DataFrame:
    """A sealed frame ready for Tier-1: its bytes and the operations whose last record it holds."""

    data: bytes
    completed: list[Operation] = field(default_factory=list)
    tag: Any = None


@dataclass(slots=True)
class _OpenFrame:
    """A frame being filled: its parts (record headers and payload views) are joined once, at flush."""

    parts: list[bytes | memoryview] = field(default_factory=list)
    size: int = FRAME_HEADER_SIZE
    crc: int = 0
    completed: list[Operation] = field(default_factory=list)
    tag: Any = None

    def add(self, part: bytes | memoryview) -> None:
        self.parts.append(part)
        self.size += len(part)
        self.crc = zlib.crc32(part, self.crc)


class DataFrameBuilder:
    """Packs operations into frames of at most ``max_frame_bytes`` and hands full frames to ``on_frame``.

    ``on_frame`` is called synchronously, in order. :meth:`flush` closes the
    current frame if it holds anything. Not thread-safe; one builder per processor.
    """

    def __init__(self, max_frame_bytes: int, on_frame: Callable[[DataFrame], None]) -> None:
        if max_frame_bytes < FRAME_HEADER_SIZE + RECORD_HEADER_SIZE + 64:
            raise ValueError(f"max_frame_bytes: {max_frame_bytes} is too small")
        self._max = max_frame_bytes
        self._on_frame = on_frame
        self._frame: _OpenFrame | None = None

    def _current(self) -> _OpenFrame:
        if self._frame is None:
            self._frame = _OpenFrame()
        return self._frame

    def append(self, op: Operation, first_frame_tag: Any = None) -> None:
        """Serialize ``op`` into the current frame, spilling into new frames as needed.

        ``first_frame_tag``, if given, is set as the ``tag`` of the frame that holds the
        operation's first record (the durable log marks where checkpoints start).
        """
        parts = serialize(op)
        remaining = sum(len(p) for p in parts)
        frame = self._current()
        if frame.size + RECORD_HEADER_SIZE + remaining <= self._max:
            # The common case, the whole operation in one record of this frame: the same bytes as
            # below, but the record header and the operation's small leading parts as one buffer.
            if first_frame_tag is not None:
                frame.tag = first_frame_tag
            *head, last_part = parts
            frame.add(b"".join([_RECORD_HEADER.pack(FLAG_FIRST | FLAG_LAST, remaining), *head]))
            frame.add(last_part)
            frame.completed.append(op)
            return
        first = True
        part_index, part_pos = 0, 0
        while True:
            frame = self._current()
            room = self._max - frame.size - RECORD_HEADER_SIZE
            if room <= 0 or (room < 64 and remaining > room):
                self.flush()
                continue
            take = min(room, remaining)
            last = take == remaining
            flags = (FLAG_FIRST if first else 0) | (FLAG_LAST if last else 0)
            if first and first_frame_tag is not None:
                frame.tag = first_frame_tag
            frame.add(_RECORD_HEADER.pack(flags, take))
            need = take
            while need:
                part = parts[part_index]
                chunk = min(need, len(part) - part_pos)
                frame.add(part if chunk == len(part) else memoryview(part)[part_pos : part_pos + chunk])
                part_pos += chunk
                need -= chunk
                if part_pos == len(part):
                    part_index += 1
                    part_pos = 0
            remaining -= take
            first = False
            if last:
                frame.completed.append(op)
                return
            self.flush()

    def flush(self) -> None:
        """Seal and emit the current frame if it holds any record."""
        frame, self._frame = self._frame, None
        if frame is None or frame.size == FRAME_HEADER_SIZE:
            return
        header = _FRAME_HEADER.pack(MAGIC, VERSION, frame.size - FRAME_HEADER_SIZE, frame.crc)
        # One copy of the payloads, into an immutable entry Tier-1 can keep without copying again.
        self._on_frame(DataFrame(b"".join([header, *frame.parts]), frame.completed, frame.tag))

    @property
    def pending_bytes(self) -> int:
        return 0 if self._frame is None else self._frame.size - FRAME_HEADER_SIZE


def read_frame(entry: bytes | memoryview) -> Iterator[tuple[int, memoryview]]:
    """Yield ``(flags, record_bytes)`` of one frame, after checking its header and CRC."""
    view = memoryview(entry)
    if len(view) < FRAME_HEADER_SIZE:
        raise DataFrameCorruptedError(f"entry of {len(view)} bytes is shorter than a frame header")
    magic, version, body_length, crc = _FRAME_HEADER.unpack_from(view, 0)
    if magic != MAGIC:
        raise DataFrameCorruptedError(f"bad frame magic {magic:#x}")
    if version != VERSION:
        raise DataFrameCorruptedError(f"unsupported frame version {version}")
    if body_length != len(view) - FRAME_HEADER_SIZE:
        actual = len(view) - FRAME_HEADER_SIZE
        raise DataFrameCorruptedError(f"frame body length {body_length} != entry body length {actual}")
    body = view[FRAME_HEADER_SIZE:]
    if zlib.crc32(body) != crc:
        raise DataFrameCorruptedError("frame CRC mismatch")
    pos = 0
    while pos < body_length:
        if pos + RECORD_HEADER_SIZE > body_length:
            raise DataFrameCorruptedError("truncated record header")
        flags, length = _RECORD_HEADER.unpack_from(body, pos)
        pos += RECORD_HEADER_SIZE
        if pos + length > body_length:
            raise DataFrameCorruptedError("record runs past the frame end")
        yield flags, body[pos : pos + length]
        pos += length


class OperationAssembler:
    """Rebuilds operations from the records of consecutive frames (recovery).

    :meth:`add_frame` returns the operations completed by that frame, in order,
    each with the ``tag`` given for the frame where the operation *started*.
    An operation left open when a new ``FIRST`` record arrives is dropped (see
    module docstring); a continuation record with no open operation is corruption.
    """

    def __init__(self) -> None:
        self._open: list[memoryview] | None = None
        self._open_tag: Any = None
        self.dropped = 0

    def add_frame(self, entry: bytes | memoryview, tag: Any = None) -> list[tuple[Operation, Any]]:
        done: list[tuple[Operation, Any]] = []
        for flags, record in read_frame(entry):
            if flags & FLAG_FIRST:
                if self._open is not None:
                    self.dropped += 1
                self._open = [record]
                self._open_tag = tag
            elif self._open is None:
                raise DataFrameCorruptedError("continuation record with no operation open")
            else:
                self._open.append(record)
            if flags & FLAG_LAST:
                parts, self._open = self._open, None
                data = parts[0] if len(parts) == 1 else b"".join(parts)
                done.append((deserialize(data), self._open_tag))
        return done
