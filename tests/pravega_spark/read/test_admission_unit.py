"""Admission control in events without Spark or a network (:mod:`pravega_spark.read.admission`): counting events
by their headers, ``maxEventsPerTrigger`` exact with and without ``maxBytesPerTrigger`` while the stream scales,
shared over streams, ``minEventsPerTrigger`` with ``maxTriggerDelay`` on a manual clock, and the options."""

from __future__ import annotations

import random

import pytest
from fake_stream import SCOPE, STREAM, FakeStream
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxBytes, ReadMaxRows, ReadMinRows

from pravega_spark.errors import SegstoreOptionError
from pravega_spark.offsets import ReadState, StreamsState
from pravega_spark.options.admission import DEFAULT_MAX_TRIGGER_DELAY_MS, AdmissionOptions, duration_ms
from pravega_spark.options.read import ReadOptions
from pravega_spark.read.admission import Admission, Limits, admit_streams, count_events, event_ends
from pravega_spark.read.planning import ReadRange, SegmentCatalog, advance, plan_ranges
from segment_store.protocol import frame_event, parse_events

pytestmark = pytest.mark.unit

STREAM_OPTIONS = {"controller": "tcp://127.0.0.1:9090", "scope": SCOPE, "stream": STREAM}


def _names(stream: FakeStream, ranges: list[ReadRange]) -> list[bytes]:
    found = []
    for r in ranges:
        data = bytes(stream.data[r.segment_id][r.start : r.end])
        found += [e.data.split(b":")[0] for e in parse_events(data, r.start)]
    return found


def _count(stream: SegmentCatalog, start: ReadState, end: ReadState) -> int:
    return count_events(start, end, stream, 10**9)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# ---- counting --------------------------------------------------------------------------------------------------
def test_event_ends_counts_whole_events_whatever_the_chunking_and_stops_reading_at_the_limit() -> None:
    data = b"".join(frame_event(b"x" * n) for n in (0, 5, 300, 1, 2))
    for step in (1, 3, 8, 64, len(data)):
        chunks = [data[i : i + step] for i in range(0, len(data), step)]
        assert event_ends(chunks, 100, 10) == (5, 100 + len(data))
        assert event_ends(chunks, 100, 2) == (2, 100 + 8 + 8 + 5)
        assert event_ends(chunks, 100, 3) == (3, 100 + 8 * 3 + 5 + 300)
    read: list[int] = []

    def chunks_read() -> object:
        for i in range(0, len(data), 8):
            read.append(i)
            yield data[i : i + 8]

    closing = chunks_read()
    assert event_ends(closing, 0, 1) == (1, 8)  # type: ignore[arg-type]
    assert read == [0]
    assert event_ends([data[:-1]], 0, 10) == (4, len(data) - 8 - 2)  # the partial last event is not counted


# ---- maxEventsPerTrigger --------------------------------------------------------------------------------------------
@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    max_events=st.integers(1, 40),
    max_bytes=st.one_of(st.none(), st.integers(1, 1500)),
    segments=st.integers(1, 4),
)
def test_max_events_is_exact_with_or_without_max_bytes_while_the_stream_scales(
    seed: int, max_events: int, max_bytes: int | None, segments: int
) -> None:
    rng = random.Random(seed)
    stream = FakeStream(segments, rng)
    admission = Admission(ReadOptions.parse({**STREAM_OPTIONS, "maxEventsPerTrigger": str(max_events)}))
    if max_bytes is not None:
        admission.max_bytes = max_bytes
    state = stream.head()
    ranges: list[ReadRange] = []

    def batch() -> ReadState:
        end = admission.next_end(state, stream, admission.default_limit(), cap=None, available_now=False)
        assert end is not None
        events = _count(stream, state, end)
        by_bytes = advance(state, stream, max_bytes=max_bytes)
        assert events <= max_events
        assert events == min(max_events, _count(stream, state, by_bytes))  # the smaller batch wins
        if events:
            ranges.extend(plan_ranges(state, end, stream))
        return end

    for _ in range(40):
        action = rng.random()
        if action < 0.5:
            stream.write(rng.randint(1, 30))
        elif action < 0.6:
            stream.scale()
        state = batch()
    stream.seal_all()
    while (new := batch()) != state:
        state = new
    assert sorted(_names(stream, ranges)) == sorted(b"e%d" % i for i in range(stream.events))


def test_max_events_spreads_the_budget_over_segments_and_admits_one_event_larger_than_max_bytes() -> None:
    stream = FakeStream(3, random.Random(1))
    for segment in (0, 1, 2):
        stream.data[segment] += b"".join(frame_event(b"e%d:" % i) for i in range(10))
    start = stream.head()
    admission = Admission(ReadOptions.parse({**STREAM_OPTIONS, "maxEventsPerTrigger": "7"}))
    end = admission.next_end(start, stream, ReadMaxRows(7), cap=None, available_now=False)
    assert end is not None
    per_segment = [_count(stream, ReadState(SCOPE, STREAM, {s: 0}), ReadState(SCOPE, STREAM, {s: end.positions[s]}))
                   for s in (0, 1, 2)]  # fmt: skip
    assert sorted(per_segment) == [2, 2, 3]
    big = FakeStream(1, random.Random(2))
    big.data[0] += frame_event(b"x" * 500) + frame_event(b"y")
    admission = Admission(ReadOptions.parse({**STREAM_OPTIONS, "maxEventsPerTrigger": "5", "maxBytesPerTrigger": "10"}))
    end = admission.next_end(big.head(), big, ReadMaxRows(5), cap=None, available_now=False)
    assert end is not None and end.positions == {0: 508}


def test_max_events_are_shared_over_streams_as_bytes_are() -> None:
    streams = {(SCOPE, name): FakeStream(1, random.Random(i)) for i, name in enumerate(("a", "b", "c"))}
    for (scope, name), fake in streams.items():
        fake.scope, fake.stream = scope, name
        count = {"a": 2, "b": 50, "c": 50}[name]
        fake.data[0] += b"".join(frame_event(b"%s%d:" % (name.encode(), i)) for i in range(count))
    start = StreamsState({key: ReadState(*key, {0: 0}) for key in streams})
    end = StreamsState({key: ReadState(*key, {0: len(fake.data[0])}) for key, fake in streams.items()})
    admitted = admit_streams(start, end, streams.__getitem__, 20)
    counts = {key[1]: _count(streams[key], start.states[key], admitted.states[key]) for key in streams}
    assert counts == {"a": 2, "b": 9, "c": 9}
    assert admit_streams(start, end, streams.__getitem__, 1000) == end


# ---- minEventsPerTrigger ------------------------------------------------------------------------------------------
def test_min_events_waits_for_the_count_or_the_delay_since_the_last_batch() -> None:
    stream = FakeStream(2, random.Random(3))
    clock = Clock()
    options = ReadOptions.parse({**STREAM_OPTIONS, "minEventsPerTrigger": "10", "maxTriggerDelay": "30s"})
    admission = Admission(options, clock)
    limit = admission.default_limit()
    assert limit == ReadMinRows(10)
    start = stream.head()

    def next_end() -> ReadState | None:
        return admission.next_end(start, stream, limit, cap=None, available_now=False)

    stream.write(9)
    assert next_end() is None
    clock.now += 29
    assert next_end() is None
    stream.write(1)
    end = next_end()  # ten events: offered before the delay
    assert end is not None and _count(stream, start, end) == 10
    start = end
    stream.write(1)
    clock.now += 29.9
    assert next_end() is None
    clock.now += 0.1  # 30 s since the last batch: the lone event goes
    end = next_end()
    assert end is not None and _count(stream, start, end) == 1
    start = end
    clock.now += 100  # nothing there: no batch, and the clock is not restarted by it
    assert next_end() == start
    stream.write(1)
    end = next_end()
    assert end is not None and _count(stream, start, end) == 1
    assert admission.next_end(end, stream, limit, cap=None, available_now=True) == end  # AvailableNow: no minimum
    stream.write(1)
    assert admission.next_end(end, stream, limit, cap=None, available_now=True) != end


def test_min_events_counts_only_what_arrived_since_the_last_look() -> None:
    stream = FakeStream(1, random.Random(5))
    reads: list[tuple[int, int]] = []

    class Counting:
        scope, stream = SCOPE, STREAM

        def __getattr__(self, name: str) -> object:
            return getattr(stream, name)

        def chunks(self, segment_id: int, start: int, end: int) -> object:
            reads.append((start, end))
            return stream.chunks(segment_id, start, end)

    admission = Admission(ReadOptions.parse({**STREAM_OPTIONS, "minEventsPerTrigger": "1000"}), Clock())
    start = stream.head()
    for _ in range(5):
        stream.write(3)
        assert admission.next_end(start, Counting(), ReadMinRows(1000), cap=None, available_now=False) is None  # type: ignore[arg-type]
    assert [b for a, b in reads] == sorted(b for a, b in reads)
    assert all(a == b_prev for (a, _), (_, b_prev) in zip(reads[1:], reads, strict=False))  # each from the last end


# ---- limits and options ---------------------------------------------------------------------------------------------
def test_limits_of_a_call_follow_sparks_limit_and_the_options() -> None:
    options = {**STREAM_OPTIONS, "maxEventsPerTrigger": "5", "minEventsPerTrigger": "3", "maxBytesPerTrigger": "99"}
    admission = Admission(ReadOptions.parse(options))
    assert admission.default_limit() == ReadMaxRows(5)
    assert admission.limits(ReadMaxRows(5), available_now=False) == Limits(99, 5, 3)
    assert admission.limits(ReadMaxRows(5), available_now=True) == Limits(99, 5, None)
    assert admission.limits(ReadAllAvailable(), available_now=False) == Limits()  # Trigger.Once
    assert Admission(ReadOptions.parse({**STREAM_OPTIONS, "maxBytesPerTrigger": "7"})).default_limit() == ReadMaxBytes(
        7
    )
    assert Admission(ReadOptions.parse(STREAM_OPTIONS)).default_limit() == ReadAllAvailable()


@pytest.mark.parametrize(
    ("text", "ms"),
    [("15s", 15_000), ("500ms", 500), ("2m", 120_000), ("1h", 3_600_000), ("250", 250), (" 3 min", 180_000)],
)
def test_durations_as_spark_writes_them(text: str, ms: int) -> None:
    assert duration_ms("maxTriggerDelay", text) == ms


@pytest.mark.parametrize(
    ("options", "option", "message"),
    [
        ({"maxEventsPerTrigger": "0"}, "maxEventsPerTrigger", "must be an integer >= 1, got '0'"),
        ({"maxEventsPerTrigger": "-3"}, "maxEventsPerTrigger", "must be an integer >= 1"),
        ({"maxEventsPerTrigger": "ten"}, "maxEventsPerTrigger", "must be an integer >= 1, got 'ten'"),
        ({"minEventsPerTrigger": "0"}, "minEventsPerTrigger", "must be an integer >= 1"),
        ({"minEventsPerTrigger": "1.5"}, "minEventsPerTrigger", "must be an integer >= 1"),
        ({"minEventsPerTrigger": "5", "maxTriggerDelay": "soon"}, "maxTriggerDelay", "must be a duration"),
        ({"minEventsPerTrigger": "5", "maxTriggerDelay": "-1s"}, "maxTriggerDelay", "must be a duration"),
        ({"minEventsPerTrigger": "5", "maxTriggerDelay": "5 weeks"}, "maxTriggerDelay", "must be a duration"),
        ({"maxTriggerDelay": "5s"}, "maxTriggerDelay", "means nothing without option 'minEventsPerTrigger'"),
        ({"maxEventsPerTriger": "5"}, "maxEventsPerTriger", "did you mean 'maxEventsPerTrigger'"),
    ],
)
def test_bad_values_fail_with_one_line_naming_the_option(options: dict[str, str], option: str, message: str) -> None:
    with pytest.raises(SegstoreOptionError) as failure:
        ReadOptions.parse({**STREAM_OPTIONS, **options})
    text = str(failure.value)
    assert text.startswith(f"option '{option}': ") and message in text and "\n" not in text


def test_defaults() -> None:
    assert ReadOptions.parse(STREAM_OPTIONS).admission == AdmissionOptions(None, None, DEFAULT_MAX_TRIGGER_DELAY_MS)
    assert DEFAULT_MAX_TRIGGER_DELAY_MS == 15 * 60 * 1000
