"""In-memory Tier-1 log with epoch fencing, for tests of the layers above.

A :class:`InMemoryDurableDataLogFactory` keeps one :class:`SharedLogState` per log id,
standing in for the durable storage and its metadata: every instance created for the
same id sees the same entries, and a second instance's :meth:`initialize` bumps the
shared epoch, which fences the first (its later appends and truncations raise
:class:`DataLogWriterNotPrimaryError`). Each epoch writes its own "ledger" (ledger id =
epoch), so addresses keep increasing across owners. Appends complete at once (nothing is
slower than memory); they still return futures, completed in call order.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from segment_store.tier1.log import (
    MAX_ENTRY_ID,
    DataLogClosedError,
    DataLogNotInitializedError,
    DataLogWriterNotPrimaryError,
    LogAddress,
    ReadItem,
    WriteTooLongError,
)

DEFAULT_MAX_APPEND_LENGTH = 1024 * 1024 + 8 * 1024


@dataclass
class SharedLogState:
    """What survives an instance: the entries, the epoch and the truncation point."""

    epoch: int = 0
    entries: list[ReadItem] = field(default_factory=list)
    truncation: LogAddress | None = None


class _State(enum.Enum):
    NEW = "new"
    OPEN = "open"
    FENCED = "fenced"
    CLOSED = "closed"


class InMemoryDurableDataLog:
    """``DurableDataLog`` over a :class:`SharedLogState` (see module docstring)."""

    def __init__(
        self, shared: SharedLogState | None = None, *, max_append_length: int = DEFAULT_MAX_APPEND_LENGTH
    ) -> None:
        self._shared = shared if shared is not None else SharedLogState()
        self._max_append_length = max_append_length
        self._state = _State.NEW
        self._epoch = 0
        self._next_entry = 0

    @property
    def epoch(self) -> int:
        if self._state is _State.NEW:
            raise DataLogNotInitializedError("log is not initialized")
        return self._epoch

    @property
    def max_append_length(self) -> int:
        return self._max_append_length

    async def initialize(self, timeout: float = 60.0) -> None:
        if self._state is not _State.NEW:
            raise DataLogClosedError("initialize may be called once per instance")
        self._shared.epoch += 1
        self._epoch = self._shared.epoch
        self._state = _State.OPEN

    def _check_owner(self) -> None:
        if self._state is _State.NEW:
            raise DataLogNotInitializedError("log is not initialized")
        if self._state is _State.CLOSED:
            raise DataLogClosedError("log is closed")
        if self._state is _State.FENCED or self._shared.epoch != self._epoch:
            self._state = _State.FENCED
            raise DataLogWriterNotPrimaryError(f"epoch {self._epoch} was fenced by epoch {self._shared.epoch}")

    def append(self, data: bytes | bytearray) -> asyncio.Future[LogAddress]:
        self._check_owner()
        if len(data) > self._max_append_length:
            raise WriteTooLongError(len(data), self._max_append_length)
        if self._next_entry > MAX_ENTRY_ID:
            raise DataLogClosedError("ledger is full; re-initialize to continue")
        address = LogAddress(ledger_id=self._epoch, entry_id=self._next_entry, epoch=self._epoch)
        self._next_entry += 1
        self._shared.entries.append(ReadItem(address, bytes(data)))
        future: asyncio.Future[LogAddress] = asyncio.get_running_loop().create_future()
        future.set_result(address)
        return future

    async def read(self) -> AsyncIterator[ReadItem]:
        if self._state is _State.NEW:
            raise DataLogNotInitializedError("log is not initialized")
        if self._state is _State.CLOSED:
            raise DataLogClosedError("log is closed")
        index = 0
        while index < len(self._shared.entries):
            item = self._shared.entries[index]
            index += 1
            truncation = self._shared.truncation
            if truncation is None or item.address > truncation:
                yield item
            await asyncio.sleep(0)

    async def truncate(self, upto: LogAddress) -> None:
        self._check_owner()
        current = self._shared.truncation
        if current is not None and upto <= current:
            return
        entries = self._shared.entries
        if not entries or upto > entries[-1].address:
            raise ValueError(f"cannot truncate at {upto}: beyond the last entry")
        self._shared.truncation = upto
        self._shared.entries = [item for item in entries if item.address > upto]

    async def close(self) -> None:
        self._state = _State.CLOSED


class InMemoryDurableDataLogFactory:
    """``DurableDataLogFactory`` whose logs share state per log id (see module docstring)."""

    def __init__(self, *, max_append_length: int = DEFAULT_MAX_APPEND_LENGTH) -> None:
        self._max_append_length = max_append_length
        self._logs: dict[int, SharedLogState] = {}

    async def initialize(self) -> None:
        return None

    def create_log(self, log_id: int) -> InMemoryDurableDataLog:
        shared = self._logs.setdefault(log_id, SharedLogState())
        return InMemoryDurableDataLog(shared, max_append_length=self._max_append_length)

    async def close(self) -> None:
        return None
