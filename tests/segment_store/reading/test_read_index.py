"""Read index: committed appends read back exactly, tail reads wait, Tier-2 fills gaps, eviction is safe."""

from __future__ import annotations

import asyncio
import random

import pytest
from container_env import wait_until

from segment_store.logs.operations import AppendOperation, DeleteOperation, MergeOperation, SealOperation
from segment_store.metadata import ContainerMetadata, SegmentMetadata
from segment_store.reading.cache import CacheBudget, CacheConfig
from segment_store.reading.read_index import ReadIndex, ReadIndexConfig, ReadIndexCorruptedError
from segstore_shared.contracts import SegmentNotExistsError, SegmentTruncatedError

pytestmark = pytest.mark.unit


class Tier2:
    def __init__(self) -> None:
        self.data: dict[str, bytearray] = {}
        self.reads = 0

    async def read(self, name: str, offset: int, length: int) -> bytes:
        self.reads += 1
        return bytes(self.data[name][offset : offset + length])


def setup(max_cache: int = 1 << 30, append_block_bytes: int = 4096) -> tuple[ContainerMetadata, ReadIndex, Tier2]:
    meta = ContainerMetadata(0)
    tier2 = Tier2()
    config = ReadIndexConfig(append_block_bytes, 8192)
    index = ReadIndex(meta, tier2.read, CacheBudget(CacheConfig(max_bytes=max_cache)), config)
    return meta, index, tier2


def add_segment(meta: ContainerMetadata, sid: int, name: str) -> SegmentMetadata:
    segment = SegmentMetadata(segment_id=sid, name=name)
    meta.add(segment)
    return segment


def commit_append(meta: ContainerMetadata, index: ReadIndex, sid: int, data: bytes) -> None:
    segment = meta.get(sid)
    assert segment is not None
    op = AppendOperation(segment_id=sid, data=data, offset=segment.length, sequence_number=1)
    segment.length += len(data)
    index.on_committed([op])


def append_randomly(meta: ContainerMetadata, index: ReadIndex, rng: random.Random, total: int, largest: int) -> bytes:
    """Commit ``total`` random bytes to segment 1 as appends of 1..``largest`` bytes; the bytes."""
    payload = rng.randbytes(total)
    position = 0
    while position < total:
        size = rng.randint(1, largest)
        commit_append(meta, index, 1, memoryview(payload)[position : position + size])  # the wire gives views
        position += size
    return payload


async def read_all(index: ReadIndex, sid: int, start: int, end: int) -> bytes:
    out = bytearray()
    while start + len(out) < end:
        result = await index.read(sid, start + len(out), end - start - len(out), 0)
        assert result.data
        out += result.data
    return bytes(out)


async def test_read_with_many_small_appends_returns_exact_bytes() -> None:
    meta, index, _ = setup()
    add_segment(meta, 1, "s")
    expected = b"".join(bytes([i]) * (i * 7 % 300 + 1) for i in range(200))
    pos = 0
    for i in range(200):
        n = i * 7 % 300 + 1
        commit_append(meta, index, 1, expected[pos : pos + n])
        pos += n
    assert await read_all(index, 1, 0, len(expected)) == expected
    assert await read_all(index, 1, 1234, 5000) == expected[1234:5000]


async def test_read_at_tail_with_later_append_wakes_up() -> None:
    meta, index, _ = setup()
    add_segment(meta, 1, "s")
    commit_append(meta, index, 1, b"abc")
    reader = asyncio.create_task(index.read(1, 3, 100, timeout_s=5))
    await wait_until(lambda: bool(index._index(1).waiters), "the reader waits at the tail")
    assert not reader.done()
    commit_append(meta, index, 1, b"defg")
    result = await asyncio.wait_for(reader, 1)
    assert (result.offset, result.data) == (3, b"defg")


async def test_read_at_tail_with_timeout_returns_empty() -> None:
    meta, index, _ = setup()
    add_segment(meta, 1, "s")
    result = await index.read(1, 0, 10, timeout_s=0.05)
    assert result.at_tail_timeout


async def test_read_at_end_of_sealed_segment_reports_end() -> None:
    meta, index, _ = setup()
    segment = add_segment(meta, 1, "s")
    commit_append(meta, index, 1, b"abc")
    waiting = asyncio.create_task(index.read(1, 3, 10, timeout_s=5))
    await wait_until(lambda: bool(index._index(1).waiters), "the reader waits at the tail")
    segment.sealed = True
    index.on_committed([SealOperation(segment_id=1, length=3, sequence_number=2)])
    assert (await asyncio.wait_for(waiting, 1)).end_of_segment


async def test_read_below_start_offset_with_truncation_raises() -> None:
    meta, index, _ = setup()
    segment = add_segment(meta, 1, "s")
    commit_append(meta, index, 1, b"abcdef")
    segment.start_offset = 4
    with pytest.raises(SegmentTruncatedError):
        await index.read(1, 3, 10, 0)
    assert (await index.read(1, 4, 10, 0)).data == b"ef"


async def test_read_with_evicted_data_comes_from_tier2_exactly() -> None:
    meta, index, tier2 = setup(max_cache=20_000)
    segment = add_segment(meta, 1, "s")
    payload = bytes(range(256)) * 200  # 51,200 bytes
    for i in range(0, len(payload), 1000):
        commit_append(meta, index, 1, payload[i : i + 1000])
    assert index.cached_bytes(1) == len(payload)  # nothing in Tier-2: nothing evictable
    # the budget counts the memory held: the data plus the unfilled end of each append block (< 1 append)
    assert len(payload) <= index.budget.used_bytes < len(payload) + 1000 * len(payload) // 4096
    tier2.data["s"] = bytearray(payload)
    segment.storage_length = len(payload)
    index.evict()
    assert index.budget.used_bytes <= 20_000
    assert await read_all(index, 1, 0, len(payload)) == payload
    assert tier2.reads > 0


async def test_appends_fill_blocks_in_place_and_read_back_across_block_ends() -> None:
    meta, index, _ = setup(max_cache=10_000_000)
    add_segment(meta, 1, "s")
    payload = append_randomly(meta, index, random.Random(5), 30_000, 1500)
    for start in range(0, len(payload), 997):  # reads that start and end anywhere, across block ends
        assert await read_all(index, 1, start, min(len(payload), start + 3001)) == payload[start : start + 3001]
    held = index.budget.used_bytes
    # blocks hold 4096 bytes here and take appends below 1024 (bigger ones are kept as they are): a block
    # is closed only when an append does not fit, so it is at least 3/4 full
    assert index.cached_bytes(1) == len(payload) <= held <= len(payload) * 4 // 3 + 4096


async def test_appends_into_blocks_growing_to_the_limit_read_back_exactly_and_a_drop_releases_them() -> None:
    meta, index, _ = setup(append_block_bytes=1024 * 1024)  # blocks of 16 KiB doubling to 1 MiB
    add_segment(meta, 1, "s")
    payload = append_randomly(meta, index, random.Random(7), 3_000_000, 60_000)
    for start in range(0, len(payload), 99_991):
        assert await read_all(index, 1, start, min(len(payload), start + 70_001)) == payload[start : start + 70_001]
    assert index.cached_bytes(1) == len(payload)
    index.drop_segment(1)
    assert index.budget.used_bytes == 0


async def test_eviction_with_data_only_in_tier1_keeps_it() -> None:
    meta, index, tier2 = setup(max_cache=5_000)
    segment = add_segment(meta, 1, "s")
    for _ in range(10):
        commit_append(meta, index, 1, b"q" * 1000)
    segment.storage_length = 4000
    tier2.data["s"] = bytearray(b"q" * 4000)
    index.evict()
    assert index.cached_bytes(1) >= 6000  # bytes above storage length stay


async def test_read_with_missing_data_everywhere_raises_corrupted() -> None:
    meta, index, _ = setup()
    segment = add_segment(meta, 1, "s")
    segment.length = 10
    with pytest.raises(ReadIndexCorruptedError):
        await index.read(1, 0, 10, 0)


async def test_read_after_merge_with_cached_and_tier2_source() -> None:
    meta, index, tier2 = setup()
    target = add_segment(meta, 1, "t")
    source = add_segment(meta, 2, "t#txn")
    commit_append(meta, index, 1, b"AAAA")
    commit_append(meta, index, 2, b"bbbbbb")
    # the source's first 3 bytes are only in Tier-2 (evicted)
    tier2.data["t#txn"] = bytearray(b"bbbbbb")
    source.storage_length = 6
    index.evict()
    index._indexes[2].offsets = [3]  # type: ignore[attr-defined]
    index._indexes[2].blocks = [bytearray(b"bbb")]  # type: ignore[attr-defined]
    source.sealed = True
    source.merged = True
    target.length = 10
    index.on_committed([MergeOperation(segment_id=1, source_id=2, target_offset=4, length=6, sequence_number=3)])
    assert await read_all(index, 1, 0, 10) == b"AAAAbbbbbb"
    with pytest.raises(SegmentNotExistsError):
        await index.read(2, 0, 1, 0)


async def test_delete_with_waiting_reader_fails_it() -> None:
    meta, index, _ = setup()
    segment = add_segment(meta, 1, "s")
    waiting = asyncio.create_task(index.read(1, 0, 10, timeout_s=5))
    await wait_until(lambda: bool(index._index(1).waiters), "the reader waits at the tail")
    segment.deleted = True
    index.on_committed([DeleteOperation(segment_id=1, sequence_number=4)])
    with pytest.raises(SegmentNotExistsError):
        await asyncio.wait_for(waiting, 1)
