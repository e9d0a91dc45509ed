"""Which pushed filters a read takes and how they narrow segment ranges (:mod:`pravega_spark.read.pushdown`), over a
made-up segment: events of 10 bytes at offsets 0, 10, 20, ..., event ``i`` ingested at ms ``1000 + i``."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from pyspark.sql.datasource import (
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    IsNull,
    LessThan,
    LessThanOrEqual,
    Not,
    StringContains,
    StringStartsWith,
)

from pravega_spark.read.planning import ReadRange
from pravega_spark.read.pushdown import Bounds, accept, prune

LENGTH = 1000


def _event_starts(segment: int, targets: Sequence[int]) -> list[int]:
    return [min(LENGTH, -(-t // 10) * 10) for t in targets]


def _offset_at_time(segment: int, ms: int) -> int:
    return min(LENGTH, max(0, (ms - 1000) * 10))


def _ms(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


def test_accept_with_exact_and_pruning_filters_returns_only_those_spark_must_check() -> None:
    stream = EqualTo(("stream",), "a")
    not_scope = Not(In(("scope",), ("x", "y")))
    like = StringStartsWith(("stream",), "a")
    segment = GreaterThan(("segment_id",), 3)
    lo, hi = GreaterThanOrEqual(("offset",), 15), LessThan(("timestamp",), _ms(1050))
    event = EqualTo(("event",), b"x")
    wrong_type = EqualTo(("segment_id",), "3")
    pushed, returned = accept([stream, not_scope, like, segment, lo, hi, event, wrong_type, IsNotNull(("offset",))])
    assert returned == [lo, hi, event, wrong_type]
    assert pushed.exact == (stream, not_scope, like, segment)
    assert pushed.offsets == Bounds(15, None) and pushed.times_us == Bounds(None, 1_050_000)
    assert pushed.admits_stream("s", "a") and not pushed.admits_stream("x", "a") and not pushed.admits_stream("s", "b")
    assert pushed.admits_segment(4) and not pushed.admits_segment(3)
    assert not accept([IsNull(("event",))])[0].admits_stream("s", "a")
    assert not accept([StringContains(("stream",), "zz")])[0].admits_stream("s", "a")


def test_prune_with_offset_bounds_cuts_at_event_starts() -> None:
    pushed, _ = accept([GreaterThanOrEqual(("offset",), 15), LessThanOrEqual(("offset",), 40)])
    assert prune(pushed, [ReadRange(1, 0, LENGTH)], _event_starts, _offset_at_time) == [ReadRange(1, 20, 50)]
    pushed, _ = accept([In(("offset",), (990, 995))])
    assert prune(pushed, [ReadRange(1, 0, 500)], _event_starts, _offset_at_time) == []


def test_prune_with_a_time_window_narrows_by_both_bounds_where_the_segment_store_answers() -> None:
    window = [GreaterThanOrEqual(("timestamp",), _ms(1010)), LessThan(("timestamp",), _ms(1020))]
    pushed, returned = accept(window)
    assert returned == window
    ranges = [ReadRange(1, 0, LENGTH), ReadRange(2, 150, 300), ReadRange(3, 50, 80)]
    # without an answer for the upper bound (an older segment store, or data from before the merge-time rule)
    assert prune(pushed, ranges, _event_starts, _offset_at_time) == [ReadRange(1, 100, LENGTH), ReadRange(2, 150, 300)]
    upper = accept([LessThanOrEqual(("timestamp",), _ms(1001))])[0]
    assert prune(upper, ranges, _event_starts, _offset_at_time) == ranges
    # the segment store's end for the upper bound (times never go back): both bounds narrow
    both = [ReadRange(1, 100, 200), ReadRange(2, 150, 200)]
    assert prune(pushed, ranges, _event_starts, _offset_at_time, _offset_at_time) == both
    assert prune(upper, ranges, _event_starts, _offset_at_time, _offset_at_time) == [ReadRange(1, 0, 20)]
    micro = accept([LessThan(("timestamp",), datetime(1970, 1, 1, 0, 0, 1, 9500, tzinfo=UTC))])[0]  # 1009.5 ms
    asked: list[int] = []
    prune(micro, ranges[:1], _event_starts, _offset_at_time, lambda s, ms: asked.append(ms))  # type: ignore[func-returns-value]
    assert asked == [1010]  # a row of 1009 ms passes: the end is before the first of 1010 ms
    crossing = accept([GreaterThan(("timestamp",), _ms(1020)), LessThan(("timestamp",), _ms(1010))])[0]
    assert not crossing.admits_stream("s", "a")
    between = accept([GreaterThan(("timestamp",), datetime(1970, 1, 1, 0, 0, 1, 9500, tzinfo=UTC))])[0]
    assert prune(between, [ReadRange(1, 0, LENGTH)], _event_starts, _offset_at_time) == [ReadRange(1, 100, LENGTH)]


def test_prune_without_answers_from_the_segment_store_keeps_the_ranges() -> None:
    pushed, _ = accept(
        [GreaterThan(("timestamp",), _ms(1010)), LessThan(("timestamp",), _ms(1020)), GreaterThan(("offset",), 35)]
    )
    kept = prune(pushed, [ReadRange(1, 0, LENGTH)], lambda s, t: None, lambda s, ms: None, lambda s, ms: None)
    assert kept == [ReadRange(1, 0, LENGTH)]
