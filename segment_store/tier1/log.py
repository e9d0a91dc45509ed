"""The Tier-1 port: a durable, fenced, append-only log of opaque entries (data frames).

After Pravega's ``DurableDataLog``: the durable log of a segment container writes its
data frames here and reads them back only for recovery, right after acquiring the log.
Implementations: :class:`segment_store.tier1.memory_log.InMemoryDurableDataLog` (tests)
and :class:`segment_store.tier1.file.ledger_log.FileLedgerLog` (files + coordination
store, after DistributedLog/BookKeeper). Both pass ``tests/segment_store/tier1/test_durable_data_log.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from segstore_shared.errors import RetriableError, SegstoreError

ENTRY_ID_BITS = 32
MAX_ENTRY_ID = (1 << ENTRY_ID_BITS) - 1


@dataclass(frozen=True, slots=True, order=True)
class LogAddress:
    """Where an entry lives: ledger, entry within the ledger, and the epoch that wrote it.

    Addresses are totally ordered by ``(ledger_id, entry_id)``, which is the log order;
    ``sequence`` packs that pair into one monotonically increasing integer
    (``ledger_id << 32 | entry_id``). The ``epoch`` is carried for diagnostics and does
    not take part in comparisons (one ledger is only ever written by one epoch).
    """

    ledger_id: int
    entry_id: int
    epoch: int = field(compare=False)

    def __post_init__(self) -> None:
        if self.ledger_id < 0 or not 0 <= self.entry_id <= MAX_ENTRY_ID:
            raise ValueError(f"invalid log address {self.ledger_id}/{self.entry_id}")

    @property
    def sequence(self) -> int:
        """The address as one integer, increasing along the log."""
        return (self.ledger_id << ENTRY_ID_BITS) | self.entry_id

    def __str__(self) -> str:
        return f"{self.ledger_id}:{self.entry_id}@e{self.epoch}"


class ReadItem(NamedTuple):
    """One entry returned by :meth:`DurableDataLog.read`."""

    address: LogAddress
    payload: bytes


class DurableDataLogError(SegstoreError):
    """Base of Tier-1 errors."""


class DataLogWriterNotPrimaryError(DurableDataLogError):
    """This instance lost (or could not acquire) ownership of the log: another instance
    bumped the epoch. Never retriable on this instance; a new instance may initialize."""


class DataLogNotAvailableError(RetriableError, DurableDataLogError):
    """The log's backing services (coordination store, disk) cannot be reached now."""


class WriteTooLongError(DurableDataLogError):
    """An append is longer than :attr:`DurableDataLog.max_append_length`."""

    def __init__(self, length: int, max_length: int) -> None:
        super().__init__(f"append of {length} bytes exceeds the maximum of {max_length}")
        self.length = length
        self.max_length = max_length


class DataLogCorruptedError(DurableDataLogError):
    """Data that the log acknowledged (or its metadata) is damaged or missing; recovery
    must not silently skip it. Also raised when the log's storage came back shorter than
    the position its metadata records as acknowledged (a rolled-back stream or ledger
    file); the message then names the log, the stream or ledger, and both positions."""


class DataLogInitializationError(DurableDataLogError):
    """Initialization failed for a reason other than fencing or unavailability."""


class DataLogWriteError(DurableDataLogError):
    """Writing or syncing an entry failed (e.g. ``fsync`` error). The instance closes; a new
    instance recovers whatever reached the disk."""


class DataLogClosedError(DurableDataLogError):
    """The instance was closed (explicitly or after a failure)."""


class DataLogNotInitializedError(DurableDataLogError):
    """The call needs a successful :meth:`DurableDataLog.initialize` first."""


class DurableDataLog(Protocol):
    """A fenced, append-only log; one instance is one would-be owner of one log.

    **Ownership.** :meth:`initialize` makes this instance the only writer: it bumps the
    log's epoch, fences the previous owner and recovers what it wrote. From then on, an
    older instance's appends fail with :class:`DataLogWriterNotPrimaryError`, and no append
    it had not been acknowledged before the fence is ever acknowledged later.

    **No rollback.** The log records in its metadata, at the updates it makes anyway
    (acquiring the epoch, truncation, ledger roll-over), a position it has already
    acknowledged (never one that is not yet durable). :meth:`initialize` (or :meth:`read`,
    for a position inside a closed ledger) refuses with :class:`DataLogCorruptedError` a log
    whose storage ends before that position, instead of recovering a shorter log and
    reusing its positions. Entries acknowledged after the last such update are not covered
    (the implementations' docstrings say exactly which); metadata without the position
    (written by an older version) is not checked.

    **Appends.** :meth:`append` is a plain (non-async) method that places the entry in
    the log's order *when it is called* and returns a future; callers may issue many
    appends without awaiting each. Guarantees:

    - log order = call order = completion order;
    - a completed append is durable, and every earlier append completed successfully;
    - when an append fails, every later append that was in flight fails too (same error
      class), and the instance stops accepting appends. A failed append may still appear
      in the log after recovery (it reached the disk but was never acknowledged); callers
      must treat its outcome as unknown. Cancelling the returned future does not withdraw
      the entry.

    ``append`` raises synchronously (the entry is rejected and nothing changes) with
    :class:`WriteTooLongError`, :class:`DataLogNotInitializedError`,
    :class:`DataLogClosedError` or :class:`DataLogWriterNotPrimaryError` (fencing already
    known). The future fails with :class:`DataLogWriterNotPrimaryError`,
    :class:`DataLogNotAvailableError`, :class:`DataLogWriteError` or
    :class:`DataLogClosedError`.

    All methods must be called from the event loop thread that initialized the log.
    """

    @property
    def epoch(self) -> int:
        """The epoch acquired by :meth:`initialize` (strictly larger than any earlier owner's).

        Raises :class:`DataLogNotInitializedError` before initialization.
        """
        ...

    @property
    def max_append_length(self) -> int:
        """The longest payload :meth:`append` accepts, in bytes."""
        ...

    async def initialize(self, timeout: float = 60.0) -> None:
        """Acquire ownership, fence the previous owner, recover, and open for appends.

        Raises :class:`DataLogWriterNotPrimaryError` (another instance won the race),
        :class:`DataLogNotAvailableError` (coordination or disk unavailable, or ``timeout``
        seconds passed), :class:`DataLogCorruptedError`,
        :class:`DataLogInitializationError`. A failed initialize leaves the instance
        unusable (close it and create another).
        """
        ...

    def append(self, data: bytes | bytearray) -> asyncio.Future[LogAddress]:
        """Queue ``data`` as the next entry; the future completes once it is durable.

        See the class docstring for ordering and failure guarantees.
        """
        ...

    def read(self) -> AsyncIterator[ReadItem]:
        """Every entry after the truncation point, in log order (for recovery).

        Meant to be used right after :meth:`initialize`, before appending; entries appended
        by this instance are included up to the last acknowledged one when the iteration
        reaches them. Raises :class:`DataLogCorruptedError` on damaged acknowledged data,
        :class:`DataLogNotInitializedError`, :class:`DataLogClosedError`.
        """
        ...

    async def truncate(self, upto: LogAddress) -> None:
        """Discard every entry at or before ``upto``; later reads start after it.

        The metadata changes first (so a crash never leaves it pointing at deleted data),
        then storage wholly below the point is reclaimed. Raises ``ValueError`` for an
        address beyond the last acknowledged entry, :class:`DataLogWriterNotPrimaryError`,
        :class:`DataLogNotAvailableError`.
        """
        ...

    async def close(self) -> None:
        """Stop; fail appends not yet acknowledged with :class:`DataLogClosedError`; idempotent.

        Ownership is not released: the next owner recovers the log as after a crash.
        """
        ...


class DurableDataLogFactory(Protocol):
    """Creates the :class:`DurableDataLog` of each segment container."""

    async def initialize(self) -> None:
        """Prepare shared resources; raises :class:`DataLogNotAvailableError`."""
        ...

    def create_log(self, log_id: int) -> DurableDataLog:
        """A new, uninitialized instance for the log of container ``log_id``."""
        ...

    async def close(self) -> None:
        """Release shared resources (not the logs' own; close those first)."""
        ...


# -- helpers of the implementations ---------------------------------------------------------


def complete_append(
    future: asyncio.Future[LogAddress], address: LogAddress | None, error: BaseException | None
) -> None:
    """Complete an append's future with its address, or fail it; a future the caller cancelled is left alone
    (cancelling does not withdraw the entry)."""
    if future.done():
        return
    if error is None:
        assert address is not None
        future.set_result(address)
    else:
        future.set_exception(error)


def with_cause(error: DurableDataLogError, cause: BaseException) -> DurableDataLogError:
    """``error`` with ``cause`` as its ``__cause__`` (for errors built before they are raised)."""
    error.__cause__ = cause
    return error
