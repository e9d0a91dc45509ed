"""Helpers of the file ledger log's unit tests: a test body runner, configurations, a coordination store that
fails on demand (it delegates to the real one), and appends/reads of whole logs."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from segment_store.tier1.file.config import FileLedgerLogConfig
from segment_store.tier1.file.ledger_log import FileLedgerLog
from segment_store.tier1.log import ReadItem
from segstore_shared.coordination.store import CoordinationStore, CoordinationUnavailableError, Versioned

TIMEOUT_S = 30.0


def run(body: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(asyncio.wait_for(body(), TIMEOUT_S))


def make_config(tmp_path: Path, **overrides: Any) -> FileLedgerLogConfig:
    settings: dict[str, Any] = {"root_dir": tmp_path, "fsync": False, "coordination_timeout_s": 2.0}
    settings.update(overrides)
    return FileLedgerLogConfig(**settings)


class FlakyStore:
    """A real coordination store whose next CAS / syncs fail as a lost connection would."""

    def __init__(self, inner: CoordinationStore) -> None:
        self.inner = inner
        self.lose_reply_of_next_cas = False  # the CAS applies, the caller sees a connection loss
        self.lose_next_cas = False  # the CAS is lost before it reaches the server
        self.fail_syncs = False

    async def compare_and_set(self, path: str, data: bytes, expected_version: int) -> int:
        if self.lose_next_cas:
            self.lose_next_cas = False
            raise CoordinationUnavailableError("injected loss", path)
        version = await self.inner.compare_and_set(path, data, expected_version)
        if self.lose_reply_of_next_cas:
            self.lose_reply_of_next_cas = False
            raise CoordinationUnavailableError("injected reply loss", path)
        return version

    async def sync(self, path: str) -> None:
        if self.fail_syncs:
            raise CoordinationUnavailableError("injected sync failure", path)
        await self.inner.sync(path)

    async def get(self, path: str) -> Versioned:
        return await self.inner.get(path)

    async def read_linearized(self, path: str) -> Versioned | None:
        if self.fail_syncs:
            raise CoordinationUnavailableError("injected sync failure", path)
        return await self.inner.read_linearized(path)

    async def create(self, path: str, data: bytes, *, ephemeral: bool = False, make_parents: bool = True) -> int:
        return await self.inner.create(path, data, ephemeral=ephemeral, make_parents=make_parents)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def open_log(config: FileLedgerLogConfig, store: Any, **kwargs: Any) -> FileLedgerLog:
    log = FileLedgerLog("log", config, store, **kwargs)
    await log.initialize(timeout=10)
    return log


async def append_each(log: FileLedgerLog, count: int, size: int = 100) -> list[ReadItem]:
    """Append one entry per group (each awaited), so every entry is its own group commit."""
    written = []
    for index in range(count):
        data = bytes([index % 251]) * size
        written.append(ReadItem(await log.append(data), data))
    return written


async def read_all(log: FileLedgerLog) -> list[ReadItem]:
    return [item async for item in log.read()]
