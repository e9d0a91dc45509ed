"""Filter pushdown in batch reads of ``format("segstore")``: filters on the columns that say *where* an event is
prune what is read.

Spark hands :meth:`DataSourceReader.pushFilters` the conjuncts of the query's ``WHERE`` that it can express as
:class:`pyspark.sql.datasource.Filter` s (only with ``spark.sql.python.filterPushdown.enabled``, which
:func:`pravega_spark.register` sets); :func:`accept` sorts them:

* ``scope``, ``stream``, ``segment_id`` - ``=``, ``<=>``, ``<``, ``<=``, ``>``, ``>=``, ``IN``, ``NOT`` of those,
  ``LIKE 'a%'`` / ``'%a'`` / ``'%a%'`` (strings), ``IS [NOT] NULL``: **exact**. Every row of a segment has the
  same three values, so a stream or segment the filter excludes is not read at all and every row of one it admits
  passes; the filter is *not* returned to Spark.
* ``offset`` (bounds from ``=``, ``<``, ``<=``, ``>``, ``>=``, ``IN``): **pruning**. Each segment range is
  narrowed to the events starting within the bounds (at event starts found with ``LocateOffset``).
* ``timestamp`` (the same shapes, on the ingestion time): **pruning, exact at both ends**. Each segment range
  starts at the first event ingested at or after the lower bound (``LocateOffsetAtTime``) and ends where the
  events ingested before the upper bound end (``LocateOffsetBeforeTime``: every later event is at or after it).
  Both are the segment store's exact lookups (the Tier-2 chunks' time bounds in the chunk metadata and their
  ``ingest_time_ms`` column, its in-memory time index), so Tier-2 chunks outside the window are never opened and
  only events of the window are read, unless times go back within a segment: a segment store answers "cannot
  tell" for the upper bound (the range then ends where it did) when its chunk metadata predates time bounds or a
  transaction was merged by a version that did not record merge times. A transaction's events all carry the time
  it was merged, in every tier (``segment_store/reading/ingest_times.py``). The filters of both bounds *are*
  returned: Spark checks every row again (a millisecond's rows straddle a microsecond bound).
* anything else (``event``, ``OR`` - Spark never pushes it -, a literal of another type): returned, not used.

Invariant: pushdown never changes a query's answer (the tests compare every shape with and without it, also over
transactions committed after a window's end).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    IsNull,
    LessThan,
    LessThanOrEqual,
    Not,
    StringContains,
    StringEndsWith,
    StringStartsWith,
)

from pravega_spark.read.planning import LiveCatalog, ReadRange
from segment_store.client import ConnectionLostError, NoSuchSegmentError, SegmentIsTruncatedError

EXACT_COLUMNS = {"scope": str, "stream": str, "segment_id": int}
"""Columns constant over a segment: their filters decide per stream or segment, exactly."""
BOUND_COLUMNS = {"offset": int, "timestamp": dt.datetime}
"""Columns whose bounds narrow each segment range (the filter stays with Spark)."""
NEVER_NULL = {"event", "scope", "stream", "segment_id", "offset"}
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


@dataclass(frozen=True)
class Bounds:
    """``[lo, hi)`` (None: unbounded), in the column's unit: a byte offset, or epoch microseconds."""

    lo: int | None = None
    hi: int | None = None

    def meet(self, lo: int | None, hi: int | None) -> Bounds:
        return Bounds(
            lo if self.lo is None else self.lo if lo is None else max(self.lo, lo),
            hi if self.hi is None else self.hi if hi is None else min(self.hi, hi),
        )

    @property
    def empty(self) -> bool:
        return self.lo is not None and self.hi is not None and self.lo >= self.hi


@dataclass(frozen=True)
class Pushed:
    """What a batch read was given: the exact filters on ``scope``/``stream``/``segment_id``, and the bounds of
    ``offset`` and ``timestamp`` (microseconds). Picklable (the reader goes to the executors)."""

    exact: tuple[Filter, ...] = ()
    offsets: Bounds = Bounds()
    times_us: Bounds = Bounds()
    nothing: bool = False
    """An ``IS NULL`` on a column that is never null: no row passes."""

    def admits_stream(self, scope: str, stream: str) -> bool:
        """Whether rows of ``scope/stream`` may pass: its ``scope`` and ``stream`` filters hold, and no filter
        excludes every row."""
        if self.nothing or self.offsets.empty or self.times_us.empty:
            return False
        values = {"scope": scope, "stream": stream}
        return all(_holds(f, values[c]) is True for f in self.exact if (c := _column(f) or "") in values)

    def admits_segment(self, segment_id: int) -> bool:
        return all(_holds(f, segment_id) is True for f in self.exact if _column(f) == "segment_id")

    @property
    def narrows(self) -> bool:
        """Whether planning has anything to do per segment range."""
        by_segment = any(_column(f) == "segment_id" for f in self.exact)
        return by_segment or self.offsets != Bounds() or self.times_us != Bounds()


def accept(filters: Sequence[Filter]) -> tuple[Pushed, list[Filter]]:
    """The filters a read takes (see the module docstring) and those Spark must still apply, the latter by
    reference among ``filters`` in their order (pyspark checks it)."""
    exact: list[Filter] = []
    offsets, times = Bounds(), Bounds()
    nothing = False
    returned: list[Filter] = []
    for f in filters:
        column = _column(f)
        if column in EXACT_COLUMNS and _exact_shape(f, EXACT_COLUMNS[column]):
            exact.append(f)
            continue
        if column in NEVER_NULL and isinstance(f, IsNotNull):
            continue  # always true
        if column in NEVER_NULL and isinstance(f, IsNull):
            nothing = True  # always false: nothing is read
            continue
        returned.append(f)
        if column == "offset":
            offsets = offsets.meet(*_bounds(f, int, lambda v: v))
        elif column == "timestamp":
            times = times.meet(*_bounds(f, dt.datetime, _micros))
    return Pushed(tuple(exact), offsets, times, nothing), returned


def _column(f: Filter) -> str | None:
    if isinstance(f, Not):
        return _column(f.child)
    attribute = getattr(f, "attribute", None)
    return attribute[0] if isinstance(attribute, tuple) and len(attribute) == 1 else None


def _literal_ok(value: Any, kind: type) -> bool:
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


def _exact_shape(f: Filter, kind: type) -> bool:
    """Whether :func:`_holds` evaluates ``f`` exactly for a non-null value of type ``kind``."""
    if isinstance(f, Not):
        return _exact_shape(f.child, kind)
    if isinstance(f, IsNull | IsNotNull):
        return True
    if isinstance(f, In):
        return all(_literal_ok(v, kind) for v in f.value)
    if isinstance(f, StringStartsWith | StringEndsWith | StringContains):
        return kind is str and isinstance(f.value, str)
    if isinstance(f, EqualTo | EqualNullSafe | GreaterThan | GreaterThanOrEqual | LessThan | LessThanOrEqual):
        return _literal_ok(f.value, kind)
    return False


def _holds(f: Filter, value: Any) -> bool | None:
    """SQL's answer for a row whose column is ``value`` (never null): True, False, or None (unknown: not kept)."""
    if isinstance(f, Not):
        inner = _holds(f.child, value)
        return None if inner is None else not inner
    if isinstance(f, IsNull):
        return False
    if isinstance(f, IsNotNull):
        return True
    if isinstance(f, In):
        if value in f.value:
            return True
        return None if any(v is None for v in f.value) else False
    literal = getattr(f, "value", None)
    if literal is None:
        return False if isinstance(f, EqualNullSafe) else None
    tests: dict[type, Callable[[Any, Any], bool]] = {
        EqualTo: lambda a, b: a == b,
        EqualNullSafe: lambda a, b: a == b,
        GreaterThan: lambda a, b: a > b,
        GreaterThanOrEqual: lambda a, b: a >= b,
        LessThan: lambda a, b: a < b,
        LessThanOrEqual: lambda a, b: a <= b,
        StringStartsWith: lambda a, b: a.startswith(b),
        StringEndsWith: lambda a, b: a.endswith(b),
        StringContains: lambda a, b: b in a,
    }
    return tests[type(f)](value, literal)


def _micros(value: dt.datetime) -> int:
    """Epoch microseconds of a timestamp literal (a naive one is local time, as pyspark gives them)."""
    if value.tzinfo is None:
        value = value.astimezone()
    return (value - _EPOCH) // dt.timedelta(microseconds=1)


def _bounds(f: Filter, kind: type, unit: Callable[[Any], int]) -> tuple[int | None, int | None]:
    """``[lo, hi)`` in ``unit`` that every row passing ``f`` lies in (``(None, None)``: no bound known)."""
    if isinstance(f, In) and f.value and all(_literal_ok(v, kind) for v in f.value):
        points = [unit(v) for v in f.value]
        return min(points), max(points) + 1
    literal = getattr(f, "value", None)
    if isinstance(f, In) or not _literal_ok(literal, kind):
        return None, None
    point = unit(literal)
    shapes: dict[type, tuple[int | None, int | None]] = {
        EqualTo: (point, point + 1),
        EqualNullSafe: (point, point + 1),
        GreaterThan: (point + 1, None),
        GreaterThanOrEqual: (point, None),
        LessThan: (None, point),
        LessThanOrEqual: (None, point + 1),
    }
    return shapes.get(type(f), (None, None))


# ---- planning -------------------------------------------------------------------------------------------------
EventStarts = Callable[[int, Sequence[int]], "list[int] | None"]
"""``(segment_id, targets)`` -> per target the first event start at or after it (None: cannot tell)."""
OffsetAtTime = Callable[[int, int], "int | None"]
"""``(segment_id, ms)`` -> the offset of the first event ingested at or after ``ms`` (the length if none; None:
cannot tell): every event before it is older than ``ms``."""
EndBeforeTime = Callable[[int, int], "int | None"]
"""``(segment_id, ms)`` -> the least offset from which every event is ingested at or after ``ms`` (None: cannot
tell): every event ingested before ``ms`` lies before it."""


def prune(
    pushed: Pushed | None,
    ranges: Iterable[ReadRange],
    event_starts: EventStarts,
    offset_at_time: OffsetAtTime,
    end_before_time: EndBeforeTime | None = None,
) -> list[ReadRange]:
    """``ranges`` without the segments the filters exclude, each narrowed to the events its ``offset`` and
    ``timestamp`` bounds may admit (a range narrowed to nothing is left out). Every event that passes the filters
    stays in a range (see the module docstring); ends stay event starts."""
    if pushed is None or not pushed.narrows:
        return list(ranges)
    kept: list[ReadRange] = []
    for r in ranges:
        if not pushed.admits_segment(r.segment_id):
            continue
        start, end = r.start, r.end
        offsets, times = pushed.offsets, pushed.times_us
        if times.lo is not None:
            first = offset_at_time(r.segment_id, math.ceil(times.lo / 1000))
            start = start if first is None else min(end, max(start, first))
        if times.hi is not None and end_before_time is not None and start < end:
            stop = end_before_time(r.segment_id, math.ceil(times.hi / 1000))
            end = end if stop is None else max(start, min(end, stop))
        targets = [t for t in (offsets.lo, offsets.hi) if t is not None and start < t < end]
        if targets and start < end:
            found = event_starts(r.segment_id, targets)
            if found is not None:
                located = dict(zip(targets, found, strict=True))
                if offsets.lo in located:
                    start = min(end, located[offsets.lo])
                if offsets.hi in located:
                    end = max(start, min(end, located[offsets.hi]))
        if (offsets.hi is not None and offsets.hi <= start) or (offsets.lo is not None and offsets.lo >= end):
            continue
        if start < end:
            kept.append(ReadRange(r.segment_id, start, end))
    return kept


def prune_in(pushed: Pushed | None, ranges: Sequence[ReadRange], catalog: LiveCatalog) -> list[ReadRange]:
    """:func:`prune` asking the segment stores of ``catalog`` (a segment gone or truncated meanwhile is not
    narrowed: its read applies ``failOnDataLoss``)."""
    if pushed is None or not pushed.narrows:
        return list(ranges)
    connection = catalog.connection

    def offset_at_time(segment_id: int, ms: int) -> int | None:
        try:
            return connection.run(connection.manager.offset_at_time(catalog.scope, catalog.stream, segment_id, ms))
        except (NoSuchSegmentError, SegmentIsTruncatedError):
            return None

    def end_before_time(segment_id: int, ms: int) -> int | None:
        manager = connection.manager
        try:
            return connection.run(manager.offset_before_time(catalog.scope, catalog.stream, segment_id, ms))
        except (NoSuchSegmentError, SegmentIsTruncatedError, ConnectionLostError):
            return None  # gone, truncated, or a segment store without the extension (it drops the connection)

    return prune(pushed, ranges, catalog.event_starts, offset_at_time, end_before_time)
