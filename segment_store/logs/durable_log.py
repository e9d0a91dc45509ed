"""The durable log of one segment container (Pravega's DurableLog + OperationProcessor).

Flow: :meth:`DurableLog.add` queues an operation and returns a future
(:meth:`DurableLog.add_then` takes a callback instead, called at once when the
operation is done: no future and no loop hop per operation). One
processor task takes everything queued, validates and completes each operation
against the pending metadata, gives it the next sequence number and packs it
into data frames; each full frame is written to Tier-1 at once, so several
frames are in flight. A completion task awaits the writes *in order*; when a
frame is durable, the operations whose last record it holds are applied to the
committed metadata, added to the in-memory operation log, handed to the
listeners (the read index), and only then their futures complete.

Guarantees:
- an operation's future completes successfully only after every frame holding
  it, and every frame before those, is durable in Tier-1;
- operations are committed, logged and acknowledged in sequence-number order,
  which is the order :meth:`add` was called in (for those that validate);
- a validation failure fails only that operation and changes nothing;
- a Tier-1 write failure fails every operation in flight and queued, rolls the
  pending metadata back, and puts the log in the failed state (it accepts nothing
  more; the container must be restarted, which recovers from Tier-1) -- so what
  the process believes and what Tier-1 holds never differ;
- Tier-1 is truncated only just before a durable metadata checkpoint, and only
  up to a sequence number the caller (the storage writer) says is in Tier-2, so
  recovery always starts from a checkpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from segment_store.logs.config import DurableLogConfig
from segment_store.logs.data_frame import DataFrame, DataFrameBuilder, OperationAssembler
from segment_store.logs.memory_log import InMemoryOperationLog
from segment_store.logs.metadata_updater import MetadataUpdater
from segment_store.logs.operations import AppendOperation, MetadataCheckpointOperation, Operation
from segment_store.metadata import ContainerMetadata, now_ms
from segment_store.tier1.log import DurableDataLog
from segstore_shared.contracts import ContainerOfflineError
from segstore_shared.errors import SegstoreError
from segstore_shared.loop_stalls import ACTIVITY

log = logging.getLogger(__name__)


class DurableLogCorruptedError(SegstoreError):
    """Tier-1 holds a log this durable log cannot recover (it does not start at a checkpoint)."""


class LogState(enum.Enum):
    NEW = "new"
    RUNNING = "running"
    FAILED = "failed"
    CLOSED = "closed"


@dataclass(slots=True)
class _CheckpointStart:
    sequence_number: int


@dataclass(slots=True)
class _TruncationPoint:
    checkpoint_sequence: int
    address: Any  # the Tier-1 address just before the checkpoint's first frame (None: log start)


Listener = Callable[[list[Operation]], None]
Done = Callable[[Operation | None, BaseException | None], None]
"""``done(op, None)`` once ``op`` is durable, or ``done(None, error)``."""


class _Callback:
    """The part of a future the log uses, completed by calling ``done`` synchronously, once."""

    __slots__ = ("_done",)

    def __init__(self, done: Done) -> None:
        self._done: Done | None = done

    def done(self) -> bool:
        return self._done is None

    def set_result(self, op: Operation) -> None:
        self._call(op, None)

    def set_exception(self, error: BaseException) -> None:
        self._call(None, error)

    def _call(self, op: Operation | None, error: BaseException | None) -> None:
        done, self._done = self._done, None
        if done is None:
            return
        try:
            done(op, error)
        except Exception:  # a caller's bug must not take the log down
            log.exception("completion callback of operation %s failed", op)


_Waiter = asyncio.Future[Operation] | _Callback


class DurableLog:
    """See module docstring. Create, :meth:`recover`, then :meth:`start`; :meth:`close` to stop."""

    def __init__(
        self,
        metadata: ContainerMetadata,
        data_log: DurableDataLog,
        config: DurableLogConfig | None = None,
        clock_ms: Callable[[], int] = now_ms,
    ) -> None:
        self.config = config or DurableLogConfig()
        self.metadata = metadata
        self.data_log = data_log
        self.updater = MetadataUpdater(metadata, clock_ms)
        self.memory_log = InMemoryOperationLog()
        self.state = LogState.NEW
        self.failure: BaseException | None = None
        self._listeners: list[Listener] = []
        self._failure_listeners: list[Callable[[BaseException], None]] = []
        self._queue: deque[tuple[Operation, _Waiter | None]] = deque()
        self._queue_event = asyncio.Event()
        self._in_flight: deque[tuple[DataFrame, asyncio.Future[Any]]] = deque()
        self._in_flight_event = asyncio.Event()
        self._room_event = asyncio.Event()
        self._futures: dict[int, _Waiter] = {}
        self._builder = DataFrameBuilder(self.config.max_frame_bytes, self._write_frame)
        self._sequence = metadata.sequence_number
        self._last_address: Any = None
        self._checkpoint_prev: dict[int, Any] = {}
        self._truncation_points: deque[_TruncationPoint] = deque()
        self._commits_since_checkpoint = 0
        self._bytes_since_checkpoint = 0
        self._checkpoint_queued = False
        self._tasks: list[asyncio.Task[None]] = []

    # ---- listeners ------------------------------------------------------------------------------------------
    def add_listener(self, listener: Listener) -> None:
        """``listener(ops)`` is called with each batch of committed operations, in order, before they are acked."""
        self._listeners.append(listener)

    def add_failure_listener(self, listener: Callable[[BaseException], None]) -> None:
        self._failure_listeners.append(listener)

    # ---- recovery -------------------------------------------------------------------------------------------
    async def recover(self) -> int:
        """Fence Tier-1, replay it into metadata, memory log and listeners; returns the operations replayed."""
        if self.state is not LogState.NEW:
            raise RuntimeError(f"recover() in state {self.state.value}")
        await self.data_log.initialize()
        assembler = OperationAssembler()
        replayed = 0
        first = True
        previous_address: Any = None
        async for address, entry in self.data_log.read():
            batch: list[Operation] = []
            for op, start_prev in assembler.add_frame(entry, tag=previous_address):
                if first:
                    first = False
                    if isinstance(op, MetadataCheckpointOperation):
                        snapshot = ContainerMetadata.from_snapshot(op.snapshot, self.metadata.container_id)
                        self.metadata.replace_with(snapshot)
                    elif op.sequence_number != 1:
                        raise DurableLogCorruptedError(
                            f"container {self.metadata.container_id}: Tier-1 starts at operation "
                            f"{op.sequence_number}, which is not a checkpoint"
                        )
                if op.sequence_number <= self.metadata.sequence_number and not isinstance(
                    op, MetadataCheckpointOperation
                ):
                    raise DurableLogCorruptedError(f"operation {op.sequence_number} is out of order")
                if isinstance(op, MetadataCheckpointOperation):
                    self._truncation_points.append(_TruncationPoint(op.sequence_number, start_prev))
                    self.metadata.sequence_number = max(self.metadata.sequence_number, op.sequence_number)
                else:
                    self.updater.accept(op)
                    batch.append(op)
                self._count_toward_checkpoint(op)
                replayed += 1
            previous_address = address
            if batch:
                self.memory_log.append(batch)
                for listener in self._listeners:
                    listener(batch)
        self._last_address = previous_address
        self._sequence = self.metadata.sequence_number
        self.metadata.epoch = self.data_log.epoch
        self.updater.rollback()  # pending view == recovered state
        return replayed

    # ---- running --------------------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the processor and completion tasks (after :meth:`recover`)."""
        if self.state is not LogState.NEW:
            raise RuntimeError(f"start() in state {self.state.value}")
        self.state = LogState.RUNNING
        self._tasks = [
            asyncio.create_task(self._process_loop(), name=f"durable-log-{self.metadata.container_id}-processor"),
            asyncio.create_task(self._complete_loop(), name=f"durable-log-{self.metadata.container_id}-completion"),
        ]
        self._maybe_queue_checkpoint()  # recovery replayed enough since the last checkpoint: one now

    def add(self, op: Operation) -> asyncio.Future[Operation]:
        """Queue ``op``; the future completes with the completed operation once it is durable."""
        future: asyncio.Future[Operation] = asyncio.get_running_loop().create_future()
        self._enqueue(op, future)
        return future

    def add_then(self, op: Operation, done: Done) -> None:
        """Queue ``op``; ``done`` is called once, synchronously, when it is durable or failed, exactly when
        :meth:`add`'s future would complete (a validation failure at once, durable operations in sequence
        order). A ``done`` that raises is logged."""
        self._enqueue(op, _Callback(done))

    def _enqueue(self, op: Operation, waiter: _Waiter) -> None:
        if self.state is not LogState.RUNNING:
            waiter.set_exception(self._offline_error())
            return
        self._queue.append((op, waiter))
        self._queue_event.set()

    async def checkpoint(self) -> int:
        """Write a metadata checkpoint now; returns its sequence number once durable."""
        op = await self.add(MetadataCheckpointOperation())
        return op.sequence_number

    def _offline_error(self) -> ContainerOfflineError:
        cid = self.metadata.container_id
        if self.state is LogState.FAILED:
            return ContainerOfflineError(f"container {cid}: durable log failed: {self.failure!r}")
        return ContainerOfflineError(f"container {cid}: durable log is {self.state.value}")

    async def _process_loop(self) -> None:
        while self.state is LogState.RUNNING:
            if not self._queue:
                self._queue_event.clear()
                await self._queue_event.wait()
                continue
            budget = self.config.max_queue_batch_bytes
            while self._queue and budget > 0 and self.state is LogState.RUNNING:
                op, future = self._queue.popleft()
                if future is not None and future.done():
                    continue
                started = time.perf_counter() if isinstance(op, MetadataCheckpointOperation) else 0.0
                try:
                    self.updater.pre_process(op)
                except SegstoreError as exc:
                    if future is not None:
                        future.set_exception(exc)
                    continue
                self._sequence += 1
                op.sequence_number = self._sequence
                if future is not None:
                    self._futures[op.sequence_number] = future
                if isinstance(op, MetadataCheckpointOperation):
                    self._builder.flush()
                    self._builder.append(op, first_frame_tag=_CheckpointStart(op.sequence_number))
                    ACTIVITY.note("checkpoint", started, time.perf_counter())
                else:
                    self._builder.append(op)
                if isinstance(op, AppendOperation):
                    budget -= len(op.data)
                if len(self._in_flight) >= self.config.max_in_flight_frames:
                    await self._wait_for_room()
            self._builder.flush()
            await self._wait_for_room()

    async def _wait_for_room(self) -> None:
        while len(self._in_flight) >= self.config.max_in_flight_frames and self.state is LogState.RUNNING:
            self._room_event.clear()
            await self._room_event.wait()

    def _write_frame(self, frame: DataFrame) -> None:
        write: asyncio.Future[Any]
        try:
            write = asyncio.ensure_future(self.data_log.append(frame.data))
        except Exception as exc:  # a synchronous refusal (fenced, too long) fails like a failed write
            write = asyncio.get_running_loop().create_future()
            write.set_exception(exc)
        self._in_flight.append((frame, write))
        self._in_flight_event.set()

    async def _complete_loop(self) -> None:
        while self.state is LogState.RUNNING:
            if not self._in_flight:
                self._in_flight_event.clear()
                await self._in_flight_event.wait()
                continue
            frame, write = self._in_flight[0]
            try:
                address = await write
            except asyncio.CancelledError:
                raise
            except BaseException as exc:  # any Tier-1 failure takes the log down (module docstring)
                self._fail(exc)
                return
            self._in_flight.popleft()
            self._room_event.set()
            if isinstance(frame.tag, _CheckpointStart):
                self._checkpoint_prev[frame.tag.sequence_number] = self._last_address
            self._last_address = address
            self._commit(frame.completed)

    def _commit(self, ops: list[Operation]) -> None:
        if not ops:
            return
        for op in ops:
            self.updater.committed(op)
            if isinstance(op, MetadataCheckpointOperation):
                prev = self._checkpoint_prev.pop(op.sequence_number, None)
                self._truncation_points.append(_TruncationPoint(op.sequence_number, prev))
                self._checkpoint_queued = False
            self._count_toward_checkpoint(op)
        data_ops = [op for op in ops if not isinstance(op, MetadataCheckpointOperation)]
        if data_ops:
            self.memory_log.append(data_ops)
            for listener in self._listeners:
                listener(data_ops)
        for op in ops:
            future = self._futures.pop(op.sequence_number, None)
            if future is not None and not future.done():
                future.set_result(op)
        self._maybe_queue_checkpoint()

    def _count_toward_checkpoint(self, op: Operation) -> None:
        """Count the operations (and append bytes) in Tier-1 since its last checkpoint: the ones committed and, at
        recovery, the ones replayed, so that the count carries over container restarts (a container restarted
        before every ``checkpoint_commit_count`` would otherwise never checkpoint, and never truncate Tier-1)."""
        if isinstance(op, MetadataCheckpointOperation):
            self._commits_since_checkpoint = 0
            self._bytes_since_checkpoint = 0
            return
        self._commits_since_checkpoint += 1
        if isinstance(op, AppendOperation):
            self._bytes_since_checkpoint += len(op.data)

    def _maybe_queue_checkpoint(self) -> None:
        cfg = self.config
        if self._checkpoint_queued or self._commits_since_checkpoint < cfg.checkpoint_min_commit_count:
            return
        if (
            self._commits_since_checkpoint >= cfg.checkpoint_commit_count
            or self._bytes_since_checkpoint >= cfg.checkpoint_total_commit_length_bytes
        ):
            self._checkpoint_queued = True
            self._queue.append((MetadataCheckpointOperation(), None))
            self._queue_event.set()

    def _fail(self, exc: BaseException) -> None:
        if self.state is not LogState.RUNNING:
            return
        log.error("container %s: Tier-1 write failed, durable log stops: %r", self.metadata.container_id, exc)
        self.state = LogState.FAILED
        self.failure = exc
        self._fail_pending(self._offline_error(), cause=exc)
        for listener in self._failure_listeners:
            listener(exc)

    def _fail_pending(self, error: ContainerOfflineError, cause: BaseException | None = None) -> None:
        error.__cause__ = cause
        for _, write in self._in_flight:
            write.cancel()
        self._in_flight.clear()
        for future in self._futures.values():
            if not future.done():
                future.set_exception(error)
        self._futures.clear()
        while self._queue:
            _, queued = self._queue.popleft()
            if queued is not None and not queued.done():
                queued.set_exception(error)
        self.updater.rollback()
        self._builder = DataFrameBuilder(self.config.max_frame_bytes, self._write_frame)
        self._room_event.set()
        self._queue_event.set()
        self._in_flight_event.set()

    # ---- truncation -----------------------------------------------------------------------------------------
    async def truncate(self, below_sequence: int) -> int | None:
        """Truncate Tier-1 at the latest checkpoint whose sequence number is <= ``below_sequence``.

        The caller promises every storage operation with a smaller sequence number is in
        Tier-2. Returns the checkpoint's sequence number, or None if none qualifies.
        """
        chosen: _TruncationPoint | None = None
        while self._truncation_points and self._truncation_points[0].checkpoint_sequence <= below_sequence:
            chosen = self._truncation_points.popleft()
        if chosen is None:
            return None
        if chosen.address is not None:
            await self.data_log.truncate(chosen.address)
        self.memory_log.truncate(chosen.checkpoint_sequence)
        return chosen.checkpoint_sequence

    # ---- shutdown -------------------------------------------------------------------------------------------
    async def close(self) -> None:
        """Stop accepting operations, fail what is queued, wait for nothing more, close Tier-1."""
        if self.state is LogState.CLOSED:
            return
        was_running = self.state is LogState.RUNNING
        self.state = LogState.CLOSED
        if was_running:
            self._fail_pending(self._offline_error())
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.data_log.close()
