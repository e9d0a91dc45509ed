"""Transactions: events that become visible in the stream all at once, at commit, or never.

:meth:`TransactionalEventStreamWriter.begin` asks the controller to open a transaction; the controller
creates one transaction segment per segment of the stream's current epoch and returns them. A
:class:`Transaction` routes each event by its routing key over *those* segments (the transaction's key
space does not change when the stream scales: the controller rolls a committing transaction over a scale
on the server side) and appends it to the matching transaction segment
(``transaction_segment_name(parent, txn_id)``) through an append session.

Invariants:

* Nothing written in a transaction is readable in the stream before :meth:`Transaction.commit`; after a
  successful commit all of it is, each segment's part in write order (so per routing key order holds);
  after :meth:`Transaction.abort` none of it ever is.
* ``commit`` first waits until every event is stored in its transaction segment (``flush``), then asks the
  controller to commit; a failed write fails the commit (the transaction stays open: abort it).
* After ``commit`` or ``abort`` the transaction takes no more events (TransactionClosedError).
* The lease: the controller aborts a transaction not pinged within its lease; ``ping`` extends it.

Use from one event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

from controller_client.model import SegmentRange, TxnState, qualified_segment_name, transaction_segment_name
from controller_client.ports import ControllerApi
from controller_client.writers.event_writer import session_writer_id
from controller_client.writers.routing import KeyHasher, SegmentMap
from segment_store.client import RetryPolicy, SegmentClient, SegmentWriter, WriterConfig
from segstore_shared.errors import SegstoreError

_T = TypeVar("_T")


class TransactionClosedError(SegstoreError):
    """The transaction was committed or aborted (or its writer closed); it takes no more events."""

    def __init__(self, txn_id: uuid.UUID, state: str) -> None:
        super().__init__(f"transaction {txn_id} is {state}")
        self.txn_id = txn_id


@dataclass(frozen=True, slots=True)
class TxnWriterConfig:
    """A transactional writer."""

    lease_ms: int = 30_000
    """Lease asked for at ``begin``; the controller aborts a transaction not pinged within it."""
    segment_writer: WriterConfig | None = None
    """Append session settings of the transaction segments; None: the client's."""
    controller_retry: RetryPolicy = field(default_factory=lambda: RetryPolicy(max_attempts=10, max_delay_ms=2_000))
    """Retries of controller calls that fail retriably (controller unavailable)."""

    def __post_init__(self) -> None:
        if self.lease_ms <= 0:
            raise ValueError("lease_ms: must be positive")


class Transaction:
    """One open transaction; make it with :meth:`TransactionalEventStreamWriter.begin`."""

    def __init__(
        self,
        owner: TransactionalEventStreamWriter,
        txn_id: uuid.UUID,
        segments: list[SegmentRange],
    ) -> None:
        self.txn_id = txn_id
        self.scope = owner.scope
        self.stream = owner.stream
        self.segments = list(segments)
        self._owner = owner
        self._map = SegmentMap.of(segments)
        self._writers: dict[int, SegmentWriter] = {}
        self._state: str | None = None  # None: open; else "committed", "aborted", "closed"
        self._lock = asyncio.Lock()

    @property
    def is_open(self) -> bool:
        return self._state is None

    def _check_open(self) -> None:
        if self._state is not None:
            raise TransactionClosedError(self.txn_id, self._state)

    def segment_name(self, segment: SegmentRange) -> str:
        """The transaction segment of ``segment``."""
        return transaction_segment_name(
            qualified_segment_name(self.scope, self.stream, segment.segment_id), self.txn_id
        )

    async def write_event(self, event: bytes, routing_key: str | None = None) -> asyncio.Future[None]:
        """Queue ``event`` in the transaction; the future completes when it is stored in its transaction
        segment (visible in the stream only after commit). Raises TransactionClosedError."""
        self._check_open()
        segment = self._map.segment_for(self._owner.hasher.position(routing_key))
        async with self._lock:  # keeps call order = append order per segment
            self._check_open()
            writer = self._writers.get(segment.segment_id)
            if writer is None:
                name = self.segment_name(segment)
                writer = self._owner.client.writer(
                    name, session_writer_id(self._owner.writer_id, name), self._owner.config.segment_writer
                )
                self._writers[segment.segment_id] = writer
            return await writer.write(event)

    async def flush(self) -> None:
        """Wait until every event written so far is stored in its transaction segment."""
        self._check_open()
        for writer in list(self._writers.values()):
            await writer.flush()

    async def commit(self, timestamp_ms: int | None = None) -> None:
        """Flush, then commit: every event becomes visible at once. With ``timestamp_ms`` (> 0) the writer notes
        that time once the transaction is in the stream, as ``EventStreamWriter.note_time`` does (watermarks).
        Raises a write failure (the transaction stays open), TxnFailedError/TxnNotFoundError from the controller,
        TransactionClosedError."""
        self._check_open()
        await self.flush()
        await self._end_sessions()
        writer, time_ms = (str(self._owner.writer_id), timestamp_ms) if timestamp_ms else ("", 0)
        await self._owner.controller_call(
            lambda: self._owner.controller.commit_transaction(self.scope, self.stream, self.txn_id, writer, time_ms)
        )
        self._state = "committed"

    async def abort(self) -> None:
        """Drop every event of the transaction. Raises TxnFailedError/TxnNotFoundError from the controller."""
        self._check_open()
        self._state = "aborted"
        await self._end_sessions(quietly=True)
        await self._owner.controller_call(
            lambda: self._owner.controller.abort_transaction(self.scope, self.stream, self.txn_id)
        )

    async def ping(self, lease_ms: int | None = None) -> None:
        """Extend the lease by ``lease_ms`` (default: the writer's). Raises TxnFailedError if it ran out."""
        lease = self._owner.config.lease_ms if lease_ms is None else lease_ms
        await self._owner.controller_call(
            lambda: self._owner.controller.ping_transaction(self.scope, self.stream, self.txn_id, lease)
        )

    async def check_status(self) -> TxnState:
        """The transaction's state at the controller (OPEN, COMMITTING, COMMITTED, ABORTING, ABORTED)."""
        return await self._owner.controller_call(
            lambda: self._owner.controller.check_transaction_state(self.scope, self.stream, self.txn_id)
        )

    async def wait_for_state(
        self, wanted: frozenset[TxnState] = frozenset({TxnState.COMMITTED, TxnState.ABORTED}), timeout_s: float = 30.0
    ) -> TxnState:
        """Poll :meth:`check_status` until it is one of ``wanted``; returns it. Raises TimeoutError."""
        async with asyncio.timeout(timeout_s):
            delay = 0.005
            while (state := await self.check_status()) not in wanted:
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.5)
            return state

    async def _end_sessions(self, quietly: bool = False) -> None:
        writers = list(self._writers.values())
        self._writers.clear()
        for writer in writers:
            if quietly:
                with contextlib.suppress(Exception):
                    await writer.close()
            else:
                await writer.close()

    async def _close(self) -> None:
        if self._state is None:
            self._state = "closed"
            await self._end_sessions(quietly=True)


class TransactionalEventStreamWriter:
    """Opens transactions on ``scope/stream``; each :class:`Transaction` writes and commits on its own.

    ``close()`` ends the sessions of transactions still open (they stay open at the controller until their
    lease runs out: commit or abort them first).
    """

    def __init__(
        self,
        controller: ControllerApi,
        client: SegmentClient,
        scope: str,
        stream: str,
        config: TxnWriterConfig | None = None,
        writer_id: uuid.UUID | None = None,
        hasher: KeyHasher | None = None,
    ) -> None:
        self.scope = scope
        self.stream = stream
        self.controller = controller
        self.client = client
        self.config = config or TxnWriterConfig()
        self.writer_id = writer_id or uuid.uuid4()
        self.hasher = hasher or KeyHasher()
        self._open: dict[uuid.UUID, Transaction] = {}
        self._closed = False

    async def __aenter__(self) -> TransactionalEventStreamWriter:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def controller_call(self, call: Callable[[], Awaitable[_T]]) -> _T:
        return await self.config.controller_retry.call(call)

    async def begin(self, lease_ms: int | None = None) -> Transaction:
        """Open a transaction. Raises StreamNotFoundError, StreamSealedError, ClientClosedError."""
        if self._closed:
            raise TransactionClosedError(uuid.UUID(int=0), "closed (its writer is closed)")
        lease = self.config.lease_ms if lease_ms is None else lease_ms
        txn_id, segments = await self.controller_call(
            lambda: self.controller.create_transaction(self.scope, self.stream, lease)
        )
        txn = Transaction(self, txn_id, segments)
        self._open = {k: t for k, t in self._open.items() if t.is_open}
        self._open[txn_id] = txn
        return txn

    async def close(self) -> None:
        """End the sessions of the transactions still open. Idempotent."""
        self._closed = True
        for txn in list(self._open.values()):
            await txn._close()
        self._open.clear()
