"""Admission control of a streaming query in events: options ``maxEventsPerTrigger``, ``minEventsPerTrigger`` and
``maxTriggerDelay`` (:class:`~pravega_spark.options.admission.AdmissionOptions`), beside ``maxBytesPerTrigger``
(:func:`~pravega_spark.read.planning.advance`).

**Counting events.** An offset is a byte position; nothing in the segment store counts events (``LocateOffset``
finds event starts, not their number). So the driver counts by reading the event headers (8 bytes: type 0, payload
length) of the range it is about to admit, framing the bytes as the executors do, and stops reading once it has
counted what it needs: ``maxEventsPerTrigger`` reads at most the bytes of the events the micro-batch admits (and of
at most that many events per stream to share the budget), ``minEventsPerTrigger`` reads at most that many events'
bytes per trigger (the count of a start is kept and only what arrived since is counted again). The limit is exact:
a micro-batch never holds more than ``maxEventsPerTrigger`` events.

**Limits together** (as Kafka's ``maxOffsetsPerTrigger`` with ``maxBytesPerTrigger``): the byte limit first, then the
event limit within it, so the smaller batch wins; when one event is larger than ``maxBytesPerTrigger`` the batch
still admits it (a query always progresses), and never more than ``maxEventsPerTrigger`` events. The event budget is
spread over the segments as the byte budget is (even shares, what a segment leaves goes to the others in the next
round) and over several streams as :func:`~pravega_spark.read.several_streams.share_budget` shares bytes.

**minEventsPerTrigger** (Kafka's ``minOffsetsPerTrigger``): ``latestOffset`` answers the start (no micro-batch) while
fewer events than that are available, until ``maxTriggerDelay`` passed since the last micro-batch that read events
(or since the query started); then what is there is offered, even a lone event. Kafka starts its clock at zero
(a restarted query offers what is there at once); here it starts with the query.

**Spark's read limit.** Spark hands ``latestOffset`` the limit :meth:`Admission.default_limit` gave (one
``ReadLimit`` only: pyspark has no composite limit; the options hold the others) or ``ReadAllAvailable``
(``Trigger.Once``: no limit). ``Trigger.AvailableNow`` applies the maximums in each batch up to its target and
ignores ``minEventsPerTrigger``: Spark ends such a query at the first trigger that offers nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxBytes, ReadMaxRows, ReadMinRows

from pravega_spark.offsets import ReadState, StreamKey, StreamsState
from pravega_spark.options.read import ReadOptions
from pravega_spark.read.partition_reader import frame_events
from pravega_spark.read.planning import SegmentCatalog, Walk, advance, plan_ranges
from pravega_spark.read.several_streams import share_budget
from segment_store.protocol import HEADER_SIZE

CatalogOf = Callable[[StreamKey], SegmentCatalog]


def event_ends(chunks: Iterable[bytes], start: int, at_most: int) -> tuple[int, int]:
    """``(n, end)``: the number of whole events at the start of ``chunks`` (bytes beginning at event boundary
    ``start``), at most ``at_most``, and the offset after the last of them. Stops reading once ``at_most`` are
    counted (the iterable is closed)."""
    count, position, rest = 0, start, b""
    try:
        for chunk in chunks:
            data = rest + chunk if rest else chunk
            starts, lengths, consumed = frame_events(data)
            if count + len(starts) >= at_most:
                last = at_most - count - 1
                return at_most, position + int(starts[last]) + HEADER_SIZE + int(lengths[last])
            count += len(starts)
            position += consumed
            rest = data[consumed:]
        return count, position
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()


def count_events(
    start: ReadState, end: ReadState, catalog: SegmentCatalog, at_most: int, *, fail_on_data_loss: bool = True
) -> int:
    """The events between ``start`` and ``end`` (a state reached from it), counted up to ``at_most``."""
    counted = 0
    for r in plan_ranges(start, end, catalog, fail_on_data_loss=fail_on_data_loss):
        if counted >= at_most:
            break
        counted += event_ends(catalog.chunks(r.segment_id, r.start, r.end), r.start, at_most - counted)[0]
    return counted


def admit_events(
    start: ReadState, end: ReadState, catalog: SegmentCatalog, max_events: int, *, fail_on_data_loss: bool = True
) -> ReadState:
    """The state after at most ``max_events`` events of those between ``start`` and ``end`` (a state reached from
    it): the walk from ``start`` capped at ``end``'s positions (so it never passes ``end``, and reaches ``end``
    exactly when the events are no more than ``max_events``). Each round gives every segment with events left an
    even share of the events left (one each to the first ones when they are fewer than the segments); at least one
    event when any is there."""
    walk = Walk(start, catalog, fail_on_data_loss, cap=end.positions)
    walk.settle()
    used = 0
    while used < max_events and (active := walk.active()):
        left = max_events - used
        progressed = False
        for index, segment in enumerate(active):
            share = left // len(active) + (1 if index < left % len(active) else 0)
            if share == 0:
                continue
            position, limit = walk.positions[segment], walk.limit(segment)
            count, new = event_ends(catalog.chunks(segment, position, limit), position, share)
            if new > position:
                walk.move(segment, new)
                used += count
                progressed = True
        walk.settle()
        if not progressed:
            break
    return walk.state()


def count_streams(
    start: StreamsState, end: StreamsState, catalog_of: CatalogOf, at_most: int, *, fail_on_data_loss: bool = True
) -> dict[StreamKey, int]:
    """Per stream read at both ``start`` and ``end``, its events between them, counted up to ``at_most``."""
    return {
        key: count_events(start.states[key], stop, catalog_of(key), at_most, fail_on_data_loss=fail_on_data_loss)
        for key, stop in end.states.items()
        if key in start.states and start.states[key] != stop
    }


def admit_streams(
    start: StreamsState, end: StreamsState, catalog_of: CatalogOf, max_events: int, *, fail_on_data_loss: bool = True
) -> StreamsState:
    """``end`` with at most ``max_events`` events over all streams: shared as
    :func:`~pravega_spark.read.several_streams.share_budget` shares bytes (each stream counted up to ``max_events``,
    as no stream takes more). A stream new at ``end`` (at its head) reads nothing in this batch anyway."""
    available = count_streams(start, end, catalog_of, max_events, fail_on_data_loss=fail_on_data_loss)
    states = dict(end.states)
    for key, share in share_budget(available, max_events).items():
        if share < available[key]:
            states[key] = admit_events(
                start.states[key], end.states[key], catalog_of(key), share, fail_on_data_loss=fail_on_data_loss
            )
    return StreamsState(states)


@dataclass(frozen=True, slots=True)
class Limits:
    """What one micro-batch may read (None: no limit)."""

    max_bytes: int | None = None
    max_events: int | None = None
    min_events: int | None = None


class Admission:
    """A streaming reader's admission control (see the module docstring); keeps the ``maxTriggerDelay`` clock
    (``clock``: seconds, monotonic) and the count of available events of the last start seen."""

    def __init__(self, options: ReadOptions, clock: Callable[[], float] = time.monotonic) -> None:
        self.options = options.admission
        self.max_bytes = options.max_bytes_per_trigger
        self.fail_on_data_loss = options.fail_on_data_loss
        self._clock = clock
        self._last_batch: float | None = None
        self._counted: tuple[Any, Any, int] | None = None  # (start, end, events between, up to min_events)

    def default_limit(self) -> ReadLimit:
        """Spark's default read limit: ``maxEventsPerTrigger``, else ``minEventsPerTrigger``, else
        ``maxBytesPerTrigger`` (the others apply all the same)."""
        if self.options.max_events_per_trigger is not None:
            return ReadMaxRows(self.options.max_events_per_trigger)
        if self.options.min_events_per_trigger is not None:
            return ReadMinRows(self.options.min_events_per_trigger)
        return ReadAllAvailable() if self.max_bytes is None else ReadMaxBytes(self.max_bytes)

    def limits(self, limit: ReadLimit, available_now: bool) -> Limits:
        """The limits of a ``latestOffset(start, limit)`` call: none for ``ReadAllAvailable``, else the options with
        ``limit`` in place of its own kind; no minimum under ``Trigger.AvailableNow``."""
        if isinstance(limit, ReadAllAvailable):
            return Limits()
        options = self.options
        max_bytes = limit.max_bytes if isinstance(limit, ReadMaxBytes) else self.max_bytes
        max_events = limit.max_rows if isinstance(limit, ReadMaxRows) else options.max_events_per_trigger
        min_events = limit.min_rows if isinstance(limit, ReadMinRows) else options.min_events_per_trigger
        return Limits(max_bytes, max_events, None if available_now else min_events)

    def waits(self, min_events: int, start: Any, end: Any, count: Callable[[Any, Any, int], int]) -> bool:
        """Whether to offer no micro-batch yet: fewer than ``min_events`` events between ``start`` and ``end`` (the
        states; ``count(a, b, at_most)`` counts between two of them) and ``maxTriggerDelay`` not passed since the
        last micro-batch. What was counted from ``start`` is kept: a later call counts only from the end then."""
        now = self._clock()
        if self._last_batch is None:
            self._last_batch = now
        if (now - self._last_batch) * 1000 >= self.options.max_trigger_delay_ms:
            return False
        counted = 0
        if self._counted is not None and self._counted[0] == start:
            _, known_end, counted = self._counted
            if counted < min_events and known_end != end:
                counted += count(known_end, end, min_events - counted)
        else:
            counted = count(start, end, min_events)
        self._counted = (start, end, counted)
        return counted < min_events

    def offered(self, start: Any, end: Any) -> None:
        """``latestOffset`` answers ``end``: a micro-batch that reads events restarts the ``maxTriggerDelay`` clock."""
        if end != start:
            self._last_batch = self._clock()

    def next_end(
        self,
        start: ReadState,
        catalog: SegmentCatalog,
        limit: ReadLimit,
        *,
        cap: Mapping[int, int] | None,
        available_now: bool,
    ) -> ReadState | None:
        """The end of the next micro-batch of one stream from ``start`` (within ``cap``, the Trigger.AvailableNow
        target), or None to offer none yet (``minEventsPerTrigger``)."""
        limits = self.limits(limit, available_now)
        fail = self.fail_on_data_loss

        def count(a: ReadState, b: ReadState, at_most: int) -> int:
            return count_events(a, b, catalog, at_most, fail_on_data_loss=fail)

        if limits.min_events is not None:
            full = advance(start, catalog, fail_on_data_loss=fail, cap=cap)
            if self.waits(limits.min_events, start, full, count):
                return None
        end = advance(start, catalog, fail_on_data_loss=fail, max_bytes=limits.max_bytes, cap=cap)
        if limits.max_events is not None:
            end = admit_events(start, end, catalog, limits.max_events, fail_on_data_loss=fail)
        self.offered(start, end)
        return end

    def next_streams_end(
        self,
        start: StreamsState,
        advance_to: Callable[[int | None], StreamsState],
        catalog_of: CatalogOf,
        limit: ReadLimit,
        *,
        available_now: bool,
    ) -> StreamsState | None:
        """As :meth:`next_end` over several streams; ``advance_to(max_bytes)``: the byte-limited end of all streams
        (:func:`~pravega_spark.read.several_streams.advance_streams`)."""
        limits = self.limits(limit, available_now)
        fail = self.fail_on_data_loss

        def count(a: StreamsState, b: StreamsState, at_most: int) -> int:
            return sum(count_streams(a, b, catalog_of, at_most, fail_on_data_loss=fail).values())

        if limits.min_events is not None and self.waits(limits.min_events, start, advance_to(None), count):
            return None
        end = advance_to(limits.max_bytes)
        if limits.max_events is not None:
            end = admit_streams(start, end, catalog_of, limits.max_events, fail_on_data_loss=fail)
        self.offered(start, end)
        return end
