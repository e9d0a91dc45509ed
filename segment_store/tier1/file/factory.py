"""The factory of file ledger logs: one ledger storage per segment store process, shared by its logs."""

from __future__ import annotations

import asyncio

from segment_store.tier1.file.config import FileLedgerLogConfig
from segment_store.tier1.file.ledger_file import LedgerStorage, OsLedgerStorage
from segment_store.tier1.file.ledger_log import FileLedgerLog
from segment_store.tier1.log import DataLogNotAvailableError
from segstore_shared.coordination.store import CoordinationStore


class FileLedgerLogFactory:
    """``DurableDataLogFactory`` of file ledger logs named ``container-<id>``.

    The coordination store is shared and owned by the caller (the composition root).
    """

    def __init__(
        self, config: FileLedgerLogConfig, store: CoordinationStore, *, storage: LedgerStorage | None = None
    ) -> None:
        self._config = config
        self._store = store
        self._storage = storage if storage is not None else OsLedgerStorage(fsync=config.fsync)

    async def initialize(self) -> None:
        try:
            await asyncio.to_thread(self._storage.make_directory, self._config.root_dir)
        except OSError as exc:
            raise DataLogNotAvailableError(f"cannot create {self._config.root_dir}: {exc}") from exc

    def create_log(self, log_id: int) -> FileLedgerLog:
        if log_id < 0:
            raise ValueError(f"log_id must be >= 0, got {log_id}")
        return FileLedgerLog(f"container-{log_id}", self._config, self._store, storage=self._storage)

    async def close(self) -> None:
        return None
