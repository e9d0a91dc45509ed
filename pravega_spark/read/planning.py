"""Driver side of the ``segstore`` source: move a read state forward, and cut the bytes between two states
into segment ranges (one Spark input partition each).

Both follow the same walk over a :class:`SegmentCatalog` (the segment store's view of each segment, the
controller's successors, and segment bytes for finding event boundaries):

* a segment in ``positions`` that is sealed and read to its end is *finished*: it leaves ``positions`` and its
  successors start at offset 0 once all of their predecessors finished (until then they wait in
  ``pending``; see :mod:`pravega_spark.offsets`);
* a segment in the *cap* (the end of a batch query, the Trigger.AvailableNow target) is read up to its
  offset there and never finished, so nothing beyond the cap is read;
* a position below a segment's start (truncated), or a segment that no longer exists, is data loss:
  :class:`~pravega_spark.errors.DataLossError` unless ``fail_on_data_loss`` is False, then the lost bytes are
  skipped and logged.

:func:`advance` answers ``latestOffset(start, limit)``: everything available, or with ``max_bytes`` at most
that many bytes over all segments (split evenly, what one segment leaves unused goes to the others in the
next round), each segment's new offset being the last event boundary within its share (found by scanning
the event headers of that share). If not even one event fits, one event of the first segment is admitted,
so a query always makes progress. :func:`plan_ranges` answers ``partitions(start, end)``: the byte range of
every segment between the two states, deterministically from the two states and the (immutable) history
of the stream, so a batch replayed after a restart reads exactly the same events.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from pravega_spark.connection import StreamConnection
from pravega_spark.errors import DataLossError, UnreachableEndError
from pravega_spark.offsets import ReadState
from pravega_spark.read.partition_reader import frame_events
from segment_store.protocol import HEADER_SIZE, ProtocolError

_log = logging.getLogger(__name__)


class SegmentState(NamedTuple):
    """What planning needs of a segment: where its data starts, its length, whether it is sealed."""

    start_offset: int
    length: int
    sealed: bool


class SegmentCatalog(Protocol):
    """The stream as planning sees it. ``status`` answers None for a segment that no longer exists;
    ``successors`` maps each successor of a sealed segment to all of its predecessors (empty while the
    segment is open); ``chunks`` yields the bytes ``[start, end)`` of a segment."""

    scope: str
    stream: str

    def status(self, segment_id: int) -> SegmentState | None: ...

    def successors(self, segment_id: int) -> Mapping[int, Sequence[int]]: ...

    def chunks(self, segment_id: int, start: int, end: int) -> Iterable[bytes]: ...


@dataclass(frozen=True, slots=True)
class ReadRange:
    """The events of ``segment_id`` whose headers start in ``[start, end)``."""

    segment_id: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


class LiveCatalog:
    """A :class:`SegmentCatalog` over a :class:`StreamConnection`. Statuses are fetched once per catalog
    (make one per planning call: a consistent snapshot); successors of sealed segments never change and are
    kept in ``successor_cache`` (share it between calls)."""

    def __init__(
        self,
        connection: StreamConnection,
        scope: str,
        stream: str,
        successor_cache: dict[int, dict[int, list[int]]] | None = None,
    ) -> None:
        self.connection = connection
        self.scope = scope
        self.stream = stream
        self._statuses: dict[int, SegmentState | None] = {}
        self._successors = successor_cache if successor_cache is not None else {}

    def status(self, segment_id: int) -> SegmentState | None:
        if segment_id not in self._statuses:
            self.prefetch([segment_id])
        return self._statuses[segment_id]

    def prefetch(self, segment_ids: Iterable[int]) -> None:
        """Fetch the statuses of ``segment_ids`` not known yet, all at once (a walk asks them one at a time)."""
        missing = [s for s in segment_ids if s not in self._statuses]
        if not missing:
            return
        for segment_id, found in self.connection.segment_statuses(self.scope, self.stream, missing).items():
            self._statuses[segment_id] = (
                None if found is None else SegmentState(found.start_offset, found.write_offset, found.sealed)
            )

    def successors(self, segment_id: int) -> Mapping[int, Sequence[int]]:
        cached = self._successors.get(segment_id)
        if cached is None:
            cached = self.connection.successors(self.scope, self.stream, segment_id)
            if cached:
                self._successors[segment_id] = cached
        return cached

    def forget_successors(self, positions: Mapping[int, int]) -> None:
        """Keep in the shared successor cache only the segments of ``positions``: see :func:`forget_successors`."""
        forget_successors(self._successors, positions)

    def chunks(self, segment_id: int, start: int, end: int) -> Iterable[bytes]:
        return self.connection.chunks(self.scope, self.stream, segment_id, start, end)

    def event_starts(self, segment_id: int, targets: Sequence[int]) -> list[int] | None:
        """See :class:`pravega_spark.read.splitting.EventLocator`."""
        return self.connection.event_starts(self.scope, self.stream, segment_id, targets)


def forget_successors(successor_cache: dict[int, dict[int, list[int]]], positions: Mapping[int, int]) -> None:
    """Keep in a :class:`LiveCatalog`'s ``successor_cache`` only the segments of ``positions`` (a query's start):
    the others were finished, so a long query's cache holds the segments alive, not the stream's history (a
    forgotten entry is only asked of the controller again)."""
    for segment in [s for s in successor_cache if s not in positions]:
        del successor_cache[segment]


def scan_boundary(chunks: Iterable[bytes], start: int) -> int:
    """The last event boundary in the bytes ``chunks`` (which begin at event boundary ``start``)."""
    position = start
    rest = b""
    for chunk in chunks:
        data = rest + chunk if rest else chunk
        _, _, consumed = frame_events(data)
        position += consumed
        rest = data[consumed:]
    return position


class Walk:
    """One walk over the segments from a read state (see the module docstring): ``move`` reads a segment up to an
    offset, ``settle`` finishes the sealed segments read to their end, ``state`` is where the walk is."""

    def __init__(
        self,
        state: ReadState,
        catalog: SegmentCatalog,
        fail_on_data_loss: bool,
        cap: Mapping[int, int] | None = None,
        strict: bool = False,
    ) -> None:
        self.catalog = catalog
        self.fail_on_data_loss = fail_on_data_loss
        self.cap = cap or {}
        self.strict = strict
        self.positions: dict[int, int] = dict(state.positions)
        self.pending: dict[int, dict[int, int]] = {s: dict(f) for s, f in state.pending.items()}
        self.ranges: dict[int, list[int]] = {}
        self.dead: set[int] = set()
        self.state_scope, self.state_stream = state.scope, state.stream

    def state(self) -> ReadState:
        return ReadState(
            self.state_scope,
            self.state_stream,
            dict(sorted(self.positions.items())),
            {s: dict(sorted(f.items())) for s, f in sorted(self.pending.items())},
        )

    def _name(self, segment: int) -> str:
        return f"segment {segment} of {self.catalog.scope}/{self.catalog.stream}"

    def _lost(self, message: str) -> None:
        if self.fail_on_data_loss:
            raise DataLossError(
                f"{message}. Data the query had not read yet was truncated away; "
                f"set option failOnDataLoss=false to skip it"
            )
        _log.warning("%s; skipped (failOnDataLoss=false)", message)

    def limit(self, segment: int) -> int:
        status = self.catalog.status(segment)
        assert status is not None
        if segment in self.cap:
            return min(status.length, self.cap[segment])
        if self.strict and not status.sealed:
            raise UnreachableEndError(
                f"{self._name(segment)} is open and not in the end position: the end is not after the start"
            )
        return status.length

    def move(self, segment: int, offset: int) -> None:
        previous = self.positions[segment]
        if offset <= previous:
            return
        span = self.ranges.setdefault(segment, [previous, offset])
        span[1] = offset
        self.positions[segment] = offset

    def finish(self, segment: int, end: int) -> None:
        del self.positions[segment]
        for successor, predecessors in sorted(self.catalog.successors(segment).items()):
            if successor in self.positions:
                continue  # a cut that already holds the successor
            waiting = self.pending.setdefault(successor, {})
            waiting[segment] = end
            if all(p in waiting for p in predecessors):
                del self.pending[successor]
                self.positions[successor] = 0

    def settle(self) -> bool:
        """Apply data loss and finish every sealed segment read to its end, repeatedly; True if anything
        changed."""
        changed_any = False
        changed = True
        while changed:
            changed = False
            for segment in sorted(self.positions):
                if segment not in self.positions or segment in self.dead:
                    continue
                position = self.positions[segment]
                status = self.catalog.status(segment)
                if status is None:
                    self._lost(f"{self._name(segment)} no longer exists; bytes from offset {position} are lost")
                    if segment in self.cap:
                        self.positions[segment] = max(position, self.cap[segment])
                        self.dead.add(segment)
                    else:
                        self.finish(segment, position)
                    changed = True
                    continue
                if position < status.start_offset:
                    skip_to = status.start_offset
                    if segment in self.cap and self.cap[segment] >= position:
                        skip_to = min(skip_to, self.cap[segment])
                    self._lost(f"{self._name(segment)}: offsets [{position}, {status.start_offset}) are truncated")
                    self.positions[segment] = position = skip_to
                    changed = True
                if position > status.length:
                    raise UnreachableEndError(
                        f"{self._name(segment)}: offset {position} is beyond its length {status.length}"
                    )
                if segment not in self.cap and status.sealed and position >= status.length:
                    self.finish(segment, status.length)
                    changed = True
            changed_any |= changed
        return changed_any

    def active(self) -> list[int]:
        return [s for s in sorted(self.positions) if s not in self.dead and self.limit(s) > self.positions[s]]

    def run_out(self) -> None:
        """Read every segment to its limit, following successors, until nothing moves (settled first)."""
        self.settle()
        while True:
            active = self.active()
            for segment in active:
                self.move(segment, self.limit(segment))
            if not self.settle() and not active:
                return


def advance(
    start: ReadState,
    catalog: SegmentCatalog,
    *,
    fail_on_data_loss: bool = True,
    max_bytes: int | None = None,
    cap: Mapping[int, int] | None = None,
) -> ReadState:
    """The state after reading everything available from ``start`` (up to ``cap`` if given), or at most
    ``max_bytes`` bytes of it (at least one event when anything is available)."""
    walk = Walk(start, catalog, fail_on_data_loss, cap)
    if max_bytes is None:
        walk.run_out()
        return walk.state()
    walk.settle()
    used = 0
    while (active := walk.active()) and used < max_bytes:
        share = (max_bytes - used) // len(active)
        progressed = False
        for segment in active:
            position, limit = walk.positions[segment], walk.limit(segment)
            if position + share >= limit:
                new = limit
            elif share < HEADER_SIZE:
                new = position
            else:
                new = scan_boundary(catalog.chunks(segment, position, position + share), position)
            if new > position:
                walk.move(segment, new)
                used += new - position
                progressed = True
        walk.settle()
        if not progressed:
            if used == 0:
                segment = active[0]
                position = walk.positions[segment]
                walk.move(segment, first_event_end(catalog, segment, position, walk.limit(segment)))
                walk.settle()
            break
    return walk.state()


def first_event_end(catalog: SegmentCatalog, segment: int, position: int, limit: int) -> int:
    """The offset after the event that starts at ``position``."""
    header = b"".join(catalog.chunks(segment, position, min(position + HEADER_SIZE, limit)))
    if len(header) < HEADER_SIZE:
        raise ProtocolError(f"segment {segment}: no event header at offset {position}")
    length = int.from_bytes(header[4:8], "big", signed=True)
    if header[:4] != b"\0\0\0\0" or length < 0 or position + HEADER_SIZE + length > limit:
        raise ProtocolError(f"segment {segment}: bad event header at offset {position}")
    return position + HEADER_SIZE + length


PACK_BYTES = 4 * 1024 * 1024
"""Ranges smaller than this are read together in one input partition, up to this many bytes in all."""


def pack_ranges(ranges: Sequence[ReadRange], limit_bytes: int = PACK_BYTES) -> list[list[ReadRange]]:
    """The ranges grouped into input partitions: a range of ``limit_bytes`` or more alone, smaller ones
    together (in the given order) while their sum stays within ``limit_bytes``.

    A Spark task has a fixed cost (~50-100 ms on a busy executor: scheduling, the Python worker, Arrow
    back to the JVM) that dwarfs reading a few hundred KB, so the micro-batches of a live tail, a few KB
    per segment, are read by one task instead of one per segment; a backlog still gets a task per segment.
    """
    groups: list[list[ReadRange]] = []
    open_group: list[ReadRange] = []
    open_bytes = 0
    for r in ranges:
        if r.size >= limit_bytes:
            groups.append([r])
            continue
        if open_group and open_bytes + r.size > limit_bytes:
            groups.append(open_group)
            open_group, open_bytes = [], 0
        open_group.append(r)
        open_bytes += r.size
    if open_group:
        groups.append(open_group)
    return groups


def plan_ranges(
    start: ReadState, end: ReadState, catalog: SegmentCatalog, *, fail_on_data_loss: bool = True
) -> list[ReadRange]:
    """The segment ranges between ``start`` and ``end`` (in segment id order; empty ones left out).

    Raises UnreachableEndError if ``end`` is not after ``start``, DataLossError (see the module docstring).
    """
    if start == end:
        return []
    walk = Walk(start, catalog, fail_on_data_loss, cap=end.positions, strict=True)
    walk.run_out()
    reached = walk.state()
    if dict(reached.positions) != dict(end.positions) or set(reached.pending) != set(end.pending):
        raise UnreachableEndError(
            f"{catalog.scope}/{catalog.stream}: the end position {end.to_json()} is not reachable from "
            f"{start.to_json()} (reached {reached.to_json()})"
        )
    return [ReadRange(s, a, b) for s, (a, b) in sorted(walk.ranges.items()) if b > a]
