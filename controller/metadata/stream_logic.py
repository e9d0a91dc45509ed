"""Pure computations over epoch records: no I/O, no clock.

A set of segments is *consistent* when their key ranges are disjoint and cover ``[0, 1)``; every
epoch record is consistent. Segment ids order segments by creation (``epoch << 32 | number``): of
two overlapping segments, the one with the smaller id was sealed before the other was created, so
it is *before* it. That single fact drives stream cut comparison, segments between two cuts and
truncation (Pravega's ``PersistentStreamBase`` / ``RecordHelper`` computations, rewritten).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Collection, Iterable, Mapping, Sequence

from controller.metadata.errors import ScaleInputError, ScalePreconditionError
from controller.metadata.records import (
    EpochRecord,
    EpochSummary,
    EpochTransitionRecord,
    HistoryEntry,
    ScaleStatus,
    SegmentRecord,
    StreamCutComparison,
    StreamState,
)
from controller_client.model import SegmentRange, StreamCut, creation_epoch, segment_id, segment_number

Range = tuple[float, float]


def positions_of(cut: StreamCut | Mapping[int, int]) -> dict[int, int]:
    """The ``segment id -> offset`` map of a stream cut given as a model object or a plain map."""
    return dict(cut.positions) if isinstance(cut, StreamCut) else dict(cut)


# ---- key ranges -----------------------------------------------------------------------------------------------
def merge_ranges(ranges: Iterable[Range]) -> list[Range]:
    """Sort and join adjacent ranges (``a.end == b.start``) into maximal contiguous blocks.

    Overlapping ranges are kept apart, so two inputs reduce to the same list only if both are
    disjoint and cover the same key space.
    """
    result: list[Range] = []
    for start, end in sorted(ranges):
        if result and result[-1][1] == start:
            result[-1] = (result[-1][0], end)
        else:
            result.append((start, end))
    return result


def is_consistent(ranges: Iterable[Range]) -> bool:
    """Disjoint ranges that together cover ``[0, 1)`` exactly."""
    return merge_ranges(ranges) == [(0.0, 1.0)] and _disjoint(list(ranges))


def _disjoint(ranges: Sequence[Range]) -> bool:
    ordered = sorted(ranges)
    return all(a[1] <= b[0] for a, b in itertools.pairwise(ordered))


# ---- scale ----------------------------------------------------------------------------------------------------
def validate_scale(
    epoch: EpochRecord,
    segments_to_seal: Collection[int],
    new_ranges: Sequence[Range],
    min_segments: int,
    *,
    scope: str = "",
    stream: str = "",
) -> None:
    """Check a scale request against the active epoch.

    Raises :class:`ScalePreconditionError` when a segment to seal is not in ``epoch`` or the stream
    would have fewer than ``min_segments`` segments, :class:`ScaleInputError` when the new ranges are
    not disjoint or do not cover exactly the key space of the sealed segments.
    """
    if not segments_to_seal or not new_ranges:
        raise ScaleInputError("scale: nothing to seal or nothing to create", scope=scope, name=stream)
    if len(set(segments_to_seal)) != len(segments_to_seal):
        raise ScaleInputError("scale: a segment to seal is listed twice", scope=scope, name=stream)
    missing = sorted(s for s in segments_to_seal if not epoch.contains(s))
    if missing:
        raise ScalePreconditionError(
            f"scale: segments {missing} are not in the active epoch {epoch.epoch}", scope=scope, name=stream
        )
    for start, end in new_ranges:
        if not 0.0 <= start < end <= 1.0:
            raise ScaleInputError(f"scale: invalid key range [{start}, {end})", scope=scope, name=stream)
    if not _disjoint(new_ranges):
        raise ScaleInputError("scale: new key ranges overlap", scope=scope, name=stream)
    sealed: list[Range] = []
    for s in segments_to_seal:
        record = epoch.segment(s)
        assert record is not None
        sealed.append((record.key_start, record.key_end))
    if merge_ranges(sealed) != merge_ranges(new_ranges):
        raise ScaleInputError(
            "scale: new key ranges do not cover exactly the ranges of the sealed segments", scope=scope, name=stream
        )
    if len(epoch.segments) - len(segments_to_seal) + len(new_ranges) < min_segments:
        raise ScalePreconditionError(
            f"scale: fewer than the minimum of {min_segments} segments would remain", scope=scope, name=stream
        )


def compute_epoch_transition(
    epoch: EpochRecord, segments_to_seal: Collection[int], new_ranges: Sequence[Range], time_ms: int
) -> EpochTransitionRecord:
    """The transition of a (validated) scale: new segments numbered after the epoch's highest number
    (the stream's highest: new segments always get the highest numbers), created in ``epoch + 1``."""
    new_epoch = epoch.epoch + 1
    first = epoch.max_segment_number() + 1
    new_segments = tuple(
        (segment_id(first + i, new_epoch), float(start), float(end)) for i, (start, end) in enumerate(new_ranges)
    )
    return EpochTransitionRecord(epoch.epoch, time_ms, frozenset(segments_to_seal), new_segments)


def transition_matches(
    record: EpochTransitionRecord, segments_to_seal: Collection[int], new_ranges: Sequence[Range]
) -> bool:
    """Whether a stored transition is the one this request would write."""
    return record.segments_to_seal == frozenset(segments_to_seal) and sorted(record.new_ranges) == sorted(
        (float(s), float(e)) for s, e in new_ranges
    )


def migrate_transition(record: EpochTransitionRecord, current: EpochRecord) -> EpochTransitionRecord:
    """Re-base a manual scale onto ``current``, a duplicate of the epoch it was computed for (a rolling
    transaction ran in between): the same segment numbers, in the duplicate epoch."""
    seal = [segment_id(segment_number(s), current.epoch) for s in sorted(record.segments_to_seal)]
    return compute_epoch_transition(current, seal, list(record.new_ranges), record.time_ms)


def build_scaled_epoch(current: EpochRecord, transition: EpochTransitionRecord) -> EpochRecord:
    """The epoch record a transition creates (deterministic, so a retry writes identical content)."""
    time_ms = max(transition.time_ms, current.creation_time_ms + 1)
    kept = [s for s in current.segments if s.segment_id not in transition.segments_to_seal]
    created = [SegmentRecord(sid, time_ms, start, end) for sid, start, end in transition.new_segments]
    return EpochRecord(transition.new_epoch, transition.new_epoch, tuple(kept + created), time_ms)


def build_rolling_epochs(active: EpochRecord, txn_epoch: EpochRecord, time_ms: int) -> tuple[EpochRecord, EpochRecord]:
    """The two epochs of a rolling transaction (Pravega ``rollingTxnCreateDuplicateEpochs``).

    Epoch ``active + 1`` duplicates the transaction's epoch (same segment numbers and ranges, created
    in the new epoch, referencing the transaction epoch's reference epoch): the transaction segments
    merge into these. Epoch ``active + 2`` duplicates the active epoch and becomes the active one, so
    the stream ends with the key space split as before the commit.
    """
    t = max(active.creation_time_ms + 1, time_ms)
    txn_number, active_number = active.epoch + 1, active.epoch + 2
    dup_txn = EpochRecord(
        txn_number,
        txn_epoch.reference_epoch,
        tuple(SegmentRecord(segment_id(s.number, txn_number), t, s.key_start, s.key_end) for s in txn_epoch.segments),
        t,
    )
    dup_active = EpochRecord(
        active_number,
        active.reference_epoch,
        tuple(
            SegmentRecord(segment_id(s.number, active_number), t + 1, s.key_start, s.key_end) for s in active.segments
        ),
        t + 1,
    )
    return dup_txn, dup_active


def check_scale(epoch: int, active: EpochRecord, state: StreamState, transition: EpochTransitionRecord) -> ScaleStatus:
    """``checkScale`` of a scale submitted against ``epoch`` (Pravega ``StreamMetadataTasks.checkScale``)."""
    if epoch > active.epoch:
        return ScaleStatus.INVALID_INPUT
    if epoch in (active.epoch, active.reference_epoch):
        return ScaleStatus.IN_PROGRESS
    if (
        epoch + 1 == active.reference_epoch
        and state == StreamState.SCALING
        and (transition.is_empty or transition.new_epoch == active.epoch)
    ):
        return ScaleStatus.IN_PROGRESS
    return ScaleStatus.SUCCESS


# ---- successors and predecessors ------------------------------------------------------------------------------
def successors(segment: int, sealed_epoch: EpochRecord, previous_epoch: EpochRecord) -> dict[SegmentRange, list[int]]:
    """Segments of ``sealed_epoch`` (the first epoch without ``segment``) that replace it, each with
    its predecessors (the segments of ``previous_epoch`` it overlaps)."""
    record = previous_epoch.segment(segment)
    if record is None:
        raise ValueError(f"segment {segment} is not in epoch {previous_epoch.epoch}")
    result: dict[SegmentRange, list[int]] = {}
    for successor in sealed_epoch.segments:
        if successor.overlaps(record):
            result[successor.range] = sorted(p.segment_id for p in previous_epoch.segments if p.overlaps(successor))
    return result


def predecessors(segment: SegmentRecord, previous_epoch: EpochRecord | None) -> list[SegmentRecord]:
    """The segments ``segment`` replaced: those of the epoch before its creation epoch it overlaps."""
    if previous_epoch is None:
        return []
    return sorted(
        (p for p in previous_epoch.segments if p.overlaps(segment) and p.segment_id != segment.segment_id),
        key=lambda p: p.key_start,
    )


# ---- stream cuts ----------------------------------------------------------------------------------------------
def cut_epoch_bounds(cut: Mapping[int, int]) -> tuple[int, int]:
    """Lowest and highest creation epoch of the cut's segments."""
    epochs = [creation_epoch(s) for s in cut]
    return min(epochs), max(epochs)


def cut_records(cut: Mapping[int, int], epochs: Mapping[int, EpochRecord]) -> dict[int, SegmentRecord] | None:
    """The segment records of the cut's segments, or ``None`` if one does not exist."""
    result: dict[int, SegmentRecord] = {}
    for sid in cut:
        epoch = epochs.get(creation_epoch(sid))
        record = epoch.segment(sid) if epoch is not None else None
        if record is None:
            return None
        result[sid] = record
    return result


def compute_span(cut: Mapping[int, int], epochs: Mapping[int, EpochRecord]) -> dict[SegmentRecord, int]:
    """Segment record -> the latest epoch containing it, up to the cut's newest creation epoch."""
    _, high = cut_epoch_bounds(cut)
    span: dict[SegmentRecord, int] = {}
    for sid in cut:
        for e in range(high, creation_epoch(sid) - 1, -1):
            record = epochs[e].segment(sid)
            if record is not None:
                span[record] = e
                break
        else:
            raise ValueError(f"segment {sid} not found")
    return span


def _offset_key(offset: int) -> float:
    return math.inf if offset < 0 else float(offset)


def cut_equal_or_after(
    cut1: Mapping[int, int],
    records1: Iterable[SegmentRecord],
    cut2: Mapping[int, int],
    records2: Iterable[SegmentRecord],
) -> bool:
    """Whether cut 1 is at or after cut 2 everywhere: for every pair of overlapping segments, the same
    segment has an offset in 1 >= the one in 2, and distinct ones have the newer in 1."""
    second = list(records2)
    for s1 in records1:
        for s2 in second:
            if s1.segment_id == s2.segment_id:
                if _offset_key(cut1[s1.segment_id]) < _offset_key(cut2[s2.segment_id]):
                    return False
            elif s1.overlaps(s2) and s1.segment_id < s2.segment_id:
                return False
    return True


def compare_cuts(
    cut1: Mapping[int, int],
    records1: Iterable[SegmentRecord],
    cut2: Mapping[int, int],
    records2: Iterable[SegmentRecord],
) -> StreamCutComparison:
    """How cut 1 relates to cut 2 (Pravega ``compareStreamCuts``)."""
    greater = less = False
    second = list(records2)
    for s1 in records1:
        for s2 in second:
            if s1.segment_id == s2.segment_id:
                a, b = _offset_key(cut1[s1.segment_id]), _offset_key(cut2[s2.segment_id])
            elif s1.overlaps(s2):
                a, b = float(s1.segment_id), float(s2.segment_id)
            else:
                continue
            greater = greater or a > b
            less = less or a < b
    if greater and less:
        return StreamCutComparison.OVERLAPS
    return StreamCutComparison.BEFORE if less else StreamCutComparison.EQUAL_OR_AFTER


def segments_between(
    from_records: Iterable[SegmentRecord], to_records: Iterable[SegmentRecord], epochs: Iterable[EpochRecord]
) -> set[SegmentRecord]:
    """Segments from cut ``from`` to cut ``to`` inclusive: every segment of ``epochs`` that is not
    before any overlapping ``from`` segment and not after any overlapping ``to`` segment.

    ``epochs`` must span from the lowest creation epoch of ``from`` to the highest of ``to``.
    """
    lower, upper = list(from_records), list(to_records)
    result: set[SegmentRecord] = set()
    for epoch in epochs:
        for s in epoch.segments:
            if s in result:
                continue
            after_from = all(f.segment_id <= s.segment_id for f in lower if f.overlaps(s))
            before_to = all(s.segment_id <= t.segment_id for t in upper if t.overlaps(s))
            if after_from and before_to:
                result.add(s)
    return result


def size_between(
    cut_from: Mapping[int, int],
    cut_to: Mapping[int, int],
    segments: Iterable[SegmentRecord],
    sealed_sizes: Mapping[int, int],
) -> int:
    """Bytes between two cuts: offsets within segments in the cuts, sealed sizes of those fully
    between (a missing size counts 0). Pravega ``sizeBetweenStreamCuts``."""
    total = 0
    for s in segments:
        sid = s.segment_id
        if sid in cut_to and sid in cut_from:
            total += max(cut_to[sid], 0) - max(cut_from[sid], 0)
        elif sid in cut_to:
            total += max(cut_to[sid], 0)
        elif sid in cut_from:
            total += max(sealed_sizes.get(sid, 0), 0) - max(cut_from[sid], 0)
        else:
            total += max(sealed_sizes.get(sid, 0), 0)
    return total


def is_stream_cut_valid(cut: Mapping[int, int], epochs: Mapping[int, EpochRecord]) -> bool:
    """Whether ``cut`` is a position in the stream (Pravega ``isStreamCutValidInternal``).

    Segments with an offset >= 0 must exist and cover the key space exactly once, except for gaps
    covered by *future* segments (offset < 0): segments the position reaches after it has read past
    all their predecessors in the cut. ``epochs`` must hold every epoch from the cut's lowest creation
    epoch to its highest.
    """
    if not cut:
        return False
    records = cut_records(cut, epochs)
    if records is None:
        return False
    low, high = cut_epoch_bounds(cut)
    present = {r for sid, r in records.items() if cut[sid] >= 0}
    future = {r for sid, r in records.items() if cut[sid] < 0}
    if not present:
        return False
    for f in future:
        if any(p.overlaps(f) and p.segment_id >= f.segment_id for p in present):
            return False
    gaps: list[Range] = []
    cursor = 0.0
    for p in sorted(present, key=lambda r: (r.key_start, r.key_end)):
        if p.key_start < cursor:
            return False
        if p.key_start > cursor:
            gaps.append((cursor, p.key_start))
        cursor = p.key_end
    if cursor < 1.0:
        gaps.append((cursor, 1.0))
    for start, end in gaps:
        if not any(f.overlaps_range(start, end) for f in future):
            return False
    # From the oldest epoch, walk forward through the gaps: every segment reached that lies after a
    # present segment must itself be a future segment of the cut.
    to_check = [s for start, end in gaps for s in epochs[low].segments if s.overlaps_range(start, end)]
    fully_read: set[SegmentRecord] = set()
    while to_check:
        s = to_check.pop(0)
        if s in fully_read or s in present or s in future:
            continue
        for p in present:
            if not p.overlaps(s):
                continue
            if p.segment_id < s.segment_id:
                return False
            fully_read.add(s)
            for e in range(max(s.creation_epoch, low), high + 1):
                if not epochs[e].contains(s.segment_id):
                    to_check.extend(x for x in epochs[e].segments if x.overlaps(s))
                    break
    return True


# ---- time and history -----------------------------------------------------------------------------------------
def epoch_at_time(entries: Sequence[HistoryEntry], time_ms: int, max_epoch: int) -> int | None:
    """The latest epoch (<= ``max_epoch``) created at or before ``time_ms``; ``None`` if none was."""
    found: int | None = None
    lo, hi = 0, len(entries) - 1
    while lo <= hi:
        mid = (lo + hi) // 2
        entry = entries[mid]
        if entry.creation_time_ms <= time_ms and entry.epoch <= max_epoch:
            found = entry.epoch
            lo = mid + 1
        else:
            hi = mid - 1
    return found


def summarize(epochs: Sequence[EpochRecord]) -> list[EpochSummary]:
    """The history of consecutive epochs: what each created and sealed relative to the one before."""
    result: list[EpochSummary] = []
    previous: EpochRecord | None = None
    for e in epochs:
        before = previous.segment_ids if previous is not None else frozenset()
        created = tuple(s for s in e.segments if s.segment_id not in before)
        sealed = tuple(s for s in previous.segments if not e.contains(s.segment_id)) if previous is not None else ()
        result.append(EpochSummary(e.epoch, e.reference_epoch, e.creation_time_ms, e.segments, created, sealed))
        previous = e
    return result
