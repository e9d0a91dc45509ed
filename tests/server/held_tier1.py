"""A Tier-1 whose write acknowledgements can be held back: slow Tier-1 writes, on demand, for server tests.

:class:`HeldLogFactory` wraps the real in-memory Tier-1. While its :class:`Tier1Gate` is held, every
entry is written at once but its acknowledgement waits; :meth:`Tier1Gate.release` acknowledges the
held entries in log order (the log's contract: call order = completion order), and later writes
complete at once again. So the durable log pre-processes operations (validation, pending metadata)
while none of them becomes durable, as with a slow bookie.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from segment_store.tier1.log import DurableDataLog, LogAddress, ReadItem
from segment_store.tier1.memory_log import InMemoryDurableDataLogFactory


class Tier1Gate:
    def __init__(self) -> None:
        self.holding = False
        self._held: list[tuple[asyncio.Future[LogAddress], LogAddress]] = []

    def hold(self) -> None:
        self.holding = True

    def release(self) -> None:
        self.holding = False
        held, self._held = self._held, []
        for future, address in held:
            if not future.done():  # the durable log may have given up on it (closed)
                future.set_result(address)

    @property
    def held_count(self) -> int:
        return len(self._held)

    def _delay(self, written: asyncio.Future[LogAddress]) -> asyncio.Future[LogAddress]:
        if not self.holding:
            return written
        held: asyncio.Future[LogAddress] = asyncio.get_running_loop().create_future()
        self._held.append((held, written.result()))
        return held


class HeldLog:
    """A ``DurableDataLog`` whose appends are acknowledged when its gate lets them."""

    def __init__(self, inner: DurableDataLog, gate: Tier1Gate) -> None:
        self._inner = inner
        self._gate = gate

    @property
    def epoch(self) -> int:
        return self._inner.epoch

    @property
    def max_append_length(self) -> int:
        return self._inner.max_append_length

    async def initialize(self, timeout: float = 60.0) -> None:
        await self._inner.initialize(timeout)

    def append(self, data: bytes | bytearray) -> asyncio.Future[LogAddress]:
        return self._gate._delay(self._inner.append(data))

    def read(self) -> AsyncIterator[ReadItem]:
        return self._inner.read()

    async def truncate(self, upto: LogAddress) -> None:
        await self._inner.truncate(upto)

    async def close(self) -> None:
        await self._inner.close()


class HeldLogFactory:
    """``DurableDataLogFactory`` of in-memory logs that share one :class:`Tier1Gate`."""

    def __init__(self, gate: Tier1Gate) -> None:
        self.gate = gate
        self._inner = InMemoryDurableDataLogFactory()

    async def initialize(self) -> None:
        await self._inner.initialize()

    def create_log(self, log_id: int) -> HeldLog:
        return HeldLog(self._inner.create_log(log_id), self.gate)

    async def close(self) -> None:
        await self._inner.close()
