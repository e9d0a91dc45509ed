"""One segment's pending storage operations, applied to Tier-2 in log order (Pravega's SegmentAggregator).

The storage writer hands each committed storage operation of a segment to its
aggregator. Appends are buffered and written as one chunk once the buffer reaches
the flush threshold or its oldest append its maximum age; any other operation
(seal, truncate, merge, delete) first flushes the appends queued before it, then
applies itself. So Tier-2 sees exactly the log's order for each segment.

Invariants:
- the aggregator's ``storage_length`` is what Tier-2 holds; appends are written at
  exactly that offset, never twice: an append wholly below it (already flushed
  before a restart) is skipped, one straddling it is cut;
- a chunk holds whole appends (so event segments are cut at event boundaries);
- an operation leaves the queue only once Tier-2 has applied it durably, so
  :attr:`lowest_sequence` bounds what Tier-1 may truncate;
- on any error the queue is unchanged; :meth:`resync` re-reads Tier-2 before the
  next attempt, so a write that did take effect is not repeated.

Consecutive appends are queued as one :class:`_AppendRun` (their bytes, the ingest times
where they change, the first sequence number), not as operation objects:
appends wait here for seconds by the thousand, and while each one kept its operation (with
its attribute updates: four objects the garbage collector tracks) the collector's passes over
them were the segment store's longest pauses (50-100 ms) and several per cent of its CPU.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from segment_store.logs.operations import (
    AppendOperation,
    DeleteOperation,
    MergeOperation,
    Operation,
    SealOperation,
    TruncateOperation,
)
from segment_store.storage.segment_storage import Framing, SegmentStorage
from segment_store.writer.config import WriterConfig
from segstore_shared.contracts import SegmentExistsError, SegmentNotExistsError
from segstore_shared.errors import SegstoreError


class StorageWriterCorruptedError(SegstoreError):
    """Tier-2 disagrees with the log in a way no retry can fix (data missing below an append)."""


@dataclass(frozen=True, slots=True)
class SegmentTarget:
    """What the aggregator needs to know about its segment."""

    segment_id: int
    name: str
    framing: Framing


class AggregatorHost(Protocol):
    """Callbacks into the storage writer."""

    def aggregator(self, segment_id: int) -> SegmentAggregator: ...

    def on_flushed(self, segment_id: int, storage_length: int, bytes_done: int) -> None: ...

    def on_sealed(self, segment_id: int) -> None: ...

    def on_merged(self, target_id: int, source_id: int, storage_length: int) -> None: ...

    def on_deleted(self, segment_id: int, bytes_dropped: int) -> None: ...

    def is_gone(self, segment_id: int) -> tuple[bool, bool]:
        """``(deleted, merged)`` as the committed metadata says (after recovery: as the whole log says)."""

    def superseded(self, name: str, segment_id: int) -> bool:
        """A segment of this name was created after this one (only after a restart, which replays both): this one
        left Tier-2 before that, and Tier-2's segment of this name is the newer one's, never to be touched here."""


class _AppendRun:
    """Appends at consecutive offsets, queued as one (at most ``max_flush_bytes`` unless one append is larger).

    ``chunks`` are the appends' bytes (``bytes``, which the collector does not track; a view is copied, so a
    received buffer is not kept alive by it); ``ingest`` is flat: ``[relative offset, ingest time ms, ...]``,
    a pair where the time changes, first at 0. ``closed`` once a flush took it: later appends start a new run
    (the flush removes the runs it wrote once the write returns; one that grew meanwhile would lose the rest).
    """

    __slots__ = ("chunks", "closed", "first_sequence", "ingest", "offset", "size")

    def __init__(self, op: AppendOperation) -> None:
        data = op.data
        self.offset = op.offset
        self.first_sequence = op.sequence_number
        self.chunks = [data if type(data) is bytes else bytes(data)]
        self.size = len(data)
        self.ingest = [0, op.ingest_time_ms]
        self.closed = False

    @property
    def end(self) -> int:
        return self.offset + self.size

    def take(self, op: AppendOperation, limit: int) -> bool:
        """Add ``op`` at the end if it follows on and fits within ``limit``; False (nothing done) otherwise."""
        data = op.data
        size = self.size
        if self.closed or op.offset != self.offset + size or size + len(data) > limit:
            return False
        if self.ingest[-1] != op.ingest_time_ms:
            self.ingest += (size, op.ingest_time_ms)
        self.chunks.append(data if type(data) is bytes else bytes(data))
        self.size = size + len(data)
        return True

    def buffers_from(self, skip: int) -> list[bytes | memoryview]:
        """The run's bytes from ``skip`` on."""
        if not skip:
            return list(self.chunks)
        out: list[bytes | memoryview] = []
        position = 0
        for chunk in self.chunks:
            end = position + len(chunk)
            if end > skip:
                out.append(chunk if position >= skip else memoryview(chunk)[skip - position :])
            position = end
        return out

    def ingest_pairs_from(self, skip: int, written: int, into: list[tuple[int, int]]) -> None:
        """Add to ``into`` this run's ingest pairs for its bytes from ``skip`` on, written at ``written`` of
        the chunk (a pair only where the time changes)."""
        pairs = self.ingest
        count = len(pairs)
        for i in range(0, count, 2):
            following = pairs[i + 2] if i + 2 < count else self.size
            if following <= skip:
                continue  # these bytes are already in Tier-2
            at, time_ms = written + max(0, pairs[i] - skip), pairs[i + 1]
            if not into or into[-1][1] != time_ms:
                into.append((at, time_ms))


class SegmentAggregator:
    """See module docstring. All methods run on the container's event loop."""

    def __init__(
        self,
        target: SegmentTarget,
        storage: SegmentStorage,
        host: AggregatorHost,
        config: WriterConfig,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.target = target
        self._storage = storage
        self._host = host
        self._config = config
        self._clock = clock
        self._queue: deque[_AppendRun | Operation] = deque()
        self._max_flush_bytes = min(config.max_flush_bytes, storage.max_write_bytes)  # one flush = one chunk
        self._lock = asyncio.Lock()
        self._append_bytes = 0  # bytes of queued appends
        self._barriers = 0  # queued operations that are not appends
        self._oldest_append_at: float | None = None
        self.storage_length: int | None = None  # unknown until resync()
        self.exists_in_storage = False
        self.sealed_in_storage = False
        self.finished = False  # deleted or merged away: nothing more will come
        self.rows_at_ms: int | None = None
        """A merge source flushed by its target's merge: the merge time, which every row it writes takes (the
        concat then has nothing to rewrite: a transaction merged before its flush is written to Tier-2 once)."""

    # ---- queue ---------------------------------------------------------------------------------------------
    def add(self, op: Operation) -> None:
        if self.finished:
            raise StorageWriterCorruptedError(f"{self.target.name}: operation {op.sequence_number} after its end")
        if isinstance(op, AppendOperation):
            queue = self._queue
            last = queue[-1] if queue else None
            if type(last) is not _AppendRun or not last.take(op, self._max_flush_bytes):
                queue.append(_AppendRun(op))
            self._append_bytes += len(op.data)
            if self._oldest_append_at is None:
                self._oldest_append_at = self._clock()
        else:
            self._queue.append(op)
            self._barriers += 1

    @property
    def lowest_sequence(self) -> int | None:
        """Sequence number of the oldest operation not yet applied to Tier-2 (None: nothing pending)."""
        if not self._queue:
            return None
        head = self._queue[0]
        return head.first_sequence if isinstance(head, _AppendRun) else head.sequence_number

    @property
    def pending(self) -> bool:
        return bool(self._queue)

    def due_in(self, now: float) -> float | None:
        """Seconds until this aggregator must flush (0: now), or None if nothing is queued."""
        if not self._queue:
            return None
        if self._barriers or self._append_bytes >= self._config.flush_threshold_bytes:
            return 0.0
        assert self._oldest_append_at is not None
        return max(0.0, self._oldest_append_at + self._config.flush_max_age_s - now)

    # ---- Tier-2 state --------------------------------------------------------------------------------------
    async def resync(self) -> None:
        """Read what Tier-2 holds of the segment (at start and after any failure)."""
        try:
            info = await self._storage.info(self.target.name)
        except SegmentNotExistsError:
            self.storage_length, self.exists_in_storage, self.sealed_in_storage = 0, False, False
            return
        self.storage_length, self.exists_in_storage, self.sealed_in_storage = info.length, True, info.sealed

    async def _ensure_exists(self) -> None:
        if self.exists_in_storage:
            return
        try:
            await self._storage.create(self.target.name, self.target.framing)
        except SegmentExistsError:
            await self.resync()
            return
        self.exists_in_storage = True

    # ---- processing ----------------------------------------------------------------------------------------
    async def process(self, force: bool = False) -> None:
        """Apply queued operations that are due (all of them with ``force``); raises on Tier-2 failure.

        A segment the log deletes later writes nothing: its appends are dropped when its delete
        comes up. A merge source waits for its target's merge (which forces it), because after a
        restart its replayed appends may already sit inside the target; a superseded one (see
        :meth:`AggregatorHost.superseded`) writes nothing even when forced: its target's merge drops it.
        """
        async with self._lock:
            deleted, merged = self._host.is_gone(self.target.segment_id)
            if deleted:
                if any(isinstance(op, DeleteOperation) for op in self._queue):
                    await self._delete()
                return
            if merged and (not force or self._superseded):
                return
            if self.storage_length is None:
                await self.resync()
            while self._queue:
                op = self._queue[0]
                if type(op) is _AppendRun:
                    if not force and self.due_in(self._clock()) != 0.0:
                        return
                    await self._flush_appends()
                elif isinstance(op, SealOperation):
                    await self._ensure_exists()
                    if not self.sealed_in_storage:
                        await self._storage.seal(self.target.name)
                        self.sealed_in_storage = True
                    self._pop_barrier()
                    self._host.on_sealed(self.target.segment_id)
                elif isinstance(op, TruncateOperation):
                    await self._truncate(op)
                elif isinstance(op, MergeOperation):
                    await self._merge(op)
                elif isinstance(op, DeleteOperation):
                    await self._delete()
                else:
                    raise StorageWriterCorruptedError(f"{type(op).__name__} is not a storage operation")

    def _pop_barrier(self) -> None:
        self._queue.popleft()
        self._barriers -= 1

    async def _flush_appends(self) -> None:
        assert self.storage_length is not None
        runs: list[_AppendRun] = []
        size = 0
        for item in self._queue:
            if type(item) is not _AppendRun or (runs and size + item.size > self._max_flush_bytes):
                break
            runs.append(item)
            size += item.size
        buffers: list[bytes | memoryview] = []
        ingest: list[tuple[int, int]] = []
        position = self.storage_length
        for run in runs:
            run.closed = True
            end = run.end
            if end <= position:
                continue  # already in Tier-2 (flushed before a restart)
            if run.offset > position:
                raise StorageWriterCorruptedError(
                    f"{self.target.name}: Tier-2 ends at {position} but the next append starts at {run.offset}"
                )
            skip = position - run.offset
            run.ingest_pairs_from(skip, position - self.storage_length, ingest)
            buffers += run.buffers_from(skip)
            position = end
        if buffers:
            if self.rows_at_ms is not None:
                ingest = [(0, self.rows_at_ms)]
            await self._ensure_exists()
            self.storage_length = await self._storage.write(self.target.name, self.storage_length, buffers, ingest)
        for _ in runs:
            self._queue.popleft()
        self._append_bytes -= size
        self._oldest_append_at = self._clock() if self._append_bytes else None
        self._host.on_flushed(self.target.segment_id, self.storage_length, size)

    async def _truncate(self, op: TruncateOperation) -> None:
        assert self.storage_length is not None
        if op.offset > 0:
            await self._ensure_exists()
            await self._storage.truncate(self.target.name, min(op.offset, self.storage_length))
        self._pop_barrier()

    @property
    def _superseded(self) -> bool:
        return self._host.superseded(self.target.name, self.target.segment_id)

    async def _merge(self, op: MergeOperation) -> None:
        source = self._host.aggregator(op.source_id)
        assert self.storage_length is not None
        concatenated = self.storage_length >= op.target_offset + op.length
        if source._superseded:  # Tier-2's segment of its name is a newer one's: the concat happened before
            if not concatenated:
                raise StorageWriterCorruptedError(
                    f"{self.target.name}: Tier-2 length {self.storage_length} lacks merge source "
                    f"{source.target.name}, whose name a newer segment holds"
                )
            source.discard()
        else:
            if source.storage_length is None:
                await source.resync()
            if concatenated and not source.exists_in_storage:
                source.discard()  # concatenated before a restart: the source's replayed operations are moot
            else:
                await self._concat(op, source)
        # never backwards: replaying the first of several merges already in Tier-2 must keep the whole length
        self.storage_length = max(self.storage_length, op.target_offset + op.length)
        source.finished = True
        self._pop_barrier()
        self._host.on_merged(self.target.segment_id, op.source_id, self.storage_length)

    async def _concat(self, op: MergeOperation, source: SegmentAggregator) -> None:
        """Flush and seal the merge source in Tier-2 (what it still holds at the merge time, when the merge carries
        one), then concatenate it at the merge offset."""
        source.rows_at_ms = op.merge_time_ms or None
        await source.process(force=True)
        if source.pending or not source.sealed_in_storage:
            raise StorageWriterCorruptedError(
                f"{self.target.name}: merge source {source.target.name} is not sealed in Tier-2"
            )
        if self.storage_length != op.target_offset:
            raise StorageWriterCorruptedError(
                f"{self.target.name}: Tier-2 length {self.storage_length} != merge offset {op.target_offset}"
            )
        await self._ensure_exists()
        merge_time = op.merge_time_ms or None  # 0: logged before merges carried their time
        await self._storage.concat(self.target.name, op.target_offset, source.target.name, merge_time)
        source.exists_in_storage = False

    async def _delete(self) -> None:
        # Merges still queued will never happen: their sources end with this segment (else they would stay
        # pending forever, keeping the writer busy and Tier-1 untruncated, and leak in Tier-2).
        for op in [op for op in self._queue if isinstance(op, MergeOperation)]:
            await self._host.aggregator(op.source_id).end_with_target()
        # After a restart a newer namesake means Tier-2's segment of this name is the namesake's: the
        # container creates a name again only once the old segment has left Tier-2.
        if not self._superseded:
            with contextlib.suppress(SegmentNotExistsError):  # never flushed, or gone already
                await self._storage.delete(self.target.name)
        self.exists_in_storage = False
        self._host.on_deleted(self.target.segment_id, self.discard())

    async def end_with_target(self) -> None:
        """This merge source's target was deleted before the merge reached Tier-2: delete it instead.

        Takes this aggregator's lock (a forced flush of it may be running); a target locks its
        sources, never the reverse.
        """
        async with self._lock:
            if not self.finished:
                await self._delete()

    def discard(self) -> int:
        """Drop every queued operation (the segment is gone); returns the append bytes dropped."""
        dropped = self._append_bytes
        self._queue.clear()
        self._append_bytes = 0
        self._barriers = 0
        self._oldest_append_at = None
        self.finished = True
        return dropped
