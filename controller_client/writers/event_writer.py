"""The event writer of a stream: routing keys to segments, one append session per segment, scaling followed.

:class:`EventStreamWriter` routes each event by its routing key (:mod:`controller_client.writers.routing`) to one of
the stream's current segments and writes it through that segment's
:class:`~segment_store.client.writer.SegmentWriter` (batching, window, acks, resend after reconnect are the
segment writer's). Each segment session's writer id is derived from the writer's id and the segment
(:func:`session_writer_id`), so the segment stores deduplicate whatever a session resends, and any number
of segments can share a connection.

Invariants:

* **Order per routing key.** Events with the same routing key are stored in the order their
  ``write_event`` calls were made (the calls are serialised by one lock, in arrival order), also across a
  scale: a key always maps to exactly one segment at a time and its pending events move as a block.
* **Scaling.** When a segment answers ``SegmentIsSealed`` the writer asks the controller for its
  successors, replaces the sealed segment's key range by them, and resends the sealed segment's
  unacknowledged events, in order, to the successors by their routing keys, before any later event is
  routed. What the sealed segment stored for this writer id (its writer attribute, read once the seal is
  committed) is acknowledged, not resent, so nothing is duplicated even when a failure reply overtakes an
  acknowledgement. Sealed with no successors means the stream is sealed: :class:`StreamSealedError`.
* **Acknowledgement.** The future ``write_event`` returns completes when the event is durably stored (in
  whichever segment it ended up), or fails with the writer's error; ``flush`` waits for all of them. Events
  written one after another into the same block of a segment share one future (done when all of them are
  stored), so a burst of small events costs one future, and nothing per event is left for the garbage
  collector to trace.
* **A producer that does not yield.** Sessions send at the end of a turn of the event loop or when an
  acknowledgement comes; a producer that writes without ever suspending gives them neither until the
  window is full, and then everything goes at once while it waits. So once ``max_unacked_bytes`` / 8
  were written in one turn, every session sends what it holds (:meth:`SegmentWriter.send_pending`): the
  segment stores work while the producer writes.
* **Memory.** The writer holds at most ``EventWriterConfig.max_unacked_bytes`` of events not yet
  acknowledged, over all its segments (one event larger than that is let through alone), and each segment
  session at most its own window; ``write_event`` waits while either is full (holding the lock, so later
  writes wait too). So memory does not grow with the number of segments, and a producer that never yields
  still lets the sessions send while it waits.
* **Failure.** Any other session failure (``NoSuchSegment``: the stream was deleted, raised as
  :class:`StreamNotFoundError`; retries exhausted; a rejected token) fails that segment's pending events and
  the writer: later calls raise the error.

Use from one event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import TypeVar

from controller_client.errors import StreamNotFoundError, StreamSealedError
from controller_client.model import SegmentRange, StreamCut, qualified_segment_name
from controller_client.ports import ControllerApi
from controller_client.writers.pending_events import Batch, PendingEvents
from controller_client.writers.routing import KeyHasher, SegmentMap
from segment_store.client import (
    ClientClosedError,
    NoSuchSegmentError,
    RetryPolicy,
    SegmentClient,
    SegmentIsSealedError,
    SegmentWriter,
    WriterConfig,
)
from segment_store.client.retry import is_retriable
from segstore_shared.errors import RetriableError

_log = logging.getLogger(__name__)
_T = TypeVar("_T")
_MAX_CACHED_KEYS = 65_536  # routing keys whose sink the writer remembers (cleared when full)
REPLACE_ATTEMPTS = 20
"""Attempts to follow a seal that fail retriably (0.05 s apart, doubling up to 2 s: about half a minute)."""


class SealNotConfirmedError(RetriableError):
    """A sealed segment did not show its seal committed yet, so what it stored for the writer is unknown."""


@dataclass(frozen=True, slots=True)
class EventWriterConfig:
    """An event stream writer."""

    max_unacked_bytes: int = 16 * 1024 * 1024
    """Event bytes written and not yet acknowledged, over all segments, before ``write_event`` waits."""
    segment_writer: WriterConfig | None = None
    """Append session settings (window ``max_unacked_bytes``, block size, reconnects); None: the client's."""
    controller_retry: RetryPolicy = field(default_factory=lambda: RetryPolicy(max_attempts=10, max_delay_ms=2_000))
    """Retries of controller calls that fail retriably (controller unavailable)."""
    seal_confirm_attempts: int = 50
    """How many times (10 ms apart) to look for a seal to be committed, per try of following the seal (the
    writer tries again, up to ``REPLACE_ATTEMPTS`` times, then fails)."""
    note_time_on_flush: bool = False
    """Each :meth:`~EventStreamWriter.flush` notes the wall-clock time (:meth:`~EventStreamWriter.note_time`):
    for writers whose events' time is the time they are written."""

    def __post_init__(self) -> None:
        if self.seal_confirm_attempts < 1:
            raise ValueError("seal_confirm_attempts: must be at least 1")
        if self.max_unacked_bytes < 1:
            raise ValueError("max_unacked_bytes: must be positive")


@dataclass(slots=True, eq=False)
class _Sink:
    """One segment's session and the events it holds that are not acknowledged, in event-number order."""

    segment: SegmentRange
    name: str
    writer: SegmentWriter
    pending: PendingEvents = field(default_factory=PendingEvents)
    writes_started: int = -1  # the session's ``writes_started`` when ``open_batch`` began
    open_batch: Batch | None = None  # the batch new events join while they go into the same block
    replaced: bool = False
    replacing: bool = False


class _SinkProgress:
    """A sink's session tells its stream writer what is stored (a ``ProgressListener``): acknowledgements
    release the sink's pending events as the reply arrives, with no future or callback per block."""

    __slots__ = ("_sink", "_writer")

    def __init__(self, writer: EventStreamWriter, sink: _Sink) -> None:
        self._writer = writer
        self._sink = sink

    def stored_through(self, event_number: int) -> None:
        freed = self._sink.pending.release_through(event_number)
        if freed:
            self._writer._freed(freed)

    def session_failed(self, error: BaseException) -> None:
        self._writer._session_failed(self._sink, error)


def session_writer_id(writer_id: uuid.UUID, segment: str) -> uuid.UUID:
    """The writer id of one segment session of a stream writer: derived from the stream writer's id and the
    segment name, so it is stable (a restarted writer with the same id resumes its sessions) and distinct
    per segment. Distinct it must be: an append block names a writer id, not a segment, so one connection
    carries one session per writer id (Pravega's clients also use one writer id per segment)."""
    return uuid.uuid5(writer_id, segment)


class _RoutingLock(asyncio.Lock):
    """The writer's lock, counting who holds or waits for it: :meth:`EventStreamWriter.write_event` routes
    without it only when nobody does, so an event never overtakes one that is waiting for the lock."""

    def __init__(self) -> None:
        super().__init__()
        self.contenders = 0

    async def __aenter__(self) -> None:
        self.contenders += 1
        try:
            await self.acquire()
        except BaseException:
            self.contenders -= 1
            raise

    async def __aexit__(self, *exc_info: object) -> None:
        self.release()
        self.contenders -= 1


class EventStreamWriter:
    """Writes events to ``scope/stream``; make it with ``StreamManager.create_writer`` or directly.

    ``await open()`` is optional (the first write opens). ``close()`` flushes; ``async with`` closes.
    """

    def __init__(
        self,
        controller: ControllerApi,
        client: SegmentClient,
        scope: str,
        stream: str,
        config: EventWriterConfig | None = None,
        writer_id: uuid.UUID | None = None,
        hasher: KeyHasher | None = None,
    ) -> None:
        self.scope = scope
        self.stream = stream
        self.config = config or EventWriterConfig()
        self.writer_id = writer_id or uuid.uuid4()
        self._controller = controller
        self._client = client
        self._hasher = hasher or KeyHasher()
        self._map: SegmentMap | None = None
        self._sinks: dict[int, _Sink] = {}
        self._key_sinks: dict[str, _Sink] = {}  # routing key -> its sink, while the map and sinks stay as they are
        self._lock = _RoutingLock()
        self._failure: BaseException | None = None
        self._closed = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._unacked_bytes = 0  # of the events in the sinks' pending queues (and the one being routed)
        self._room: asyncio.Future[None] | None = None  # set while write_event waits for the window
        self._turn_bytes = 0  # routed since the event loop last had a turn (see "A producer that does not yield")
        self._max_unacked = self.config.max_unacked_bytes
        self._send_point = max(1, self._max_unacked // 8)
        self.scales_followed = 0
        """How many sealed segments were replaced by their successors; for tests and metrics."""
        self.events_resent = 0
        """Events moved from a sealed segment to a successor; for tests and metrics."""
        self._noted = False  # a time was noted: the controller is told when this writer goes

    async def __aenter__(self) -> EventStreamWriter:
        await self.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # ---- public API ---------------------------------------------------------------------------------------

    @property
    def failure(self) -> BaseException | None:
        """The error that ended the writer, or None."""
        return self._failure

    @property
    def unacked_bytes(self) -> int:
        """Bytes of events written and not yet acknowledged (or failed), over all segments."""
        return self._unacked_bytes

    def current_segments(self) -> list[SegmentRange]:
        """The segments events are routed to now (empty before the first write or ``open``)."""
        return self._map.segments() if self._map is not None else []

    async def open(self) -> None:
        """Learn the stream's current segments. Raises StreamNotFoundError, StreamSealedError."""
        self._check_usable()
        async with self._lock:
            if self._map is None:
                await self._load()

    async def write_event(self, event: bytes, routing_key: str | None = None) -> asyncio.Future[None]:
        """Queue ``event`` for the segment owning ``routing_key`` (None: a random segment); wait only while
        that segment's window is full. Returns a future that completes when the event is stored.

        Events written one after another to the same segment may share one future (it completes when all
        of them are stored): await it, do not cancel it.

        Raises the writer's failure (StreamSealedError, StreamNotFoundError, ...) or ClientClosedError.
        """
        data = event if type(event) is bytes else bytes(event)
        # The usual case, without a task switch (inline: it runs per event): window room, the session up with room.
        if self._failure is None and not self._closed and not self._lock.contenders and self._map is not None:
            size = len(data)
            unacked = self._unacked_bytes
            if not unacked or unacked + size <= self._max_unacked:
                sink = self._key_sinks.get(routing_key) if routing_key is not None else None
                if sink is None:
                    sink = self._sink_of_key(routing_key)
                number = sink.writer.offer(data)
                if number:
                    self._unacked_bytes = unacked + size
                    return self._record(sink, number, data, routing_key, None).future
        self._check_usable()
        async with self._lock:
            self._check_usable()
            if self._map is None:
                await self._load()
            return (await self._queue(data, routing_key)).future

    def _sink_of_key(self, routing_key: str | None) -> _Sink:
        """The sink of ``routing_key``'s segment (None: a random one), remembered for the key."""
        sink = self._sink_for(self._hasher.position(routing_key))
        if routing_key is not None:
            if len(self._key_sinks) >= _MAX_CACHED_KEYS:
                self._key_sinks.clear()
            self._key_sinks[routing_key] = sink
        return sink

    def _new_turn(self) -> None:
        self._turn_bytes = 0

    async def _queue(self, data: bytes, routing_key: str | None) -> Batch:
        """Route a new event once the writer's window has room for it (lock held); its batch."""
        size = len(data)
        while self._unacked_bytes and self._unacked_bytes + size > self.config.max_unacked_bytes:
            await self._wait_for_room()
        self._unacked_bytes += size
        try:
            return await self._route(data, routing_key, None)
        except BaseException:
            self._unacked_bytes -= size  # not queued anywhere
            raise

    async def _wait_for_room(self) -> None:
        """Wait until acknowledgements (or a failure) free part of the window; raise the writer's failure."""
        if self._room is None or self._room.done():
            self._room = asyncio.get_running_loop().create_future()
        await self._room
        self._check_usable()

    def _freed(self, size: int) -> None:
        self._unacked_bytes -= size
        room = self._room
        if room is not None and not room.done() and self._unacked_bytes < self.config.max_unacked_bytes:
            room.set_result(None)

    async def write_events(self, events: Iterable[tuple[bytes, str | None]]) -> asyncio.Future[None]:
        """Queue several ``(event, routing_key)`` in order, as ``write_event`` each would (taking the lock
        once); the future completes when all are stored. An error is raised as ``write_event`` raises it;
        the events queued before it stay queued."""
        self._check_usable()
        batches: dict[int, Batch] = {}
        async with self._lock:
            self._check_usable()
            if self._map is None:
                await self._load()
            for event, routing_key in events:
                batch = await self._queue(bytes(event), routing_key)
                batches[id(batch)] = batch
        futures = [batch.future for batch in batches.values()]
        if len(futures) == 1:
            return futures[0]
        return asyncio.ensure_future(_all_of(futures))

    async def flush(self) -> None:
        """Wait until every event written so far is stored (following scales). Raises the first failure. With
        ``note_time_on_flush``, then notes the wall-clock time."""
        await self._flush()
        if self.config.note_time_on_flush:
            await self._note_time(int(time.time() * 1000))

    async def _flush(self) -> None:
        self._check_usable()
        async with self._lock:  # events being moved to successors are in no session until the move ends
            waiters = [batch.wait() for sink in self._sinks.values() for batch in sink.pending.batches()]
        first_error: BaseException | None = None
        for waiter in waiters:
            try:
                await waiter
            except asyncio.CancelledError:
                raise
            except Exception as error:
                first_error = first_error or error
        if first_error is not None:
            raise first_error
        if self._failure is not None:
            raise self._failure

    async def note_time(self, timestamp_ms: int) -> None:
        """Note this writer's time for the stream's watermarks: the events written so far have times up to
        ``timestamp_ms`` and the ones written from now on will have times from it on. Flushes, then tells the controller
        the time with the writer's position (each segment's length at its last acknowledgement). Times must not go
        backwards (else ``InvalidArgumentError``). Closing the writer then tells the controller it is gone."""
        await self._flush()
        await self._note_time(timestamp_ms)

    async def _note_time(self, timestamp_ms: int) -> None:
        async with self._lock:
            position = {sink.segment.segment_id: sink.writer.write_offset for sink in self._sinks.values()}
        cut = StreamCut(self.scope, self.stream, {s: o for s, o in position.items() if o >= 0})
        await self._controller_call(
            lambda: self._controller.note_timestamp_from_writer(str(self.writer_id), cut, timestamp_ms)
        )
        self._noted = True

    async def close(self) -> None:
        """Flush, then end every segment session. Raises the writer's failure if it failed. Idempotent."""
        if self._closed:
            return
        error: BaseException | None = None
        try:
            if self._failure is None:
                await self.flush()
            if self._noted:
                await self._controller_call(
                    lambda: self._controller.remove_writer(self.scope, self.stream, str(self.writer_id))
                )
        except Exception as exc:
            error = exc
        self._closed = True
        async with self._lock:
            for sink in list(self._sinks.values()):
                await _close_quietly(sink.writer)
            self._sinks.clear()
            self._key_sinks.clear()
        for task in list(self._tasks):
            task.cancel()
        if error is None:
            error = self._failure
        if error is not None:
            raise error

    # ---- routing ------------------------------------------------------------------------------------------

    def _check_usable(self) -> None:
        if self._failure is not None:
            raise self._failure
        if self._closed:
            raise ClientClosedError(f"event writer {self.writer_id} on {self.scope}/{self.stream} is closed")

    async def _controller_call(self, call: Callable[[], Awaitable[_T]]) -> _T:
        return await self.config.controller_retry.call(call)

    async def _load(self) -> None:
        segments = await self._controller_call(lambda: self._controller.get_current_segments(self.scope, self.stream))
        if not segments:
            raise StreamSealedError(self.scope, self.stream)
        self._map = SegmentMap.of(segments)
        self._key_sinks.clear()

    def _sink_for(self, position: float) -> _Sink:
        assert self._map is not None
        segment = self._map.segment_for(position)
        sink = self._sinks.get(segment.segment_id)
        if sink is None:
            name = qualified_segment_name(self.scope, self.stream, segment.segment_id)
            writer = self._client.writer(name, session_writer_id(self.writer_id, name), self.config.segment_writer)
            sink = self._sinks[segment.segment_id] = _Sink(segment, name, writer)
            writer.set_listener(_SinkProgress(self, sink))
        return sink

    async def _route(self, data: bytes, routing_key: str | None, batch: Batch | None) -> Batch:
        """Hand an event to the session of its key's segment (called with the lock held). ``batch``: the
        batch of an event being moved; None for a new event, which joins the sink's open batch or starts one.
        """
        position = self._hasher.position(routing_key)
        while True:
            sink = self._sink_for(position)
            try:
                await sink.writer.put(data)
            except SegmentIsSealedError:
                await self._replace_sealed(sink)
                continue
            except Exception as error:
                self._fail(sink, error)
                raise
            return self._record(sink, sink.writer.last_event_number, data, routing_key, batch)

    def _record(self, sink: _Sink, number: int, data: bytes, routing_key: str | None, batch: Batch | None) -> Batch:
        """Keep an event the sink's session just queued as event ``number`` until it is stored; its batch. A new
        event joins the sink's open batch while it goes into the same block of the session as the batch's first
        one."""
        writer = sink.writer
        if batch is None:
            batch = sink.open_batch
            started = writer.writes_started
            if started != sink.writes_started or batch is None or batch.future.done():
                sink.writes_started = started
                batch = sink.open_batch = Batch(asyncio.get_running_loop().create_future())
            batch.remaining += 1
        sink.pending.add(number, data, routing_key, batch)
        turn = self._turn_bytes  # bytes routed in this turn of the event loop (inline: it runs per event)
        if not turn:
            asyncio.get_running_loop().call_soon(self._new_turn)
        turn += len(data)
        if turn >= self._send_point:
            turn = 0
            for each in self._sinks.values():
                each.writer.send_pending()
        self._turn_bytes = turn
        return batch

    # ---- acknowledgements and failures ----------------------------------------------------------------------

    def _release(self, sink: _Sink, stored_through: int | None = None) -> None:
        """Complete the pending events the segment stored (through ``stored_through`` if given)."""
        level = sink.writer.acked_event_number
        if stored_through is not None:
            level = max(level, stored_through)
        freed = sink.pending.release_through(level)
        if freed:
            self._freed(freed)

    def _session_failed(self, sink: _Sink, error: BaseException) -> None:
        """``sink``'s session failed (told by its listener, synchronously): follow a seal, else fail."""
        self._release(sink)
        if sink.replaced:
            return
        if isinstance(error, SegmentIsSealedError):
            if not sink.replacing:
                sink.replacing = True
                task = asyncio.get_running_loop().create_task(self._replace_in_background(sink))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        elif not isinstance(error, ClientClosedError):
            self._fail(sink, error)

    async def _replace_in_background(self, sink: _Sink) -> None:
        """Follow the seal; a retriable failure before anything moved (the sealed segment's container moving:
        WrongHost, a lost connection) is tried again with backoff, and a failure that ends it fails the writer
        (its pending events get the error) rather than leaving them pending for ever."""
        delay_s = 0.05
        for attempt in range(1, REPLACE_ATTEMPTS + 1):
            try:
                async with self._lock:
                    await self._replace_sealed(sink)
                return
            except asyncio.CancelledError:
                raise
            except Exception as error:
                if sink.replaced or self._failure is not None or not is_retriable(error) or attempt == REPLACE_ATTEMPTS:
                    _log.warning("event writer %s: following a scale of %s failed: %r", self.writer_id, sink.name,
                                 error)  # fmt: skip
                    if not sink.replaced:
                        self._fail(sink, error)
                    return
                _log.info("event writer %s: following a scale of %s: %r; trying again", self.writer_id, sink.name,
                          error)  # fmt: skip
            await asyncio.sleep(delay_s)
            delay_s = min(delay_s * 2, 2.0)

    def _fail(self, sink: _Sink | None, error: BaseException) -> None:
        """The writer is over: fail ``sink``'s pending events (other segments finish what they hold).

        A missing segment of the stream means the stream is gone: StreamNotFoundError (caused by it)."""
        if isinstance(error, NoSuchSegmentError):
            missing = StreamNotFoundError(self.scope, self.stream)
            missing.__cause__ = error
            error = missing
        if self._failure is None:
            self._failure = error
            _log.warning("event writer %s on %s/%s failed: %r", self.writer_id, self.scope, self.stream, error)
        self._freed(sink.pending.fail_all(error) if sink is not None else 0)
        if self._room is not None and not self._room.done():
            self._room.set_result(None)  # a waiting write_event raises the failure

    async def _stored_through(self, sink: _Sink) -> int | None:
        """The last event number the sealed segment stored for this writer id, read once the seal is
        committed (a committed seal implies every append before it is committed); None if the segment is
        gone. Raises SealNotConfirmedError (retriable) when the seal is not committed within
        ``seal_confirm_attempts``: resending every unacknowledged event then could write some twice."""
        for _ in range(self.config.seal_confirm_attempts):
            try:
                info = await self._client.get_segment_info(sink.name)
                if not info.exists:
                    return None
                if info.sealed:
                    value = await self._client.get_segment_attribute(sink.name, sink.writer.writer_id)
                    return -1 if value is None else value
            except NoSuchSegmentError:
                return None
            await asyncio.sleep(0.01)
        raise SealNotConfirmedError(f"{sink.name}: the seal is not committed yet; what it stored is not known")

    async def _replace_sealed(self, sink: _Sink) -> None:
        """``sink``'s segment is sealed: route its key range to the successors and resend (lock held)."""
        segment_id = sink.segment.segment_id
        if sink.replaced or self._sinks.get(segment_id) is not sink:
            return
        assert self._map is not None
        self._release(sink, await self._stored_through(sink))
        try:
            successors = await self._controller_call(
                lambda: self._controller.get_successors(self.scope, self.stream, segment_id)
            )
        except Exception as error:
            self._fail(sink, error)
            raise
        if not any(segment_id in preds for preds in successors.values()):
            sealed = StreamSealedError(self.scope, self.stream)
            self._fail(sink, sealed)
            raise sealed
        self._map = self._map.replace(segment_id, successors)
        sink.replaced = True
        del self._sinks[segment_id]
        self._key_sinks.clear()  # keys of the sealed segment route to its successors now
        resend = sink.pending.take_all()
        await _close_quietly(sink.writer)
        self.scales_followed += 1
        self.events_resent += len(resend)
        _log.info(
            "event writer %s: %s sealed, %d event(s) move to %s",
            self.writer_id, sink.name, len(resend), [s.segment_id for s in self._map.segments()],
        )  # fmt: skip
        for index, (data, routing_key, batch) in enumerate(resend):
            try:
                await self._route(data, routing_key, batch)
            except BaseException as error:  # the writer failed: so do the events not moved yet
                self._abandon(resend[index:], error)
                raise

    def _abandon(self, events: list[tuple[bytes, str | None, Batch]], error: BaseException) -> None:
        """Fail events held by no sink (being moved to successors) with ``error``."""
        failure = error if isinstance(error, Exception) else ClientClosedError(f"event writer stopped: {error!r}")
        for _, _, batch in events:
            batch.fail(failure)
        self._freed(sum(len(data) for data, _, _ in events))


async def _close_quietly(writer: SegmentWriter) -> None:
    """End a session whose outcome is handled elsewhere (a failed session re-raises its failure)."""
    with contextlib.suppress(Exception):
        await writer.close()


async def _all_of(futures: list[asyncio.Future[None]]) -> None:
    for future in futures:
        await future
