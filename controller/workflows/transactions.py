"""Transaction workflows: create, ping, commit (in order, rolling over a concurrent scale), abort, and
lease timeouts (seed 003, "Transaction Manager").

- **Create** writes the OPEN record (in the active epoch's reference epoch, the *transaction epoch*),
  then creates one transaction segment per segment of that epoch, and answers those segments: the
  client names its transaction segments after them.
  A transaction aborted while its segments were being created (its lease ran out during a segment store's
  failover) fails the create, and its segments are deleted again (a retried create may land after the abort's
  deletes).
- **Commit** marks the transaction COMMITTING (taking its commit order) and returns; a per-stream
  committer then takes batches (lowest epoch first, commit order within) and merges each transaction
  segment into the segment with the same number in the active epoch. When the transaction epoch is no
  longer the active epoch's reference (a scale happened), the batch **rolls over**: it duplicates the
  transaction epoch (new segments, same numbers and ranges), merges into those, seals them, duplicates
  the active epoch and makes that one active, so the committed events come after everything that was in
  the stream before the commit and before everything after it.
- **Abort** (explicit or by lease timeout) marks ABORTING, deletes the transaction segments and records
  ABORTED. Timeouts: this controller tracks the leases it handed out or renewed and checks them against
  the stored expiry (another controller may have renewed a lease); at start it takes over every open
  transaction it finds.

Every step is idempotent, and :meth:`TxnWorkflows.resume` finishes committing and aborting transactions
a previous controller left (the owner of the stream's bucket resumes it every ``txn_scan_period_s``, so a
transaction marked for commit through a controller that died next is committed too).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import uuid
from collections.abc import Callable, Iterable

from controller.config import ControllerConfig
from controller.errors import (
    LeaseTooLargeError,
    StreamBeingCreatedError,
    StreamSealedError,
    TxnStateError,
    from_metadata,
)
from controller.metadata import StreamMetadataStore, StreamState
from controller.metadata import errors as md
from controller.segment_ops import SegmentStoreOps
from controller.workflows.streams import StreamLocks, wall_clock_ms
from controller_client.model import SegmentRange, TxnState, segment_id
from segstore_shared.stuck import warn_if_slow

log = logging.getLogger(__name__)

SLOW_WARNING_S = 30.0
"""A committer pass running this long logs where it waits (again each as long): a hang names its line."""

TxnKey = tuple[str, str, uuid.UUID]


def new_txn_id() -> uuid.UUID:
    """A random 128-bit transaction id whose low 64 bits are below 2**63.

    ``TxnId`` carries the id as two signed 64-bit halves. The Rust client (and so the ``pravega`` Python
    package) widens the low half with sign extension, which corrupts any id whose low half is negative
    as a signed number; Pravega's own ids keep it small (a counter), so they never hit this. Keeping the
    top bit of the low half clear makes every id survive every client.
    """
    return uuid.UUID(int=(secrets.randbits(64) << 64) | secrets.randbits(63))


class TxnWorkflows:
    def __init__(
        self,
        store: StreamMetadataStore,
        ops: SegmentStoreOps,
        locks: StreamLocks,
        config: ControllerConfig,
        clock_ms: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self._store = store
        self._ops = ops
        self._locks = locks
        self._config = config
        self._clock_ms = clock_ms
        self._leases: dict[TxnKey, int] = {}
        self._tasks: dict[tuple[str, str], asyncio.Task[None]] = {}
        self._aborts: set[asyncio.Task[None]] = set()
        self._wanted: set[tuple[str, str]] = set()
        self.retry_delay_s = 0.5
        self.slow_warning_s = SLOW_WARNING_S

    def _check_lease(self, lease_ms: int) -> int:
        lease = lease_ms or self._config.txn_default_lease_ms
        if lease > self._config.txn_max_lease_ms:
            raise LeaseTooLargeError(lease, self._config.txn_max_lease_ms)
        return lease

    # ---- create / ping / state --------------------------------------------------------------------------------
    async def create(self, scope: str, stream: str, lease_ms: int) -> tuple[uuid.UUID, list[SegmentRange]]:
        lease = self._check_lease(lease_ms)
        txn_id = new_txn_id()
        with from_metadata(scope, stream, str(txn_id)):
            try:
                info = await self._store.create_txn(scope, stream, txn_id, lease)
            except md.DataNotFoundError:  # the state or current record is not written yet
                raise StreamBeingCreatedError(scope, stream) from None
            except md.IllegalStreamStateError:
                if await self._store.get_state(scope, stream) == StreamState.CREATING:
                    raise StreamBeingCreatedError(scope, stream) from None
                raise StreamSealedError(scope, stream) from None
            epoch = await self._store.get_epoch(scope, stream, info.epoch)
        await asyncio.gather(
            *(self._ops.create_txn_segment(scope, stream, s.segment_id, txn_id) for s in epoch.segments)
        )
        with from_metadata(scope, stream, str(txn_id)):
            status = await self._store.get_txn_status(scope, stream, txn_id)
        if status != TxnState.OPEN:
            await self._drop_late_segments(scope, stream, txn_id, [s.segment_id for s in epoch.segments])
            raise TxnStateError(scope, stream, str(txn_id), status.name.lower(), "begin")
        self._leases[(scope, stream, txn_id)] = info.record.lease_expiry_ms
        return txn_id, [s.range for s in sorted(epoch.segments, key=lambda s: s.key_start)]

    async def _drop_late_segments(self, scope: str, stream: str, txn_id: uuid.UUID, parents: list[int]) -> None:
        """The transaction was aborted (its lease ran out) while its segments were being created: the abort may
        have deleted them before a create, retried through a segment store's failover, landed. Delete them again, so
        no segment outlives its transaction (holding what a client wrote into a transaction it believed open).
        An abort that starts after the status was read finds the segments created and deletes them itself."""
        await asyncio.gather(*(self._ops.abort_txn_segment(scope, stream, sid, txn_id) for sid in parents))

    async def ping(self, scope: str, stream: str, txn_id: uuid.UUID, lease_ms: int) -> TxnState:
        lease = self._check_lease(lease_ms)
        with from_metadata(scope, stream, str(txn_id)):
            try:
                expiry = await self._store.ping_txn(scope, stream, txn_id, lease)
            except (md.IllegalTxnTransitionError, md.TxnMaxExecutionTimeExceededError):
                return await self._store.get_txn_status(scope, stream, txn_id)
        self._leases[(scope, stream, txn_id)] = expiry
        return TxnState.OPEN

    async def state(self, scope: str, stream: str, txn_id: uuid.UUID) -> TxnState:
        with from_metadata(scope, stream, str(txn_id)):
            return await self._store.get_txn_status(scope, stream, txn_id)

    # ---- commit -----------------------------------------------------------------------------------------------
    async def commit(self, scope: str, stream: str, txn_id: uuid.UUID, writer_id: str = "", time_ms: int = -1) -> None:
        """Mark the transaction for commit; the committer makes it visible shortly after."""
        with from_metadata(scope, stream, str(txn_id)):
            if await self._store.get_state(scope, stream) in (StreamState.SEALING, StreamState.SEALED):
                status = await self._store.get_txn_status(scope, stream, txn_id)
                if status not in (TxnState.COMMITTING, TxnState.COMMITTED):
                    raise TxnStateError(scope, stream, str(txn_id), "on a sealed stream", "commit")
            await self._store.seal_txn(scope, stream, txn_id, True, writer_id=writer_id, commit_time_ms=time_ms)
        self._leases.pop((scope, stream, txn_id), None)
        self.schedule_commits(scope, stream)

    def schedule_commits(self, scope: str, stream: str) -> None:
        """Make sure a committer makes one more pass over the stream after this call (it drains every committing
        transaction): a transaction marked for commit before this call is seen by that pass, even when a pass
        was just ending (its check for work came before the mark)."""
        key = (scope, stream)
        self._wanted.add(key)
        task = self._tasks.get(key)
        if task is None or task.done():
            self._tasks[key] = asyncio.get_running_loop().create_task(
                self._committer(scope, stream), name=f"commit {scope}/{stream}"
            )

    async def _committer(self, scope: str, stream: str) -> None:
        key = (scope, stream)
        while key in self._wanted:
            self._wanted.discard(key)  # a call from now on asks for another pass
            try:
                async with warn_if_slow(f"committing transactions of {scope}/{stream}", self.slow_warning_s, log):
                    await self.process_commits(scope, stream)
            except (md.StreamNotFoundError, md.ScopeNotFoundError):
                return
            except Exception:
                log.exception("committing transactions of %s/%s failed; retrying", scope, stream)
                self._wanted.add(key)
                await asyncio.sleep(self.retry_delay_s)

    async def wait_committed(self, scope: str, stream: str) -> None:
        """Wait until the stream's committer is idle (tests, seal)."""
        task = self._tasks.get((scope, stream))
        if task is not None:
            await asyncio.shield(task)

    async def process_commits(self, scope: str, stream: str) -> None:
        """Commit every COMMITTING transaction of the stream, batch by batch."""
        async with self._locks.of(scope, stream):
            while True:
                batch, _ = await self._store.start_committing_transactions(scope, stream)
                if batch.is_empty:
                    if await self._store.get_state(scope, stream) == StreamState.COMMITTING_TXN:
                        await self._store.set_state(scope, stream, StreamState.ACTIVE)
                    return
                await self._store.set_state(scope, stream, StreamState.COMMITTING_TXN)
                marks = await self._writer_marks(scope, stream, batch.txn_ids)
                active = await self._store.get_active_epoch(scope, stream)
                if not batch.is_rolling and batch.epoch == active.reference_epoch:
                    txn_epoch = await self._store.get_epoch(scope, stream, batch.epoch)
                    by_number = {s.number: s.segment_id for s in active.segments}
                    for txn_id in batch.txn_ids:
                        await asyncio.gather(
                            *(
                                self._ops.commit_txn_segment(scope, stream, by_number[s.number], s.segment_id, txn_id)
                                for s in txn_epoch.segments
                            )
                        )
                else:
                    await self._roll_over(scope, stream, batch.epoch, batch.txn_ids, active.epoch)
                await self._store.complete_commit_batch(scope, stream)
                log.info("committed %d transactions of %s/%s", len(batch.txn_ids), scope, stream)
                await self._note_marks(scope, stream, marks)

    async def _writer_marks(self, scope: str, stream: str, txn_ids: Iterable[uuid.UUID]) -> list[tuple[str, int]]:
        """``(writer, time)`` of the batch's transactions committed with a writer's time (for watermarks)."""
        marks = []
        for txn_id in txn_ids:
            with contextlib.suppress(md.TxnNotFoundError):
                record = (await self._store.get_txn(scope, stream, txn_id)).record
                if record.writer_id and record.commit_time_ms >= 0:
                    marks.append((record.writer_id, record.commit_time_ms))
        return marks

    async def _note_marks(self, scope: str, stream: str, marks: list[tuple[str, int]]) -> None:
        """Note each committing writer's time at the stream's tail, which is past its merged transaction (a
        crash before this loses the marks, not data: the next commit or ``note_time`` notes again)."""
        if not marks:
            return
        active = await self._store.get_active_epoch(scope, stream)
        ids = sorted(active.segment_ids)
        lengths = await asyncio.gather(*(self._ops.segment_length(scope, stream, s) for s in ids))
        tail = {sid: length[1] for sid, length in zip(ids, lengths, strict=True)}
        for writer, time_ms in marks:
            await self._store.note_writer_mark(scope, stream, writer, time_ms, tail)

    async def _roll_over(
        self, scope: str, stream: str, txn_epoch_number: int, txn_ids: tuple[uuid.UUID, ...], active_epoch: int
    ) -> None:
        record, _ = await self._store.start_rolling_txn(scope, stream, active_epoch)
        active_number = record.new_active_epoch - 2
        active = await self._store.get_epoch(scope, stream, active_number)
        txn_epoch = await self._store.get_epoch(scope, stream, txn_epoch_number)
        dup_txn = record.new_txn_epoch
        dup_active = record.new_active_epoch
        config = await self._store.get_configuration(scope, stream)
        rolled = {s.number: segment_id(s.number, dup_txn) for s in txn_epoch.segments}
        current = await self._store.get_active_epoch(scope, stream)
        if current.epoch == active_number:  # not completed yet: do (or redo) the segment work
            await asyncio.gather(
                *(self._ops.create_segment(scope, stream, sid, config.scaling) for sid in rolled.values()),
                *(
                    self._ops.create_segment(scope, stream, segment_id(s.number, dup_active), config.scaling)
                    for s in active.segments
                ),
            )
            for txn_id in txn_ids:
                await asyncio.gather(
                    *(
                        self._ops.commit_txn_segment(scope, stream, rolled[s.number], s.segment_id, txn_id)
                        for s in txn_epoch.segments
                    )
                )
            rolled_sizes = await asyncio.gather(*(self._ops.seal_segment(scope, stream, s) for s in rolled.values()))
            await self._store.rolling_txn_create_duplicate_epochs(
                scope, stream, dict(zip(rolled.values(), rolled_sizes, strict=True)), self._clock_ms()
            )
            ids = sorted(active.segment_ids)
            sizes = await asyncio.gather(*(self._ops.seal_segment(scope, stream, s) for s in ids))
            await self._store.complete_rolling_txn(scope, stream, dict(zip(ids, sizes, strict=True)))
        log.info("rolled %d transactions of %s/%s over into epoch %d", len(txn_ids), scope, stream, dup_active)

    # ---- abort ------------------------------------------------------------------------------------------------
    async def abort(self, scope: str, stream: str, txn_id: uuid.UUID) -> None:
        """Mark the transaction for abort; its segments are deleted shortly after."""
        with from_metadata(scope, stream, str(txn_id)):
            status, epoch = await self._store.seal_txn(scope, stream, txn_id, False)
        self._leases.pop((scope, stream, txn_id), None)
        if status != TxnState.ABORTED:
            self._spawn_abort(scope, stream, txn_id, epoch)

    def _spawn_abort(self, scope: str, stream: str, txn_id: uuid.UUID, epoch: int) -> None:
        task = asyncio.get_running_loop().create_task(self._finish_abort(scope, stream, txn_id, epoch))
        self._aborts.add(task)
        task.add_done_callback(self._aborts.discard)

    async def _finish_abort(self, scope: str, stream: str, txn_id: uuid.UUID, epoch: int) -> None:
        while True:
            try:
                txn_epoch = await self._store.get_epoch(scope, stream, epoch)
                await asyncio.gather(
                    *(self._ops.abort_txn_segment(scope, stream, s.segment_id, txn_id) for s in txn_epoch.segments)
                )
                await self._store.complete_aborted_txn(scope, stream, txn_id)
                return
            except (md.StreamNotFoundError, md.ScopeNotFoundError, md.TxnNotFoundError):
                return
            except Exception:
                log.exception("aborting transaction %s of %s/%s failed; retrying", txn_id, scope, stream)
                await asyncio.sleep(self.retry_delay_s)

    # ---- timeouts and resume ----------------------------------------------------------------------------------
    async def abort_expired(self, owns: Callable[[str, str], bool] | None = None) -> int:
        """Abort every tracked transaction whose stored lease has expired (of the streams ``owns`` says this
        controller runs, when given); returns how many."""
        now = self._clock_ms()
        aborted = 0
        for key, expiry in list(self._leases.items()):
            if expiry > now:
                continue
            scope, stream, txn_id = key
            if owns is not None and not owns(scope, stream):
                continue
            try:
                info = await self._store.get_txn(scope, stream, txn_id)
            except (md.TxnNotFoundError, md.StreamNotFoundError, md.ScopeNotFoundError):
                self._leases.pop(key, None)
                continue
            if info.record.status != TxnState.OPEN:
                self._leases.pop(key, None)
                continue
            expires = info.record.lease_expiry_ms
            if info.record.max_execution_expiry_ms > 0:
                expires = min(expires, info.record.max_execution_expiry_ms)
            if expires > now:
                self._leases[key] = expires  # renewed through another controller
                continue
            with contextlib.suppress(md.IllegalTxnTransitionError):
                log.info("transaction %s of %s/%s timed out: aborting", txn_id, scope, stream)
                await self.abort(scope, stream, txn_id)
                aborted += 1
        return aborted

    async def resume(self, scope: str, stream: str) -> None:
        """Take over the stream's transactions: track open leases, finish commits and aborts."""
        txns = await self._store.list_active_txns(scope, stream)
        committing = False
        for info in txns:
            if info.record.status == TxnState.OPEN:
                self._leases[(scope, stream, info.txn_id)] = info.record.lease_expiry_ms
            elif info.record.status == TxnState.COMMITTING:
                committing = True
            elif info.record.status == TxnState.ABORTING:
                self._spawn_abort(scope, stream, info.txn_id, info.epoch)
        batch, _ = await self._store.get_commit_batch(scope, stream)
        if committing or not batch.is_empty:
            self.schedule_commits(scope, stream)

    async def close(self) -> None:
        tasks = [*self._tasks.values(), *self._aborts]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()

    def tracked(self, scope: str, stream: str, txn_id: uuid.UUID) -> bool:
        return (scope, stream, txn_id) in self._leases
