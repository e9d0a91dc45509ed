"""ChunkedSegmentStorage under chunk storage faults, injected by FaultyChunkStorage around a real backend.

A "crash" drops an instance without close() and opens a new one with a higher epoch on the
same chunk storage and pointer store. Invariants checked after every scenario: the state is
what was acknowledged, every chunk the metadata references exists, and after a boot no data
chunk is left that the metadata does not reference.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from segment_store.storage.backends.faulty import FaultyChunkStorage
from segment_store.storage.backends.filesystem import FsChunkStorage
from segment_store.storage.backends.memory import MemoryChunkStorage
from segment_store.storage.chunk_storage import ChunkNotFoundError, ChunkStorage, ChunkStorageUnavailableError
from segment_store.storage.chunked_storage import ChunkedSegmentStorage
from segment_store.storage.data_chunk_names import data_chunk_name, data_prefix
from segment_store.storage.journal.records import system_prefix
from segment_store.storage.journal.system_journal import InMemorySnapshotInfoStore
from segment_store.storage.storage_config import ChunkedStorageConfig
from segstore_shared.contracts import SegmentTruncatedError

pytestmark = pytest.mark.unit

CID = 5
JOURNAL = system_prefix(CID, "journal")
DATA = data_prefix(CID)


class Env:
    def __init__(self, inner: ChunkStorage | None = None, **config: object) -> None:
        self.faulty = FaultyChunkStorage(inner or MemoryChunkStorage())
        self.pointer = InMemorySnapshotInfoStore(CID)
        settings: dict[str, object] = {"retry_delay_s": 0.0, "gc_delay_s": 0.0}
        settings.update(config)
        self.config = ChunkedStorageConfig(**settings)  # type: ignore[arg-type]
        self.epoch = 0

    async def open(self) -> ChunkedSegmentStorage:
        """A new owner (the previous instance, if any, is simply dropped: a crash)."""
        self.epoch += 1
        storage = ChunkedSegmentStorage(self.faulty, CID, self.pointer, self.config)
        await storage.open(self.epoch)
        return storage

    def data(self) -> set[str]:
        return set(self.faulty.inner.list(DATA))

    def journal(self) -> list[str]:
        return list(self.faulty.inner.list(JOURNAL))


async def check_invariants(env: Env, storage: ChunkedSegmentStorage, *, swept: bool = False) -> None:
    referenced = storage.journal.metadata.referenced_chunks()
    assert referenced <= env.data(), "metadata references a chunk that does not exist"
    if swept:
        assert env.data() == referenced, "an unreferenced chunk survived boot"


def journal_writes(op: str, name: str) -> bool:
    return op == "write_chunk" and name.startswith(JOURNAL)


def data_writes(op: str, name: str) -> bool:
    return op == "write_chunk" and name.startswith(DATA)


async def seeded(env: Env) -> ChunkedSegmentStorage:
    storage = await env.open()
    await storage.create("s", "raw")
    await storage.write("s", 0, [b"0123456789"], 1)
    return storage


# -- write path ------------------------------------------------------------------------------


@pytest.mark.parametrize("landed", [False, True], ids=["before", "landed"])
async def test_write_with_data_chunk_write_failure_changes_nothing(landed: bool) -> None:
    env = Env()
    storage = await seeded(env)
    chunks, records = env.data(), storage.journal.records_written
    env.faulty.inject(data_writes, after=landed, times=1)
    with pytest.raises(ChunkStorageUnavailableError):
        await storage.write("s", 10, [b"lost"], 2)
    assert (await storage.info("s")).length == 10
    assert storage.journal.records_written == records
    assert env.data() == chunks  # a chunk that landed anyway was deleted at once
    assert await storage.write("s", 10, [b"next"], 3) == 14
    await check_invariants(env, storage)


async def test_write_with_journal_failure_raises_and_deletes_its_chunk() -> None:
    env = Env()
    storage = await seeded(env)
    chunks = env.data()
    fault = env.faulty.inject(journal_writes)
    with pytest.raises(ChunkStorageUnavailableError):
        await storage.write("s", 10, [b"lost"], 2)
    assert fault.hits == env.config.journal_write_attempts  # retried under new names, then gave up
    assert (await storage.info("s")).length == 10
    assert env.data() == chunks
    env.faulty.remove(fault)
    assert await storage.write("s", 10, [b"next"], 3) == 14
    after_crash = await env.open()
    assert await after_crash.read("s", 0, 14) == b"0123456789next"
    await check_invariants(env, after_crash, swept=True)


async def test_write_with_journal_failure_and_failed_cleanup_leaves_chunk_to_boot_sweep() -> None:
    env = Env()
    storage = await seeded(env)
    chunks = env.data()
    env.faulty.inject(journal_writes)
    env.faulty.inject(lambda op, name: name.startswith(DATA), ops=["delete_if_exists"])
    with pytest.raises(ChunkStorageUnavailableError):
        await storage.write("s", 10, [b"lost"], 2)
    assert (await storage.info("s")).length == 10
    [orphan] = env.data() - chunks
    env.faulty.clear()
    after_crash = await env.open()
    assert orphan not in env.data()
    assert (await after_crash.info("s")).length == 10
    await check_invariants(env, after_crash, swept=True)


async def test_write_with_journal_record_landed_but_reported_failed_is_consistent_after_crash() -> None:
    env = Env()
    storage = await seeded(env)
    env.faulty.inject(journal_writes, after=True)  # every record lands, every write reports an error
    env.faulty.inject(lambda op, name: name.startswith(JOURNAL), ops=["delete_if_exists"])  # and cannot be retracted
    with pytest.raises(ChunkStorageUnavailableError):
        await storage.write("s", 10, [b"maybe"], 2)
    assert (await storage.info("s")).length == 10  # not acknowledged: memory unchanged
    await check_invariants(env, storage)  # the chunk is kept: a landed record may reference it
    env.faulty.clear()
    after_crash = await env.open()
    # the outcome was unknown; the boot found the record, so the write took effect, exactly once
    info = await after_crash.info("s")
    assert (info.length, info.chunk_count) == (15, 2)
    assert await after_crash.read("s", 0, 15) == b"0123456789maybe"
    await check_invariants(env, after_crash, swept=True)


async def test_write_with_transient_journal_failure_succeeds_on_retry() -> None:
    env = Env()
    storage = await seeded(env)
    journal_before = set(env.journal())
    env.faulty.inject(journal_writes, times=1)
    assert await storage.write("s", 10, [b"ok"], 2) == 12
    assert len(set(env.journal()) - journal_before) == 1
    assert await (await env.open()).read("s", 0, 12) == b"0123456789ok"


@pytest.mark.parametrize("op", ["seal", "truncate", "delete", "concat", "create"])
async def test_change_with_journal_failure_changes_nothing(op: str) -> None:
    env = Env()
    storage = await seeded(env)
    await storage.create("src", "raw")
    await storage.write("src", 0, [b"abc"], 1)
    await storage.seal("src")
    chunks = env.data()
    before = [await storage.info("s"), await storage.info("src")]
    calls = {
        "seal": lambda: storage.seal("s"),
        "truncate": lambda: storage.truncate("s", 10),
        "delete": lambda: storage.delete("s"),
        "concat": lambda: storage.concat("s", 10, "src"),
        "create": lambda: storage.create("new", "raw"),
    }
    with env.faulty.outage(ops=["write_chunk"]), pytest.raises(ChunkStorageUnavailableError):
        await calls[op]()
    assert [await storage.info("s"), await storage.info("src")] == before
    assert not await storage.exists("new")
    assert env.data() == chunks
    after_crash = await env.open()
    assert [await after_crash.info("s"), await after_crash.info("src")] == before
    await check_invariants(env, after_crash, swept=True)


async def test_truncate_with_failed_chunk_delete_succeeds_and_boot_sweeps_chunk() -> None:
    env = Env()
    storage = await seeded(env)
    await storage.write("s", 10, [b"abcdef"], 2)
    [first] = [c.chunk_name for c in await storage.chunks("s")][:1]
    env.faulty.inject(lambda op, name: name == first, ops=["delete_if_exists"])
    await storage.truncate("s", 12)
    assert first in env.data()  # left behind, not referenced any more
    with pytest.raises(SegmentTruncatedError):
        await storage.read("s", 5, 1)
    env.faulty.clear()
    after_crash = await env.open()
    assert first not in env.data()
    assert await after_crash.read("s", 12, 4) == b"cdef"
    await check_invariants(env, after_crash, swept=True)


# -- boot ------------------------------------------------------------------------------------


async def test_crash_between_data_chunk_and_journal_record_is_swept_at_boot() -> None:
    env = Env()
    storage = await seeded(env)
    orphan = data_chunk_name(CID, "s", 1, 999)  # written, then the process died before the record
    env.faulty.inner.write_chunk(orphan, b"never recorded")
    after_crash = await env.open()
    assert orphan not in env.data()
    assert await after_crash.read("s", 0, 10) == b"0123456789"
    await check_invariants(env, after_crash, swept=True)
    del storage


async def test_boot_sweep_keeps_chunks_of_newer_epochs_and_foreign_names() -> None:
    env = Env()
    await seeded(env)
    newer = data_chunk_name(CID, "s", 50, 1)  # a newer owner's chunk: this booting owner must not touch it
    foreign = f"{DATA}s/readme.txt"
    for name in (newer, foreign):
        env.faulty.inner.write_chunk(name, b"x")
    await env.open()
    assert {newer, foreign} <= env.data()


async def test_open_during_outage_raises_and_later_open_succeeds() -> None:
    env = Env()
    await seeded(env)
    with env.faulty.outage(), pytest.raises(ChunkStorageUnavailableError):
        await env.open()
    recovered = await env.open()
    assert await recovered.read("s", 0, 10) == b"0123456789"


@pytest.mark.parametrize("failing_op", ["read_all", "list", "write_chunk"])
async def test_open_with_failing_op_raises_unavailable(failing_op: str) -> None:
    env = Env()
    await seeded(env)
    with env.faulty.outage(ops=[failing_op]), pytest.raises(ChunkStorageUnavailableError):
        await env.open()
    assert await (await env.open()).exists("s")


# -- reads -----------------------------------------------------------------------------------


async def test_read_during_outage_raises_unavailable_then_recovers() -> None:
    env = Env(chunk_cache_bytes=0, read_attempts=3)
    storage = await seeded(env)
    with env.faulty.outage(ops=["read_all"]) as fault, pytest.raises(ChunkStorageUnavailableError):
        await storage.read("s", 2, 5)
    assert fault.hits == 3
    assert await storage.read("s", 2, 5) == b"23456"


async def test_read_with_transient_faults_is_retried() -> None:
    env = Env(chunk_cache_bytes=0, read_attempts=3)
    storage = await seeded(env)
    fault = env.faulty.inject(ops=["read_all"], times=2)
    assert await storage.read("s", 0, 10) == b"0123456789"
    assert fault.hits == 2


async def test_sequential_reads_of_one_chunk_fetch_it_once() -> None:
    env = Env()
    await seeded(env)
    storage = await env.open()  # a fresh instance: nothing cached
    env.faulty.calls.clear()
    for offset in range(10):
        assert await storage.read("s", offset, 1) == b"0123456789"[offset : offset + 1]
    fetched = [name for op, name in env.faulty.calls if op == "read_all"]
    assert fetched == [c.chunk_name for c in await storage.chunks("s")]


async def test_read_of_missing_referenced_chunk_raises_not_found(tmp_path: Path) -> None:
    env = Env(FsChunkStorage(tmp_path, durable=False))
    storage = await seeded(env)
    [ref] = await storage.chunks("s")
    env.faulty.inner.delete(ref.chunk_name)  # lost behind our back: never papered over
    with pytest.raises(ChunkNotFoundError):
        await storage.read("s", 0, 1)


class PausingMemoryChunkStorage(MemoryChunkStorage):
    """Pauses the first fetch of chunk ``pause_on`` until ``go`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.pause_on = ""
        self.reached, self.go = threading.Event(), threading.Event()

    def read_all(self, name: str) -> bytes:
        if name == self.pause_on and not self.reached.is_set():
            self.reached.set()
            self.go.wait(10)
        return super().read_all(name)


async def test_read_racing_truncate_reports_truncation() -> None:
    inner = PausingMemoryChunkStorage()
    env = Env(inner, chunk_cache_bytes=0)
    storage = await seeded(env)
    await storage.write("s", 10, [b"abc"], 2)
    inner.pause_on = (await storage.chunks("s"))[0].chunk_name
    read = asyncio.create_task(storage.read("s", 5, 6))
    await asyncio.to_thread(inner.reached.wait, 10)
    await storage.truncate("s", 12)  # deletes the chunk the read is about to fetch
    inner.go.set()
    with pytest.raises(SegmentTruncatedError):
        await read
    assert await storage.read("s", 12, 1) == b"c"
