"""Stream cuts with their segments' key ranges: bounds and order (for watermarks and consumption-based retention).

A cut maps segments (:class:`~controller_client.watermarks.SegmentWithRange`) to offsets. Of two overlapping
segments the one with the larger id is the later (a successor, directly or not: ids grow with epochs). A cut is
*at or after* another when, on every key, it is at a later segment, or at the same segment at an offset at least
as large.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping

from controller_client.watermarks import SegmentWithRange

Cut = dict[SegmentWithRange, int]


class Order(enum.Enum):
    EQUAL_OR_AFTER = "equal or after"
    BEFORE = "before"
    OVERLAPS = "overlaps"
    """Ahead on some keys and behind on others."""


def add_to_upper_bound(position: Mapping[SegmentWithRange, int], upper: Cut) -> None:
    """Make ``upper`` an upper bound of itself and ``position`` (Pravega's ``addToUpperBound``): a segment already
    there takes the larger offset; a segment with a successor there is left out; a new segment replaces its
    predecessors (overlapping segments with smaller ids)."""
    for segment, offset in position.items():
        if segment in upper:
            upper[segment] = max(offset, upper[segment])
        elif not any(segment.overlaps(x) and segment.segment_id < x.segment_id for x in upper):
            for older in [x for x in upper if segment.overlaps(x) and segment.segment_id > x.segment_id]:
                del upper[older]
            upper[segment] = offset


def add_to_lower_bound(position: Mapping[SegmentWithRange, int], lower: Cut) -> None:
    """Make ``lower`` a lower bound of itself and ``position`` (both complete cuts): a segment already there
    takes the smaller offset; a segment with a predecessor there is left out; a new segment replaces its
    successors (Pravega's subscriber lower bound)."""
    for segment, offset in position.items():
        if segment in lower:
            lower[segment] = min(offset, lower[segment])
        elif not any(segment.overlaps(x) and segment.segment_id > x.segment_id for x in lower):
            for newer in [x for x in lower if segment.overlaps(x) and segment.segment_id < x.segment_id]:
                del lower[newer]
            lower[segment] = offset


def lower_bound(cuts: Iterable[Mapping[SegmentWithRange, int]]) -> Cut:
    """The greatest cut at or before every one of ``cuts`` (empty for none)."""
    result: Cut = {}
    for index, cut in enumerate(cuts):
        if index == 0:
            result = dict(cut)
        else:
            add_to_lower_bound(cut, result)
    return result


def compare(a: Mapping[SegmentWithRange, int], b: Mapping[SegmentWithRange, int]) -> Order:
    """Where ``a`` is relative to ``b`` (complete cuts of one stream)."""
    lower = dict(a)
    add_to_lower_bound(b, lower)
    if lower == dict(b):
        return Order.EQUAL_OR_AFTER
    if lower == dict(a):
        return Order.BEFORE
    return Order.OVERLAPS


def missing_ranges(cut: Mapping[SegmentWithRange, int]) -> list[tuple[float, float]]:
    """The key ranges of [0, 1) no segment of ``cut`` covers (Pravega's ``findMissingRanges``)."""
    missing: list[tuple[float, float]] = []
    reached = 0.0
    for segment in sorted(cut, key=lambda s: s.low):
        if segment.low > reached:
            missing.append((reached, segment.low))
        reached = max(reached, segment.high)
    if reached < 1.0:
        missing.append((reached, 1.0))
    return missing
