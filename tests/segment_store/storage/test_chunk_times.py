"""Tier-2 time queries and the merge-time rewrite (``segment_store/storage/chunk_times.py``), on the in-memory and
filesystem chunk storages: a concat given the merge time gives every moved row that time (the chunks rewritten,
the bytes the same), chunk metadata records time bounds, and the exact "where the events before a time end" answers
from them; chunk metadata without bounds (as written before they existed) still answers every query it did."""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from segment_store.storage.backends.filesystem import FsChunkStorage
from segment_store.storage.backends.memory import MemoryChunkStorage
from segment_store.storage.chunk_storage import ChunkStorage
from segment_store.storage.chunked_storage import ChunkedSegmentStorage
from segment_store.storage.journal.system_journal import InMemorySnapshotInfoStore
from segment_store.storage.storage_config import ChunkedStorageConfig

pytestmark = pytest.mark.contract

CID = 7
CONFIG = ChunkedStorageConfig(retry_delay_s=0.0, snapshot_every_records=8, gc_delay_s=0)


@pytest.fixture(params=["memory", "fs"])
def chunks(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ChunkStorage]:
    backend: ChunkStorage = (
        MemoryChunkStorage() if request.param == "memory" else FsChunkStorage(tmp_path, durable=False)
    )
    try:
        yield backend
    finally:
        backend.close()


@pytest.fixture
async def storage(chunks: ChunkStorage) -> AsyncIterator[ChunkedSegmentStorage]:
    made = ChunkedSegmentStorage(chunks, CID, InMemorySnapshotInfoStore(CID), CONFIG)
    await made.open(1)
    try:
        yield made
    finally:
        await made.close()


def events(prefix: bytes, count: int) -> bytes:
    return b"".join(struct.pack(">ii", 0, len(prefix) + 2) + prefix + b"%02d" % i for i in range(count))


async def write(storage: ChunkedSegmentStorage, name: str, data: bytes, times: list[tuple[int, int]] | int) -> int:
    length = (await storage.info(name)).length
    return await storage.write(name, length, [data], times)


async def test_concat_with_merge_time_gives_every_moved_row_that_time(storage: ChunkedSegmentStorage) -> None:
    await storage.create("t", "events")
    first, second = events(b"a", 3), events(b"b", 4)
    await write(storage, "t", first, 100)
    await write(storage, "t", second, 200)
    await storage.create("txn", "events")
    inside = [events(b"x", 2), events(b"y", 5)]
    await write(storage, "txn", inside[0], 150)  # written into the transaction before the target's 200
    await write(storage, "txn", inside[1], [(0, 160), (len(events(b"y", 1)), 170)])
    await storage.seal("txn")
    old_names = {c.chunk_name for c in await storage.chunks("txn")}
    at = len(first) + len(second)
    await storage.concat("t", at, "txn", merge_time_ms=300)
    length = (await storage.info("t")).length
    whole = first + second + b"".join(inside)
    assert await storage.read("t", 0, length) == whole  # the same bytes
    moved = (await storage.chunks("t"))[2:]
    assert len(moved) == 2 and not {c.chunk_name for c in moved} & old_names  # rewritten, then relinked
    layout = storage.layout("t")
    assert layout is not None
    assert [(c.min_ms, c.max_ms) for c in layout.chunks] == [(100, 100), (200, 200), (300, 300), (300, 300)]
    assert await storage.ingest_runs("t", 0, length, 100) == [(0, 100), (len(first), 200), (at, 300)]
    assert await storage.first_ingested_at_or_after("t", 0, length, 201) == at
    assert await storage.end_before_time("t", 0, length, 300) == at
    assert await storage.end_before_time("t", 0, length, 301) == length
    assert await storage.end_before_time("t", 0, length, 150) == len(first)
    assert await storage.end_before_time("t", 0, length, 100) == 0
    await storage.write("t", length, [events(b"z", 1)], 400)
    assert await storage.end_before_time("t", 0, length, 350) == length


async def test_time_queries_read_the_chunks_inside_a_chunk_and_without_bounds(storage: ChunkedSegmentStorage) -> None:
    await storage.create("s", "events")
    data = events(b"e", 6)
    size = len(events(b"e", 1))
    await write(storage, "s", data, [(i * size, 10 * (i + 1)) for i in range(6)])  # 10, 20, ..., 60
    assert await storage.end_before_time("s", 0, len(data), 35) == 3 * size  # the chunk's rows read
    assert await storage.end_before_time("s", size, 4 * size, 15) == size
    layout = storage.layout("s")
    assert layout is not None
    # chunk metadata from before time bounds were recorded: the same chunk, no bounds
    layout.chunks[0] = dataclasses.replace(layout.chunks[0], min_ms=None, max_ms=None)
    assert await storage.end_before_time("s", 0, len(data), 35) is None  # cannot tell: no narrowing
    assert await storage.first_ingested_at_or_after("s", 0, len(data), 35) == 3 * size  # still exact
    assert await storage.ingest_runs("s", 0, len(data), 100) == [(i * size, 10 * (i + 1)) for i in range(6)]
