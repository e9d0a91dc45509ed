"""Offsets, planning and framing of the ``segstore`` source without Spark or a network: a fake stream with
a random scaling history stands in for the controller and the segment store."""

from __future__ import annotations

import itertools
import json
import random

import pytest
from fake_stream import SCOPE, STREAM, FakeStream
from hypothesis import given, settings
from hypothesis import strategies as st

from controller_client.model import StreamCut
from pravega_spark.errors import DataLossError, OffsetFormatError, SegstoreOptionError, UnreachableEndError
from pravega_spark.offsets import (
    ReadState,
    is_initial,
    offset_to_stream_cut,
    stream_cut_to_offset,
)
from pravega_spark.options.read import Position, ReadOptions, parse_cut_option
from pravega_spark.read.partition_reader import (
    SegmentIngestTimes,
    SegmentRangePartition,
    batches_from_chunks,
    frame_events,
)
from pravega_spark.read.planning import (
    ReadRange,
    advance,
    pack_ranges,
    plan_ranges,
)
from segment_store.protocol import ProtocolError, encode_events, frame_event, parse_events

pytestmark = pytest.mark.unit


def _events_of(stream: FakeStream, ranges: list[ReadRange]) -> list[bytes]:
    found = []
    for r in ranges:
        data = bytes(stream.data[r.segment_id][r.start : r.end])
        found += [e.data.split(b":")[0] for e in parse_events(data, r.start)]
    return found


def _all_events(stream: FakeStream) -> list[bytes]:
    return sorted(b"e%d" % i for i in range(stream.events))


# ---- offsets ----------------------------------------------------------------------------------------------------
def test_read_state_offset_round_trips_with_pending_and_sorted_keys() -> None:
    state = ReadState(SCOPE, STREAM, {(1 << 32) | 3: 10, 2: 0}, {(2 << 32) | 4: {7: 99}})
    offset = state.to_offset()
    assert list(offset["positions"]) == ["2", str((1 << 32) | 3)]
    assert offset["pending"] == {str((2 << 32) | 4): {"7": 99}}
    assert ReadState.from_offset(offset) == ReadState(
        SCOPE, STREAM, dict(sorted(state.positions.items())), state.pending
    )
    assert ReadState.from_json(state.to_json()).to_offset() == offset


def test_stream_cut_helpers_convert_both_ways() -> None:
    cut = StreamCut(SCOPE, STREAM, {5: 100, 1: 0})
    offset = stream_cut_to_offset(cut)
    assert offset == {"scope": SCOPE, "stream": STREAM, "positions": {"1": 0, "5": 100}}
    assert offset_to_stream_cut(offset) == StreamCut(SCOPE, STREAM, {1: 0, 5: 100})
    with_pending = {**offset, "pending": {"9": {"7": 50}}}
    assert offset_to_stream_cut(with_pending).positions == {1: 0, 5: 100, 7: 50}


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("{", "not JSON"),
        ("[]", "expected a JSON object"),
        ('{"positions": {}}', "non-empty"),
        ('{"positions": {"x": 1}}', "not an integer"),
        ('{"positions": {"1": "a"}}', "must be an integer"),
        ('{"positions": {"1": -2}}', "negative"),
        ('{"scope": "other", "stream": "st", "positions": {"1": 0}}', "not in sc/st"),
        ('{"positions": {"1": 0}, "extra": 1}', "unknown field"),
    ],
)
def test_bad_stream_cut_json_is_an_error_naming_the_option(text: str, problem: str) -> None:
    with pytest.raises(SegstoreOptionError, match=f"^option 'startingOffsets': .*{problem}"):
        parse_cut_option("startingOffsets", text, SCOPE, STREAM)
    with pytest.raises(OffsetFormatError):
        ReadState.from_json(text, SCOPE, STREAM)


def test_stream_cut_json_accepts_end_markers_and_leaves_out_scope() -> None:
    state = parse_cut_option("endingOffsets", '{"positions": {"0": -1, "1": 8}}', SCOPE, STREAM)
    assert state == ReadState(SCOPE, STREAM, {0: -1, 1: 8})


# ---- options ----------------------------------------------------------------------------------------------------
def test_read_options_parse_aliases_and_defaults() -> None:
    options = ReadOptions.parse(
        {"scope": SCOPE, "stream": STREAM, "START_STREAM_CUT": "earliest", "approx_bytes_per_trigger": "100"}
    )
    assert options.starting is not None and options.starting.kind == "earliest"
    assert options.ending is None and options.max_bytes_per_trigger == 100 and options.fail_on_data_loss
    assert options.target.controller == "tcp://127.0.0.1:9090"
    cut = ReadOptions.parse({"scope": SCOPE, "stream": STREAM, "end_stream_cut": '{"positions": {"3": 5}}'})
    assert cut.ending is not None and cut.ending.cut == ReadState(SCOPE, STREAM, {3: 5})


@pytest.mark.parametrize(
    ("values", "option"),
    [
        ({"scope": ""}, "scope"),
        ({"stream": " "}, "stream"),
        ({"startingOffsets": "{bad"}, "startingOffsets"),
        ({"endingOffsets": "earliest"}, "endingOffsets"),
        ({"startingTimestamp": "yesterday"}, "startingTimestamp"),
        ({"startingTimestamp": "5", "startingOffsets": "latest"}, "startingTimestamp"),
        ({"maxBytesPerTrigger": "0"}, "maxBytesPerTrigger"),
        ({"failOnDataLoss": "maybe"}, "failOnDataLoss"),
        ({"controller": "http://x:1"}, "controller"),
    ],
)
def test_read_option_errors_name_the_option(values: dict[str, str], option: str) -> None:
    with pytest.raises(SegstoreOptionError, match=f"^option '{option}'"):
        ReadOptions.parse({"scope": SCOPE, "stream": STREAM, **values})


# ---- framing ----------------------------------------------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 300), max_size=300),
    uniform=st.booleans(),
    cuts=st.lists(st.integers(1, 5000), max_size=20),
    base=st.integers(0, 10**9),
)
def test_batches_from_chunks_give_every_event_once_whatever_the_chunking(
    sizes: list[int], uniform: bool, cuts: list[int], base: int
) -> None:
    payloads = [bytes([i % 251]) * (sizes[0] if uniform and sizes else n) for i, n in enumerate(sizes)]
    data = encode_events(payloads)
    bounds = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    chunks = [data[a:b] for a, b in itertools.pairwise(bounds)]
    batches = list(batches_from_chunks(chunks, base, SCOPE, STREAM, 42, batch_bytes=700))
    expected = parse_events(data, base)
    assert [e for b in batches for e in b.column("event").to_pylist()] == [e.data for e in expected]
    assert [o for b in batches for o in b.column("offset").to_pylist()] == [e.offset for e in expected]
    assert all(b.column("scope").to_pylist() == [SCOPE] * b.num_rows for b in batches)
    assert all(set(b.column("segment_id").to_pylist()) <= {42} for b in batches)


def test_framing_rejects_bad_headers_and_ranges_ending_inside_an_event() -> None:
    with pytest.raises(ProtocolError, match="bad event header"):
        frame_events(b"\0\0\0\1\0\0\0\0")
    data = encode_events([b"abc", b"defg"])
    starts, lengths, consumed = frame_events(data[:-1])
    assert list(starts) == [0] and list(lengths) == [3] and consumed == 11
    with pytest.raises(ProtocolError, match="ends inside an event"):
        list(batches_from_chunks([data[:-1]], 0, SCOPE, STREAM, 0))


class _Times:
    """A stand-in for the executor's connection: ``ReadIngestTimes`` answers from ``runs``, a few at a time;
    None (as for a segment store without the extension) when ``runs`` is None."""

    def __init__(self, runs: list[tuple[int, int]] | None, end: int) -> None:
        self.runs, self.end, self.asked = runs, end, 0

    def ingest_times(self, scope: str, stream: str, segment_id: int, start: int, end: int) -> object:
        self.asked += 1
        if self.runs is None:
            return None
        covering = max(i for i, (at, _) in enumerate(self.runs) if at <= start)
        part = [(start, self.runs[covering][1]), *self.runs[covering + 1 : covering + 3]]
        answered = self.runs[covering + 3][0] if covering + 3 < len(self.runs) else min(end, self.end)
        return answered, part


def test_timestamps_come_from_ingest_time_runs_and_are_null_without_them() -> None:
    data = encode_events([bytes([i]) * (i % 5) for i in range(60)])
    expected = parse_events(data, 100)
    runs = [(100, 5_000), (100 + len(data) // 3, 6_000), (100 + len(data) // 2, 7_000), (expected[40].offset, 9_000)]
    partition = SegmentRangePartition("tcp://x", SCOPE, STREAM, 1, 100, 100 + len(data))
    times = _Times(runs, 100 + len(data))
    batches = list(
        batches_from_chunks([data], 100, SCOPE, STREAM, 1, batch_bytes=200, times=SegmentIngestTimes(times, partition))
    )
    got = [t.timestamp() * 1000 for b in batches for t in b.column("timestamp").to_pylist()]
    want = [max(ms for at, ms in runs if at <= e.offset) for e in expected]
    assert got == want and times.asked < len(batches) + 2
    unknown = SegmentIngestTimes(_Times(None, 100 + len(data)), partition)
    batches = list(batches_from_chunks([data], 100, SCOPE, STREAM, 1, times=unknown))
    assert [b.column("timestamp").null_count for b in batches] == [b.num_rows for b in batches]
    plain = list(batches_from_chunks([data], 100, SCOPE, STREAM, 1))
    assert plain[0].schema.names[-1] == "timestamp" and plain[0].column("timestamp").null_count == len(expected)


# ---- planning ---------------------------------------------------------------------------------------------------
def test_advance_without_limit_reaches_the_tail_across_a_split_and_a_merge() -> None:
    stream = FakeStream(2, random.Random(1))
    start = stream.head()
    stream.write(50)
    stream.scale()
    stream.write(50)
    stream.scale()
    stream.write(50)
    end = advance(start, stream)
    assert end == stream.tail()
    assert sorted(_events_of(stream, plan_ranges(start, end, stream))) == _all_events(stream)


def test_merge_successor_waits_in_pending_until_every_predecessor_is_read() -> None:
    stream = FakeStream(2, random.Random(2))
    a, b = stream.active()
    start = stream.head()
    stream.data[a] += frame_event(b"e0:")
    stream.data[b] += frame_event(b"e1:") * 3
    stream.events = 2  # names e0, e1 (e1 three times is fine for this check)
    stream.sealed.update({a, b})
    merged = (1 << 32) | 2
    stream._create(merged, (0.0, 1.0))
    stream.succ = {a: {merged: [a, b]}, b: {merged: [a, b]}}
    half = advance(start, stream, max_bytes=len(stream.data[a]) + 11)  # all of a, one event of b
    assert half.positions == {b: 11} and half.pending == {merged: {a: 11}}
    assert half.to_stream_cut().positions == {a: 11, b: 11}
    rest = advance(half, stream)
    assert rest.positions == {merged: 0} and not rest.pending
    ranges = plan_ranges(start, half, stream) + plan_ranges(half, rest, stream)
    assert sorted((r.segment_id, r.start, r.end) for r in ranges) == [(a, 0, 11), (b, 0, 11), (b, 11, 33)]


def test_max_bytes_ends_at_event_boundaries_and_always_admits_one_event() -> None:
    stream = FakeStream(1, random.Random(3))
    (segment,) = stream.active()
    start = stream.head()
    stream.data[segment] += encode_events([b"a" * 10, b"b" * 10, b"c" * 100])
    first = advance(start, stream, max_bytes=40)
    assert first.positions == {segment: 36}  # two events of 18 bytes; the third does not fit
    second = advance(first, stream, max_bytes=40)
    assert second.positions == {segment: 144}  # one event bigger than the limit: admitted alone
    assert advance(second, stream, max_bytes=40) == second


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32), budget=st.one_of(st.none(), st.integers(1, 2000)), segments=st.integers(1, 4))
def test_micro_batches_read_every_event_once_while_the_stream_scales(
    seed: int, budget: int | None, segments: int
) -> None:
    rng = random.Random(seed)
    stream = FakeStream(segments, rng)
    state = stream.head()
    ranges: list[ReadRange] = []
    for step in range(60):
        action = rng.random()
        if action < 0.5:
            stream.write(rng.randint(1, 20))
        elif action < 0.65:
            stream.scale()
        new = advance(state, stream, max_bytes=budget)
        batch = plan_ranges(state, new, stream)
        if budget is not None and batch:
            assert sum(r.size for r in batch) <= budget or len(batch) == 1
        ranges += batch
        state = new
        if step % 7 == 0:  # a restart: the state comes back from its JSON
            state = ReadState.from_json(state.to_json(), SCOPE, STREAM)
    stream.seal_all()
    while (new := advance(state, stream, max_bytes=budget)) != state:
        ranges += plan_ranges(state, new, stream)
        state = new
    assert sorted(_events_of(stream, ranges)) == _all_events(stream)
    assert not state.pending


def test_cap_stops_at_the_target_and_never_reads_past_it() -> None:
    stream = FakeStream(2, random.Random(4))
    start = stream.head()
    stream.write(30)
    target = stream.tail()
    stream.write(30)
    stream.scale()
    stream.write(30)
    end = advance(start, stream, cap=target.positions)
    assert end.positions == target.positions
    assert advance(end, stream, cap=target.positions) == end


def test_truncated_positions_are_data_loss_unless_allowed() -> None:
    stream = FakeStream(1, random.Random(5))
    (segment,) = stream.active()
    start = stream.head()
    stream.data[segment] += encode_events([b"a", b"b", b"c"])
    stream.start[segment] = 9
    with pytest.raises(DataLossError, match=r"offsets \[0, 9\) are truncated.*failOnDataLoss=false"):
        advance(start, stream)
    end = advance(start, stream, fail_on_data_loss=False)
    assert end.positions == {segment: 27}
    with pytest.raises(DataLossError):
        plan_ranges(start, end, stream)
    assert plan_ranges(start, end, stream, fail_on_data_loss=False) == [ReadRange(segment, 9, 27)]


def test_a_deleted_segment_is_data_loss_and_its_successors_follow_when_allowed() -> None:
    stream = FakeStream(1, random.Random(6))
    (segment,) = stream.active()
    start = stream.head()
    stream.write(5)
    stream.scale()
    stream.write(5)
    stream.deleted.add(segment)
    with pytest.raises(DataLossError, match="no longer exists"):
        advance(start, stream)
    end = advance(start, stream, fail_on_data_loss=False)
    assert end == stream.tail()


def test_an_end_before_the_start_is_unreachable() -> None:
    stream = FakeStream(1, random.Random(7))
    stream.write(5)
    tail = stream.tail()
    with pytest.raises(UnreachableEndError):
        plan_ranges(tail, stream.head(), stream)
    stream.scale()
    with pytest.raises(UnreachableEndError, match="is open and not in the end position"):
        plan_ranges(stream.tail(), ReadState(SCOPE, STREAM, dict.fromkeys(tail.positions, 0)), stream)


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"startingOffsets": "latest"},
        {"startingOffsets": "earliest"},
        {"startingTimestamp": "1700000000000"},
        {"startingOffsets": '{"positions": {"0": -1, "1": 7}}'},
    ],
)
def test_initial_offset_of_a_moving_start_is_the_same_json_every_time_and_stands_for_its_position(
    options: dict[str, str],
) -> None:
    parsed = ReadOptions.parse({"scope": SCOPE, "stream": STREAM, **options})
    position = parsed.starting_or("latest")
    assert not position.is_fixed
    first = position.to_initial_offset(SCOPE, STREAM)
    again = ReadOptions.parse({"scope": SCOPE, "stream": STREAM, **options}).starting_or("latest")
    assert json.dumps(first) == json.dumps(again.to_initial_offset(SCOPE, STREAM))
    assert is_initial(first)
    assert Position.from_initial_offset(json.loads(json.dumps(first))) == position


def test_a_cut_naming_every_offset_is_fixed_and_initial_offsets_are_no_read_positions() -> None:
    cut = ReadOptions.parse({"scope": SCOPE, "stream": STREAM, "startingOffsets": '{"positions": {"0": 3}}'})
    assert cut.starting_or("latest").is_fixed
    initial = Position.latest("startingOffsets").to_initial_offset(SCOPE, STREAM)
    with pytest.raises(OffsetFormatError, match=r"initial offset .* not a position in the stream"):
        ReadState.from_offset(initial)
    with pytest.raises(OffsetFormatError, match="initial offset"):
        offset_to_stream_cut(initial)
    with pytest.raises(OffsetFormatError, match="not an initial offset"):
        Position.from_initial_offset({"scope": SCOPE, "stream": STREAM, "initial": {"kind": "soon"}})
    with pytest.raises(OffsetFormatError, match="timestampMs"):
        Position.from_initial_offset({"scope": SCOPE, "stream": STREAM, "initial": {"kind": "timestamp"}})


def test_small_ranges_are_packed_into_one_partition_and_large_ones_stand_alone() -> None:
    small = [ReadRange(s, 0, 100_000) for s in range(4)]
    assert pack_ranges(small, limit_bytes=1_000_000) == [small]  # a live tail: one task
    big = ReadRange(9, 0, 2_000_000)
    grouped = pack_ranges([small[0], big, *small[1:]], limit_bytes=250_000)
    assert grouped == [[big], [small[0], small[1]], [small[2], small[3]]]
    assert sum(len(g) for g in grouped) == 5 and pack_ranges([]) == []
