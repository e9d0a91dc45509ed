"""The incremental watermark reader (pravega_spark.read.watermark_cache) against the full re-read: random histories of
writes, scales (splits and merges), watermarks whose cuts move forward (passing over short-lived segments too), a
mark segment truncated and with a partial last event, and a query planned batch after batch with the real planner
(advance, plan_ranges) over an in-memory stream; every batch's thresholds must be those of
segment_thresholds over every watermark read, and what the cache holds stays bounded."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

import pytest

from controller_client.model import segment_id
from controller_client.watermarks import SegmentWithRange, Watermark, decode_watermark_events
from pravega_spark.offsets import ReadState
from pravega_spark.read.planning import SegmentState, advance, plan_ranges
from pravega_spark.read.watermark_cache import WatermarkCache, insert_step
from pravega_spark.read.watermark_column import segment_thresholds, thresholds_in_range
from segment_store.protocol import encode_events

pytestmark = pytest.mark.unit


class _Stream:
    """An in-memory stream (a SegmentCatalog for the planner) with its mark segment."""

    scope, stream = "s", "t"

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.epoch = 0
        first = [SegmentWithRange(segment_id(i, 0), i / 2, (i + 1) / 2) for i in range(2)]
        self.ranges = {s.segment_id: s for s in first}
        self.current = [s.segment_id for s in first]
        self.lengths = dict.fromkeys(self.current, 0)
        self.sealed: set[int] = set()
        self.succ: dict[int, dict[int, list[int]]] = {}
        self.mark = bytearray()
        self.mark_start = 0
        self.cut = dict.fromkeys(self.current, 0)  # where the next watermark's cut is
        self.bound = 1_000
        self.written: list[Watermark] = []

    # SegmentCatalog
    def status(self, segment: int) -> SegmentState | None:
        return SegmentState(0, self.lengths[segment], segment in self.sealed)

    def successors(self, segment: int) -> Mapping[int, Sequence[int]]:
        return self.succ.get(segment, {})

    def chunks(self, segment: int, start: int, end: int) -> list[bytes]:
        raise AssertionError("not read without maxBytesPerTrigger")

    def write(self) -> None:
        for s in self.current:
            self.lengths[s] += self.rng.choice((0, 10, 100))

    def scale(self) -> None:
        self.epoch += 1
        ordered = sorted(self.current, key=lambda s: self.ranges[s].low)
        i = self.rng.randrange(len(ordered))
        if len(ordered) > 1 and (len(ordered) > 5 or self.rng.random() < 0.4):
            i = min(i, len(ordered) - 2)
            olds = ordered[i : i + 2]
            pieces = [(self.ranges[olds[0]].low, self.ranges[olds[1]].high)]
        else:
            olds = [ordered[i]]
            low, high = self.ranges[olds[0]].low, self.ranges[olds[0]].high
            pieces = [(low, (low + high) / 2), ((low + high) / 2, high)]
        news = [
            SegmentWithRange(segment_id(len(self.ranges) + k, self.epoch), lo, hi) for k, (lo, hi) in enumerate(pieces)
        ]
        for s in news:
            self.ranges[s.segment_id] = s
            self.lengths[s.segment_id] = 0
        for old in olds:
            self.sealed.add(old)
            self.succ[old] = {n.segment_id: sorted(o for o in olds if self.ranges[o].overlaps(n)) for n in news}
        self.current = [s for s in self.current if s not in olds] + [n.segment_id for n in news]

    def note_watermark(self) -> None:
        """Move the cut forward (offsets up, sealed segments read to their end replaced by their successors once the
        cut holds all of their predecessors), then write a watermark with a higher bound."""
        for _ in range(self.rng.randint(1, 3)):
            for s in list(self.cut):
                if s not in self.cut:
                    continue
                self.cut[s] = self.rng.randint(self.cut[s], self.lengths[s])
                if s in self.sealed and self.cut[s] == self.lengths[s]:
                    done = {p for p in self.cut if p in self.sealed and self.cut[p] == self.lengths[p]}
                    starting = [n for n, preds in self.succ[s].items() if done.issuperset(preds)]
                    if len(starting) == len(self.succ[s]):  # the cut stays complete: it covers every key once
                        for successor in starting:
                            for p in self.succ[s][successor]:
                                self.cut.pop(p, None)
                            self.cut[successor] = 0
        self.bound += self.rng.randint(1, 5)
        watermark = Watermark(self.bound, self.bound + 10, {self.ranges[s]: o for s, o in self.cut.items()})
        self.written.append(watermark)
        self.mark += encode_events([watermark.encode()])

    def read(self, offset: int) -> tuple[list[Watermark], int]:
        start = max(offset, self.mark_start)
        return decode_watermark_events(bytes(self.mark[start:]), start)

    def lookup(self, segment: int) -> SegmentWithRange:
        return self.ranges[segment]


def _plan(stream: _Stream, cache: WatermarkCache, start: ReadState, end: ReadState) -> None:
    """One micro-batch planned through the cache, checked against the full re-read of ``reference``."""
    ranges = plan_ranges(start, end, stream)
    asked = {r.segment_id: r.start for r in ranges}
    got = cache.plan(stream.read, stream.lookup, asked, [*start.positions, *start.pending], start.positions)
    for r in ranges:
        full = segment_thresholds(stream.ranges[r.segment_id], stream.written)
        assert thresholds_in_range(got[r.segment_id], r.start, r.end) == thresholds_in_range(full, r.start, r.end), r


@pytest.mark.parametrize("seed", range(16))
def test_plan_with_random_scales_and_watermarks_matches_the_full_re_read(seed: int) -> None:
    rng = random.Random(seed)
    stream = _Stream(rng)
    cache = WatermarkCache()
    state = ReadState("s", "t", dict.fromkeys(stream.current, 0))
    largest = 0
    for _ in range(200):
        for _ in range(rng.randint(0, 3)):
            action = rng.random()
            if action < 0.5:
                stream.write()
            elif action < 0.65:
                stream.scale()
            else:
                stream.note_watermark()
        end = advance(state, stream)
        _plan(stream, cache, state, end)
        state = end
        largest = max(largest, len(cache))
    assert cache.watermarks_read == len(stream.written)
    assert largest < 200, "bounded by the segments alive, not by the history"


def test_plan_with_a_truncated_mark_segment_and_a_partial_last_event() -> None:
    rng = random.Random(7)
    stream = _Stream(rng)
    cache = WatermarkCache()
    state = ReadState("s", "t", dict.fromkeys(stream.current, 0))
    seen: list[Watermark] = []

    def spy(offset: int) -> tuple[list[Watermark], int]:
        watermarks, after = stream.read(offset)
        seen.extend(watermarks)
        return watermarks, after

    for step in range(200):
        stream.write()
        for _ in range(3):
            stream.note_watermark()
        if step % 10 == 3:
            stream.scale()
        if step % 25 == 24:  # retention drops all but the last watermark (two of them not read yet)
            last = len(encode_events([stream.written[-1].encode()]))
            stream.mark_start = len(stream.mark) - last
        partial = step % 7 == 0
        if partial:  # the next watermark's first bytes only
            whole = len(stream.mark)
            stream.mark += encode_events([Watermark(stream.bound + 1, stream.bound + 1, {}).encode()])[:9]
        end = advance(state, stream)
        ranges = plan_ranges(state, end, stream)
        asked = {r.segment_id: r.start for r in ranges}
        got = cache.plan(spy, stream.lookup, asked, [*state.positions, *state.pending], state.positions)
        for r in ranges:
            full = segment_thresholds(stream.ranges[r.segment_id], seen)
            assert thresholds_in_range(got[r.segment_id], r.start, r.end) == thresholds_in_range(full, r.start, r.end)
        if partial:
            assert cache.read_offset <= whole
            del stream.mark[whole:]
        state = end
    assert len(seen) < len(stream.written), "some watermarks were truncated before they were read"
    assert len({id(w) for w in seen}) == len(seen) == cache.watermarks_read, "each watermark read once"


def test_plan_of_an_earlier_batch_again_reads_the_mark_segment_again() -> None:
    rng = random.Random(3)
    stream = _Stream(rng)
    cache = WatermarkCache()
    states = [ReadState("s", "t", dict.fromkeys(stream.current, 0))]
    for step in range(60):
        stream.write()
        stream.note_watermark()
        if step % 6 == 5:
            stream.scale()
        states.append(advance(states[-1], stream))
        _plan(stream, cache, states[-2], states[-1])
    assert cache.restarts == 0
    _plan(stream, cache, states[10], states[11])  # Spark plans batch 10 again after a restart: still right
    assert cache.restarts == 1 and cache.watermarks_read == len(stream.written), "read again from the start"
    _plan(stream, cache, states[11], states[12])
    assert cache.restarts == 1


def test_insert_step_keeps_the_staircase_of_segment_thresholds() -> None:
    rng = random.Random(1)
    segment = SegmentWithRange(segment_id(0, 0), 0.0, 1.0)
    for _ in range(200):
        points = [(rng.randint(0, 50), rng.randint(0, 50)) for _ in range(rng.randint(0, 12))]
        steps: list[tuple[int, int]] = []
        for offset, bound in points:
            insert_step(steps, offset, bound)
        marks = [Watermark(b, b, {segment: o}) for o, b in points]
        assert tuple(steps) == segment_thresholds(segment, marks), points


def test_decode_watermark_events_leaves_a_partial_last_event_for_later() -> None:
    segment = SegmentWithRange(segment_id(0, 0), 0.0, 1.0)
    first, second = (Watermark(b, b, {segment: b}) for b in (5, 9))
    data = encode_events([first.encode(), second.encode()])
    cut = len(data) - 3
    assert decode_watermark_events(data[:cut], 0) == ([first], len(encode_events([first.encode()])))
    rest, after = decode_watermark_events(data[len(encode_events([first.encode()])) :], 100)
    assert rest == [second] and after == 100 + len(encode_events([second.encode()]))
