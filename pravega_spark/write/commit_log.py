"""The sink's durable record of micro-batches, and the exactly-once commit of a batch's transactions.

**Where.** One table segment per target stream, ``<scope>/_sparkcommits.<stream>/0.#epoch.0`` (streams whose
name starts with ``_`` are reserved, so no user stream collides; the controller's ``getURI`` places any such
name). Each key is ``<query id>/<batch id>`` (the batch id zero-padded); the query id is Spark's persistent id
of a streaming query, which it keeps in the checkpoint, so a query restarted from its checkpoint finds its
records and a new query (or a deleted checkpoint) starts afresh. The value is JSON::

    {"state": "pending" | "done", "txns": ["<uuid>", ...], "streams": {"<uuid>": "<scope>/<stream>", ...}}

``streams`` (per-row target streams, :mod:`pravega_spark.write.targets`) names the stream of each transaction that
is not on the committer's stream; it is left out when there is none, so a write to one stream records what it
always did. A write whose rows name their streams, without a ``stream`` option, keeps its records in
``<scope>/_sparkcommits./0.#epoch.0`` (the table of no stream: no stream is named ``""``); with one, in that
stream's table as before. A batch's transactions on several streams are recorded, committed and recovered as one.

**Protocol** (:meth:`BatchCommitter.commit`, run by the driver for ``commit(messages, batchId)``):

1. Read the record of the batch.
2. None: renew the lease of each new transaction (all must still be OPEN; a transaction whose lease ran out
   fails the batch before anything is visible), insert ``pending`` with the new transaction ids (insert-only,
   so two committers cannot both win), commit every transaction (idempotent at the controller), mark the
   record ``done``, then wait until the controller merged them (``wait_committed``).
3. ``done``: the batch was committed by an earlier run (Spark replays a batch whose own commit log entry was
   not written, e.g. after a driver crash). The new transactions are aborted: nothing is written twice.
4. ``pending``: an earlier run crashed between recording and marking done. If no recorded transaction is
   visible (all ABORTED, e.g. their lease ran out), the record is replaced by the new transactions (version
   conditioned) and step 2 continues with them. If every recorded transaction is OPEN, COMMITTING or
   COMMITTED, they are committed (again), the record is marked done and the new transactions are aborted.
   A mix of committed and aborted transactions cannot be repaired: :class:`CommitLogError`.

A transaction the controller no longer knows (UNKNOWN: it forgets completed transactions after
``completed_txn_ttl_s``, one hour by default) makes a ``pending`` record ambiguous; that is raised as
:class:`CommitLogError` too. Only a crash inside the commit step followed by a restart more than an hour later
gets there.

:meth:`BatchCommitter.abort` (Spark's ``abort``) aborts the given transactions except those a record of the
batch holds: a record's transactions belong to the protocol above, which finishes them on the next run.

Old records are removed as batches complete: the record of batch ``N - retain_batches`` goes when batch ``N``
is done (Spark replays only its latest batch).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import json
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from controller_client.errors import TxnFailedError, TxnNotFoundError
from controller_client.model import TxnState
from controller_client.ports import ControllerApi
from pravega_spark.errors import CommitLogError
from segment_store.client import (
    NOT_EXISTS,
    RetryPolicy,
    SegmentAlreadyExistsError,
    SegmentClient,
    TableKeyBadVersionReplyError,
    TableKeyDoesNotExistReplyError,
    WrongHostError,
)

_log = logging.getLogger(__name__)
_T = TypeVar("_T")

PENDING = "pending"
DONE = "done"
TABLE_PREFIX = "_sparkcommits."
RETAIN_BATCHES = 100

CrashHook = Callable[[str, int], None]
"""Called with ``("recorded", batch_id)`` after the pending record is written, and ``("committed", batch_id)``
once the record is marked done and the transactions are committed; tests stop the driver at those points."""


def commit_table_name(scope: str, stream: str) -> str:
    """The table segment holding the sink's batch records for ``scope/stream``."""
    return f"{scope}/{TABLE_PREFIX}{stream}/0.#epoch.0"


def record_key(query_key: str, batch_id: int) -> bytes:
    return f"{query_key}/{batch_id:020d}".encode()


Target = tuple[str, str]
"""``(scope, stream)`` of a transaction."""


@dataclass(frozen=True, slots=True)
class BatchRecord:
    state: str
    txn_ids: tuple[uuid.UUID, ...]
    streams: Mapping[uuid.UUID, Target] = field(default_factory=dict)
    """The stream of each transaction not on the committer's stream (module docstring)."""

    def encode(self) -> bytes:
        value: dict[str, object] = {"state": self.state, "txns": [str(t) for t in self.txn_ids]}
        if self.streams:
            value["streams"] = {str(t): f"{scope}/{stream}" for t, (scope, stream) in self.streams.items()}
        return json.dumps(value).encode()

    @classmethod
    def decode(cls, data: bytes) -> BatchRecord:
        try:
            value = json.loads(data)
            state = value["state"]
            txns = tuple(uuid.UUID(t) for t in value["txns"])
            streams: dict[uuid.UUID, Target] = {}
            for txn, name in value.get("streams", {}).items():
                scope, stream = name.split("/")
                streams[uuid.UUID(txn)] = (scope, stream)
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            raise CommitLogError(f"commit log: unreadable record {data[:200]!r}: {error}") from None
        if state not in (PENDING, DONE):
            raise CommitLogError(f"commit log: unknown state {state!r}")
        return cls(state, txns, streams)


class CommitOutcome(enum.Enum):
    COMMITTED = "committed"
    """The batch's new transactions were committed."""
    ALREADY_DONE = "already_done"
    """An earlier run committed the batch; the new transactions were aborted."""
    RECOVERED = "recovered"
    """An earlier run's recorded transactions were committed; the new ones were aborted."""
    EMPTY = "empty"
    """No transactions: nothing to do."""


class CommitLog:
    """The batch records of one target stream in their table segment."""

    def __init__(
        self,
        client: SegmentClient,
        scope: str,
        stream: str,
        invalidate: Callable[[str], None] | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        self.client = client
        self.table = commit_table_name(scope, stream)
        self._invalidate = invalidate
        self._retry = retry or RetryPolicy(max_attempts=10, max_delay_ms=2_000)
        self._ready = False

    async def _call(self, call: Callable[[], Awaitable[_T]]) -> _T:
        async def attempt() -> _T:
            try:
                return await call()
            except WrongHostError:
                if self._invalidate is not None:
                    self._invalidate(self.table)
                raise

        return await self._retry.call(attempt)

    async def ensure(self) -> None:
        """Create the table segment unless it exists."""
        if self._ready:
            return
        with contextlib.suppress(SegmentAlreadyExistsError):
            await self._call(lambda: self.client.create_table_segment(self.table))
        self._ready = True

    async def get(self, query_key: str, batch_id: int) -> tuple[BatchRecord, int] | None:
        """The record of the batch and its version, or None."""
        await self.ensure()
        key = record_key(query_key, batch_id)
        (entry,) = await self._call(lambda: self.client.read_table(self.table, [key]))
        if entry is None:
            return None
        return BatchRecord.decode(entry.value), entry.version

    async def insert(self, query_key: str, batch_id: int, record: BatchRecord) -> int | None:
        """Write the record if the batch has none; its version, or None if one exists already."""
        await self.ensure()
        key = record_key(query_key, batch_id)
        try:
            (version,) = await self._call(
                lambda: self.client.update_table_entries(self.table, [(key, record.encode(), NOT_EXISTS)])
            )
        except (TableKeyBadVersionReplyError, TableKeyDoesNotExistReplyError):
            return None
        return version

    async def replace(self, query_key: str, batch_id: int, record: BatchRecord, version: int) -> int | None:
        """Overwrite the record if it is still at ``version``; the new version, or None if it changed."""
        key = record_key(query_key, batch_id)
        try:
            (new_version,) = await self._call(
                lambda: self.client.update_table_entries(self.table, [(key, record.encode(), version)])
            )
        except (TableKeyBadVersionReplyError, TableKeyDoesNotExistReplyError):
            return None
        return new_version

    async def forget(self, query_key: str, batch_id: int) -> None:
        """Remove the record of the batch if there is one."""
        key = record_key(query_key, batch_id)
        with contextlib.suppress(TableKeyDoesNotExistReplyError, TableKeyBadVersionReplyError):
            await self._call(lambda: self.client.remove_table_keys(self.table, [key]))


class BatchCommitter:
    """Commits and aborts the transactions of a write on ``scope/stream``, and on the streams ``streams`` names for
    some of them (per-row targets; see the module docstring)."""

    def __init__(
        self,
        controller: ControllerApi,
        log: CommitLog | None,
        scope: str,
        stream: str,
        lease_ms: int,
        wait_committed: bool = True,
        wait_timeout_s: float = 120.0,
        crash_hook: CrashHook | None = None,
        retry: RetryPolicy | None = None,
        poll_interval_s: float = 0.25,
        streams: Mapping[uuid.UUID, Target] | None = None,
    ) -> None:
        """``poll_interval_s``: while waiting for commits, the longest wait between two polls of the transactions'
        states (the first comes after 5 ms, each next one after twice as long). ``streams``: the stream of each
        transaction not on ``scope/stream`` (records read add theirs)."""
        self.controller = controller
        self.log = log
        self.scope = scope
        self.stream = stream
        self.lease_ms = lease_ms
        self.wait_committed = wait_committed
        self.wait_timeout_s = wait_timeout_s
        self.crash_hook = crash_hook
        self._retry = retry or RetryPolicy(max_attempts=10, max_delay_ms=2_000)
        self.poll_interval_s = poll_interval_s
        self.streams: dict[uuid.UUID, Target] = dict(streams or {})

    def _where(self, txn: uuid.UUID) -> Target:
        return self.streams.get(txn, (self.scope, self.stream))

    def _elsewhere(self, txn_ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, Target]:
        """What a record says of ``txn_ids``' streams: those not on the committer's."""
        home = (self.scope, self.stream)
        return {t: self.streams[t] for t in txn_ids if self.streams.get(t, home) != home}

    async def _controller(self, call: Callable[[], Awaitable[_T]]) -> _T:
        return await self._retry.call(call)

    # ---- transactions ---------------------------------------------------------------------------------------

    async def _renew(self, txn_ids: Sequence[uuid.UUID], what: str) -> None:
        """Renew every lease; raises CommitLogError unless all are OPEN."""

        async def ping(txn: uuid.UUID) -> object:
            try:
                return await self._controller(
                    lambda: self.controller.ping_transaction(*self._where(txn), txn, self.lease_ms)
                )
            except (TxnNotFoundError, TxnFailedError) as error:
                raise CommitLogError(
                    f"{what}: transaction {txn} can no longer be committed ({error}); its lease "
                    f"(transactionTimeoutMs={self.lease_ms}) ran out before the driver committed? raise it"
                ) from error

        states = await asyncio.gather(*(ping(t) for t in txn_ids))
        for txn, state in zip(txn_ids, states, strict=True):
            if state != TxnState.OPEN:
                name = state.name if isinstance(state, TxnState) else state
                scope, stream = self._where(txn)
                raise CommitLogError(
                    f"{what}: transaction {txn} of {scope}/{stream} is {name}, not OPEN: its lease "
                    f"(transactionTimeoutMs={self.lease_ms}) ran out before the driver committed; raise it"
                )

    async def _commit_all(self, txn_ids: Sequence[uuid.UUID]) -> None:
        async def commit(txn: uuid.UUID) -> None:
            await self._controller(lambda: self.controller.commit_transaction(*self._where(txn), txn))

        await asyncio.gather(*(commit(t) for t in txn_ids))

    async def _states(self, txn_ids: Sequence[uuid.UUID]) -> list[TxnState]:
        async def state(txn: uuid.UUID) -> TxnState:
            return await self._controller(lambda: self.controller.check_transaction_state(*self._where(txn), txn))

        return list(await asyncio.gather(*(state(t) for t in txn_ids)))

    async def _await_committed(self, txn_ids: Sequence[uuid.UUID], what: str) -> None:
        if not self.wait_committed or not txn_ids:
            return
        pending = list(txn_ids)
        delay = 0.005
        async with asyncio.timeout(self.wait_timeout_s):
            while pending:
                states = await self._states(pending)
                for txn, state in zip(pending, states, strict=True):
                    if state in (TxnState.ABORTING, TxnState.ABORTED):
                        raise CommitLogError(f"{what}: transaction {txn} was aborted while committing")
                pending = [t for t, s in zip(pending, states, strict=True) if s != TxnState.COMMITTED]
                if pending:
                    await asyncio.sleep(min(delay, self.poll_interval_s))
                    delay = min(delay * 2, self.poll_interval_s)

    async def abort_transactions(self, txn_ids: Iterable[uuid.UUID]) -> None:
        """Abort each transaction; ones already gone or ended are left as they are (logged)."""

        async def abort(txn: uuid.UUID) -> None:
            try:
                await self._controller(lambda: self.controller.abort_transaction(*self._where(txn), txn))
            except (TxnNotFoundError, TxnFailedError) as error:
                _log.info("segstore sink: transaction %s not aborted: %s", txn, error)

        await asyncio.gather(*(abort(t) for t in txn_ids))

    async def commit_unlogged(self, txn_ids: Sequence[uuid.UUID], what: str) -> None:
        """Commit without a record (batch writes: Spark calls ``commit`` once per job)."""
        if not txn_ids:
            return
        await self._renew(txn_ids, what)
        await self._commit_all(txn_ids)
        await self._await_committed(txn_ids, what)

    # ---- the protocol ---------------------------------------------------------------------------------------

    def _hook(self, point: str, batch_id: int) -> None:
        if self.crash_hook is not None:
            self.crash_hook(point, batch_id)

    async def commit(self, query_key: str, batch_id: int, txn_ids: Sequence[uuid.UUID]) -> CommitOutcome:
        """Commit batch ``batch_id`` of query ``query_key`` exactly once (module docstring)."""
        log = self.log
        if log is None:
            raise CommitLogError("commit: a streaming commit needs the commit log")
        where = f"{self.scope}/{self.stream}" if self.stream else f"streams of its rows (scope {self.scope})"
        what = f"batch {batch_id} of query {query_key} on {where}"
        new = tuple(dict.fromkeys(txn_ids))
        while True:
            found = await log.get(query_key, batch_id)
            if found is None:
                if not new:
                    return CommitOutcome.EMPTY
                await self._renew(new, what)
                version = await log.insert(query_key, batch_id, BatchRecord(PENDING, new, self._elsewhere(new)))
                if version is None:
                    continue  # another committer recorded the batch meanwhile: handle its record
                await self._finish(query_key, batch_id, new, version, what)
                return CommitOutcome.COMMITTED
            record, version = found
            self.streams.update(record.streams)
            if record.state == DONE:
                await self.abort_transactions(t for t in new if t not in record.txn_ids)
                _log.info("segstore sink: %s was committed before; %d new transaction(s) aborted", what, len(new))
                return CommitOutcome.ALREADY_DONE
            states = await self._states(record.txn_ids)
            visible = {TxnState.COMMITTING, TxnState.COMMITTED}
            gone = {TxnState.ABORTING, TxnState.ABORTED}
            if TxnState.UNKNOWN in states:
                raise CommitLogError(
                    f"{what}: the controller no longer knows the recorded transactions {list(record.txn_ids)} "
                    f"(states {[s.name for s in states]}); whether they were committed cannot be told"
                )
            if all(s in gone for s in states):
                fresh = BatchRecord(PENDING, new, self._elsewhere(new))
                replaced = await log.replace(query_key, batch_id, fresh, version)
                if replaced is None:
                    continue
                _log.warning("segstore sink: %s: recorded transactions were aborted; committing the new ones", what)
                if not new:
                    await log.replace(query_key, batch_id, BatchRecord(DONE, ()), replaced)
                    return CommitOutcome.COMMITTED
                await self._renew(new, what)
                await self._finish(query_key, batch_id, new, replaced, what)
                return CommitOutcome.COMMITTED
            if any(s in gone for s in states):
                raise CommitLogError(
                    f"{what}: recorded transactions are partly committed, partly aborted "
                    f"({dict(zip(map(str, record.txn_ids), (s.name for s in states), strict=True))}); "
                    f"the batch cannot be made exactly once"
                )
            assert all(s in visible or s == TxnState.OPEN for s in states)
            _log.warning("segstore sink: %s: finishing the commit an earlier run recorded", what)
            await self._finish(query_key, batch_id, record.txn_ids, version, what, recorded=True)
            await self.abort_transactions(t for t in new if t not in record.txn_ids)
            return CommitOutcome.RECOVERED

    async def _finish(
        self,
        query_key: str,
        batch_id: int,
        txn_ids: tuple[uuid.UUID, ...],
        version: int,
        what: str,
        recorded: bool = False,
    ) -> None:
        assert self.log is not None
        if not recorded:
            self._hook("recorded", batch_id)
        await self._commit_all(txn_ids)
        done = BatchRecord(DONE, txn_ids, self._elsewhere(txn_ids))
        if await self.log.replace(query_key, batch_id, done, version) is None:
            raise CommitLogError(f"{what}: the record changed while committing (two drivers on one query?)")
        await self._await_committed(txn_ids, what)
        self._hook("committed", batch_id)
        if batch_id >= RETAIN_BATCHES:
            await self.log.forget(query_key, batch_id - RETAIN_BATCHES)

    async def abort(self, query_key: str | None, batch_id: int, txn_ids: Sequence[uuid.UUID]) -> None:
        """Abort the transactions, except those the batch's record holds (the protocol finishes them)."""
        keep: set[uuid.UUID] = set()
        if self.log is not None and query_key is not None:
            found = await self.log.get(query_key, batch_id)
            if found is not None:
                keep = set(found[0].txn_ids)
                self.streams.update(found[0].streams)
        await self.abort_transactions(t for t in dict.fromkeys(txn_ids) if t not in keep)
