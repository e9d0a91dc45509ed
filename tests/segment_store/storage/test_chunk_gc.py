"""Delayed garbage collection of released chunks: delay, retries, never a live chunk, never as a zombie.

The chunked storage runs over a FaultyChunkStorage around a real in-memory backend, with a
manual clock; the tests call ``gc.collect()`` themselves at chosen times.
"""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Callable

import pytest

from segment_store.storage.backends.faulty import FaultyChunkStorage
from segment_store.storage.backends.memory import MemoryChunkStorage
from segment_store.storage.chunk_storage import ChunkStorage
from segment_store.storage.chunked_storage import ChunkedSegmentStorage
from segment_store.storage.data_chunk_names import data_prefix
from segment_store.storage.journal.system_journal import InMemorySnapshotInfoStore
from segment_store.storage.storage_config import ChunkedStorageConfig
from segstore_shared.contracts import SegmentTruncatedError

pytestmark = pytest.mark.unit

CID = 9
DATA = data_prefix(CID)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Env:
    def __init__(self, inner: ChunkStorage | None = None, **config: object) -> None:
        self.faulty = FaultyChunkStorage(inner or MemoryChunkStorage())
        self.pointer = InMemorySnapshotInfoStore(CID)
        self.clock = Clock()
        settings: dict[str, object] = {
            "retry_delay_s": 0.0,
            "gc_delay_s": 60.0,
            "gc_retry_min_delay_s": 1.0,
            "gc_retry_max_delay_s": 4.0,
            "compaction_enabled": False,
        }
        settings.update(config)
        self.config = ChunkedStorageConfig(**settings)  # type: ignore[arg-type]
        self.epoch = 0

    async def open(self) -> ChunkedSegmentStorage:
        self.epoch += 1
        storage = ChunkedSegmentStorage(self.faulty, CID, self.pointer, self.config, clock=self.clock)
        await storage.open(self.epoch)
        return storage

    def data(self) -> set[str]:
        return set(self.faulty.inner.list(DATA))


async def seeded(env: Env, sizes: tuple[int, ...] = (10, 10, 10)) -> tuple[ChunkedSegmentStorage, list[str], bytes]:
    storage = await env.open()
    await storage.create("s", "raw")
    data = b""
    for i, size in enumerate(sizes):
        piece = bytes((i * 7 + j) & 0xFF for j in range(size))
        await storage.write("s", len(data), [piece], i)
        data += piece
    return storage, [c.chunk_name for c in await storage.chunks("s")], data


async def test_truncate_with_delay_deletes_released_chunk_only_after_delay() -> None:
    env = Env()
    storage, names, _ = await seeded(env)
    await storage.truncate("s", 10)
    assert names[0] in env.data()
    assert storage.gc.pending == [names[0]]
    env.clock.now += 59.9
    assert await storage.gc.collect() == 0
    assert names[0] in env.data()
    env.clock.now += 0.1
    assert await storage.gc.collect() == 1
    assert env.data() == set(names[1:])
    assert storage.gc.pending == []


async def test_background_task_deletes_after_real_delay() -> None:
    env = Env(gc_delay_s=0.05)
    storage = ChunkedSegmentStorage(env.faulty, CID, env.pointer, env.config)  # real clock
    await storage.open(1)
    await storage.create("s", "raw")
    await storage.write("s", 0, [b"abc"], 1)
    [chunk] = [c.chunk_name for c in await storage.chunks("s")]
    await storage.delete("s")
    assert chunk in env.data()
    for _ in range(1000):  # the 50 ms delay, and slack for a loaded machine
        if storage.gc.deleted:
            break
        await asyncio.sleep(0.01)
    assert chunk not in env.data()
    assert storage.gc.deleted == 1
    await storage.close()


class PausingStorage(MemoryChunkStorage):
    """Pauses the first read_all of ``pause_on`` until ``go`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.pause_on = ""
        self.reached, self.go = threading.Event(), threading.Event()

    def read_all(self, name: str) -> bytes:
        if name == self.pause_on and not self.reached.is_set():
            self.reached.set()
            self.go.wait(10)
        return super().read_all(name)


async def test_read_in_flight_on_truncated_range_finishes_within_delay() -> None:
    inner = PausingStorage()
    env = Env(inner, chunk_cache_bytes=0)
    storage, names, data = await seeded(env)
    inner.pause_on = names[0]
    read = asyncio.create_task(storage.read("s", 2, 20))
    await asyncio.to_thread(inner.reached.wait, 10)
    await storage.truncate("s", 20)  # releases chunks 0 and 1 while the read is on its way to them
    inner.go.set()
    assert await read == data[2:22]  # the released chunks are still there: the read completes
    env.clock.now += 60
    assert await storage.gc.collect() == 2
    with pytest.raises(SegmentTruncatedError):
        await storage.read("s", 2, 20)
    assert await storage.read("s", 20, 10) == data[20:]


async def test_failed_delete_is_retried_with_backoff() -> None:
    env = Env()
    storage, names, _ = await seeded(env)
    fault = env.faulty.inject(lambda op, name: name == names[0], ops=["delete_if_exists"], times=2)
    await storage.truncate("s", 10)
    env.clock.now += 60
    assert await storage.gc.collect() == 0  # attempt 1 fails: retried 1 s later
    env.clock.now += 0.9
    assert await storage.gc.collect() == 0
    env.clock.now += 0.1
    assert await storage.gc.collect() == 0  # attempt 2 fails: retried 2 s later
    assert fault.hits == 2
    env.clock.now += 1.9
    assert await storage.gc.collect() == 0
    assert names[0] in env.data()
    env.clock.now += 0.1
    assert await storage.gc.collect() == 1
    assert names[0] not in env.data()


async def test_delete_failing_every_attempt_is_left_to_boot_sweep() -> None:
    env = Env(gc_max_attempts=3)
    storage, names, data = await seeded(env)
    fault = env.faulty.inject(lambda op, name: name == names[0], ops=["delete_if_exists"])
    await storage.truncate("s", 10)
    for _ in range(10):
        env.clock.now += 60
        await storage.gc.collect()
    assert (fault.hits, storage.gc.given_up, storage.gc.pending) == (3, 1, [])
    assert names[0] in env.data()
    env.faulty.remove(fault)
    successor = await env.open()
    assert env.data() == set(names[1:])
    assert await successor.read("s", 10, 20) == data[10:]


async def test_ownership_check_failure_postpones_the_batch() -> None:
    env = Env()
    storage, names, _ = await seeded(env)
    await storage.truncate("s", 10)
    env.clock.now += 60
    with env.faulty.outage(ops=["list"]):
        assert await storage.gc.collect() == 0
    assert storage.gc.pending == [names[0]]
    env.clock.now += 1
    assert await storage.gc.collect() == 1


async def test_queued_chunk_that_is_live_is_never_deleted() -> None:
    env = Env()
    storage, names, data = await seeded(env)
    storage.gc.enqueue([names[1]])  # a bug elsewhere would release a chunk still referenced
    env.clock.now += 60
    assert await storage.gc.collect() == 0
    assert storage.gc.skipped_live == 1
    assert names[1] in env.data()
    assert await storage.read("s", 0, 30) == data


async def test_zombie_does_not_delete_chunks_a_newer_owner_references() -> None:
    env = Env(compaction_min_chunks=2, compaction_small_chunk_bytes=64)
    zombie, names, data = await seeded(env)
    owner = await env.open()  # epoch 2 boots; the old instance does not know yet
    # the zombie compacts: its record is off the new owner's chain, but its GC would delete for real
    assert await zombie.compactor.compact_segment("s") == 1
    assert sorted(zombie.gc.pending) == sorted(names)
    assert not set(names) & zombie.journal.metadata.referenced_chunks()
    env.clock.now += 60
    assert await zombie.gc.collect() == 0
    assert zombie.gc.stopped and zombie.gc.pending == []
    assert set(names) <= env.data()
    assert await owner.read("s", 0, 30) == data
    assert [c.chunk_name for c in await owner.chunks("s")] == names


async def test_close_leaves_queued_chunks_to_next_boot_sweep() -> None:
    env = Env()
    storage, names, data = await seeded(env)
    await storage.truncate("s", 20)
    await storage.close()
    assert set(names) <= env.data()
    successor = await env.open()
    assert env.data() == {names[2]}
    assert await successor.read("s", 20, 10) == data[20:]


async def test_delay_zero_deletes_before_the_call_returns() -> None:
    env = Env(gc_delay_s=0)
    storage, names, _ = await seeded(env)
    await storage.truncate("s", 20)
    assert env.data() == {names[2]}
    await storage.delete("s")
    assert env.data() == set()


# -- no live chunk, ever: random operations with a storage that checks every delete ------------


class GuardedStorage(MemoryChunkStorage):
    """Fails the test if a chunk that the current metadata references is deleted."""

    def __init__(self) -> None:
        super().__init__()
        self.live: Callable[[], set[str]] = set
        self.violations: list[str] = []
        self.deletes = 0

    def delete_if_exists(self, name: str) -> bool:
        if name.startswith(DATA):
            self.deletes += 1
            if name in self.live():
                self.violations.append(name)
        return super().delete_if_exists(name)


@pytest.mark.parametrize("seed", range(6))
async def test_random_operations_never_delete_a_live_chunk_and_keep_bytes(seed: int) -> None:
    rng = random.Random(seed)
    guarded = GuardedStorage()
    env = Env(
        guarded,
        gc_delay_s=rng.choice([0.0, 5.0]),
        compaction_min_chunks=2,
        compaction_small_chunk_bytes=64,
        compaction_target_bytes=256,
    )
    storage = await env.open()
    guarded.live = lambda: storage.journal.metadata.referenced_chunks()
    model: dict[str, bytearray] = {}
    starts: dict[str, int] = {}
    sealed: set[str] = set()
    counter = 0
    for _ in range(120):
        op = rng.choice(["create", "write", "write", "write", "truncate", "delete", "concat", "compact", "tick"])
        names = sorted(model)
        if op == "create" or not names:
            counter += 1
            name = f"seg{counter}"
            await storage.create(name, "raw")
            model[name], starts[name] = bytearray(), 0
        elif op == "write":
            name = rng.choice(names)
            if name in sealed:
                continue
            piece = rng.randbytes(rng.randint(1, 60))
            await storage.write(name, len(model[name]), [piece], 1)
            model[name] += piece
        elif op == "truncate":
            name = rng.choice(names)
            cut = rng.randint(starts[name], len(model[name]))
            await storage.truncate(name, cut)
            starts[name] = max(starts[name], cut)
        elif op == "delete":
            name = rng.choice(names)
            await storage.delete(name)
            del model[name], starts[name]
            sealed.discard(name)
        elif op == "concat" and len(names) >= 2:
            target, source = rng.sample(names, 2)
            if target in sealed or starts[source] != 0:
                continue
            await storage.seal(source)
            await storage.concat(target, len(model[target]), source)
            model[target] += model.pop(source)
            del starts[source]
            sealed.discard(source)
        elif op == "compact":
            await storage.compactor.compact_all()
        else:
            env.clock.now += rng.choice([1.0, 6.0])
            await storage.gc.collect()
        for name, content in model.items():
            start = starts[name]
            assert await storage.read(name, start, len(content) - start) == bytes(content[start:])
    env.clock.now += 100
    await storage.gc.collect()
    assert guarded.violations == []
    assert guarded.deletes > 0
    assert storage.compactor.merged_runs > 0
    assert env.data() == storage.journal.metadata.referenced_chunks()  # and everything released is gone
