"""When the bytes of each segment not yet in Tier-2 were ingested: the in-memory half of time lookups.

A segment's *ingestion time* of an event is the segment store's clock (epoch ms) when the append
carrying it was accepted; for a transaction's events, when the transaction was merged into the
segment (``MergeOperation.merge_time_ms``: the events become visible then, and times stay
non-decreasing along the segment). Tier-2 chunks keep it per row (``ingest_time_ms``; a merged
transaction's chunks are rewritten with the merge time when Tier-2 concatenates them, see
:mod:`segment_store.storage.chunk_times`); this index keeps it for what is only in memory and
Tier-1, so "the first event ingested at or after T" is exact everywhere
(:meth:`SegmentContainer.offset_at_time`), and every tier gives an event the same time.

It is fed with committed operations in log order (a durable log listener, also during recovery,
so it is rebuilt for everything Tier-1 replays).

Invariants, per segment:
- entries are ``(offset, ms)`` in offset order with non-decreasing ``ms`` (the metadata updater
  never gives an append an earlier time than the segment's previous one; an older time from
  before that rule is raised to the previous entry's, which can only make a lookup start earlier);
  the appends from an entry's offset up to the next entry were all ingested at its ``ms``;
- a merged range with a merge time is an entry at its start with that time, and the append right
  after it always gets an entry (its end is then a known event boundary);
- a merged range logged without a merge time (an operation from before merges carried one) is a
  *merge mark* ``(start, end)``: times inside it are not tracked, so a lookup treats it as possibly
  at or after any time (it starts no later than it); an append right after a mark always gets an
  entry (at least the previous entry's time), so :meth:`IngestTimeIndex.runs` can give a mark's
  events the first time after it;
- coverage: entries and marks account for every byte from the first entry (or mark) to the
  segment's length; :meth:`trim` drops an entry only when the next one starts at or below the
  storage length, and a mark only when it ends at or below the first remaining entry, so together
  with Tier-2 everything from the segment's start is covered;
- size: a segment is trimmed whenever its entries double since the last trim (at least 64), so it
  holds about twice the appends of distinct milliseconds not yet in Tier-2.

The lookup rests on one more fact the updater guarantees: an append is never given a time earlier
than the segment's last modification, and a merge sets that to the merge time, which is after the
transaction's writes. So every event before an append entry ingested at ``ms`` was ingested at or
before ``ms``.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from segment_store.logs.operations import AppendOperation, DeleteOperation, MergeOperation, Operation
from segment_store.metadata import ContainerMetadata

_MIN_TRIM_ENTRIES = 64


@dataclass(slots=True)
class _Times:
    offsets: list[int] = field(default_factory=list)
    times: list[int] = field(default_factory=list)
    merges: list[tuple[int, int]] = field(default_factory=list)  # (start, end) of merged ranges without a time
    after_merge: bool = False  # the last entry is a timed merge's: the next append gets an entry
    trim_at: int = _MIN_TRIM_ENTRIES


@dataclass(frozen=True, slots=True)
class TimeLookup:
    """What the index knows from ``from_offset`` on, for one timestamp.

    ``offset``: the first position at or after ``from_offset`` that holds an event ingested at or after
    the timestamp, or may (a merged range); None if every event the index holds there is older.
    ``older_before``: every event before ``from_offset`` is known to be older than the timestamp.
    """

    offset: int | None
    older_before: bool


@dataclass(frozen=True, slots=True)
class EndLookup:
    """What the index knows of where the events ingested before a timestamp end, from ``from_offset`` on.

    ``known``: False if the index cannot tell (a merged range without a time). Else ``offset``: the least
    offset above ``from_offset`` from which every event is ingested at or after the timestamp, or None when
    every event from ``from_offset`` on is (the end lies at or below ``from_offset``: ask Tier-2).
    """

    offset: int | None
    known: bool


class IngestTimeIndex:
    """See module docstring. Runs on the container's event loop."""

    def __init__(self, metadata: ContainerMetadata) -> None:
        self._metadata = metadata  # storage lengths, for trimming
        self._segments: dict[int, _Times] = {}

    def on_committed(self, ops: list[Operation]) -> None:
        """Durable log listener: record appends and merges, forget deleted and merged-away segments."""
        segments = self._segments
        for op in ops:
            if isinstance(op, AppendOperation):
                entry = segments.get(op.segment_id)
                if entry is None:
                    entry = segments[op.segment_id] = _Times()
                times, ms = entry.times, op.ingest_time_ms
                if times and ms <= times[-1]:
                    after_mark = entry.merges and entry.merges[-1][1] > entry.offsets[-1]
                    if not after_mark and not entry.after_merge:
                        continue  # same millisecond (or an older clock): the previous entry covers it
                    ms = times[-1]  # right after a merge: the previous entry's run ended at the merge
                entry.offsets.append(op.offset)
                times.append(ms)
                entry.after_merge = False
                if len(times) >= entry.trim_at:
                    segment = self._metadata.get(op.segment_id)
                    if segment is not None:
                        self.trim(op.segment_id, segment.storage_length)
            elif isinstance(op, MergeOperation):
                segments.pop(op.source_id, None)
                if op.length > 0:
                    entry = segments.get(op.segment_id)
                    if entry is None:
                        entry = segments[op.segment_id] = _Times()
                    if op.merge_time_ms > 0:
                        entry.offsets.append(op.target_offset)
                        entry.times.append(max(op.merge_time_ms, entry.times[-1] if entry.times else 0))
                        entry.after_merge = True
                    else:
                        entry.merges.append((op.target_offset, op.target_offset + op.length))
            elif isinstance(op, DeleteOperation):
                segments.pop(op.segment_id, None)

    def trim(self, segment_id: int, storage_length: int) -> None:
        """Drop what Tier-2 answers for: entries followed by one starting at or below ``storage_length``."""
        entry = self._segments.get(segment_id)
        if entry is None:
            return
        offsets = entry.offsets
        drop = bisect.bisect_right(offsets, storage_length) - 1
        if drop > 0:
            del offsets[:drop]
            del entry.times[:drop]
        if entry.merges:
            below = offsets[0] if offsets else storage_length
            entry.merges = [m for m in entry.merges if m[1] > below]
        entry.trim_at = max(_MIN_TRIM_ENTRIES, 2 * len(offsets))

    def entries(self, segment_id: int) -> int:
        """How many entries ``segment_id`` holds (for tests and metrics)."""
        entry = self._segments.get(segment_id)
        return 0 if entry is None else len(entry.offsets) + len(entry.merges)

    def append_start_at_or_before(self, segment_id: int, offset: int) -> int | None:
        """The largest offset at or below ``offset`` where an append (or a merged range) of ``segment_id`` starts, or
        where a merged range ends; None if the index knows none. Each is an event boundary of an event segment
        (appends and transactions hold whole events), for :meth:`SegmentContainer.event_start_at_or_after`."""
        entry = self._segments.get(segment_id)
        if entry is None:
            return None
        found: int | None = None
        i = bisect.bisect_right(entry.offsets, offset) - 1
        if i >= 0:
            found = entry.offsets[i]
        for start, end in entry.merges:
            for edge in (start, end):
                if edge <= offset and (found is None or edge > found):
                    found = edge
        return found

    def find(self, segment_id: int, timestamp_ms: int, from_offset: int) -> TimeLookup:
        """See :class:`TimeLookup`."""
        entry = self._segments.get(segment_id)
        if entry is None:
            return TimeLookup(None, False)
        offsets, times = entry.offsets, entry.times
        covering = bisect.bisect_right(offsets, from_offset) - 1
        lo = max(covering, 0)
        found: int | None = None
        first = bisect.bisect_left(times, timestamp_ms, lo)
        if first < len(times):
            found = max(offsets[first], from_offset)
        for start, end in entry.merges:
            if end > from_offset:
                candidate = max(start, from_offset)
                found = candidate if found is None else min(found, candidate)
                break
        older_before = (
            covering >= 0
            and times[covering] < timestamp_ms
            and not any(offsets[covering] <= start < from_offset for start, _ in entry.merges)
        )
        return TimeLookup(found, older_before)

    def end_before(self, segment_id: int, timestamp_ms: int, from_offset: int, length: int) -> EndLookup:
        """Where the events from ``from_offset`` (the storage length) to ``length`` that were ingested before
        ``timestamp_ms`` end: see :class:`EndLookup`. Entries are in time order, so the first entry at or after
        the time ends them; a merge mark (a merge logged without its time) makes it unknown."""
        entry = self._segments.get(segment_id)
        if from_offset >= length:
            return EndLookup(None, True)
        if entry is None or not entry.offsets or entry.offsets[0] > from_offset:
            return EndLookup(None, False)  # bytes the index does not cover (none, by the coverage invariant)
        if any(end > from_offset for _, end in entry.merges):
            return EndLookup(None, False)
        first = bisect.bisect_left(entry.times, timestamp_ms)
        if first == len(entry.times):
            return EndLookup(length, True)
        at = entry.offsets[first]
        return EndLookup(None, True) if at <= from_offset else EndLookup(min(at, length), True)

    def runs(self, segment_id: int, start: int, end: int, last_ms: int) -> list[tuple[int, int]]:
        """``(offset, ms)`` runs of the ingestion times of ``[start, end)`` (at or above the storage length, where
        the index covers every byte), the first at ``start``; consecutive runs differ in time.

        The events of a merge mark (a merge logged without its time) get the time of the first entry at or after
        its end (the first append after the merge), or ``last_ms`` (the segment's last modification, at least the
        transaction's last write) if none follows: a time no earlier than any of the transaction's writes and than
        every event before it, so times never decrease along the segment. Bytes the index does not cover (none, by the
        coverage invariant) get the next known time the same way."""
        entry = self._segments.get(segment_id)
        if entry is None or start >= end:
            return [(start, last_ms)] if start < end else []
        offsets, times = entry.offsets, entry.times

        def next_time(at: int) -> int:
            i = bisect.bisect_left(offsets, at)
            return times[i] if i < len(times) else last_ms

        first = max(bisect.bisect_right(offsets, start) - 1, 0)
        items = [(offsets[i], times[i]) for i in range(first, bisect.bisect_left(offsets, end))]
        items += [(s, next_time(e)) for s, e in entry.merges if e > start and s < end]
        items.sort()
        if not items or items[0][0] > start:
            items.insert(0, (start, next_time(start)))
        runs: list[tuple[int, int]] = []
        for i, (at, ms) in enumerate(items):
            if i + 1 < len(items) and items[i + 1][0] <= start:
                continue  # ends before the range
            if not runs or runs[-1][1] != ms:
                runs.append((max(at, start), ms))
        return runs
