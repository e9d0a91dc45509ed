"""Watermarks: what the controller writes into a stream's mark stream, in Pravega's format (seed 003 "Watermarks").

A :class:`Watermark` says (Pravega's reader time window): every event the stream's live writers write after the stream
cut ``stream_cut`` (segment -> offset, with each segment's key range) has a time of at least ``lower_time_bound``; the
writers' latest noted times lie within ``[lower_time_bound, upper_time_bound]``. A writer noting time ``t`` at its
position says: what I wrote before has times up to ``t``, what I write after has times from ``t`` on. Watermarks of a
stream never move backwards: each one's lower bound is above the previous one's, and its cut is at or after the
previous cut.

The mark stream is ``<scope>/_MARK<stream>``, one segment; each watermark is one event whose payload is Pravega's
``Watermark`` serialization (``VersionedSerializer``: format version 0, version 0, one revision 0 whose body is
``lowerTimeBound`` long, ``upperTimeBound`` long, then the stream cut as a map: a compact-int count and, for each
entry, a nested ``SegmentWithRange`` serialization (segment id long, range low and high doubles) and the offset
long; all big-endian), so Pravega's Java readers can read it.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass

from segment_store.protocol import EventParser

MARK_PREFIX = "_MARK"

_LONG = struct.Struct(">q")
_DOUBLE = struct.Struct(">d")
_INT = struct.Struct(">i")


class WatermarkFormatError(ValueError):
    """Bytes that are not a serialized watermark."""


@dataclass(frozen=True, slots=True, order=True)
class SegmentWithRange:
    """A segment and its key range ``[low, high)``."""

    segment_id: int
    low: float
    high: float

    def overlaps(self, other: SegmentWithRange) -> bool:
        return other.low < self.high and other.high > self.low


@dataclass(frozen=True, slots=True)
class Watermark:
    lower_time_bound: int
    upper_time_bound: int
    stream_cut: Mapping[SegmentWithRange, int]

    def positions(self) -> dict[int, int]:
        """The stream cut as segment id -> offset."""
        return {segment.segment_id: offset for segment, offset in self.stream_cut.items()}

    def encode(self) -> bytes:
        body = bytearray(_LONG.pack(self.lower_time_bound) + _LONG.pack(self.upper_time_bound))
        body += _compact_int(len(self.stream_cut))
        for segment, offset in sorted(self.stream_cut.items()):
            inner = _LONG.pack(segment.segment_id) + _DOUBLE.pack(segment.low) + _DOUBLE.pack(segment.high)
            body += _versioned(inner) + _LONG.pack(offset)
        return _versioned(bytes(body))

    @classmethod
    def decode(cls, data: bytes) -> Watermark:
        """Parse a serialized watermark; :class:`WatermarkFormatError` if it is not one."""
        try:
            reader = _Reader(data)
            body = _Reader(reader.revision_body())
            lower, upper = body.long(), body.long()
            cut: dict[SegmentWithRange, int] = {}
            for _ in range(body.compact_int()):
                inner = _Reader(body.revision_body())
                segment = SegmentWithRange(inner.long(), inner.double(), inner.double())
                cut[segment] = body.long()
            return cls(lower, upper, cut)
        except (struct.error, IndexError) as error:
            raise WatermarkFormatError(f"not a watermark: {error}") from None


def mark_stream(stream: str) -> str:
    """The name of a stream's mark stream (Pravega's ``NameUtils.getMarkStreamForStream``)."""
    return MARK_PREFIX + stream


def decode_watermark_events(data: bytes, start_offset: int) -> tuple[list[Watermark], int]:
    """The watermarks of the mark segment's bytes ``data`` (which begin at event boundary ``start_offset``) and the
    offset after the last whole event: a partial last event (bytes not all written or read yet) is left out, to
    be read again from there."""
    parser = EventParser(start_offset)
    parser.feed(data)
    return [Watermark.decode(event.data) for event in parser], parser.offset


def _versioned(revision_body: bytes) -> bytes:
    """format version 0, version 0, one revision (id 0, int length, body)."""
    return bytes((0, 0, 1, 0)) + _INT.pack(len(revision_body)) + revision_body


def _compact_int(value: int) -> bytes:
    if not 0 <= value < 1 << 30:
        raise ValueError(f"compact int out of range: {value}")
    if value > 0x3FFF:
        return struct.pack(">I", value | 0xC000_0000)
    if value > 0x7F:
        return struct.pack(">H", value | 0x8000)
    return bytes((value,))


class _Reader:
    def __init__(self, data: bytes) -> None:
        self._data = memoryview(data)
        self._pos = 0

    def _take(self, size: int) -> memoryview:
        if self._pos + size > len(self._data):
            raise WatermarkFormatError("truncated")
        chunk = self._data[self._pos : self._pos + size]
        self._pos += size
        return chunk

    def long(self) -> int:
        return int(_LONG.unpack(self._take(8))[0])

    def double(self) -> float:
        return float(_DOUBLE.unpack(self._take(8))[0])

    def compact_int(self) -> int:
        first = self._data[self._pos] if self._pos < len(self._data) else -1
        if first < 0:
            raise WatermarkFormatError("truncated")
        kind = first >> 6
        if kind < 2:
            return self._take(1)[0]
        if kind == 2:
            return int(struct.unpack(">H", self._take(2))[0]) & 0x3FFF
        return int(struct.unpack(">I", self._take(4))[0]) & 0x3FFF_FFFF

    def revision_body(self) -> bytes:
        """A whole versioned serialization: the body of its revision 0 (later revisions are skipped)."""
        header = bytes(self._take(3))
        if header[0] != 0 or header[1] != 0 or header[2] < 1:
            raise WatermarkFormatError(f"unknown serialization header {header.hex()}")
        if self._take(1)[0] != 0:
            raise WatermarkFormatError("the first revision is not revision 0")
        body = bytes(self._take(int(_INT.unpack(self._take(4))[0])))
        for _ in range(header[2] - 1):
            self._take(1)
            self._take(int(_INT.unpack(self._take(4))[0]))
        return body
