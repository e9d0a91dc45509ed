"""Option watermarkColumn, the pure part (pravega_spark.read.watermark_column): where each watermark applies on a
segment, the thresholds
the driver ships, and the column executors compute from them."""

from __future__ import annotations

import pyarrow as pa
import pytest

from controller_client.model import segment_id
from controller_client.watermarks import SegmentWithRange, Watermark
from pravega_spark.read.watermark_column import (
    ARROW_TYPE,
    bound_column,
    cut_offset_for,
    segment_thresholds,
    thresholds_in_range,
)

pytestmark = pytest.mark.unit

A = SegmentWithRange(segment_id(0, 0), 0.0, 0.5)
B = SegmentWithRange(segment_id(1, 0), 0.5, 1.0)
A1 = SegmentWithRange(segment_id(2, 1), 0.0, 0.25)  # A split in epoch 1
A2 = SegmentWithRange(segment_id(3, 1), 0.25, 0.5)


def test_cut_offset_for_with_the_segment_named_a_successor_and_a_predecessor() -> None:
    before_split = Watermark(100, 150, {A: 40, B: 10})
    after_split = Watermark(200, 250, {A1: 5, A2: 0, B: 30})
    assert cut_offset_for(A, before_split) == 40
    assert cut_offset_for(A1, before_split) == 0, "the cut is at A, a predecessor: all of A1 is after it"
    assert cut_offset_for(A, after_split) is None, "the cut is at A's successors: all of A is before it"
    assert cut_offset_for(A1, after_split) == 5


def test_cut_offset_for_with_mixed_overlap_does_not_apply() -> None:
    merged = SegmentWithRange(segment_id(4, 2), 0.0, 0.5)  # A1 and A2 merged in epoch 2
    mixed = Watermark(300, 300, {A1: 5, SegmentWithRange(segment_id(5, 3), 0.25, 0.5): 0, B: 30})
    assert cut_offset_for(merged, mixed) is None


def test_segment_thresholds_keep_the_largest_bound_from_each_offset() -> None:
    marks = [Watermark(100, 100, {A: 40, B: 0}), Watermark(200, 200, {A: 40, B: 9}), Watermark(300, 300, {A: 90, B: 9})]
    assert segment_thresholds(A, marks) == ((40, 200), (90, 300))
    assert segment_thresholds(B, marks) == ((0, 100), (9, 300))
    assert segment_thresholds(A1, marks) == ((0, 300),)
    assert segment_thresholds(A, []) == ()


def test_thresholds_in_range_keep_the_one_at_or_before_the_start() -> None:
    thresholds = ((10, 1), (20, 2), (30, 3), (40, 4))
    assert thresholds_in_range(thresholds, 25, 35) == ((20, 2), (30, 3))
    assert thresholds_in_range(thresholds, 20, 30) == ((20, 2),)
    assert thresholds_in_range(thresholds, 0, 15) == ((10, 1),)
    assert thresholds_in_range(thresholds, 50, 60) == ((40, 4),)


def test_bound_column_is_null_before_the_first_threshold_and_in_microseconds() -> None:
    column = bound_column(pa.array([0, 9, 10, 19, 20, 500], pa.int64()), ((10, 1_000), (20, 2_000)))
    assert column.type == ARROW_TYPE
    micros = column.cast(pa.int64()).to_pylist()
    assert micros == [None, None, 1_000_000, 1_000_000, 2_000_000, 2_000_000]
    assert bound_column(pa.array([1, 2], pa.int64()), ()).null_count == 2
