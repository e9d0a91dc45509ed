"""Chunk pins: the garbage collector never deletes a chunk a live pin holds; a released or expired pin frees it;
pins survive a restart, and the boot sweep leaves pinned orphans to the collector.

The chunked storage runs over a real in-memory backend with a manual clock for the collector (as in
``test_chunk_gc.py``); pins expire on the wall clock, so expiry is tested with a short TTL and polled.
"""

from __future__ import annotations

import time

import pytest

from segment_store.storage.backends.memory import MemoryChunkStorage
from segment_store.storage.chunk_pins import ChunkPins, PinError, pins_prefix
from segment_store.storage.chunked_storage import ChunkedSegmentStorage
from segment_store.storage.data_chunk_names import data_prefix
from segment_store.storage.journal.system_journal import InMemorySnapshotInfoStore
from segment_store.storage.storage_config import ChunkedStorageConfig

pytestmark = pytest.mark.unit

CID = 3


class Env:
    def __init__(self) -> None:
        self.backend = MemoryChunkStorage()
        self.pointer = InMemorySnapshotInfoStore(CID)
        self.now = 1000.0
        self.config = ChunkedStorageConfig(retry_delay_s=0.0, gc_delay_s=10.0, compaction_enabled=False)
        self.epoch = 0

    async def open(self) -> ChunkedSegmentStorage:
        self.epoch += 1
        storage = ChunkedSegmentStorage(self.backend, CID, self.pointer, self.config, clock=lambda: self.now)
        await storage.open(self.epoch)
        return storage

    def data(self) -> set[str]:
        return set(self.backend.list(data_prefix(CID)))


async def _seeded(env: Env) -> tuple[ChunkedSegmentStorage, list[str]]:
    storage = await env.open()
    await storage.create("s", "raw")
    for i in range(3):
        await storage.write("s", 10 * i, [bytes([i]) * 10], i)
    return storage, [c.chunk_name for c in await storage.chunks("s")]


def _wait_expired(pins: ChunkPins, chunk: str) -> None:
    deadline = time.monotonic() + 10
    while pins.held_for_s(chunk) is not None:
        assert time.monotonic() < deadline, "the pin did not expire"
        time.sleep(0.01)


async def test_pinned_chunk_outlives_truncation_until_release() -> None:
    env = Env()
    storage, names = await _seeded(env)
    storage.pins.pin("reader-1", "s", names[:2], 60_000)
    await storage.truncate("s", 20)
    env.now += 11
    await storage.gc.collect()
    assert set(names[:2]) <= env.data() and storage.gc.deferred_pinned == 2
    assert storage.pins.release("reader-1", "s") and not storage.pins.release("reader-1", "s")
    env.now += 2
    await storage.gc.collect()
    assert not set(names[:2]) & env.data() and names[2] in env.data()
    await storage.close()


async def test_expired_pin_frees_its_chunks_and_its_object() -> None:
    env = Env()
    storage, names = await _seeded(env)
    storage.pins.pin("reader-1", "s", names[:1], 200)
    await storage.truncate("s", 10)
    env.now += 11
    await storage.gc.collect()
    assert names[0] in env.data()
    _wait_expired(storage.pins, names[0])
    env.now += 2
    await storage.gc.collect()
    assert names[0] not in env.data()
    assert storage.pins.expire() == 1 and not list(env.backend.list(pins_prefix(CID)))
    await storage.close()


async def test_pins_survive_a_restart_and_the_sweep_leaves_pinned_orphans() -> None:
    env = Env()
    storage, names = await _seeded(env)
    storage.pins.pin("reader-1", "s", names[:2], 60_000)
    storage.pins.pin("reader-1", "s", names[:2], 120_000)  # a renewal replaces the object
    assert len(list(env.backend.list(pins_prefix(CID)))) == 1
    await storage.truncate("s", 20)
    await storage.close()  # the released chunks were queued only: the next boot's sweep would delete them

    again = await env.open()
    assert [(p.pin_id, p.segment, p.chunks) for p in again.pins.live()] == [("reader-1", "s", frozenset(names[:2]))]
    assert set(names[:2]) <= env.data()
    assert set(again.gc.pending) == set(names[:2])  # left to the collector
    assert again.pins.release("reader-1", "s")
    env.now += 11
    await again.gc.collect()
    assert not set(names[:2]) & env.data()
    await again.close()


@pytest.mark.parametrize(("pin_id", "ttl_ms"), [("", 1000), ("a/b", 1000), ("ok", 0), ("ok", 10**12)])
def test_pin_with_bad_id_or_ttl_is_refused(pin_id: str, ttl_ms: int) -> None:
    with pytest.raises(PinError):
        ChunkPins(MemoryChunkStorage(), CID).pin(pin_id, "s", ["c"], ttl_ms)
