"""Reads of chunks too big for the chunk cache: by ranges, footer fetched once, faults retried."""

from __future__ import annotations

import os

import pytest

from segment_store.storage.backends.faulty import FaultyChunkStorage
from segment_store.storage.backends.memory import MemoryChunkStorage
from segment_store.storage.chunk_reads import ChunkCache
from segment_store.storage.chunked_storage import ChunkedSegmentStorage
from segment_store.storage.journal.system_journal import InMemorySnapshotInfoStore
from segment_store.storage.storage_config import ChunkedStorageConfig

pytestmark = pytest.mark.unit

MIB = 1024 * 1024


@pytest.fixture
async def big() -> tuple[FaultyChunkStorage, ChunkedSegmentStorage, bytes]:
    faulty = FaultyChunkStorage(MemoryChunkStorage())
    config = ChunkedStorageConfig(retry_delay_s=0.0, chunk_cache_bytes=2 * MIB, compaction_enabled=False)
    pointer = InMemorySnapshotInfoStore(1)
    writer = ChunkedSegmentStorage(faulty, 1, pointer, config)
    await writer.open(1)
    await writer.create("s", "raw")
    data = os.urandom(9 * MIB + 5)
    await writer.write("s", 0, [data], 1)
    reader = ChunkedSegmentStorage(faulty, 1, pointer, config)  # a new owner: nothing cached
    await reader.open(2)
    faulty.calls.clear()
    return faulty, reader, data


async def test_sequential_reads_of_big_chunk_fetch_ranges_and_the_footer_once(
    big: tuple[FaultyChunkStorage, ChunkedSegmentStorage, bytes],
) -> None:
    faulty, reader, data = big
    for offset in range(0, len(data), 3 * MIB):
        length = min(3 * MIB, len(data) - offset)
        assert await reader.read("s", offset, length) == data[offset : offset + length]
    ops = [op for op, name in faulty.calls if name.startswith("data/")]
    assert "read_all" not in ops
    assert ops.count("info") == 1  # the size comes with the cached tail afterwards
    assert ops.count("read") <= 1 + 4 * 2  # the footer once, then the row groups of each read


async def test_ranged_read_with_transient_faults_is_retried(
    big: tuple[FaultyChunkStorage, ChunkedSegmentStorage, bytes],
) -> None:
    faulty, reader, data = big
    fault = faulty.inject(ops=["read"], times=2)
    assert await reader.read("s", 5 * MIB, 1000) == data[5 * MIB : 5 * MIB + 1000]
    assert fault.hits == 2


def test_chunk_cache_keeps_only_tails_that_end_the_chunk_within_budget() -> None:
    cache = ChunkCache(0, tail_bytes=100)
    cache.put_tail("a", 1000, 900, b"x" * 99)  # does not reach the end: not a tail
    assert cache.get_tail("a") is None
    cache.put_tail("a", 1000, 940, b"x" * 60)
    cache.put_tail("b", 500, 450, b"y" * 50)  # over the budget: "a" (least recent) goes
    assert cache.get_tail("a") is None and cache.get_tail("b") == (500, 450, b"y" * 50)
    cache.discard("b")
    assert cache.get_tail("b") is None
