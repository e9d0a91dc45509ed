"""Transactions: active records per epoch, seal, ordered commit batches, rolling transactions.

A transaction belongs to the *reference* epoch of the epoch active at its creation (duplicate
epochs written by rolling transactions share their original's transactions), as in Pravega. Its
record lives at ``txns/<epoch>/<id>`` until completion moves it to ``completed/<id>``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import uuid
from collections.abc import Mapping, Sequence

from controller.metadata.codec import encode
from controller.metadata.epochs import EpochOps
from controller.metadata.errors import (
    DataNotFoundError,
    IllegalStreamStateError,
    IllegalTxnTransitionError,
    TxnMaxExecutionTimeExceededError,
    TxnNotFoundError,
    WriteConflictError,
)
from controller.metadata.records import (
    EMPTY_COMMITTING,
    NO_EPOCH,
    ActiveTxnRecord,
    CommittingTxnsRecord,
    CompletedTxnRecord,
    EpochRecord,
    StreamState,
    TxnInfo,
)
from controller.metadata.stream_logic import build_rolling_epochs
from controller_client.model import TxnState
from segstore_shared.coordination.store import BadVersionError, NodeNotFoundError

_SEAL_TARGET = {True: TxnState.COMMITTING, False: TxnState.ABORTING}


class TxnOps(EpochOps):
    # ---- lookup -----------------------------------------------------------------------------------------------
    def _txn_path(self, scope: str, stream: str, epoch: int, txn_id: uuid.UUID) -> str:
        return self._sp(scope, stream, "txns", epoch, txn_id.hex)

    async def _txn_epochs(self, scope: str, stream: str) -> list[int]:
        try:
            return sorted(int(e) for e in await self._coord.children(self._sp(scope, stream, "txns")))
        except NodeNotFoundError:
            await self._stream(scope, stream)
            return []

    async def _find_txn(self, scope: str, stream: str, txn_id: uuid.UUID) -> TxnInfo | None:
        for epoch in reversed(await self._txn_epochs(scope, stream)):
            found = await self._get_opt(self._txn_path(scope, stream, epoch, txn_id), ActiveTxnRecord)
            if found is not None:
                return TxnInfo(txn_id, epoch, found[0], found[1])
        return None

    async def _completed(self, scope: str, stream: str, txn_id: uuid.UUID) -> CompletedTxnRecord | None:
        found = await self._get_opt(self._sp(scope, stream, "completed", txn_id.hex), CompletedTxnRecord)
        return found[0] if found is not None else None

    async def list_completed_txns(self, scope: str, stream: str) -> list[tuple[uuid.UUID, CompletedTxnRecord]]:
        """Every completed transaction of the stream whose record is still kept (see
        :meth:`purge_completed_txns`), in no particular order. Raises ``StreamNotFoundError``."""
        try:
            names = await self._coord.children(self._sp(scope, stream, "completed"))
        except NodeNotFoundError:
            names = []
        await self._stream(scope, stream)
        found = await asyncio.gather(
            *(self._get_opt(self._sp(scope, stream, "completed", name), CompletedTxnRecord) for name in names)
        )
        return [(uuid.UUID(hex=name), record[0]) for name, record in zip(names, found, strict=True) if record]

    async def get_txn(self, scope: str, stream: str, txn_id: uuid.UUID) -> TxnInfo:
        """The active record of a transaction; :class:`TxnNotFoundError` once completed or unknown."""
        info = await self._find_txn(scope, stream, txn_id)
        if info is None:
            await self._stream(scope, stream)
            raise TxnNotFoundError(txn_id, scope=scope, name=stream)
        return info

    async def get_txn_status(self, scope: str, stream: str, txn_id: uuid.UUID) -> TxnState:
        """OPEN / COMMITTING / ABORTING while active, COMMITTED / ABORTED once completed (until
        purged), UNKNOWN otherwise."""
        info = await self._find_txn(scope, stream, txn_id)
        if info is not None:
            return info.record.status
        completed = await self._completed(scope, stream, txn_id)
        if completed is not None:
            return completed.status
        await self._stream(scope, stream)
        return TxnState.UNKNOWN

    # ---- create, ping, seal -----------------------------------------------------------------------------------
    async def create_txn(
        self, scope: str, stream: str, txn_id: uuid.UUID, lease_ms: int, max_execution_ms: int | None = None
    ) -> TxnInfo:
        """Create an OPEN transaction in the active epoch's reference epoch; lease and maximum
        execution expiry are stored as absolute times. Idempotent for an id already created there.
        :class:`IllegalStreamStateError` if the stream is sealing or sealed."""
        state = await self.get_state(scope, stream)
        if state in (StreamState.SEALING, StreamState.SEALED, StreamState.CREATING):
            raise IllegalStreamStateError(
                f"cannot create a transaction in state {state.name}", scope=scope, name=stream
            )
        current, _ = await self._current(scope, stream)
        epoch = current.reference_epoch
        now = self._clock_ms()
        record = ActiveTxnRecord(now, now + lease_ms, now + max_execution_ms if max_execution_ms else -1, TxnState.OPEN)
        container = self._sp(scope, stream, "txns", epoch)
        await self._create_in_stream(scope, stream, container, b"")
        path = self._txn_path(scope, stream, epoch, txn_id)
        if not await self._create_in_stream(scope, stream, path, record):
            stored, version = await self._get(path, ActiveTxnRecord)
            return TxnInfo(txn_id, epoch, stored, version)
        return TxnInfo(txn_id, epoch, record, 0)

    async def ping_txn(self, scope: str, stream: str, txn_id: uuid.UUID, lease_ms: int) -> int:
        """Extend an OPEN transaction's lease to now + ``lease_ms``; returns the new expiry.

        :class:`IllegalTxnTransitionError` unless OPEN, :class:`TxnMaxExecutionTimeExceededError` past
        the maximum execution time, :class:`TxnNotFoundError`.
        """
        for _ in range(self._config.update_attempts):
            info = await self.get_txn(scope, stream, txn_id)
            if info.record.status != TxnState.OPEN:
                raise IllegalTxnTransitionError(txn_id, info.record.status.name, "ping", scope=scope, name=stream)
            expiry = self._clock_ms() + lease_ms
            limit = info.record.max_execution_expiry_ms
            if limit >= 0 and expiry > limit:
                raise TxnMaxExecutionTimeExceededError(
                    f"transaction {txn_id}: lease would pass the maximum execution time", scope=scope, name=stream
                )
            update = dataclasses.replace(info.record, lease_expiry_ms=expiry)
            try:
                await self._coord.compare_and_set(
                    self._txn_path(scope, stream, info.epoch, txn_id), encode(update), info.version
                )
                return expiry
            except BadVersionError:
                continue
        raise WriteConflictError(f"transaction {txn_id}: too many concurrent updates", scope=scope, name=stream)

    async def seal_txn(
        self,
        scope: str,
        stream: str,
        txn_id: uuid.UUID,
        commit: bool,
        *,
        writer_id: str = "",
        commit_time_ms: int = -1,
        commit_offsets: Mapping[int, int] | None = None,
        expected_version: int | None = None,
    ) -> tuple[TxnState, int]:
        """Move an OPEN transaction to COMMITTING (taking the next commit order) or ABORTING; returns
        ``(status, epoch)``. Idempotent when already there or completed that way;
        :class:`IllegalTxnTransitionError` otherwise (e.g. committing an aborted one),
        :class:`TxnNotFoundError` for an unknown id."""
        target = _SEAL_TARGET[commit]
        final = TxnState.COMMITTED if commit else TxnState.ABORTED
        for _ in range(self._config.update_attempts):
            info = await self._find_txn(scope, stream, txn_id)
            if info is None:
                completed = await self._completed(scope, stream, txn_id)
                if completed is None:
                    await self._stream(scope, stream)
                    raise TxnNotFoundError(txn_id, scope=scope, name=stream)
                if completed.status == final:
                    return completed.status, completed.epoch
                raise IllegalTxnTransitionError(
                    txn_id, completed.status.name, target.name.lower(), scope=scope, name=stream
                )
            status = info.record.status
            if status in (target, final):
                return status, info.epoch
            if status != TxnState.OPEN:
                raise IllegalTxnTransitionError(txn_id, status.name, target.name.lower(), scope=scope, name=stream)
            if expected_version is not None and info.version != expected_version:
                raise WriteConflictError(f"transaction {txn_id} changed", scope=scope, name=stream)
            if commit:
                order = await self._next_commit_order(scope, stream)
                update = dataclasses.replace(
                    info.record,
                    status=target,
                    writer_id=writer_id,
                    commit_time_ms=commit_time_ms,
                    commit_order=order,
                    commit_offsets=dict(commit_offsets or {}),
                )
            else:
                update = dataclasses.replace(info.record, status=target)
            try:
                await self._coord.compare_and_set(
                    self._txn_path(scope, stream, info.epoch, txn_id), encode(update), info.version
                )
                return target, info.epoch
            except BadVersionError:
                if expected_version is not None:
                    raise WriteConflictError(f"transaction {txn_id} changed", scope=scope, name=stream) from None
        raise WriteConflictError(f"transaction {txn_id}: too many concurrent updates", scope=scope, name=stream)

    async def _next_commit_order(self, scope: str, stream: str) -> int:
        """A per-stream, strictly increasing number: the version of the counter node after a write."""
        path = self._sp(scope, stream, "txn_order")
        for _ in range(self._config.update_attempts):
            try:
                node = await self._coord.get(path)
            except NodeNotFoundError:
                await self._create_in_stream(scope, stream, path, b"")
                continue
            try:
                return await self._coord.compare_and_set(path, b"", node.version)
            except BadVersionError:
                continue
        raise WriteConflictError("commit order: too many concurrent updates", scope=scope, name=stream)

    # ---- listings ---------------------------------------------------------------------------------------------
    async def list_txns_in_epoch(self, scope: str, stream: str, epoch: int) -> list[TxnInfo]:
        """Active transactions of ``epoch`` (any status)."""
        try:
            names = await self._coord.children(self._sp(scope, stream, "txns", epoch))
        except NodeNotFoundError:
            await self._stream(scope, stream)
            return []
        ids = [uuid.UUID(hex=n) for n in names]
        found = await asyncio.gather(
            *(self._get_opt(self._txn_path(scope, stream, epoch, t), ActiveTxnRecord) for t in ids)
        )
        return [TxnInfo(t, epoch, f[0], f[1]) for t, f in zip(ids, found, strict=True) if f is not None]

    async def list_active_txns(self, scope: str, stream: str) -> list[TxnInfo]:
        """All active transactions (open, committing, aborting), by epoch."""
        result: list[TxnInfo] = []
        for epoch in await self._txn_epochs(scope, stream):
            result.extend(await self.list_txns_in_epoch(scope, stream, epoch))
        return result

    async def list_open_txns(self, scope: str, stream: str) -> list[TxnInfo]:
        return [t for t in await self.list_active_txns(scope, stream) if t.record.status == TxnState.OPEN]

    async def list_expired_txns(self, scope: str, stream: str, now_ms: int | None = None) -> list[TxnInfo]:
        """OPEN transactions whose lease or maximum execution time has passed (for the sweeper)."""
        now = self._clock_ms() if now_ms is None else now_ms
        return [
            t
            for t in await self.list_open_txns(scope, stream)
            if t.record.lease_expiry_ms <= now or 0 <= t.record.max_execution_expiry_ms <= now
        ]

    async def get_committing_txns_in_lowest_epoch(
        self, scope: str, stream: str, limit: int = 1000
    ) -> tuple[int, list[TxnInfo]]:
        """The lowest epoch with COMMITTING transactions and up to ``limit`` of them in commit order
        (``(NO_EPOCH, [])`` when none)."""
        for epoch in await self._txn_epochs(scope, stream):
            committing = [
                t for t in await self.list_txns_in_epoch(scope, stream, epoch) if t.record.status == TxnState.COMMITTING
            ]
            if committing:
                return epoch, sorted(committing, key=lambda t: t.record.commit_order)[:limit]
        return NO_EPOCH, []

    # ---- commit batches ---------------------------------------------------------------------------------------
    async def get_commit_batch(self, scope: str, stream: str) -> tuple[CommittingTxnsRecord, int]:
        return await self._stream_get(scope, stream, "committing", CommittingTxnsRecord)

    async def start_commit_batch(
        self, scope: str, stream: str, epoch: int, txn_ids: Sequence[uuid.UUID]
    ) -> tuple[CommittingTxnsRecord, int]:
        """Record the batch ``txn_ids`` (COMMITTING transactions of ``epoch``, in commit order).

        If a batch is already recorded it is returned unchanged (finish it first). Raises
        :class:`IllegalTxnTransitionError` / :class:`TxnNotFoundError` for ids that are not
        committing in ``epoch``, :class:`WriteConflictError` on a lost race.
        """
        record, version = await self.get_commit_batch(scope, stream)
        if not record.is_empty or not txn_ids:
            return record, version
        for txn_id in txn_ids:
            found = await self._get_opt(self._txn_path(scope, stream, epoch, txn_id), ActiveTxnRecord)
            if found is None:
                raise TxnNotFoundError(txn_id, scope=scope, name=stream)
            if found[0].status != TxnState.COMMITTING:
                raise IllegalTxnTransitionError(txn_id, found[0].status.name, "commit", scope=scope, name=stream)
        update = CommittingTxnsRecord(epoch, tuple(txn_ids))
        new_version = await self._cas(
            self._sp(scope, stream, "committing"), update, version, scope=scope, name=stream, what="committing record"
        )
        return update, new_version

    async def start_committing_transactions(
        self, scope: str, stream: str, limit: int = 1000
    ) -> tuple[CommittingTxnsRecord, int]:
        """The batch in progress, or a new one from the lowest epoch's committing transactions."""
        record, version = await self.get_commit_batch(scope, stream)
        if not record.is_empty:
            return record, version
        epoch, txns = await self.get_committing_txns_in_lowest_epoch(scope, stream, limit)
        if not txns:
            return record, version
        return await self.start_commit_batch(scope, stream, epoch, [t.txn_id for t in txns])

    async def complete_commit_batch(self, scope: str, stream: str) -> None:
        """Mark every transaction of the batch COMMITTED, then clear the batch (idempotent).
        For a rolling batch the active epoch must have been moved (``complete_rolling_txn``)."""
        record, _ = await self.get_commit_batch(scope, stream)
        if record.is_empty:
            return
        if record.is_rolling:
            current, _ = await self._current(scope, stream)
            if current.epoch < record.new_active_epoch:
                raise IllegalStreamStateError("rolling transaction not completed", scope=scope, name=stream)
        for txn_id in record.txn_ids:
            await self.complete_committed_txn(scope, stream, txn_id)
        await self._update(
            self._sp(scope, stream, "committing"),
            CommittingTxnsRecord,
            lambda r: EMPTY_COMMITTING if r == record else None,
            scope=scope,
            name=stream,
            what="committing record",
        )

    async def complete_committed_txn(self, scope: str, stream: str, txn_id: uuid.UUID) -> None:
        """COMMITTING -> COMMITTED: write the completed record, then drop the active one."""
        await self._complete(scope, stream, txn_id, TxnState.COMMITTING, TxnState.COMMITTED)

    async def complete_aborted_txn(self, scope: str, stream: str, txn_id: uuid.UUID) -> None:
        """ABORTING -> ABORTED: write the completed record, then drop the active one."""
        await self._complete(scope, stream, txn_id, TxnState.ABORTING, TxnState.ABORTED)

    async def _complete(self, scope: str, stream: str, txn_id: uuid.UUID, sealed: TxnState, final: TxnState) -> None:
        info = await self._find_txn(scope, stream, txn_id)
        if info is None:
            completed = await self._completed(scope, stream, txn_id)
            if completed is None:
                await self._stream(scope, stream)
                raise TxnNotFoundError(txn_id, scope=scope, name=stream)
            if completed.status != final:
                raise IllegalTxnTransitionError(
                    txn_id, completed.status.name, f"mark {final.name}", scope=scope, name=stream
                )
            return
        if info.record.status != sealed:
            raise IllegalTxnTransitionError(
                txn_id, info.record.status.name, f"mark {final.name}", scope=scope, name=stream
            )
        path = self._sp(scope, stream, "completed", txn_id.hex)
        await self._create_in_stream(scope, stream, path, CompletedTxnRecord(info.epoch, self._clock_ms(), final))
        with contextlib.suppress(NodeNotFoundError):
            await self._coord.delete(self._txn_path(scope, stream, info.epoch, txn_id))

    async def purge_completed_txns(self, scope: str, stream: str, completed_before_ms: int) -> int:
        """Delete completed records older than ``completed_before_ms``; returns how many."""
        try:
            names = await self._coord.children(self._sp(scope, stream, "completed"))
        except NodeNotFoundError:
            await self._stream(scope, stream)
            return 0
        purged = 0
        for name in names:
            path = self._sp(scope, stream, "completed", name)
            found = await self._get_opt(path, CompletedTxnRecord)
            if found is not None and found[0].complete_time_ms < completed_before_ms:
                try:
                    await self._coord.delete(path, found[1])
                    purged += 1
                except (NodeNotFoundError, BadVersionError):
                    pass
        return purged

    # ---- rolling transactions ---------------------------------------------------------------------------------
    async def start_rolling_txn(self, scope: str, stream: str, active_epoch: int) -> tuple[CommittingTxnsRecord, int]:
        """Note in the batch record that it commits by rolling over ``active_epoch`` (idempotent)."""
        record, version = await self.get_commit_batch(scope, stream)
        if record.is_empty:
            raise IllegalStreamStateError("no commit batch in progress", scope=scope, name=stream)
        if record.is_rolling:
            return record, version
        current, _ = await self._current(scope, stream)
        if current.epoch != active_epoch:
            raise IllegalStreamStateError(
                f"active epoch is {current.epoch}, not {active_epoch}", scope=scope, name=stream
            )
        if record.epoch == current.reference_epoch:
            raise IllegalStreamStateError("the batch's epoch is active: no rolling needed", scope=scope, name=stream)
        update = dataclasses.replace(record, active_epoch=active_epoch)
        new_version = await self._cas(
            self._sp(scope, stream, "committing"), update, version, scope=scope, name=stream, what="committing record"
        )
        return update, new_version

    async def _rolling_record(self, scope: str, stream: str) -> CommittingTxnsRecord:
        record, _ = await self.get_commit_batch(scope, stream)
        if not record.is_rolling:
            raise IllegalStreamStateError("no rolling transaction in progress", scope=scope, name=stream)
        return record

    async def rolling_txn_create_duplicate_epochs(
        self, scope: str, stream: str, sealed_txn_epoch_sizes: Mapping[int, int], time_ms: int
    ) -> tuple[EpochRecord, EpochRecord]:
        """Write epoch ``active + 1`` (duplicate of the transaction epoch) and ``active + 2``
        (duplicate of the active epoch) with their history entries, and record the sizes of the
        sealed duplicate transaction-epoch segments. Idempotent; returns both epochs."""
        record = await self._rolling_record(scope, stream)
        uid = (await self._stream(scope, stream)).uid
        active_epoch = record.new_active_epoch - 2
        current, _ = await self._current(scope, stream)
        if current.epoch > active_epoch:
            epochs = await self._epochs(scope, stream, uid, record.new_txn_epoch, record.new_active_epoch)
            return epochs[record.new_txn_epoch], epochs[record.new_active_epoch]
        active = await self._epoch(scope, stream, uid, active_epoch)
        txn_epoch = await self._epoch(scope, stream, uid, record.epoch)
        dup_txn, dup_active = build_rolling_epochs(active, txn_epoch, time_ms)
        dup_txn = await self._create_epoch(scope, stream, uid, dup_txn)
        dup_active = await self._create_epoch(scope, stream, uid, dup_active)
        await self._record_sealed_sizes(scope, stream, sealed_txn_epoch_sizes)
        return dup_txn, dup_active

    async def complete_rolling_txn(
        self, scope: str, stream: str, sealed_active_epoch_sizes: Mapping[int, int]
    ) -> EpochRecord:
        """Record the sizes of the sealed (old) active segments and make ``active + 2`` the active
        epoch. Idempotent; returns the new active epoch."""
        record = await self._rolling_record(scope, stream)
        uid = (await self._stream(scope, stream)).uid
        current, _ = await self._current(scope, stream)
        if current.epoch == record.new_active_epoch - 2:
            if not await self._coord.exists(self._sp(scope, stream, "epochs", record.new_active_epoch)):
                raise DataNotFoundError(f"epoch {record.new_active_epoch} not created yet", scope=scope, name=stream)
            await self._record_sealed_sizes(scope, stream, sealed_active_epoch_sizes)
            return await self._update_current_epoch(scope, stream, uid, record.new_active_epoch)
        return await self._epoch(scope, stream, uid, record.new_active_epoch)
