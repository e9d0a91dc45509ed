"""Pure computations of the metadata store (no coordination store): scale validation, epochs,
successors/predecessors, stream cuts, sizes, time lookups, rolling transaction epochs, and
property-based tests over random scale sequences."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.metadata.codec import CodecError, decode, encode
from controller.metadata.errors import ScaleInputError, ScalePreconditionError
from controller.metadata.records import (
    EMPTY_TRANSITION,
    EMPTY_TRUNCATION,
    ActiveTxnRecord,
    CommittingTxnsRecord,
    ConfigurationRecord,
    EpochRecord,
    HistoryEntry,
    ReaderGroupConfigRecord,
    ReaderGroupRetentionType,
    ScaleStatus,
    SegmentRecord,
    StreamCutComparison,
    StreamState,
    TruncationRecord,
    is_transition_allowed,
)
from controller.metadata.stream_logic import (
    build_rolling_epochs,
    build_scaled_epoch,
    check_scale,
    compare_cuts,
    compute_epoch_transition,
    compute_span,
    cut_equal_or_after,
    epoch_at_time,
    is_consistent,
    is_stream_cut_valid,
    merge_ranges,
    migrate_transition,
    predecessors,
    segments_between,
    size_between,
    successors,
    summarize,
    transition_matches,
    validate_scale,
)
from controller_client.model import (
    RetentionPolicy,
    ScalingPolicy,
    StreamConfiguration,
    StreamCut,
    TxnState,
    creation_epoch,
    even_ranges,
    segment_id,
)

pytestmark = pytest.mark.unit


def epoch0(count: int = 2, t: int = 100) -> EpochRecord:
    return EpochRecord(
        0, 0, tuple(SegmentRecord(segment_id(i, 0), t, s, e) for i, (s, e) in enumerate(even_ranges(count))), t
    )


def scale(epoch: EpochRecord, seal: list[int], ranges: list[tuple[float, float]], t: int) -> EpochRecord:
    validate_scale(epoch, seal, ranges, 1)
    return build_scaled_epoch(epoch, compute_epoch_transition(epoch, seal, ranges, t))


def as_map(epochs: list[EpochRecord]) -> dict[int, EpochRecord]:
    return {e.epoch: e for e in epochs}


S0, S1 = segment_id(0, 0), segment_id(1, 0)


@pytest.fixture
def history() -> list[EpochRecord]:
    """e0: S0 [0,.5) S1 [.5,1); e1: split S1 -> S2 [.5,.75) S3 [.75,1); e2: merge S0,S2 -> S4 [0,.75)."""
    e0 = epoch0()
    e1 = scale(e0, [S1], [(0.5, 0.75), (0.75, 1.0)], 200)
    e2 = scale(e1, [S0, segment_id(2, 1)], [(0.0, 0.75)], 300)
    return [e0, e1, e2]


# ---- state machine and ranges ---------------------------------------------------------------------------------
def test_state_transitions_with_pravega_map() -> None:
    assert is_transition_allowed(StreamState.CREATING, StreamState.ACTIVE)
    for busy in (StreamState.UPDATING, StreamState.SCALING, StreamState.TRUNCATING, StreamState.COMMITTING_TXN):
        assert is_transition_allowed(StreamState.ACTIVE, busy)
        assert is_transition_allowed(busy, StreamState.ACTIVE)
        assert not is_transition_allowed(busy, StreamState.SEALED)
    assert is_transition_allowed(StreamState.SEALING, StreamState.SEALED)
    assert not is_transition_allowed(StreamState.SEALING, StreamState.ACTIVE)
    assert not is_transition_allowed(StreamState.SEALED, StreamState.ACTIVE)
    assert not is_transition_allowed(StreamState.CREATING, StreamState.SCALING)
    assert all(is_transition_allowed(s, s) for s in StreamState)


def test_merge_ranges_with_gaps_and_overlaps() -> None:
    assert merge_ranges([(0.5, 1.0), (0.0, 0.5)]) == [(0.0, 1.0)]
    assert merge_ranges([(0.0, 0.3), (0.4, 1.0)]) == [(0.0, 0.3), (0.4, 1.0)]
    assert is_consistent([(0.0, 0.25), (0.25, 1.0)])
    assert not is_consistent([(0.0, 0.6), (0.5, 1.0)])
    assert not is_consistent([(0.0, 0.5)])


# ---- scale ----------------------------------------------------------------------------------------------------
def test_validate_scale_with_segment_not_active() -> None:
    with pytest.raises(ScalePreconditionError):
        validate_scale(epoch0(), [segment_id(7, 0)], [(0.0, 0.5)], 1)


def test_validate_scale_with_ranges_not_covering_sealed() -> None:
    e = epoch0()
    with pytest.raises(ScaleInputError):
        validate_scale(e, [S1], [(0.5, 0.7)], 1)
    with pytest.raises(ScaleInputError):
        validate_scale(e, [S1], [(0.5, 0.8), (0.7, 1.0)], 1)  # overlapping new ranges
    with pytest.raises(ScaleInputError):
        validate_scale(e, [S1], [(0.4, 1.0)], 1)
    with pytest.raises(ScaleInputError):
        validate_scale(e, [S1], [(0.9, 0.5)], 1)
    with pytest.raises(ScaleInputError):
        validate_scale(e, [], [(0.5, 1.0)], 1)


def test_validate_scale_with_min_segments() -> None:
    with pytest.raises(ScalePreconditionError):
        validate_scale(epoch0(), [S0, S1], [(0.0, 1.0)], 2)
    validate_scale(epoch0(), [S0, S1], [(0.0, 1.0)], 1)


def test_epoch_transition_numbers_segments_after_highest(history: list[EpochRecord]) -> None:
    t = compute_epoch_transition(history[2], [segment_id(3, 1)], [(0.75, 0.9), (0.9, 1.0)], 400)
    assert t.active_epoch == 2 and t.new_epoch == 3
    assert [sid for sid, _, _ in t.new_segments] == [segment_id(5, 3), segment_id(6, 3)]
    assert transition_matches(t, [segment_id(3, 1)], [(0.9, 1.0), (0.75, 0.9)])
    assert not transition_matches(t, [segment_id(3, 1)], [(0.75, 1.0)])
    assert EMPTY_TRANSITION.is_empty


def test_scaled_epoch_with_time_not_after_previous() -> None:
    e0 = epoch0(t=1000)
    e1 = scale(e0, [S1], [(0.5, 1.0)], 10)
    assert e1.creation_time_ms == 1001
    assert e1.segment(segment_id(2, 1)).creation_time_ms == 1001  # type: ignore[union-attr]
    assert is_consistent((s.key_start, s.key_end) for s in e1.segments)


def test_successors_and_predecessors_with_split_then_merge(history: list[EpochRecord]) -> None:
    e0, e1, e2 = history
    s2, s3, s4 = segment_id(2, 1), segment_id(3, 1), segment_id(4, 2)
    succ = successors(S1, e1, e0)
    assert {r.segment_id: p for r, p in succ.items()} == {s2: [S1], s3: [S1]}
    succ0 = successors(S0, e2, e1)
    assert {r.segment_id: p for r, p in succ0.items()} == {s4: [S0, s2]}
    assert [p.segment_id for p in predecessors(e2.segment(s4), e1)] == [S0, s2]  # type: ignore[arg-type]
    assert predecessors(e0.segment(S0), None) == []  # type: ignore[arg-type]


def test_check_scale_statuses() -> None:
    e0 = epoch0()
    e1 = scale(e0, [S1], [(0.5, 1.0)], 200)
    assert check_scale(0, e0, StreamState.SCALING, EMPTY_TRANSITION) == ScaleStatus.IN_PROGRESS
    assert check_scale(0, e1, StreamState.ACTIVE, EMPTY_TRANSITION) == ScaleStatus.SUCCESS
    assert check_scale(5, e1, StreamState.ACTIVE, EMPTY_TRANSITION) == ScaleStatus.INVALID_INPUT


# ---- stream cuts ----------------------------------------------------------------------------------------------
def test_stream_cut_validity_with_mixed_epochs(history: list[EpochRecord]) -> None:
    epochs = as_map(history)
    s2, s3, s4 = segment_id(2, 1), segment_id(3, 1), segment_id(4, 2)
    assert is_stream_cut_valid({S0: 5, S1: 7}, epochs)
    assert is_stream_cut_valid({S0: 5, s2: 1, s3: 0}, epochs)
    assert is_stream_cut_valid({s4: 3, s3: 9}, epochs)
    assert not is_stream_cut_valid({S0: 5}, epochs)  # gap
    assert not is_stream_cut_valid({S0: 5, S1: 1, s2: 0}, epochs)  # overlap
    assert not is_stream_cut_valid({s4: 0, S1: 0}, epochs)  # overlap (S1 covers s3's range too)
    assert not is_stream_cut_valid({S0: 1, segment_id(9, 0): 1}, epochs)  # unknown segment
    assert not is_stream_cut_valid({}, epochs)


def test_stream_cut_validity_with_future_segments(history: list[EpochRecord]) -> None:
    epochs = as_map(history)
    s2, s3, s4 = segment_id(2, 1), segment_id(3, 1), segment_id(4, 2)
    # S0 read fully, waiting for s4 (its successor) whose other predecessor s2 is being read
    assert is_stream_cut_valid({s2: 4, s3: 2, s4: -1, S0: 9}, epochs)
    # a future segment older than a present segment it overlaps
    assert not is_stream_cut_valid({s4: 1, S0: -1, s3: 0}, epochs)


def test_compare_and_order_stream_cuts(history: list[EpochRecord]) -> None:
    e0, e1, e2 = history
    s2, s3, s4 = segment_id(2, 1), segment_id(3, 1), segment_id(4, 2)
    a = {S0: 5, S1: 7}
    b = {S0: 6, s2: 0, s3: 0}
    c = {s4: 0, s3: 0}
    ra, rb, rc = e0.segments, (e0.segment(S0), *e1.segments[1:]), e2.segments
    assert compare_cuts(b, rb, a, ra) == StreamCutComparison.EQUAL_OR_AFTER  # type: ignore[arg-type]
    assert compare_cuts(a, ra, b, rb) == StreamCutComparison.BEFORE  # type: ignore[arg-type]
    assert compare_cuts(c, rc, b, rb) == StreamCutComparison.EQUAL_OR_AFTER  # type: ignore[arg-type]
    mixed = {S0: 9, S1: 0}
    assert compare_cuts(mixed, ra, b, rb) == StreamCutComparison.OVERLAPS  # type: ignore[arg-type]
    assert cut_equal_or_after(a, ra, a, ra)
    assert not cut_equal_or_after({S0: 4, S1: 7}, ra, a, ra)
    assert cut_equal_or_after({S0: -1, S1: 7}, ra, a, ra)  # -1: the segment's end


def test_segments_between_and_sizes(history: list[EpochRecord]) -> None:
    e0, e1, e2 = history
    s2, s3, s4 = segment_id(2, 1), segment_id(3, 1), segment_id(4, 2)
    between = segments_between(e0.segments, e2.segments, history)
    assert {s.segment_id for s in between} == {S0, S1, s2, s3, s4}
    between = segments_between([e0.segment(S0), e1.segment(s2), e1.segment(s3)], e2.segments, history)  # type: ignore[list-item]
    assert {s.segment_id for s in between} == {S0, s2, s3, s4}
    cut_from = {S0: 10, S1: 20}
    cut_to = {s4: 5, s3: 7}
    segs = segments_between(e0.segments, e2.segments, history)
    sizes = {S0: 100, S1: 50, s2: 30}
    # S0: 100-10, S1: 50-20, s2: 30, s3: 7 (in to only), s4: 5
    assert size_between(cut_from, cut_to, segs, sizes) == 90 + 30 + 30 + 7 + 5
    span = compute_span(cut_to, as_map(history))
    assert {r.segment_id: e for r, e in span.items()} == {s4: 2, s3: 2}


def test_epoch_at_time_with_boundaries() -> None:
    entries = [HistoryEntry(0, 0, 100), HistoryEntry(1, 1, 200), HistoryEntry(2, 2, 300)]
    assert epoch_at_time(entries, 99, 2) is None
    assert epoch_at_time(entries, 100, 2) == 0
    assert epoch_at_time(entries, 250, 2) == 1
    assert epoch_at_time(entries, 10_000, 2) == 2
    assert epoch_at_time(entries, 10_000, 1) == 1


def test_summarize_with_created_and_sealed(history: list[EpochRecord]) -> None:
    summary = summarize(history)
    assert [len(s.segments_created) for s in summary] == [2, 2, 1]
    assert [{x.segment_id for x in s.segments_sealed} for s in summary] == [set(), {S1}, {S0, segment_id(2, 1)}]


# ---- rolling transactions -------------------------------------------------------------------------------------
def test_rolling_epochs_duplicate_numbers_in_new_epochs(history: list[EpochRecord]) -> None:
    e0, _, e2 = history
    dup_txn, dup_active = build_rolling_epochs(e2, e0, 50)
    assert (dup_txn.epoch, dup_txn.reference_epoch) == (3, 0)
    assert (dup_active.epoch, dup_active.reference_epoch) == (4, 2)
    assert [s.segment_id for s in dup_txn.segments] == [segment_id(0, 3), segment_id(1, 3)]
    assert [(s.key_start, s.key_end) for s in dup_txn.segments] == [(s.key_start, s.key_end) for s in e0.segments]
    assert [s.number for s in dup_active.segments] == [s.number for s in e2.segments]
    assert all(s.creation_epoch == 4 for s in dup_active.segments)
    assert dup_txn.creation_time_ms == e2.creation_time_ms + 1
    assert dup_active.creation_time_ms == dup_txn.creation_time_ms + 1
    assert dup_txn.is_duplicate and dup_active.is_duplicate
    # the active epoch's segments are succeeded by the transaction duplicates, and those by the active duplicates
    succ = successors(segment_id(4, 2), dup_txn, e2)
    assert {r.segment_id for r in succ} == {segment_id(0, 3), segment_id(1, 3)}
    # a manual scale submitted against epoch 2 re-bases onto the duplicate of epoch 2
    t = compute_epoch_transition(e2, [segment_id(3, 1)], [(0.75, 1.0)], 60)
    moved = migrate_transition(t, dup_active)
    assert moved.active_epoch == 4 and moved.segments_to_seal == {segment_id(3, 4)}
    assert [sid for sid, _, _ in moved.new_segments] == [segment_id(5, 5)]


# ---- codec ----------------------------------------------------------------------------------------------------
def test_codec_round_trips_records(history: list[EpochRecord]) -> None:
    import uuid

    config = StreamConfiguration(
        ScalingPolicy.by_event_rate(10, 2, 3), RetentionPolicy.by_size_bytes(5, 10), 7, ("x",), 9
    )
    span = compute_span({segment_id(4, 2): 5, segment_id(3, 1): 7}, as_map(history))
    records: list[object] = [
        history[2],
        ConfigurationRecord(config, True, False, ("y",)),
        TruncationRecord({1: 2}, span, frozenset({3}), frozenset({4}), 99, True),
        EMPTY_TRUNCATION,
        ActiveTxnRecord(1, 2, -1, TxnState.COMMITTING, "w", 5, 6, {7: 8}),
        CommittingTxnsRecord(3, (uuid.uuid4(),), 4),
        StreamState.SEALING,
        ReaderGroupConfigRecord(
            retention_type=ReaderGroupRetentionType.AUTOMATIC,
            starting_stream_cuts={"s/a": StreamCut("s", "a", {1: 2}), "s/b": "unbounded"},
            reader_group_id=uuid.uuid4(),
            removed_streams=frozenset({"s/c"}),
        ),
    ]
    for record in records:
        assert decode(type(record), encode(record)) == record
    with pytest.raises(CodecError):
        decode(EpochRecord, b'{"v": 99}')
    with pytest.raises(CodecError):
        decode(EpochRecord, b"not json")


# ---- property-based: random scale and rolling sequences -------------------------------------------------------
@st.composite
def stream_histories(draw: st.DrawFn) -> list[EpochRecord]:
    epochs = [epoch0(draw(st.integers(1, 4)), t=1000)]
    for step in range(draw(st.integers(0, 12))):
        current = epochs[-1]
        originals = [e for e in epochs if not e.is_duplicate and e.epoch < current.reference_epoch]
        if originals and draw(st.integers(0, 4)) == 0:
            txn_epoch = draw(st.sampled_from(originals))
            epochs.extend(build_rolling_epochs(current, txn_epoch, 1000 + step))
            continue
        ordered = sorted(current.segments, key=lambda s: s.key_start)
        i = draw(st.integers(0, len(ordered) - 1))
        j = draw(st.integers(i, min(i + 2, len(ordered) - 1)))
        start, end = ordered[i].key_start, ordered[j].key_end
        pieces = draw(st.integers(1, 3)) if end - start > 1e-9 else 1
        inner = st.floats(start, end, exclude_min=True, exclude_max=True)
        cuts = sorted(draw(st.sets(inner, max_size=pieces - 1))) if pieces > 1 else []
        points = [start, *cuts, end]
        ranges = [(a, b) for a, b in itertools.pairwise(points) if a < b]
        seal = [s.segment_id for s in ordered[i : j + 1]]
        epochs.append(scale(current, seal, ranges, 1000 + 10 * step))
    return epochs


def _sealed_epoch(epochs: list[EpochRecord], sid: int) -> int | None:
    seen = False
    for e in epochs:
        if e.contains(sid):
            seen = True
        elif seen:
            return e.epoch
    return None


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stream_histories())
def test_random_histories_keep_epochs_consistent_and_links_symmetric(epochs: list[EpochRecord]) -> None:
    by_number = as_map(epochs)
    all_segments: dict[int, SegmentRecord] = {}
    for e in epochs:
        assert is_consistent((s.key_start, s.key_end) for s in e.segments)
        assert e.creation_time_ms > by_number[e.epoch - 1].creation_time_ms if e.epoch else True
        for s in e.segments:
            assert all_segments.setdefault(s.segment_id, s) == s
    for sid, record in all_segments.items():
        present = [e.epoch for e in epochs if e.contains(sid)]
        assert present == list(range(present[0], present[-1] + 1)), "a segment never comes back"
        assert present[0] == record.creation_epoch
        sealed = _sealed_epoch(epochs, sid)
        if sealed is None:
            continue
        succ = successors(sid, by_number[sealed], by_number[sealed - 1])
        assert succ, "a sealed segment has successors"
        for successor, preds in succ.items():
            assert sid in preds
            created_in = creation_epoch(successor.segment_id)
            back = predecessors(all_segments[successor.segment_id], by_number[created_in - 1])
            assert sid in {p.segment_id for p in back}
            assert sorted(p.segment_id for p in back) == preds
    for sid, record in all_segments.items():
        if record.creation_epoch == 0:
            continue
        for p in predecessors(record, by_number[record.creation_epoch - 1]):
            succ = successors(p.segment_id, by_number[record.creation_epoch], by_number[record.creation_epoch - 1])
            assert sid in {r.segment_id for r in succ}


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stream_histories(), st.data())
def test_random_histories_epoch_cuts_valid_ordered_and_between(epochs: list[EpochRecord], data: st.DataObject) -> None:
    by_number = as_map(epochs)
    a = data.draw(st.integers(0, len(epochs) - 1))
    b = data.draw(st.integers(a, len(epochs) - 1))
    cut_a = {s.segment_id: 0 for s in epochs[a].segments}
    cut_b = {s.segment_id: 0 for s in epochs[b].segments}
    assert is_stream_cut_valid(cut_a, by_number) and is_stream_cut_valid(cut_b, by_number)
    assert cut_equal_or_after(cut_b, epochs[b].segments, cut_a, epochs[a].segments)
    expected = {s.segment_id for e in epochs[a : b + 1] for s in e.segments}
    got = segments_between(epochs[a].segments, epochs[b].segments, epochs[: b + 1])
    assert {s.segment_id for s in got} == expected
    if set(cut_a) != set(cut_b):
        assert compare_cuts(cut_a, epochs[a].segments, cut_b, epochs[b].segments) == StreamCutComparison.BEFORE
        assert not cut_equal_or_after(cut_a, epochs[a].segments, cut_b, epochs[b].segments)
    # a reader position advanced by whole scale events (each region independently) stays valid
    position = dict(cut_a)
    for e in epochs[a + 1 :]:
        previous = by_number[e.epoch - 1]
        sealed = [s.segment_id for s in previous.segments if not e.contains(s.segment_id)]
        created = [s.segment_id for s in e.segments if not previous.contains(s.segment_id)]
        if all(s in position for s in sealed) and data.draw(st.booleans()):
            for s in sealed:
                del position[s]
            position.update(dict.fromkeys(created, 0))
            assert is_stream_cut_valid(position, by_number)
    if len(position) > 1:
        dropped = dict(position)
        dropped.pop(next(iter(dropped)))
        assert not is_stream_cut_valid(dropped, by_number)
