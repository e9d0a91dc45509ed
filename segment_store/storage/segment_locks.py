"""Per-segment asyncio locks for :class:`~segment_store.storage.chunked_storage.ChunkedStorage`."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator


class SegmentLocks:
    """One asyncio lock per segment name, dropped when nobody holds or waits for it."""

    def __init__(self) -> None:
        self._entries: dict[str, tuple[asyncio.Lock, list[int]]] = {}

    @contextlib.asynccontextmanager
    async def hold(self, *names: str) -> AsyncIterator[None]:
        ordered = sorted(set(names))  # one global order: no deadlock between concat and others
        entries = []
        for name in ordered:
            entry = self._entries.setdefault(name, (asyncio.Lock(), [0]))
            entry[1][0] += 1
            entries.append(entry)
        locked: list[asyncio.Lock] = []
        try:
            for lock, _ in entries:
                await lock.acquire()
                locked.append(lock)
            yield
        finally:
            for lock in reversed(locked):
                lock.release()
            for name, (_, users) in zip(ordered, entries, strict=True):
                users[0] -= 1
                if users[0] == 0:
                    del self._entries[name]
