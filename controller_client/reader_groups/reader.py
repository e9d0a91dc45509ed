"""A reader of a reader group: reads the segments the group assigns it, and shares the work (issue 25).

An :class:`EventStreamReader` is one member of a :class:`~controller_client.reader_groups.group.ReaderGroup`. The
group's state (:mod:`controller_client.reader_groups.state`) says which segments it holds; it reads them with one
prefetching segment reader each and hands the application their events one at a time (:meth:`next_event`).

Everything the reader does to the group happens inside :meth:`next_event`, at most every ``refresh_interval_s``
(and at once when a segment ends): bring its view of the state up to date, report its positions (also its sign of
life), meet a pending checkpoint (a checkpoint marker is returned instead of an event), take readers that have not
reported for ``reader_timeout_s`` offline, acquire unassigned segments up to its share, release one above its share.
A reader that is not polled does nothing, so poll at least every ``reader_timeout_s``.

Invariants:

* Each segment is read by one reader at a time, from the position the group holds for it: a released segment
  is given back at the offset right after the last event this reader returned (events it had prefetched beyond
  are dropped), so a rebalance neither loses nor repeats an event.
* Events of one segment come out in offset order; a successor is read only after all its predecessors were read
  to their end (by whichever readers): every routing key's events come out in order across scalings.
* A reader's *position* in a segment is where its next event starts. Positions reach the group with the next
  report; a reader that dies leaves the positions of its last report, so the reader taking over repeats what was
  returned since (at least once). :meth:`close` reports the exact positions, so a clean handover repeats nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from controller_client.model import qualified_segment_name
from controller_client.ports import ControllerApi
from controller_client.reader_groups.format import ASSIGNED, ScopedSegment, Segment
from controller_client.reader_groups.state import (
    AUTOMATIC_PREFIX,
    CheckpointRecord,
    GroupView,
    ReaderOfflineError,
    acquire,
    acquire_or_release,
    add_reader,
    complete_segment,
    create_automatic_checkpoint,
    newest_complete,
    reach_checkpoint,
    release,
    remove_reader,
    report_positions,
    view,
)
from controller_client.reader_groups.table import GroupTable, Update
from segment_store.client import (
    Backoff,
    ClientClosedError,
    ConnectionLostError,
    ReaderConfig,
    RetryPolicy,
    SegmentClient,
    SegmentIsTruncatedError,
    SegmentReader,
    WrongHostError,
)
from segment_store.protocol.constants import HEADER_SIZE
from segment_store.protocol.errors import ProtocolError
from segment_store.protocol.events import EventParser, SegmentEvent
from segstore_shared.deadline import DEFAULT_UNREACHABLE_TIMEOUT_S

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class EventRead:
    """What :meth:`EventStreamReader.next_event` returns: an event, or a checkpoint marker (``checkpoint`` set,
    ``data`` None: every event before the checkpoint has been returned by this reader, none after)."""

    data: bytes | None
    segment: ScopedSegment | None
    offset: int
    """The offset of the event's header in its segment (-1 for a checkpoint marker)."""
    checkpoint: str | None = None

    @property
    def is_checkpoint(self) -> bool:
        return self.checkpoint is not None


@dataclass(frozen=True, slots=True)
class GroupReaderConfig:
    """A reader of a group."""

    refresh_interval_s: float = 1.0
    """How often the reader reports positions, looks for checkpoints, dead readers and unassigned segments."""
    reader_timeout_s: float | None = 30.0
    """A reader that has not reported for this long is taken offline by another (its segments resume at its last
    reported positions); None: never (use ``ReaderGroup.reader_offline``). Must exceed the official client's
    report period (3 s) if its readers share the group."""
    max_buffered_events: int = 4096
    """Events read ahead of the application across the reader's segments."""
    segment_reader: ReaderConfig | None = None
    controller_retry: RetryPolicy = field(default_factory=lambda: RetryPolicy(max_attempts=10, max_delay_ms=2_000))
    segment_retry: RetryPolicy = field(default_factory=lambda: RetryPolicy(max_attempts=1_000, max_delay_ms=1_000))
    """Backoff of a segment reader restarted after its segment store answered WrongHost or dropped the connection."""
    segment_retry_timeout_s: float | None = None
    """How long a segment reader may keep failing that way, without reading anything, before the reader fails with
    the error; None: the stream manager's ``retry_timeout_s`` (30 s by default)."""

    def __post_init__(self) -> None:
        if self.refresh_interval_s <= 0:
            raise ValueError("refresh_interval_s: must be positive")
        if self.reader_timeout_s is not None and self.reader_timeout_s <= self.refresh_interval_s:
            raise ValueError("reader_timeout_s: must exceed refresh_interval_s (or be None)")
        if self.max_buffered_events < 1:
            raise ValueError("max_buffered_events: must be at least 1")
        if self.segment_retry_timeout_s is not None and self.segment_retry_timeout_s <= 0:
            raise ValueError(f"segment_retry_timeout_s: must be positive, not {self.segment_retry_timeout_s}")


@dataclass(frozen=True, slots=True)
class AutomaticCheckpoints:
    """A subscriber group's automatic checkpoints: every ``interval_ms`` a reader starts a silent one (no marker is
    returned for it), and each reader publishes the newest completed one with ``publish``."""

    interval_ms: int
    publish: Callable[[CheckpointRecord], Awaitable[None]]


class _Held:
    """A segment this reader holds: where its next event starts, and the task reading it (None once read to its
    end, or stopped). ``active`` turns False when the segment is given up: what its task read is dropped."""

    __slots__ = ("active", "position", "segment", "task")

    def __init__(self, segment: ScopedSegment, position: int) -> None:
        self.segment = segment
        self.position = position
        self.task: asyncio.Task[None] | None = None
        self.active = True


@dataclass(frozen=True, slots=True)
class _Done:
    end: int


@dataclass(frozen=True, slots=True)
class _Failed:
    error: BaseException


_Item = tuple[_Held, list[SegmentEvent] | _Done | _Failed]


class EventStreamReader:
    """One reader of a group (made by ``ReaderGroup.create_reader``); ``async with`` closes it."""

    def __init__(
        self,
        name: str,
        table: GroupTable,
        controller: ControllerApi,
        client: SegmentClient,
        end_positions: Mapping[ScopedSegment, int],
        config: GroupReaderConfig | None = None,
        on_endpoint_error: Callable[[str], None] | None = None,
        automatic: AutomaticCheckpoints | None = None,
        retry_timeout_s: float = DEFAULT_UNREACHABLE_TIMEOUT_S,
    ) -> None:
        """``retry_timeout_s``: the segment readers' budget when the config names none (the manager's)."""
        self.name = name
        self._automatic = automatic
        self._published: str | None = None
        self._joined_ms = int(time.time() * 1000)
        self.config = config or GroupReaderConfig()
        self._table = table
        self._controller = controller
        self._client = client
        self._end = dict(end_positions)
        self._on_endpoint_error = on_endpoint_error
        self._segment_retry_timeout_s = self.config.segment_retry_timeout_s or retry_timeout_s
        self._queue: asyncio.Queue[_Item] = asyncio.Queue(max(1, self.config.max_buffered_events // 64))
        self._held: dict[ScopedSegment, _Held] = {}
        self._batch: deque[SegmentEvent] = deque()
        self._batch_of: _Held | None = None
        self._deferred: list[ScopedSegment] = []
        self._others: dict[str, tuple[int | None, float]] = {}
        self._next_refresh = 0.0
        self._state = GroupView()
        self._closed = False
        self._failure: BaseException | None = None
        self.segments_read: list[ScopedSegment] = []
        """Segments in the order this reader started reading them; for tests and metrics."""

    async def __aenter__(self) -> EventStreamReader:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def join(self) -> None:
        """Come online in the group (``ReaderGroup.create_reader`` does this). ReaderAlreadyOnlineError."""
        await self._table.update(lambda u: add_reader(u, self.name))

    @property
    def positions(self) -> dict[ScopedSegment, int]:
        """The segments this reader holds, each with the offset its next event starts at."""
        return {segment: held.position for segment, held in self._held.items()}

    @property
    def group_finished(self) -> bool:
        """Whether the group had nothing left to read at this reader's last refresh (every segment read to its
        end or to the group's end cut)."""
        state = self._state
        return not self._held and state.segment_count == 0 and not state.future

    # ---- reading ------------------------------------------------------------------------------------------

    async def next_event(self, timeout_s: float | None = None) -> EventRead | None:
        """The next event or checkpoint marker; None after ``timeout_s`` without one.

        Raises ReaderOfflineError if the reader was taken offline (timed out, or the group was reset: make a new
        reader), a segment's read error, ClientClosedError after :meth:`close`.
        """
        if self._closed:
            raise ClientClosedError(f"reader {self.name!r} is closed")
        if self._failure is not None:
            raise self._failure
        loop = asyncio.get_running_loop()
        deadline = None if timeout_s is None else loop.time() + timeout_s
        while True:
            now = loop.time()
            if now >= self._next_refresh:
                self._next_refresh = now + self.config.refresh_interval_s
                marker = await self._guard(self._refresh())
                if marker is not None:
                    return marker
            held = self._batch_of
            if self._batch and held is not None and held.active:
                event = self._batch.popleft()
                held.position = event.offset + HEADER_SIZE + len(event.data)
                return EventRead(event.data, held.segment, event.offset)
            try:
                item = self._queue.get_nowait()
            except asyncio.QueueEmpty:
                wait = self._next_refresh - now
                if deadline is not None:
                    if now >= deadline:
                        return None
                    wait = min(wait, deadline - now)
                try:
                    async with asyncio.timeout(max(0.0, wait)):  # (not wait_for: it may swallow a cancel, 3.11)
                        item = await self._queue.get()
                except TimeoutError:
                    continue
            held, payload = item
            if not held.active:
                continue  # read before the segment was given up: not ours to return
            if isinstance(payload, list):
                self._batch = deque(payload)
                self._batch_of = held
                continue
            if isinstance(payload, _Failed):
                self._failure = payload.error
                await self._stop_all()
                raise payload.error
            marker = await self._guard(self._segment_done(held, payload.end))
            if marker is not None:
                return marker

    async def _guard(self, work: Awaitable[EventRead | None]) -> EventRead | None:
        """Run group work; a reader found offline stops reading and raises ReaderOfflineError from now on."""
        try:
            return await work
        except ReaderOfflineError as error:
            self._failure = error
            await self._stop_all()
            raise

    async def close(self) -> None:
        """Leave the group, handing every segment over at exactly the position after the last event returned.
        Idempotent; a reader already offline just stops."""
        if self._closed:
            return
        self._closed = True
        positions = self.positions
        await self._stop_all()
        if isinstance(self._failure, ReaderOfflineError):
            return
        await self._table.update(lambda u: remove_reader(u, self.name, positions))

    # ---- the group ------------------------------------------------------------------------------------------

    def _view(self) -> GroupView:
        return view(Update(self._table.entries))

    async def _refresh(self) -> EventRead | None:
        await self._table.fetch()
        self._state = self._view()
        if self.name not in self._state.assigned:
            raise ReaderOfflineError(self.name)
        marker = await self._meet_checkpoint()
        if marker is None:
            positions = self.positions
            await self._table.update(lambda u: report_positions(u, self.name, positions), fetch_first=False)
        await self._complete_deferred()
        await self._take_dead_offline()
        await self._balance()
        await self._automatic_checkpoints()
        return marker

    async def _meet_checkpoint(self) -> EventRead | None:
        record = self._state.pending_for(self.name)
        if record is None:
            return None
        positions = self.positions
        await self._table.update(lambda u: reach_checkpoint(u, self.name, record.name, positions), fetch_first=False)
        self._state = self._view()
        _log.info("reader %s reached checkpoint %s", self.name, record.name)
        if record.name.startswith(AUTOMATIC_PREFIX):
            return None  # silent: the application is not told
        return EventRead(None, None, -1, record.name)

    async def _automatic_checkpoints(self) -> None:
        automatic = self._automatic
        if automatic is None:
            return
        now_ms = int(time.time() * 1000)
        if await self._table.update(
            lambda u: create_automatic_checkpoint(u, automatic.interval_ms, now_ms, self._joined_ms), fetch_first=False
        ):
            self._state = self._view()
        newest = newest_complete(self._state, AUTOMATIC_PREFIX)
        if newest is not None and newest.name != self._published:
            await automatic.publish(newest)
            self._published = newest.name

    async def _take_dead_offline(self) -> None:
        timeout = self.config.reader_timeout_s
        if timeout is None:
            return
        now = asyncio.get_running_loop().time()
        for reader in list(self._state.assigned):
            if reader == self.name:
                continue
            version = self._table.entries[(ASSIGNED, reader)].version
            seen = self._others.get(reader)
            if seen is None or seen[0] != version:
                self._others[reader] = (version, now)
                continue
            if now - seen[1] < timeout:
                continue

            def take(update: Update, reader: str = reader, version: int | None = version) -> bool:
                return remove_reader(update, reader, None, if_version=version)

            if await self._table.update(take, fetch_first=False):
                _log.warning(
                    "reader %s took reader %s offline: no report for %.1f s (its segments resume at its last "
                    "reported positions)",
                    self.name,
                    reader,
                    now - seen[1],
                )
            self._others.pop(reader, None)
        self._state = self._view()

    async def _balance(self) -> None:
        taken = await self._table.update(lambda u: acquire(u, self.name, 1 << 30), fetch_first=False)
        for segment, offset in taken:
            await self._start(segment, offset)
        self._state = self._view()
        if taken or acquire_or_release(self._state, self.name) >= 0 or self._state.pending_checkpoints:
            return
        segment = max(self._held, key=lambda s: s.qualified_name)
        offset = self._held[segment].position
        if await self._table.update(lambda u: release(u, self.name, segment, offset), fetch_first=False):
            _log.info("reader %s released %s at %d to balance the group", self.name, segment, offset)
            await self._stop(segment)
        self._state = self._view()

    async def _segment_done(self, held: _Held, end: int) -> EventRead | None:
        """``held``'s segment was read to its end (sealed, or the group's end cut)."""
        held.position = end
        held.task = None
        self._deferred.append(held.segment)
        await self._complete_deferred()
        if not self._deferred:
            self._state = self._view()
            await self._balance()
            return None
        # a checkpoint is pending on this reader: meet it first (the segment stays ours, at its end, meanwhile)
        await self._table.fetch()
        self._state = self._view()
        marker = await self._meet_checkpoint()
        await self._complete_deferred()
        return marker

    async def _complete_deferred(self) -> None:
        while self._deferred:
            segment = self._deferred[0]
            successors = await self._successors(segment)
            done = await self._table.update(
                functools.partial(complete_segment, reader=self.name, segment=segment, successors=successors)
            )
            if done is None:
                return  # a checkpoint is pending on this reader: complete it after the marker
            self._deferred.pop(0)
            self._held.pop(segment, None)

    async def _successors(self, segment: ScopedSegment) -> dict[ScopedSegment, tuple[Segment, ...]]:
        if segment in self._end:
            return {}  # stopped at the group's end cut: its successors are beyond it
        number = segment.segment.number
        found = await self.config.controller_retry.call(
            lambda: self._controller.get_successors(segment.scope, segment.stream, number)
        )
        return {
            ScopedSegment.of(segment.scope, segment.stream, s.segment_id): tuple(Segment(p) for p in predecessors)
            for s, predecessors in found.items()
        }

    # ---- segment readers ----------------------------------------------------------------------------------

    async def _start(self, segment: ScopedSegment, offset: int) -> None:
        await self._stop(segment)
        held = self._held[segment] = _Held(segment, offset)
        end = self._end.get(segment)
        if end is not None and end < 0:
            end = None
        self.segments_read.append(segment)
        held.task = asyncio.get_running_loop().create_task(
            self._pump(held, offset, end), name=f"group-read-{segment.qualified_name}"
        )

    async def _stop(self, segment: ScopedSegment) -> None:
        """Give up ``segment``: stop its task and drop what it read."""
        held = self._held.pop(segment, None)
        if held is None:
            return
        held.active = False
        task, held.task = held.task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _stop_all(self) -> None:
        for segment in list(self._held):
            await self._stop(segment)

    async def _pump(self, held: _Held, offset: int, end: int | None) -> None:
        """Feed the segment's events from ``offset`` into the queue in batches (what each read returned), then a
        ``_Done`` (or a ``_Failed``)."""
        segment = held.segment
        name = qualified_segment_name(segment.scope, segment.stream, segment.segment.number)
        backoff = Backoff(self.config.segment_retry, self._segment_retry_timeout_s)
        put = self._queue.put
        try:
            while True:
                reader: SegmentReader = self._client.reader(name, offset, end, self.config.segment_reader)
                parser = EventParser(offset)
                try:
                    while chunk := await reader.read():
                        parser.feed(chunk)
                        events = list(parser)
                        if events:
                            backoff.succeeded()
                            await put((held, events))
                    if parser.pending_bytes:
                        raise ProtocolError(f"{name} ends inside an event at offset {parser.offset}")
                    offset = parser.offset
                    break
                except SegmentIsTruncatedError:
                    start = (await self._client.get_segment_info(name)).start_offset
                    _log.warning("reader %s: %s is truncated at %d, past %d: skipping", self.name, name, start, offset)
                    offset = start
                except (WrongHostError, ConnectionLostError) as error:
                    _log.info("reader %s: %s restarts at %d after %r", self.name, name, parser.offset, error)
                    if self._on_endpoint_error is not None:
                        self._on_endpoint_error(name)
                    offset = parser.offset
                    await reader.close()
                    await backoff.failed(error)  # raises once the failures in a row outlast the budget
                finally:
                    await reader.close()
            await put((held, _Done(offset)))
        except asyncio.CancelledError:
            raise
        except Exception as error:  # handed to the application by next_event
            await put((held, _Failed(error)))
