"""Faults of the file ledger log, injected by wrappers around the real file and store adapters.

Files are real (under tmp_path); the coordination store is the in-process one. No mocks
replace a component: the wrappers delegate to the real adapters and fail on demand.
"""

from __future__ import annotations

import asyncio
import errno
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from ledger_helpers import FlakyStore, append_each, make_config, open_log, read_all, run

from segment_store.tier1.file.config import FileLedgerLogConfig
from segment_store.tier1.file.ledger_file import (
    ENTRY_HEADER,
    FILE_HEADER,
    LedgerSink,
    OsLedgerStorage,
    ledger_file_name,
)
from segment_store.tier1.file.ledger_log import FileLedgerLog
from segment_store.tier1.log import (
    DataLogClosedError,
    DataLogCorruptedError,
    DataLogNotAvailableError,
    DataLogWriteError,
    LogAddress,
)
from segstore_shared.coordination.memory_store import MemoryCoordinationServer
from segstore_shared.coordination.store import CoordinationStore

pytestmark = pytest.mark.unit


class FailingSyncStorage(OsLedgerStorage):
    """The real file storage, whose ledger syncs raise EIO while ``failing`` is set."""

    def __init__(self) -> None:
        super().__init__(fsync=True)
        self.failing = False
        self.failed_syncs = 0

    def create(self, path: Path) -> LedgerSink:
        return _FailingSink(super().create(path), self)


class _FailingSink:
    def __init__(self, inner: LedgerSink, owner: FailingSyncStorage) -> None:
        self._inner = inner
        self._owner = owner

    def write(self, buffers: Sequence[bytes | memoryview]) -> None:
        self._inner.write(buffers)

    def sync(self) -> None:
        if self._owner.failing:
            self._owner.failed_syncs += 1
            raise OSError(errno.EIO, "injected fsync failure")
        self._inner.sync()

    def close(self) -> None:
        self._inner.close()


def ledger_path(config: FileLedgerLogConfig, log: FileLedgerLog, address: LogAddress) -> Path:
    return config.root_dir / log.name / ledger_file_name(address.ledger_id, address.epoch)


def entry_offset(entry_id: int, size: int = 100) -> int:
    return FILE_HEADER.size + entry_id * (ENTRY_HEADER.size + size)


def flip_byte(path: Path, offset: int) -> None:
    with open(path, "r+b") as file:
        file.seek(offset)
        value = file.read(1)[0]
        file.seek(offset)
        file.write(bytes([value ^ 0x40]))


@pytest.mark.parametrize("tear", ["truncated", "zeros"])
def test_recover_with_torn_last_entry(tmp_path: Path, tear: str) -> None:
    """The file cut in the middle of its last entry, or zeros where that entry's end was (a crash can make
    a file's size durable before its data, as ext4 may after a power loss): a torn tail either way."""

    async def body() -> None:
        config, store = make_config(tmp_path), MemoryCoordinationServer().connect()
        log = await open_log(config, store)
        written = await append_each(log, 6)
        await log.close()
        path = ledger_path(config, log, written[0].address)
        with open(path, "r+b") as file:
            cut = entry_offset(5) + ENTRY_HEADER.size + 40  # mid-payload of entry 5
            if tear == "truncated":
                file.truncate(cut)
            else:
                file.seek(cut)
                file.write(bytes(60))  # to the entry's end
        recovered = await open_log(config, store)
        assert await read_all(recovered) == written[:5]
        more = await append_each(recovered, 2)
        await recovered.close()
        assert await read_all(await open_log(config, store)) == written[:5] + more

    run(body)


def test_recover_with_zeroed_entry_in_the_middle_is_corruption(tmp_path: Path) -> None:
    """Zeros over a synced entry are damage, not a tail: later entries prove it was synced."""

    async def body() -> None:
        config, store = make_config(tmp_path), MemoryCoordinationServer().connect()
        log = await open_log(config, store)
        written = await append_each(log, 6)
        await log.close()
        with open(ledger_path(config, log, written[0].address), "r+b") as file:
            file.seek(entry_offset(2))
            file.write(bytes(ENTRY_HEADER.size + 100))
        with pytest.raises(DataLogCorruptedError):
            await read_all(await open_log(config, store))

    run(body)


def test_recover_with_torn_entry_header(tmp_path: Path) -> None:
    async def body() -> None:
        config, store = make_config(tmp_path), MemoryCoordinationServer().connect()
        log = await open_log(config, store)
        written = await append_each(log, 4)
        await log.close()
        with open(ledger_path(config, log, written[0].address), "r+b") as file:
            file.truncate(entry_offset(3) + 5)
        assert await read_all(await open_log(config, store)) == written[:3]

    run(body)


def test_recover_with_garbage_after_last_entry(tmp_path: Path) -> None:
    async def body() -> None:
        config, store = make_config(tmp_path), MemoryCoordinationServer().connect()
        log = await open_log(config, store)
        written = await append_each(log, 5)
        await log.close()
        with open(ledger_path(config, log, written[0].address), "ab") as file:
            file.write(b"\x00\x00\x01\x00garbage that is not an entry" * 50)
        recovered = await open_log(config, store)
        assert await read_all(recovered) == written
        more = await append_each(recovered, 1)
        await recovered.close()
        assert await read_all(await open_log(config, store)) == written + more

    run(body)


def test_recover_with_crc_flip_in_the_middle(tmp_path: Path) -> None:
    async def body() -> None:
        config, store = make_config(tmp_path), MemoryCoordinationServer().connect()
        log = await open_log(config, store)
        written = await append_each(log, 8)
        await log.close()
        flip_byte(ledger_path(config, log, written[0].address), entry_offset(3) + ENTRY_HEADER.size + 10)
        with pytest.raises(DataLogCorruptedError):
            await open_log(config, store)

    run(body)


def test_recover_with_length_flip_in_the_middle(tmp_path: Path) -> None:
    async def body() -> None:
        config, store = make_config(tmp_path), MemoryCoordinationServer().connect()
        log = await open_log(config, store)
        written = await append_each(log, 8)
        await log.close()
        flip_byte(ledger_path(config, log, written[0].address), entry_offset(2) + 2)  # length field
        with pytest.raises(DataLogCorruptedError):
            await open_log(config, store)

    run(body)


def test_read_with_crc_flip_in_closed_ledger(tmp_path: Path) -> None:
    async def body() -> None:
        config, store = make_config(tmp_path), MemoryCoordinationServer().connect()
        log = await open_log(config, store)
        written = await append_each(log, 8)
        await log.close()
        await (await open_log(config, store)).close()  # closes the ledger at entry 7
        flip_byte(ledger_path(config, log, written[0].address), entry_offset(7) + ENTRY_HEADER.size + 1)
        reader = await open_log(config, store)
        with pytest.raises(DataLogCorruptedError):
            await read_all(reader)

    run(body)


def test_read_with_missing_ledger_file(tmp_path: Path) -> None:
    async def body() -> None:
        config, store = make_config(tmp_path), MemoryCoordinationServer().connect()
        log = await open_log(config, store)
        written = await append_each(log, 3)
        await log.close()
        await (await open_log(config, store)).close()
        ledger_path(config, log, written[0].address).unlink()
        reader = await open_log(config, store)
        with pytest.raises(DataLogCorruptedError):
            await read_all(reader)

    run(body)


def test_recover_with_hole_in_last_group(tmp_path: Path) -> None:
    """Damage in the first entry of the last group, later entries of that group intact: a
    torn tail (the group may never have finished syncing), cut off, not corruption."""

    async def body() -> None:
        config, store = make_config(tmp_path), MemoryCoordinationServer().connect()
        log = await open_log(config, store)
        first = await append_each(log, 3)
        group = [log.append(bytes([9]) * 100) for _ in range(3)]  # one group: entries 3..5
        await asyncio.gather(*group)
        await log.close()
        with open(ledger_path(config, log, first[0].address), "r+b") as file:
            file.seek(entry_offset(3) + ENTRY_HEADER.size)
            file.write(b"\x00" * 100)
        assert await read_all(await open_log(config, store)) == first

    run(body)


class RecordingStorage(OsLedgerStorage):
    """The real file storage, logging which ledger files recovery synced."""

    def __init__(self, events: list[str]) -> None:
        super().__init__(fsync=True)
        self.events = events

    def sync_file(self, path: Path) -> None:
        super().sync_file(path)
        self.events.append(f"sync {path.name}")


class RecordingStore(FlakyStore):
    def __init__(self, inner: CoordinationStore, events: list[str]) -> None:
        super().__init__(inner)
        self.events = events

    async def compare_and_set(self, path: str, data: bytes, expected_version: int) -> int:
        version = await super().compare_and_set(path, data, expected_version)
        self.events.append(f"cas {version}")
        return version


def test_recover_with_old_ledger_synced_before_it_is_closed(tmp_path: Path) -> None:
    """Entries the old owner wrote but never synced become durable before the metadata
    records the ledger as closed after them."""

    async def body() -> None:
        events: list[str] = []
        config = make_config(tmp_path, fsync=True)
        store = RecordingStore(MemoryCoordinationServer().connect(), events)
        log = await open_log(config, store, storage=RecordingStorage(events))
        written = await append_each(log, 3)
        await log.close()
        events.clear()
        await (await open_log(config, store, storage=RecordingStorage(events))).close()
        old = ledger_file_name(written[0].address.ledger_id, written[0].address.epoch)
        assert events == ["cas 2", f"sync {old}", "cas 3"]  # fence, sync, close-and-open

    run(body)


def test_append_with_fsync_failure(tmp_path: Path) -> None:
    async def body() -> None:
        config, store = make_config(tmp_path, fsync=True), MemoryCoordinationServer().connect()
        storage = FailingSyncStorage()
        log = await open_log(config, store, storage=storage)
        acknowledged = await append_each(log, 4)
        storage.failing = True
        futures = [log.append(bytes([i]) * 50) for i in range(20)]
        results = await asyncio.gather(*futures, return_exceptions=True)
        assert all(isinstance(result, DataLogWriteError) for result in results)
        assert storage.failed_syncs == 1
        with pytest.raises(DataLogClosedError):
            log.append(b"after the failure")
        await log.close()
        storage.failing = False
        recovered = await read_all(await open_log(config, store, storage=storage))
        assert recovered[:4] == acknowledged
        assert len(recovered) in (4, 24)  # the failed group is on disk or not; never half of it

    run(body)


@pytest.mark.parametrize("lease_s", [0.0, 0.6])
def test_append_with_coordination_unavailable(tmp_path: Path, lease_s: float) -> None:
    """Without a lease every group needs a check; with one, groups synced within half of it after the last
    check are acknowledged without ZooKeeper, then nothing is until a check succeeds."""

    async def body() -> None:
        config = make_config(
            tmp_path, coordination_timeout_s=0.3, coordination_retry_delay_s=0.05, ownership_lease_s=lease_s
        )
        store = FlakyStore(MemoryCoordinationServer().connect())
        log = await open_log(config, store)
        acknowledged = await append_each(log, 2)
        store.fail_syncs = True
        if lease_s:
            acknowledged += await append_each(log, 1)  # the check of the first group still covers it
            await asyncio.sleep(lease_s / 2)
        results = await asyncio.gather(*[log.append(b"x") for _ in range(5)], return_exceptions=True)
        assert all(isinstance(result, DataLogNotAvailableError) for result in results)
        assert all(result.retriable for result in results if isinstance(result, DataLogNotAvailableError))
        await log.close()
        store.fail_syncs = False
        assert (await read_all(await open_log(config, store)))[: len(acknowledged)] == acknowledged

    run(body)


def test_initialize_with_lost_cas_reply(tmp_path: Path) -> None:
    async def body() -> None:
        config = make_config(tmp_path)
        store = FlakyStore(MemoryCoordinationServer().connect())
        first = await open_log(config, store)
        written = await append_each(first, 3)
        await first.close()
        store.lose_reply_of_next_cas = True  # the epoch bump applies, its reply is lost
        second = await open_log(config, store)
        store.lose_next_cas = True  # the next CAS (rollover or close) is lost and retried
        assert await read_all(second) == written
        more = await append_each(second, 2)
        await second.close()
        third = await open_log(config, store)
        assert third.epoch == second.epoch + 1
        assert await read_all(third) == written + more

    run(body)


def test_rollover_with_small_ledgers(tmp_path: Path) -> None:
    async def body() -> None:
        config = make_config(tmp_path, rollover_size_bytes=8 * 1024, max_append_length_bytes=2048)
        store = MemoryCoordinationServer().connect()
        log = await open_log(config, store)
        written = await append_each(log, 300)
        ledgers = log.metadata.ledgers
        assert len(ledgers) >= 3
        assert all(not ledger.is_open for ledger in ledgers[:-1]) and ledgers[-1].is_open
        assert sum((ledger.last_entry or 0) + 1 for ledger in ledgers[:-1]) <= len(written)
        await log.close()
        reopened = await open_log(config, store)
        assert await read_all(reopened) == written

        await reopened.truncate(written[250].address)
        files = sorted(p.name for p in (tmp_path / "log").iterdir())
        kept = {ledger_file_name(ledger.ledger_id, ledger.epoch) for ledger in reopened.metadata.ledgers}
        assert set(files) == kept
        assert await read_all(reopened) == written[251:]

    run(body)


def test_initialize_with_unreferenced_ledger_files(tmp_path: Path) -> None:
    async def body() -> None:
        config, store = make_config(tmp_path), MemoryCoordinationServer().connect()
        log = await open_log(config, store)
        await append_each(log, 2)
        await log.close()
        directory = tmp_path / "log"
        stale = directory / ledger_file_name(99, 1)  # e.g. a fenced zombie's rollover file
        newer = directory / ledger_file_name(98, 50)  # a newer owner's file: not ours to delete
        stale.write_bytes(b"stale")
        newer.write_bytes(b"newer")
        other = directory / "notes.txt"
        other.write_text("not a ledger")
        await (await open_log(config, store)).close()
        assert not stale.exists() and newer.exists() and other.exists()

    run(body)


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"rollover_size_bytes": 100}, "rollover_size_bytes"),
        ({"max_append_length_bytes": 0}, "max_append_length_bytes"),
        ({"max_batch_bytes": -1}, "max_batch_bytes"),
        ({"metadata_root": "relative"}, "metadata_root"),
        ({"coordination_timeout_s": 0}, "coordination_timeout_s"),
    ],
)
def test_config_with_invalid_value(tmp_path: Path, overrides: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        FileLedgerLogConfig(root_dir=tmp_path, **overrides)


def test_config_from_mapping(tmp_path: Path) -> None:
    config = FileLedgerLogConfig.from_mapping(
        {"root_dir": str(tmp_path), "fsync": "false", "rollover_size_bytes": str(64 * 1024 * 1024)}
    )
    assert config.root_dir == tmp_path and config.fsync is False
    assert config.rollover_size_bytes == 64 * 1024 * 1024
    with pytest.raises(ValueError, match="colour"):
        FileLedgerLogConfig.from_mapping({"root_dir": "/x", "colour": "blue"})
