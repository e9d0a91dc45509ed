"""The storage writer of one container: moves committed operations from Tier-1 to Tier-2.

It reads the in-memory operation log in sequence order, hands each storage
operation to its segment's :class:`~segment_store.writer.aggregator.SegmentAggregator`,
flushes aggregators when they are due (size, age, or a seal/truncate/merge/delete
waiting behind appends), records Tier-2 progress in the container metadata
(``storage_length``, ``sealed_in_storage``; merged and deleted segments are
forgotten), and then lets Tier-1 truncate below the oldest operation not yet in
Tier-2.

Guarantees:
- per segment, Tier-2 applies operations in log order; across segments a merge
  waits for its source and a new segment waits for a deleted namesake;
- so after a restart, a deleted or merged segment whose name a newer segment holds
  (both replayed) is out of Tier-2 already: nothing is written, sealed, deleted or
  checked in Tier-2 for it, and a replayed merge of it counts as done;
- :meth:`StorageWriter.truncation_sequence` never passes an operation that is not
  durably in Tier-2, so Tier-1 keeps everything recovery needs;
- retriable Tier-2 failures (an outage) are retried with backoff for as long as
  they last; nothing is dropped. Anything else stops the writer and calls the
  failure callback (the container goes offline and recovers on restart).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from segment_store.logs.memory_log import InMemoryOperationLog
from segment_store.logs.operations import MapSegmentOperation, MergeOperation, Operation, SegmentOperation
from segment_store.metadata import ContainerMetadata, SegmentMetadata
from segment_store.storage.segment_storage import SegmentStorage
from segment_store.writer.aggregator import SegmentAggregator, SegmentTarget, StorageWriterCorruptedError
from segment_store.writer.config import WriterConfig
from segstore_shared.contracts import SegmentNotExistsError
from segstore_shared.errors import SegstoreError
from segstore_shared.loop_stalls import ACTIVITY

log = logging.getLogger(__name__)

Truncator = Callable[[int], Awaitable[object]]


@dataclass(slots=True)
class WriterListener:
    """Callbacks the container gives the writer (all optional)."""

    bytes_done: Callable[[int], None] = lambda n: None
    """Appended bytes that no longer need Tier-1/cache (flushed, found in Tier-2, or of a deleted segment)."""
    segment_removed: Callable[[int], None] = lambda segment_id: None
    """A deleted or merged segment is gone from Tier-2 (the read index drops it)."""
    merge_completed: Callable[[int, int], None] = lambda target_id, source_id: None
    failed: Callable[[BaseException], None] = lambda exc: None


def framing_of(segment: SegmentMetadata) -> str:
    return "events" if segment.segment_type.holds_events else "raw"


class StorageWriter:
    """See module docstring. :meth:`start` after the container recovered; :meth:`stop` to end."""

    def __init__(
        self,
        metadata: ContainerMetadata,
        operation_log: InMemoryOperationLog,
        storage: SegmentStorage,
        truncate_tier1: Truncator,
        config: WriterConfig | None = None,
        listener: WriterListener | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.metadata = metadata
        self.config = config or WriterConfig()
        self._log = operation_log
        self._storage = storage
        self._truncate_tier1 = truncate_tier1
        self._listener = listener or WriterListener()
        self._clock = clock
        self._aggregators: dict[int, SegmentAggregator] = {}
        self._busy: dict[int, SegmentAggregator] = {}
        """The aggregators that may have operations queued (a superset of the pending ones): what each iteration
        looks at, so its cost follows the segments being written, not every segment the container has."""
        first = operation_log.read_now(-1, 1)
        self._last_read = first[0].sequence_number - 1 if first else metadata.sequence_number
        self._truncated_below = -1
        self._flush_waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._wake = asyncio.Event()
        self._iteration_started = float("-inf")  # loop time
        self._task: asyncio.Task[None] | None = None
        self._semaphore = asyncio.Semaphore(self.config.max_concurrent_flushes)
        self._retry_delay = 0.0
        self.failure: BaseException | None = None
        self._stopping = False
        self.flushed_bytes = 0
        self.flush_count = 0

    # ---- AggregatorHost -------------------------------------------------------------------------------------
    def aggregator(self, segment_id: int) -> SegmentAggregator:
        agg = self._aggregators.get(segment_id)
        if agg is None:
            segment = self.metadata.get(segment_id)
            if segment is None:
                raise SegmentNotExistsError(f"#{segment_id}")
            target = SegmentTarget(segment_id, segment.name, framing_of(segment))  # type: ignore[arg-type]
            agg = self._aggregators[segment_id] = SegmentAggregator(
                target, self._storage, self, self.config, self._clock
            )
        return agg

    def on_flushed(self, segment_id: int, storage_length: int, bytes_done: int) -> None:
        segment = self.metadata.get(segment_id)
        if segment is not None:
            segment.storage_length = max(segment.storage_length, min(storage_length, segment.length))
        self.flushed_bytes += bytes_done
        self.flush_count += 1
        self._listener.bytes_done(bytes_done)

    def on_sealed(self, segment_id: int) -> None:
        segment = self.metadata.get(segment_id)
        if segment is not None:
            segment.sealed_in_storage = True

    def on_merged(self, target_id: int, source_id: int, storage_length: int) -> None:
        target = self.metadata.get(target_id)
        if target is not None:
            target.storage_length = max(target.storage_length, min(storage_length, target.length))
        source = self._aggregators.pop(source_id, None)
        self._busy.pop(source_id, None)
        self.metadata.remove(source_id)
        self._listener.merge_completed(target_id, source_id)
        if source is not None:
            self._listener.bytes_done(source.discard())
        self._listener.segment_removed(source_id)

    def is_gone(self, segment_id: int) -> tuple[bool, bool]:
        segment = self.metadata.get(segment_id)
        if segment is None:
            return True, False
        return segment.deleted, segment.merged

    def superseded(self, name: str, segment_id: int) -> bool:
        return self.metadata.has_newer_namesake(name, segment_id)

    def on_deleted(self, segment_id: int, bytes_dropped: int) -> None:
        self.metadata.remove(segment_id)
        self._aggregators.pop(segment_id, None)
        self._busy.pop(segment_id, None)
        self._listener.bytes_done(bytes_dropped)
        self._listener.segment_removed(segment_id)

    # ---- lifecycle ------------------------------------------------------------------------------------------
    async def reconcile(self) -> None:
        """Align the recovered metadata with Tier-2 (call once, after recovery, before :meth:`start`).

        Sets every segment's ``storage_length``/``sealed_in_storage`` from Tier-2 (a checkpoint
        may predate flushes), and finishes deletions and merges whose operations Tier-1 no
        longer holds (their metadata outlived them in a checkpoint); the source of a merge Tier-1 still holds stays
        for it to be replayed. A deleted or merged segment
        whose name was created again later (both replayed) is not compared with Tier-2: Tier-2's
        segment of that name is the newer one's (see ``ContainerMetadata.has_newer_namesake``).
        """
        replayed = self._log.read_now(-1, len(self._log))
        pending_ids = {op.segment_id for op in replayed if isinstance(op, SegmentOperation)}
        # A merge still in the log needs its source, even when Tier-1 no longer holds any operation of the source
        # itself (sealed and flushed before a truncation, merged after it): the merge is replayed from its metadata.
        pending_ids |= {op.source_id for op in replayed if isinstance(op, MergeOperation)}
        pending_names = {op.name for op in replayed if isinstance(op, MapSegmentOperation)}
        for segment in list(self.metadata.segments()):
            if not segment.live and segment.segment_id not in pending_ids:
                reused = self.metadata.get_by_name(segment.name) is not None or segment.name in pending_names
                if segment.deleted and not reused and await self._storage.exists(segment.name):
                    await self._storage.delete(segment.name)  # deleted in the log, not yet in Tier-2
                self.metadata.remove(segment.segment_id)
                self._listener.segment_removed(segment.segment_id)
                continue
            if not segment.live and self.superseded(segment.name, segment.segment_id):
                continue  # out of Tier-2 before its namesake was created; its replayed operations touch nothing
            try:
                info = await self._storage.info(segment.name)
            except SegmentNotExistsError:
                continue
            if info.length > segment.length:
                raise StorageWriterCorruptedError(
                    f"{segment.name}: Tier-2 holds {info.length} bytes, the log only {segment.length}"
                )
            segment.storage_length = info.length
            segment.sealed_in_storage = info.sealed

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"storage-writer-{self.metadata.container_id}")

    async def stop(self) -> None:
        self._stopping = True
        if self._task is not None:
            self._log.wake()
            self._wake.set()
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        self._fail_waiters(SegstoreError("storage writer stopped"))

    async def flush_all(self) -> None:
        """Wait until every operation committed so far is in Tier-2 (``FlushToStorage``)."""
        if self.failure is not None:
            raise SegstoreError(f"storage writer failed: {self.failure!r}")
        target = self._log.last_sequence
        if target <= self._last_read and not any(
            (s := a.lowest_sequence) is not None and s <= target for a in self._busy.values()
        ):
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._flush_waiters.append((target, future))
        self._wake.set()
        self._log.wake()  # an idle writer waits on the operation log
        await future

    @property
    def pending_segments(self) -> int:
        """How many segments have operations not yet applied to Tier-2."""
        return sum(1 for a in self._busy.values() if a.pending)

    @property
    def truncation_sequence(self) -> int:
        """Every storage operation with a smaller sequence number is in Tier-2."""
        lowest = [s for a in self._busy.values() if (s := a.lowest_sequence) is not None]
        return min(lowest) if lowest else self._last_read + 1

    # ---- loop -----------------------------------------------------------------------------------------------
    async def _run(self) -> None:
        try:
            while not self._stopping:
                await self._iteration()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            self.failure = exc
            log.error("container %s: storage writer failed: %r", self.metadata.container_id, exc, exc_info=exc)
            self._fail_waiters(SegstoreError(f"storage writer failed: {exc!r}"))
            self._listener.failed(exc)

    async def _iteration(self) -> None:
        await self._pace()
        ops = await self._log.read(self._last_read, self.config.max_read_count, self._wait_time())
        for op in ops:
            await self._route(op)
        if ops:
            self._last_read = ops[-1].sequence_number
            self._log.truncate(self._last_read + 1)  # the aggregators hold what is not in Tier-2 yet
        force_until = max((t for t, _ in self._flush_waiters), default=-1)
        if self._retry_delay > 0:
            await self._sleep_or_wake(self._retry_delay)
        try:
            await self._flush(force_until)
        except SegstoreError as exc:
            self._retry_delay = self._next_retry(exc, self._retry_delay)
            for agg in self._aggregators.values():
                agg.storage_length = None  # resync before the next attempt
            return
        self._retry_delay = 0.0
        self._resolve_waiters()
        below = self.truncation_sequence
        if below > self._truncated_below:
            self._truncated_below = below
            await self._truncate_tier1(below)

    async def _pace(self) -> None:
        """Let ``min_iteration_interval_s`` pass since the previous iteration started (a flush request cuts it)."""
        loop = asyncio.get_running_loop()
        rest = self._iteration_started + self.config.min_iteration_interval_s - loop.time()
        if rest > 0 and not self._flush_waiters:
            await self._sleep_or_wake(rest)
        self._iteration_started = loop.time()

    def _wait_time(self) -> float:
        if self._flush_waiters:
            return 0.0
        now = self._clock()
        dues = [d for a in self._busy.values() if (d := a.due_in(now)) is not None]
        return min([self.config.flush_max_age_s, *dues]) if dues else self.config.flush_max_age_s

    async def _sleep_or_wake(self, delay: float) -> None:
        self._wake.clear()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(delay):
                await self._wake.wait()

    async def _route(self, op: Operation) -> None:
        if isinstance(op, MapSegmentOperation):
            for agg in list(self._busy.values()):  # one with nothing queued is done with Tier-2
                if agg.target.name == op.name and agg.target.segment_id != op.segment_id:
                    await self._process_until_done(agg)  # a deleted/merged namesake leaves Tier-2 first
            return
        if not op.is_storage_operation:
            return
        assert isinstance(op, SegmentOperation)
        busy = self._busy.get(op.segment_id)
        if busy is None:
            busy = self._busy[op.segment_id] = self.aggregator(op.segment_id)
        busy.add(op)

    async def _process_until_done(self, agg: SegmentAggregator) -> None:
        delay = 0.0
        while True:
            try:
                await agg.process(force=True)
                return
            except SegstoreError as exc:
                delay = self._next_retry(exc, delay)
                agg.storage_length = None
                await asyncio.sleep(delay)

    def _next_retry(self, exc: SegstoreError, delay: float) -> float:
        """The (doubled, bounded) delay before retrying after ``exc``; re-raises what is not retriable."""
        if not exc.retriable:
            raise exc
        delay = min(self.config.retry_max_delay_s, max(self.config.retry_min_delay_s, delay * 2))
        log.warning("container %s: Tier-2 unavailable, retrying in %.2fs: %r", self.metadata.container_id, delay, exc)
        return delay

    async def _flush(self, force_until: int) -> None:
        self._forget_idle()
        now = self._clock()
        due = [
            a
            for a in self._busy.values()
            if a.pending and (a.due_in(now) == 0.0 or (force_until >= 0 and (a.lowest_sequence or 0) <= force_until))
        ]
        if not due:
            return

        async def run(agg: SegmentAggregator) -> None:
            async with self._semaphore:
                await agg.process(force=force_until >= 0)

        started = time.perf_counter()
        results = await asyncio.gather(*(run(a) for a in due), return_exceptions=True)
        ACTIVITY.note("writer_flush", started, time.perf_counter())
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            fatal = [e for e in errors if not (isinstance(e, SegstoreError) and e.retriable)]
            raise fatal[0] if fatal else errors[0]

    def _forget_idle(self) -> None:
        """Drop the aggregators with nothing queued from the busy ones (they come back with their next operation)."""
        idle = [segment_id for segment_id, a in self._busy.items() if not a.pending]
        for segment_id in idle:
            del self._busy[segment_id]

    def _resolve_waiters(self) -> None:
        if not self._flush_waiters:
            return
        lowest = min([s for a in self._busy.values() if (s := a.lowest_sequence) is not None], default=None)
        keep = []
        for target, future in self._flush_waiters:
            if target <= self._last_read and (lowest is None or lowest > target):
                if not future.done():
                    future.set_result(None)
            else:
                keep.append((target, future))
        self._flush_waiters = keep

    def _fail_waiters(self, error: BaseException) -> None:
        waiters, self._flush_waiters = self._flush_waiters, []
        for _, future in waiters:
            if not future.done():
                future.set_exception(error)
