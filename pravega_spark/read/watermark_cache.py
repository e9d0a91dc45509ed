"""The driver's incremental view of a stream's watermarks, for option ``watermarkColumn`` in a long-running query.

Re-reading the whole mark segment every micro-batch costs what the stream has lived through (a million watermarks
after a year); :class:`WatermarkCache` reads only the bytes written since its last read
(:meth:`~controller_client.stream_manager.StreamManager.watermarks_from`) and keeps per segment what the thresholds
of :func:`~pravega_spark.read.watermark_column.segment_thresholds` need, so a micro-batch costs what arrived since
the previous one.

What it keeps, for every segment ``c`` a watermark's cut named (the cut carries ``c``'s key range):

* ``steps``: the staircase of the points ``(offset in c, lower bound)`` of the watermarks naming ``c`` (each point
  kept only if its bound is above every point at or before its offset: exactly the thresholds those watermarks
  give);
* ``before``: the bound of the watermark just before the first one naming ``c`` (None if that was the first read).

A watermark whose cut does not name a segment ``S`` applies to all of ``S`` (offset 0) when its cut's segments over
``S``'s range are all older (:func:`~pravega_spark.read.watermark_column.cut_offset_for`). Watermarks never move
backwards (:mod:`controller_client.watermarks`: bounds increase, each cut at or after the previous one), so those
watermarks are a prefix of the mark segment and the last of them has the largest bound: the watermark just before
the first cut naming ``S`` or a newer segment over ``S``'s range, i.e. the smallest ``before`` of those segments, or
the last watermark read if no such cut came yet. Hence ``thresholds(S) = steps(S) + (0, that bound)``, the same as a
full re-read (``tests/pravega_spark/read/test_watermark_cache.py`` checks it on random histories).

What it forgets (:meth:`WatermarkCache.forget`), given the query's frontier (the segments of its read position and
those waiting for their predecessors, with their positions): every segment the query has finished (not in the
frontier, and each frontier segment over its range is newer) and, on a frontier segment, the points before its
position but the last one at or before it. Memory so stays in proportion to the segments alive, not to the
history. A question about something forgotten (Spark planning an earlier batch again after a restart) starts the
cache again from the mark segment's start: slower once, never wrong.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from controller_client.watermarks import SegmentWithRange, Watermark
from pravega_spark.read.watermark_column import Thresholds

ReadFrom = Callable[[int], tuple[list[Watermark], int]]
"""``read(offset) -> (watermarks from there, next offset)``: :meth:`StreamManager.watermarks_from` of the stream."""

RangeOf = Callable[[int], SegmentWithRange]
"""A segment id's key range (a controller lookup, made once per segment)."""


def insert_step(steps: list[tuple[int, int]], offset: int, bound: int) -> None:
    """Add the point ``(offset, bound)`` to the staircase ``steps`` (offsets and bounds strictly ascending): kept
    unless a point at or before ``offset`` has a bound at least as high; the points it covers are dropped."""
    i = bisect.bisect_right(steps, offset, key=lambda step: step[0])
    if i > 0 and steps[i - 1][1] >= bound:
        return
    start = i - 1 if i > 0 and steps[i - 1][0] == offset else i
    end = i
    while end < len(steps) and steps[end][1] <= bound:
        end += 1
    steps[start:end] = [(offset, bound)]


def trim_steps(steps: list[tuple[int, int]], position: int) -> None:
    """Drop the points before ``position`` but the last one at or before it (all that offsets from there need)."""
    i = bisect.bisect_right(steps, position, key=lambda step: step[0])
    if i > 1:
        del steps[: i - 1]


@dataclass(slots=True)
class _Named:
    segment: SegmentWithRange
    before: int | None
    steps: list[tuple[int, int]] = field(default_factory=list)


def _finished(segment: SegmentWithRange, frontier: Mapping[int, SegmentWithRange]) -> bool:
    """Whether the query is past all of ``segment``: not in the frontier, and every frontier segment over its range
    is newer (a segment no frontier segment overlaps is kept: nothing says it is behind)."""
    if segment.segment_id in frontier:
        return False
    overlapping = [f for f in frontier.values() if f.overlaps(segment)]
    return bool(overlapping) and all(f.segment_id > segment.segment_id for f in overlapping)


class WatermarkCache:
    """One stream's watermarks as read so far (driver side; one per streaming query, a new one per batch read)."""

    def __init__(self) -> None:
        self.restarts = 0
        """How many times a question about something forgotten made it read the mark segment from its start."""
        self._reset()

    def _reset(self) -> None:
        self.read_offset = 0
        """Where the next read of the mark segment starts (after the last whole event read)."""
        self.watermarks_read = 0
        self._last: Watermark | None = None
        self._named: dict[int, _Named] = {}
        self._ranges: dict[int, SegmentWithRange] = {}  # key ranges of the frontier's and asked segments
        self._floors: dict[int, int] = {}  # frontier segment -> offset below which points were forgotten
        self._frontier: dict[int, SegmentWithRange] = {}

    def __len__(self) -> int:
        """How many points it holds (for the tests and the benchmark: it stays bounded)."""
        return sum(len(n.steps) + 1 for n in self._named.values()) + len(self._ranges) + len(self._floors)

    def apply(self, watermark: Watermark) -> None:
        """Take the next watermark of the mark segment."""
        before = None if self._last is None else self._last.lower_time_bound
        for segment, offset in watermark.stream_cut.items():
            named = self._named.get(segment.segment_id)
            if named is None:
                named = self._named[segment.segment_id] = _Named(segment, before)
            insert_step(named.steps, offset, watermark.lower_time_bound)
        self._last = watermark
        self.watermarks_read += 1

    def catch_up(self, read: ReadFrom) -> int:
        """Read and apply what the mark segment gained since the last call; how many watermarks that was."""
        watermarks, self.read_offset = read(self.read_offset)
        for watermark in watermarks:
            self.apply(watermark)
        return len(watermarks)

    def thresholds(self, segment: SegmentWithRange) -> Thresholds:
        """The segment's thresholds from the watermarks read (those before a forgotten position excepted)."""
        named = self._named.get(segment.segment_id)
        steps = list(named.steps) if named is not None else []
        base = self._base_bound(segment)
        if base is not None:
            insert_step(steps, 0, base)
        return tuple(steps)

    def _base_bound(self, segment: SegmentWithRange) -> int | None:
        """The largest bound of the watermarks whose cut is before all of ``segment`` (see the module docstring)."""
        later = [
            n.before
            for n in self._named.values()
            if n.segment.segment_id >= segment.segment_id and n.segment.overlaps(segment)
        ]
        if later:
            return None if None in later else min(b for b in later if b is not None)
        last = self._last
        if last is None:
            return None
        overlapping = [s for s in last.stream_cut if s.overlaps(segment)]
        if overlapping and all(s.segment_id < segment.segment_id for s in overlapping):
            return last.lower_time_bound
        return None

    def forgotten(self, segment: SegmentWithRange, start: int) -> bool:
        """Whether the thresholds of ``segment`` from ``start`` on may need something :meth:`forget` dropped."""
        return start < self._floors.get(segment.segment_id, 0) or _finished(segment, self._frontier)

    def forget(
        self, frontier: Mapping[int, SegmentWithRange], positions: Mapping[int, int], keep: Iterable[int] = ()
    ) -> None:
        """Drop what a query whose frontier is ``frontier`` (segments of its position and waiting ones) at
        ``positions`` (segment -> offset) can no longer ask about (``keep``: key ranges to keep too)."""
        self._frontier = dict(frontier)
        for segment_id in [s for s, n in self._named.items() if _finished(n.segment, frontier)]:
            del self._named[segment_id]
        self._floors = {s: max(o, self._floors.get(s, 0)) for s, o in positions.items()}
        for segment_id, position in self._floors.items():
            named = self._named.get(segment_id)
            if named is not None:
                trim_steps(named.steps, position)
        kept = {*frontier, *keep}
        self._ranges = {s: r for s, r in self._ranges.items() if s in kept}

    def range_of(self, segment_id: int, lookup: RangeOf) -> SegmentWithRange:
        """The key range of a segment: from a cut that named it, kept ones, else ``lookup`` (kept)."""
        named = self._named.get(segment_id)
        if named is not None:
            return named.segment
        if segment_id not in self._ranges:
            self._ranges[segment_id] = lookup(segment_id)
        return self._ranges[segment_id]

    def plan(
        self,
        read: ReadFrom,
        lookup: RangeOf,
        asked: Mapping[int, int],
        frontier: Sequence[int],
        positions: Mapping[int, int],
    ) -> dict[int, Thresholds]:
        """One planning: the thresholds of each segment of ``asked`` (segment -> start of its range), after reading
        the new watermarks; then forget what the query's ``frontier`` at ``positions`` no longer needs."""
        if any(self.forgotten(self.range_of(s, lookup), start) for s, start in asked.items()):
            self._reset()  # an earlier batch planned again (a restart): read everything once more
            self.restarts += 1
        self.catch_up(read)
        if self._last is None:
            result: dict[int, Thresholds] = {s: () for s in asked}
        else:
            result = {s: self.thresholds(self.range_of(s, lookup)) for s in asked}
        self.forget({s: self.range_of(s, lookup) for s in frontier}, positions, keep=asked)
        return result


def driver_thresholds(
    connection: object,
    scope: str,
    stream: str,
    asked: Mapping[int, int],
    cache: WatermarkCache,
    positions: Mapping[int, int],
    waiting: Sequence[int] = (),
) -> dict[int, Thresholds]:
    """The thresholds of each segment of ``asked`` (segment -> start of its range) from the stream's watermarks,
    reading only the new ones (driver side, once per planning): ``connection`` is a
    :class:`~pravega_spark.connection.StreamConnection`; ``positions`` the query's position at the start of the
    batch, ``waiting`` the segments waiting for their predecessors there (the frontier: what ``cache`` keeps)."""
    from controller_client.model import creation_epoch
    from pravega_spark.connection import StreamConnection

    assert isinstance(connection, StreamConnection)
    if not asked:
        return {}
    manager = connection.manager

    def read(offset: int) -> tuple[list[Watermark], int]:
        return connection.run(manager.watermarks_from(scope, stream, offset))

    def lookup(segment_id: int) -> SegmentWithRange:
        for s in connection.run(connection.controller.get_epoch_segments(scope, stream, creation_epoch(segment_id))):
            if s.segment_id == segment_id:
                return SegmentWithRange(s.segment_id, s.key_start, s.key_end)
        raise LookupError(f"segment {segment_id} of {scope}/{stream} is not in the epoch that created it")

    return cache.plan(read, lookup, asked, [*positions, *waiting], positions)


__all__ = ["ReadFrom", "WatermarkCache", "driver_thresholds", "insert_step", "trim_steps"]
