"""Faults of the file ledger log, injected by wrappers around the real file and store adapters.

Files are real (under tmp_path); the coordination store is the in-process one. No mocks
replace a component: the wrappers delegate to the real adapters and fail on demand.
"""

from __future__ import annotations

import asyncio
import errno
import subprocess
import sys
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from segment_store.coordination.memory_store import MemoryCoordinationServer
from segment_store.coordination.store import CoordinationStore, CoordinationUnavailableError, Versioned
from segment_store.tier1.file_ledger_config import FileLedgerLogConfig
from segment_store.tier1.file_ledger_log import FileLedgerLog
from segment_store.tier1.ledger_file import (
    ENTRY_HEADER,
    FILE_HEADER,
    LedgerSink,
    OsLedgerStorage,
    ledger_file_name,
)
from segment_store.tier1.log import (
    DataLogClosedError,
    DataLogCorruptedError,
    DataLogNotAvailableError,
    DataLogWriteError,
    DataLogWriterNotPrimaryError,
    LogAddress,
    ReadItem,
)
from segment_store.tier1.log_metadata import LogMetadata
from segment_store.tier1.owner_identity import machine_identity

TIMEOUT_S = 30.0


def run(body: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(asyncio.wait_for(body(), TIMEOUT_S))


def make_config(tmp_path: Path, **overrides: Any) -> FileLedgerLogConfig:
    settings: dict[str, Any] = {"root_dir": tmp_path, "fsync": False, "coordination_timeout_s": 2.0}
    settings.update(overrides)
    return FileLedgerLogConfig(**settings)


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


def test_initialize_with_a_live_owner_waits_its_recorded_lease_and_keeps_what_it_acknowledged(tmp_path: Path) -> None:
    """The old owner (alive: this process) keeps acknowledging under its lease while the new owner waits that
    lease (the one in the metadata, not the new owner's own) before reading; nothing acknowledged is lost."""

    async def body() -> None:
        server = MemoryCoordinationServer()
        old = await open_log(make_config(tmp_path, ownership_lease_s=0.8), server.connect())
        assert old.metadata.lease_ms == 800
        acknowledged = await append_each(old, 2)
        new = FileLedgerLog("log", make_config(tmp_path, ownership_lease_s=0.1), server.connect())
        began = time.monotonic()
        opening = asyncio.create_task(new.initialize(timeout=10))
        await asyncio.sleep(0.05)  # the new owner has fenced (memory store: at once) and waits
        assert not opening.done()
        acknowledged += await append_each(old, 1)  # the old owner's check of the last group still covers it
        await opening
        assert time.monotonic() - began >= 0.8
        assert new.metadata.lease_ms == 100
        with pytest.raises(DataLogWriterNotPrimaryError):
            await asyncio.sleep(0.4)  # the old lease has run out: the next group needs a check, which fails
            await old.append(b"late")
        assert (await read_all(new))[: len(acknowledged)] == acknowledged
        await old.close()
        await new.close()

    run(body)


@pytest.mark.parametrize("where", ["here", "other machine", "old owner id"])
def test_initialize_with_the_old_owners_process_gone_waits_only_if_it_ran_elsewhere(tmp_path: Path, where: str) -> None:
    """A dead pid proves nothing about another machine or pid namespace (e.g. a container with the host's
    name), nor for an owner id without a machine identity: then the new owner waits the lease."""

    async def body() -> None:
        server = MemoryCoordinationServer()
        lease_s = 30.0 if where == "here" else 0.8  # here: no wait, however slow the machine
        config = make_config(tmp_path, ownership_lease_s=lease_s)
        old = await open_log(config, server.connect())
        acknowledged = await append_each(old, 3)
        await old.close()
        exited = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
        machine = {
            "here": machine_identity(),
            "other machine": machine_identity().split("@")[0] + "@another-boot/1",
            "old owner id": machine_identity().split("@")[0],
        }[where]
        store = server.connect()
        record = await store.get(old._keeper.path)
        gone = f"{machine}:{exited.stdout.strip()}:x"
        parsed = LogMetadata.parse(record.data)  # the owner named by the record and by the ledger it left open
        dead = replace(parsed, owner=gone, ledgers=tuple(replace(ledger, owner=gone) for ledger in parsed.ledgers))
        await store.compare_and_set(old._keeper.path, dead.serialize(), record.version)
        began = time.monotonic()
        new = await open_log(config, store)
        took = time.monotonic() - began
        assert took < 10 if where == "here" else took >= lease_s
        assert (await read_all(new))[:3] == acknowledged
        await new.close()

    run(body)


class SlowChecks(FlakyStore):
    """Ownership checks (linearized reads) take ``delay`` seconds; counts them."""

    def __init__(self, inner: CoordinationStore, delay: float) -> None:
        super().__init__(inner)
        self.delay = delay
        self.checks = 0

    async def read_linearized(self, path: str) -> Versioned | None:
        self.checks += 1
        await asyncio.sleep(self.delay)
        return await super().read_linearized(path)


def test_append_under_steady_load_never_waits_for_a_lease_renewal(tmp_path: Path) -> None:
    """The lease is renewed in the background halfway through: with checks of 0.25 s and a lease of 2 s, no
    append after the first waits for one, though the first check's half lease (1 s) runs out meanwhile."""

    async def body() -> None:
        store = SlowChecks(MemoryCoordinationServer().connect(), delay=0.25)
        log = await open_log(make_config(tmp_path, ownership_lease_s=2.0), store)
        await append_each(log, 1)  # the first group waits for the first check
        checks = store.checks
        loop = asyncio.get_running_loop()
        began = loop.time()
        slowest = 0.0
        while loop.time() - began < 1.6:
            start = loop.time()
            await log.append(b"x" * 100)
            slowest = max(slowest, loop.time() - start)
        assert store.checks > checks  # renewed while appending
        assert slowest < 0.2, f"an append waited {slowest:.3f} s"
        await log.close()

    run(body)


class FrozenChecks(FlakyStore):
    """An owner's ZooKeeper traffic cut off on demand: its ownership checks wait while ``frozen``."""

    def __init__(self, inner: CoordinationStore) -> None:
        super().__init__(inner)
        self.thawed = asyncio.Event()
        self.thawed.set()

    async def read_linearized(self, path: str) -> Versioned | None:
        await self.thawed.wait()
        return await super().read_linearized(path)


async def keep_appending(log: FileLedgerLog, acked: list[bytes], stop: asyncio.Event) -> None:
    """Appends with many in flight until ``stop`` or the log refuses; records each acknowledged payload."""
    pending: set[asyncio.Future[LogAddress]] = set()
    number = 0

    def record(data: bytes, future: asyncio.Future[LogAddress]) -> None:
        if not future.cancelled() and future.exception() is None:
            acked.append(data)

    try:
        while not stop.is_set():
            while len(pending) < 16:
                data = b"a-%08d" % number
                number += 1
                future = log.append(data)
                future.add_done_callback(lambda f, d=data: record(d, f))
                pending.add(future)
            _, pending = await asyncio.wait(pending, timeout=0.05, return_when=asyncio.FIRST_COMPLETED)
    except DataLogWriterNotPrimaryError:
        pass
    await asyncio.gather(*pending, return_exceptions=True)


@pytest.mark.parametrize("b_lease_s", [0.0, 0.5], ids=["B without lease", "B with a lease"])
def test_double_failover_waits_for_the_lease_of_the_owner_still_alive(tmp_path: Path, b_lease_s: float) -> None:
    """A is alive and appending; B fences A and dies before it recovered A's ledger; C takes over. B's process is
    gone (here: B's owner id names a dead pid) or B ran without a lease, so the record C replaces says nothing
    about A, but A's open ledger does: C must wait A's lease, during which A, cut off from ZooKeeper, may still
    acknowledge. Every entry A acknowledged is read by C."""

    async def body() -> None:
        server = MemoryCoordinationServer()
        a_store = FrozenChecks(server.connect())
        a = await open_log(make_config(tmp_path, ownership_lease_s=1.6), a_store)
        acked: list[bytes] = []
        stop = asyncio.Event()
        load = asyncio.create_task(keep_appending(a, acked, stop))
        while len(acked) < 50:
            await asyncio.sleep(0.01)
        a_store.thawed.clear()  # A cannot learn it was fenced: only its lease stops it
        b = FileLedgerLog("log", make_config(tmp_path, ownership_lease_s=b_lease_s), server.connect())
        with pytest.raises(DataLogNotAvailableError, match="initialize took over"):
            await b.initialize(timeout=0.3)  # B fences A, then dies while it waits out A's lease
        await b.close()
        store = server.connect()
        record = await store.get(b._keeper.path)
        exited = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
        b_gone = replace(LogMetadata.parse(record.data), owner=f"{machine_identity()}:{exited.stdout.strip()}:b")
        await store.compare_and_set(b._keeper.path, b_gone.serialize(), record.version)
        c = await open_log(make_config(tmp_path, ownership_lease_s=1.0), store)
        read = [item.payload for item in await read_all(c)]
        stop.set()
        a_store.thawed.set()
        await load
        assert acked and set(acked) <= set(read), f"{len(set(acked) - set(read))} acknowledged by A, not read by C"
        await a.close()
        await c.close()

    run(body)


def test_lease_counts_time_the_machine_spent_suspended(tmp_path: Path) -> None:
    """The owner measures its lease on an injected clock (boot time by default): when the clock jumps past the
    lease (the machine was suspended), the next group waits for a fresh ownership check."""

    async def body() -> None:
        now = [1000.0]
        store = FrozenChecks(MemoryCoordinationServer().connect())
        log = await open_log(make_config(tmp_path, ownership_lease_s=10.0), store, clock=lambda: now[0])
        await log.append(b"checked")  # a check now covers what is synced in the next 5 s (on the clock)
        await log.append(b"covered")
        store.thawed.clear()
        now[0] += 60.0  # suspended for a minute: the monotonic clock did not move, this one did
        waiting = log.append(b"after the suspension")
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(asyncio.shield(waiting), 0.5)
        store.thawed.set()
        await waiting
        await log.close()

    run(body)
