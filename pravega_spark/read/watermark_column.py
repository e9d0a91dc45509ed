"""Option ``watermarkColumn``: each event's event-time lower bound from the stream's watermarks.

The controller turns the times writers note (``EventStreamWriter.note_time``) into watermarks
(:mod:`controller_client.watermarks`): a ``Watermark(lower_time_bound, upper_time_bound, stream_cut)`` says that
the events the stream's live writers put after ``stream_cut`` have times of at least ``lower_time_bound``. With
``watermarkColumn=<name>`` a read adds a nullable ``timestamp`` column ``<name>`` at the end of the schema: for each
event the largest lower bound of the watermarks whose cut is at or before the event on its segment, null where none
is (before the first watermark). Every watermark that applies is a true bound, so the largest is the tightest; the
values never decrease along a segment.

Where a watermark's cut is for a segment ``S`` of an event:

* the cut names ``S`` at offset ``o``: it applies to the events of ``S`` at offsets ``>= o``;
* the cut does not name ``S``, and every segment of the cut overlapping ``S``'s key range is older (a smaller id:
  a predecessor, as :mod:`controller.policies.cuts` orders segments): the cut is before all of ``S``, so it applies
  from offset 0;
* otherwise (the cut is at successors of ``S``, or the overlap is mixed) ``S`` is before the cut: it does not apply.

The driver reads the watermarks once per batch (a batch read) or micro-batch (a streaming query: only the new ones,
:mod:`pravega_spark.read.watermark_cache`) and hands each input partition the few ``(offset, bound)`` thresholds
of its range (:func:`thresholds_in_range`); executors only look offsets up in them (:func:`bound_column`), with no
controller call.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable

import numpy as np
import pyarrow as pa

from controller_client.watermarks import SegmentWithRange, Watermark

ARROW_TYPE = pa.timestamp("us", tz="UTC")
"""Spark's ``timestamp`` in Arrow."""

Thresholds = tuple[tuple[int, int], ...]
"""``(offset, lower bound ms)`` pairs, ascending in both: from ``offset`` on, events have times ``>= bound``."""


def cut_offset_for(segment: SegmentWithRange, watermark: Watermark) -> int | None:
    """From which offset of ``segment`` the watermark applies; None if the segment is before its cut."""
    for cut_segment, offset in watermark.stream_cut.items():
        if cut_segment.segment_id == segment.segment_id:
            return offset
    overlapping = [s for s in watermark.stream_cut if s.overlaps(segment)]
    if overlapping and all(s.segment_id < segment.segment_id for s in overlapping):
        return 0
    return None


def segment_thresholds(segment: SegmentWithRange, watermarks: Iterable[Watermark]) -> Thresholds:
    """Every threshold of ``segment``: where the largest applicable lower bound rises, ascending."""
    found = sorted(
        (offset, w.lower_time_bound) for w in watermarks if (offset := cut_offset_for(segment, w)) is not None
    )
    thresholds: list[tuple[int, int]] = []
    for offset, bound in found:
        if thresholds and bound <= thresholds[-1][1]:
            continue  # an older (smaller) bound from further on: the earlier one already covers it
        if thresholds and thresholds[-1][0] == offset:
            thresholds[-1] = (offset, bound)
        else:
            thresholds.append((offset, bound))
    return tuple(thresholds)


def thresholds_in_range(thresholds: Thresholds, start: int, end: int) -> Thresholds:
    """The thresholds that matter to offsets ``[start, end)``: the last one at or before ``start`` and those after."""
    offsets = [o for o, _ in thresholds]
    first = max(bisect.bisect_right(offsets, start) - 1, 0)
    last = bisect.bisect_left(offsets, end)
    return thresholds[first:last]


def bound_column(offsets: pa.Array, thresholds: Thresholds) -> pa.Array:
    """The lower bound of each event at ``offsets`` (int64) as a nullable timestamp array (null: no watermark)."""
    values = np.asarray(offsets.to_numpy(zero_copy_only=False), dtype=np.int64)
    if not thresholds:
        return pa.nulls(len(values), ARROW_TYPE)
    starts = np.array([o for o, _ in thresholds], dtype=np.int64)
    bounds = np.array([b * 1000 for _, b in thresholds], dtype=np.int64)  # ms -> us
    index = np.searchsorted(starts, values, side="right") - 1
    missing = index < 0
    micros = bounds[np.maximum(index, 0)]
    return pa.array(micros, type=pa.int64(), mask=missing).cast(ARROW_TYPE)


def with_bound_column(batch: pa.RecordBatch, name: str, thresholds: Thresholds) -> pa.RecordBatch:
    """``batch`` (the source's columns, with ``offset``) and the bound column ``name`` at its end."""
    column = bound_column(batch.column("offset"), thresholds)
    return pa.RecordBatch.from_arrays(
        [*batch.columns, column], schema=batch.schema.append(pa.field(name, ARROW_TYPE, True))
    )


__all__ = [
    "ARROW_TYPE",
    "Thresholds",
    "bound_column",
    "cut_offset_for",
    "segment_thresholds",
    "thresholds_in_range",
    "with_bound_column",
]
