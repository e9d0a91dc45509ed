"""The segment container: one shard of the segment store (Pravega's StreamSegmentContainer).

A container owns a set of segments (those whose names hash to it) and runs, on
one event loop, the components that keep them: the durable log (Tier-1), the read
index and cache, the storage writer and Tier-2 segment storage. Every change is
an operation on the durable log; this class turns API calls into operations and
answers reads from the read index.

Lifecycle: :meth:`start` fences Tier-1 and replays it (metadata, read index,
operation log), opens Tier-2 (its journal, fenced by the same epoch), reconciles
the two, starts the storage writer, and only then serves. :meth:`stop` closes
everything. If Tier-1 or the storage writer fails, the container goes offline
(every call raises :class:`ContainerOfflineError`); the owner restarts it, which
recovers from Tier-1.

Guarantees (on top of the durable log's):
- a call returns only after its operation is durable; a failed call changed nothing;
- names resolve against the *pending* state, so an append right after an awaited
  create always finds the segment; reads and info see committed state only;
- appends wait (they are not failed) while more than ``max_unflushed_bytes`` are
  not yet in Tier-2 or the cache holds more than its budget of data not yet in
  Tier-2, so memory stays bounded when Tier-2 is slow or down.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from time import perf_counter
from typing import Any, cast

from segment_store.containers.config import ContainerConfig
from segment_store.logs.durable_log import DurableLog, LogState
from segment_store.logs.operations import (
    AppendOperation,
    DeleteOperation,
    MapSegmentOperation,
    MergeOperation,
    Operation,
    SealOperation,
    TruncateOperation,
    UpdateAttributesOperation,
)
from segment_store.metadata import ContainerMetadata, SegmentMetadata
from segment_store.metrics import NO_METRICS, StoreMetrics
from segment_store.reading.cache import CacheBudget
from segment_store.reading.event_starts import walk_to_event_start
from segment_store.reading.ingest_times import IngestTimeIndex
from segment_store.reading.read_index import ReadIndex, ReadResult
from segment_store.storage.journal.system_journal import SnapshotInfo, SnapshotInfoStore
from segment_store.storage.segment_storage import SegmentStorage
from segment_store.tier1.log import DurableDataLog
from segment_store.writer.storage_writer import StorageWriter, WriterListener
from segstore_shared.contracts import (
    NULL_ATTRIBUTE_VALUE,
    SLTS_LATEST_SNAPSHOT_EPOCH,
    SLTS_LATEST_SNAPSHOT_ID,
    AttributeUpdate,
    AttributeUpdateType,
    ContainerOfflineError,
    SegmentInfo,
    SegmentNotExistsError,
    SegmentSealedError,
    SegmentTruncatedError,
    SegmentType,
    ThrottledTimeoutError,
    TooLargeError,
)

log = logging.getLogger(__name__)

RECENT_MERGES = 10_000
StorageFactory = Callable[[int, SnapshotInfoStore], SegmentStorage]
"""``(container_id, snapshot_info_store) -> SegmentStorage`` for this container."""


class ContainerState(enum.Enum):
    NEW = "new"
    STARTING = "starting"
    RUNNING = "running"
    FAILED = "failed"
    STOPPED = "stopped"


@dataclass(frozen=True, slots=True)
class MergeResult:
    """``target_offset``: where the source's bytes start in the target; ``length``: how many."""

    target_offset: int
    length: int

    @property
    def target_length(self) -> int:
        return self.target_offset + self.length


def metadata_segment_name(container_id: int) -> str:
    """The container's own system segment (its attributes hold the Tier-2 journal's snapshot pointer)."""
    return f"_system/containers/metadata_{container_id}"


class SegmentContainer:
    """See module docstring."""

    def __init__(
        self,
        container_id: int,
        data_log: DurableDataLog,
        storage_factory: StorageFactory,
        config: ContainerConfig | None = None,
        cache: CacheBudget | None = None,
        metrics: StoreMetrics = NO_METRICS,
    ) -> None:
        """``cache``: the process's cache budget, shared with its other containers (None: one of its own,
        sized by ``config.cache``). ``metrics``: what to measure (appends, reads; default nothing)."""
        self.container_id = container_id
        self.config = config or ContainerConfig()
        self.state = ContainerState.NEW
        self.failure: BaseException | None = None
        self.metadata = ContainerMetadata(container_id)
        self.durable_log = DurableLog(self.metadata, data_log, self.config.durable_log)
        self.snapshot_info = ContainerSnapshotInfoStore(self)
        self.storage = storage_factory(container_id, self.snapshot_info)
        self._metrics = metrics
        self.read_index = ReadIndex(
            self.metadata, self.storage.read, cache or CacheBudget(self.config.cache), self.config.read_index, metrics
        )
        self.read_index.budget.on_room = self._cache_room
        self.writer = StorageWriter(
            self.metadata,
            self.durable_log.memory_log,
            self.storage,
            self.durable_log.truncate,
            self.config.writer,
            WriterListener(
                bytes_done=self._bytes_done,
                segment_removed=self.read_index.drop_segment,
                merge_completed=lambda target, _source: self.read_index.merge_completed(target),
                failed=self._fail,
            ),
        )
        self.durable_log.add_listener(self.read_index.on_committed)
        self.ingest_times = IngestTimeIndex(self.metadata)
        self.durable_log.add_listener(self.ingest_times.on_committed)
        self.durable_log.add_listener(self._count_replayed)
        self.durable_log.add_listener(self._remember_merges)
        self._recent_merges: OrderedDict[str, int] = OrderedDict()
        self.durable_log.add_failure_listener(self._fail)
        self._unflushed_bytes = 0
        self._room = asyncio.Event()
        self._room.set()
        self._failure_listeners: list[Callable[[BaseException], None]] = []

    # ---- lifecycle ------------------------------------------------------------------------------------------
    async def start(self) -> None:
        if self.state is not ContainerState.NEW:
            raise RuntimeError(f"container {self.container_id}: start() in state {self.state.value}")
        self.state = ContainerState.STARTING
        try:
            replayed = await self.durable_log.recover()
            self.durable_log.start()
            if self.metadata.get_by_name(metadata_segment_name(self.container_id)) is None:
                await self.durable_log.add(
                    MapSegmentOperation(name=metadata_segment_name(self.container_id), segment_type=SegmentType.SYSTEM)
                )
            await self.storage.open(self.durable_log.data_log.epoch)
            await self.writer.reconcile()
            self.writer.start()
        except BaseException:
            self.state = ContainerState.FAILED
            await self._close_components()
            raise
        self.state = ContainerState.RUNNING
        log.info(
            "container %s: started at epoch %s (%s operations replayed, %s segments)",
            self.container_id,
            self.durable_log.data_log.epoch,
            replayed,
            len(self.metadata),
        )

    async def stop(self) -> None:
        if self.state is ContainerState.STOPPED:
            return
        self.state = ContainerState.STOPPED
        await self._close_components()
        self._room.set()

    async def _close_components(self) -> None:
        await self.writer.stop()
        await self.durable_log.close()
        await self.storage.close()
        self.read_index.close()  # its cache leaves the process's budget

    def add_failure_listener(self, listener: Callable[[BaseException], None]) -> None:
        self._failure_listeners.append(listener)

    def _fail(self, exc: BaseException) -> None:
        if self.state in (ContainerState.FAILED, ContainerState.STOPPED):
            return
        self.state = ContainerState.FAILED
        self.failure = exc
        self._room.set()  # throttled appends wake up and see the container offline
        log.error("container %s: failed, going offline: %r", self.container_id, exc)
        for listener in self._failure_listeners:
            listener(exc)

    def _check_running(self) -> None:
        if self.state is not ContainerState.RUNNING:
            detail = f": {self.failure!r}" if self.failure is not None else ""
            raise ContainerOfflineError(f"container {self.container_id} is {self.state.value}{detail}")

    # ---- throttling -----------------------------------------------------------------------------------------
    def _count_replayed(self, ops: list[Operation]) -> None:
        if self.durable_log.state is LogState.NEW:  # recovery: replayed appends are not in Tier-2 yet
            self._unflushed_bytes += sum(len(op.data) for op in ops if isinstance(op, AppendOperation))

    def _bytes_done(self, count: int) -> None:
        self._unflushed_bytes -= count
        if self.read_index.budget.needs_eviction:
            self.read_index.evict()
        if not self._must_throttle():
            self._room.set()

    def _cache_room(self) -> None:
        """The shared cache is no longer over budget (maybe thanks to another container's eviction)."""
        if not self._must_throttle():
            self._room.set()

    def _must_throttle(self) -> bool:
        return self._unflushed_bytes > self.config.max_unflushed_bytes or self.read_index.budget.over_budget

    @property
    def unflushed_bytes(self) -> int:
        return self._unflushed_bytes

    async def _throttle(self) -> None:
        if self._must_throttle():
            self._metrics.throttled()
        while self._must_throttle() and self.state is ContainerState.RUNNING:
            self._room.clear()
            await self._room.wait()
        self._check_running()

    # ---- operations -----------------------------------------------------------------------------------------
    def _pending_segment(self, name: str) -> SegmentMetadata:
        segment = self.durable_log.updater.segment_by_name(name)
        if segment is None:
            raise SegmentNotExistsError(name)
        return segment

    def _committed_segment(self, name: str) -> SegmentMetadata:
        segment = self.metadata.get_by_name(name)
        if segment is None:
            raise SegmentNotExistsError(name)
        return segment

    async def _run(self, op: Operation) -> Any:
        self._check_running()
        return await self.durable_log.add(op)

    async def create_segment(
        self, name: str, segment_type: SegmentType = SegmentType.STREAM, attributes: dict[int, int] | None = None
    ) -> None:
        """Create a segment. Raises SegmentExistsError."""
        if not name or len(name.encode()) > self.config.max_segment_name_bytes:
            raise ValueError(f"segment name must be 1..{self.config.max_segment_name_bytes} bytes: {name!r}")
        values = {k: v for k, v in (attributes or {}).items() if v != NULL_ATTRIBUTE_VALUE}
        await self._await_namesake_removal(name)
        await self._run(MapSegmentOperation(name=name, segment_type=segment_type, attributes=values))

    async def _await_namesake_removal(self, name: str) -> None:
        """Tier-2 names segments by name: a deleted/merged namesake must leave Tier-2 before ``name`` is reused.

        So the log never holds a new segment's creation before the Tier-2 removal of the old one,
        which is what lets recovery tell the two apart (see the storage writer).
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.namesake_removal_timeout_s
        while self.durable_log.updater.name_freed_in_flight(name) or self.metadata.has_dead(name):
            self._check_running()
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise ThrottledTimeoutError(
                    f"{name}: a deleted segment of this name is still being removed from Tier-2; retry later"
                )
            if self.durable_log.updater.name_freed_in_flight(name):
                await asyncio.sleep(min(0.005, remaining))
                continue
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await self.writer.flush_all()

    async def append(
        self,
        name: str,
        data: bytes,
        attribute_updates: Sequence[AttributeUpdate] = (),
        expected_offset: int | None = None,
    ) -> int:
        """Append durably; returns the offset ``data`` starts at.

        Raises SegmentNotExistsError, SegmentSealedError, BadOffsetError (``expected_offset`` is
        not the length), BadAttributeUpdateError, TooLargeError, ContainerOfflineError.
        """
        await self.wait_for_room()
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        def done(op: AppendOperation | None, error: BaseException | None) -> None:
            if future.done():
                return
            if error is not None:
                future.set_exception(error)
            else:
                assert op is not None
                future.set_result(op.offset)

        self.submit_append(name, data, done, attribute_updates, expected_offset)
        return await future

    async def wait_for_room(self) -> None:
        """Wait while appends are throttled (Tier-2 lags); raises ContainerOfflineError."""
        await self._throttle()

    @property
    def throttled(self) -> bool:
        """Whether :meth:`wait_for_room` would wait now."""
        return self._must_throttle()

    def submit_append(
        self,
        name: str,
        data: bytes | memoryview,
        done: Callable[[AppendOperation | None, BaseException | None], None],
        attribute_updates: Sequence[AttributeUpdate] = (),
        expected_offset: int | None = None,
    ) -> None:
        """Queue an append *now*, without waiting for room; appends submitted in order are applied in order.

        For callers that must keep order across many appends (the wire server); they call
        :meth:`wait_for_room` before submitting. ``done(op, None)`` is called (synchronously, from the
        durable log) with the durable operation (its ``offset``), or ``done(None, error)`` with what
        :meth:`append` raises; errors known at once (a missing segment, an oversize append, an offline
        container) raise here instead.
        """
        if len(data) > self.config.max_append_bytes:
            raise TooLargeError(f"{name}: append of {len(data)} bytes exceeds {self.config.max_append_bytes}")
        self._check_running()
        segment = self._pending_segment(name)
        op = AppendOperation(
            segment_id=segment.segment_id,
            data=data,
            attribute_updates=tuple(attribute_updates),
            expected_offset=-1 if expected_offset is None else expected_offset,
        )
        size = len(data)
        self._unflushed_bytes += size
        started = perf_counter()

        def completed(result: Operation | None, error: BaseException | None) -> None:
            if error is not None:
                self._bytes_done(size)
            else:
                self._metrics.appended(size, perf_counter() - started)
                if self._must_throttle():
                    self._room.clear()
            done(cast(AppendOperation | None, result), error)  # the log completes an op with itself

        self.durable_log.add_then(op, completed)

    async def read(self, name: str, offset: int, max_length: int, timeout_s: float = 0.0) -> ReadResult:
        """Up to ``max_length`` committed bytes at ``offset``; at the tail waits up to ``timeout_s``."""
        self._check_running()
        return await self.read_index.read(self._committed_segment(name).segment_id, offset, max_length, timeout_s)

    async def get_info(self, name: str) -> SegmentInfo:
        self._check_running()
        return self._committed_segment(name).info()

    async def offset_at_time(self, name: str, timestamp_ms: int) -> int:
        """The offset of the first event (in offset order, from the start offset) ingested at or after
        ``timestamp_ms``, or the length if every event is older. Exact: the Tier-2 part is searched in its
        chunks' ``ingest_time_ms`` column, the rest in :class:`IngestTimeIndex`; a merged transaction's events
        carry its merge time (one merged by an older version that logged no time, not yet in Tier-2, counts as
        possibly at or after any time: the answer is no later than its start).
        Raises SegmentNotExistsError."""
        self._check_running()
        for attempt in range(3):
            segment = self._committed_segment(name)
            length = segment.length
            if segment.last_modified_ms < timestamp_ms:
                return length
            start = segment.start_offset
            tier2_end = max(start, segment.storage_length)
            in_memory = self.ingest_times.find(segment.segment_id, timestamp_ms, tier2_end)
            if in_memory.older_before or tier2_end == start:
                return length if in_memory.offset is None else in_memory.offset
            try:
                found = await self.storage.first_ingested_at_or_after(name, start, tier2_end, timestamp_ms)
            except SegmentTruncatedError:
                if attempt == 2:
                    raise
                continue  # truncated meanwhile: look again from the new start
            if found is not None:
                return found
            return length if in_memory.offset is None else in_memory.offset
        raise AssertionError("unreachable")

    async def end_offset_before_time(self, name: str, timestamp_ms: int) -> int | None:
        """The least offset (an event start) from which every event of the segment up to its length was ingested
        at or after ``timestamp_ms``: a read of the events ingested before it may stop there (the segment's start
        if none was). Exact: above the storage length :class:`IngestTimeIndex` (times never decrease there), below
        it the chunks' time bounds and ``ingest_time_ms``. None when it cannot tell: Tier-2 chunks without time
        bounds (written before they were recorded), a merge logged without its time, or a truncation meanwhile.
        Raises SegmentNotExistsError."""
        self._check_running()
        segment = self._committed_segment(name)
        length, start = segment.length, segment.start_offset
        if segment.last_modified_ms < timestamp_ms:
            return length
        tier2_end = max(start, segment.storage_length)
        in_memory = self.ingest_times.end_before(segment.segment_id, timestamp_ms, tier2_end, length)
        if not in_memory.known or in_memory.offset is not None:
            return in_memory.offset
        if tier2_end == start:
            return start
        try:
            return await self.storage.end_before_time(name, start, tier2_end, timestamp_ms)
        except SegmentTruncatedError:
            return None

    async def ingest_time_runs(
        self, name: str, start: int, end: int, max_runs: int
    ) -> tuple[int, list[tuple[int, int]]]:
        """``(answered_end, runs)``: the ingestion times of the events in ``[start, end)`` as ``(offset, ms)`` runs
        (the first at ``start``, consecutive ones differing), covering ``[start, answered_end)`` with at most
        ``max_runs`` runs; ``answered_end`` is at most ``end`` and the length. Below the storage length the
        chunks' ``ingest_time_ms`` answer, above it :meth:`IngestTimeIndex.runs` (its rule for merged
        transactions). Raises SegmentNotExistsError, SegmentTruncatedError."""
        self._check_running()
        segment = self._committed_segment(name)
        if start < segment.start_offset:
            raise SegmentTruncatedError(name, segment.start_offset, start)
        end = min(end, segment.length)
        tier2_end = max(segment.start_offset, segment.storage_length)
        # the in-memory part first: the index may be trimmed while Tier-2 is read
        above = self.ingest_times.runs(segment.segment_id, max(start, tier2_end), end, segment.last_modified_ms)
        below = await self.storage.ingest_runs(name, start, min(end, tier2_end), max_runs) if start < tier2_end else []
        if below and above and below[-1][1] == above[0][1]:
            del above[0]
        runs = below + above
        if len(runs) > max_runs:
            return runs[max_runs][0], runs[:max_runs]
        return max(start, end), runs

    async def event_start_at_or_after(self, name: str, offset: int) -> int:
        """The offset of the first event that starts at or after ``offset`` (Pravega's ``LocateOffset``: an event
        boundary at or after it; exact here): the segment's start offset for an offset at or below it, its length
        for one past its last event start. Below the storage length the event rows of the Tier-2 chunks answer;
        above it the frames are walked from the closest known event start (:mod:`segment_store.reading.event_starts`).
        Raises SegmentNotExistsError, SegmentTruncatedError (truncated meanwhile), InvalidOffsetError (not events)."""
        self._check_running()
        segment = self._committed_segment(name)
        start, length = segment.start_offset, segment.length
        if offset <= start:
            return start
        if offset >= length:
            return length
        tier2_end = max(start, segment.storage_length)
        if offset < tier2_end:
            found = await self.storage.first_event_at_or_after(name, offset, tier2_end)
            return tier2_end if found is None else found
        known = self.ingest_times.append_start_at_or_before(segment.segment_id, offset)
        base = tier2_end if known is None else max(tier2_end, known)

        async def read(at: int, size: int) -> bytes:
            return (await self.read(name, at, size)).data

        return await walk_to_event_start(name, read, base, offset, length)

    def length(self, name: str) -> int:
        """The committed length of ``name`` (cheap: no copy of its info). Raises SegmentNotExistsError."""
        return self._committed_segment(name).length

    async def get_attributes(self, name: str, attribute_ids: Sequence[int]) -> dict[int, int]:
        """Values of ``attribute_ids`` (NULL_ATTRIBUTE_VALUE when not set)."""
        self._check_running()
        attributes = self._committed_segment(name).attributes
        return {a: attributes.get(a, NULL_ATTRIBUTE_VALUE) for a in attribute_ids}

    async def update_attributes(self, name: str, updates: Sequence[AttributeUpdate]) -> None:
        """Raises BadAttributeUpdateError (a condition failed; nothing changed), SegmentSealedError."""
        segment = self._pending_segment(name)
        await self._run(UpdateAttributesOperation(segment_id=segment.segment_id, attribute_updates=tuple(updates)))

    async def seal(self, name: str) -> int:
        """Seal; returns the final length. Raises SegmentSealedError if already sealed."""
        segment = self._pending_segment(name)
        done: SealOperation = await self._run(SealOperation(segment_id=segment.segment_id))
        return done.length

    async def truncate(self, name: str, offset: int) -> None:
        """Raise the start offset to ``offset``. Raises InvalidOffsetError beyond the length."""
        segment = self._pending_segment(name)
        await self._run(TruncateOperation(segment_id=segment.segment_id, offset=offset))

    async def delete_segment(self, name: str) -> None:
        segment = self._pending_segment(name)
        await self._run(DeleteOperation(segment_id=segment.segment_id))

    async def merge(self, target: str, source: str, attribute_updates: Sequence[AttributeUpdate] = ()) -> MergeResult:
        """Seal ``source`` (if needed) and append it to ``target``; ``source`` is gone afterwards.

        ``attribute_updates`` apply to the target atomically with the merge; if one of their
        conditions fails (BadAttributeUpdateError) nothing is merged (the source stays sealed).
        """
        source_segment = self._pending_segment(source)
        target_segment = self._pending_segment(target)
        if not source_segment.sealed:
            with contextlib.suppress(SegmentSealedError):  # sealed meanwhile: fine
                await self._run(SealOperation(segment_id=source_segment.segment_id))
        done: MergeOperation = await self._run(
            MergeOperation(
                segment_id=target_segment.segment_id,
                source_id=source_segment.segment_id,
                attribute_updates=tuple(attribute_updates),
            )
        )
        return MergeResult(done.target_offset, done.length)

    async def flush_to_storage(self) -> None:
        """Wait until everything acknowledged so far is in Tier-2."""
        self._check_running()
        await self.writer.flush_all()

    def was_merged(self, name: str) -> bool:
        """``name`` was merged into another segment recently (answers retried merges idempotently).

        Remembered for the last :data:`RECENT_MERGES` merges committed or replayed by this instance.
        """
        return name in self._recent_merges or any(s.merged for s in self.metadata.dead_segments(name))

    def _remember_merges(self, ops: list[Operation]) -> None:
        for op in ops:
            if isinstance(op, MergeOperation):
                source = self.metadata.get(op.source_id)
                if source is not None:
                    self._recent_merges[source.name] = op.segment_id
                    while len(self._recent_merges) > RECENT_MERGES:
                        self._recent_merges.popitem(last=False)

    def segment_names(self) -> list[str]:
        return [s.name for s in self.metadata.segments() if s.live]


class ContainerSnapshotInfoStore:
    """The Tier-2 journal's snapshot pointer, kept as two core attributes of the container's metadata segment.

    Saving goes through the fenced durable log, so only the container's current owner can move it.
    """

    def __init__(self, container: SegmentContainer) -> None:
        self._container = container

    def _segment(self) -> SegmentMetadata | None:
        return self._container.metadata.get_by_name(metadata_segment_name(self._container.container_id))

    async def load(self) -> SnapshotInfo | None:
        segment = self._segment()
        if segment is None:
            return None
        epoch = segment.attributes.get(SLTS_LATEST_SNAPSHOT_EPOCH)
        snapshot_id = segment.attributes.get(SLTS_LATEST_SNAPSHOT_ID)
        if epoch is None or snapshot_id is None:
            return None
        return SnapshotInfo(epoch, snapshot_id)

    async def save(self, info: SnapshotInfo) -> None:
        segment = self._segment()
        if segment is None:
            raise SegmentNotExistsError(metadata_segment_name(self._container.container_id))
        await self._container.durable_log.add(
            UpdateAttributesOperation(
                segment_id=segment.segment_id,
                attribute_updates=(
                    AttributeUpdate(SLTS_LATEST_SNAPSHOT_EPOCH, AttributeUpdateType.REPLACE, info.epoch),
                    AttributeUpdate(SLTS_LATEST_SNAPSHOT_ID, AttributeUpdateType.REPLACE, info.snapshot_id),
                ),
            )
        )
