"""Time lookups: the first event ingested at or after a time, exact in memory, in Tier-2, across both, after
recovery and truncation; transactions; a clock that goes back. Also the in-memory index on its own."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

import pytest
from container_env import ContainerEnv, crash

from segment_store.containers.segment_container import SegmentContainer
from segment_store.logs.operations import AppendOperation, DeleteOperation, MergeOperation
from segment_store.metadata import ContainerMetadata, SegmentMetadata
from segment_store.protocol import encode_events
from segment_store.reading.ingest_times import IngestTimeIndex
from segstore_shared.contracts import SegmentNotExistsError

pytestmark = pytest.mark.unit

SEGMENT = "scope/stream/0.#epoch.0"


class Clock:
    def __init__(self, now: int) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


@pytest.fixture
async def env() -> AsyncIterator[ContainerEnv]:
    e = ContainerEnv()
    yield e
    await e.close()


async def start(env: ContainerEnv, clock: Clock) -> SegmentContainer:
    container = await env.start()
    container.durable_log.updater._clock_ms = clock
    return container


async def append_at(container: SegmentContainer, clock: Clock, ms: int, count: int = 3) -> int:
    """Append ``count`` events at clock ``ms``; the append's offset."""
    clock.now = ms
    return await container.append(SEGMENT, encode_events([os.urandom(40) for _ in range(count)]))


def expected(appends: list[tuple[int, int]], timestamp: int, length: int, start: int = 0) -> int:
    """The first append (offset, time) at or after ``start`` with time >= ``timestamp``, else ``length``."""
    return next((o for o, t in appends if o >= start and t >= timestamp), length)


async def check_every_time(container: SegmentContainer, appends: list[tuple[int, int]], start: int = 0) -> None:
    length = container.length(SEGMENT)
    times = sorted({t for _, t in appends})
    for timestamp in [0, *times, *(t + 1 for t in times), *(t - 1 for t in times)]:
        got = await container.offset_at_time(SEGMENT, timestamp)
        assert got == expected(appends, timestamp, length, start), timestamp


async def test_offset_at_time_is_exact_in_memory_in_tier2_across_both_and_after_recovery(env: ContainerEnv) -> None:
    clock = Clock(1_000)
    c = await start(env, clock)
    await c.create_segment(SEGMENT)
    appends: list[tuple[int, int]] = []
    for i in range(12):  # some appends share a millisecond
        ms = 1_000 + 10 * (i // 2)
        appends.append((await append_at(c, clock, ms), ms))
    await c.flush_to_storage()
    assert c.metadata.get_by_name(SEGMENT).storage_length == c.length(SEGMENT)  # type: ignore[union-attr]
    for i in range(12, 20):  # only in memory (the writer flushes after 0.05 s: check at once)
        appends.append((await append_at(c, clock, 1_000 + 10 * i), 1_000 + 10 * i))
    await check_every_time(c, appends)

    await c.stop()
    recovered = await start(env, clock)
    await check_every_time(recovered, appends)
    await recovered.flush_to_storage()  # now all of it in Tier-2
    await check_every_time(recovered, appends)

    await recovered.truncate(SEGMENT, appends[5][0])
    await check_every_time(recovered, appends, start=appends[5][0])
    assert await recovered.offset_at_time(SEGMENT, 0) == appends[5][0]
    with pytest.raises(SegmentNotExistsError):
        await recovered.offset_at_time("scope/stream/9.#epoch.0", 0)


async def test_offset_at_time_after_a_crash_between_flush_and_tier1_truncation(env: ContainerEnv) -> None:
    # the replayed appends already in Tier-2 and the new ones after them are queued together: the flush writes
    # from Tier-2's end on, with the ingest times of the new appends only
    clock = Clock(1_000)
    c = await start(env, clock)
    await c.create_segment(SEGMENT)
    appends = [(await append_at(c, clock, 1_000 + 10 * (i // 3)), 1_000 + 10 * (i // 3)) for i in range(9)]
    await c.flush_to_storage()
    await crash(c)
    recovered = await start(env, clock)
    appends += [(await append_at(recovered, clock, 2_000 + 10 * (i // 2)), 2_000 + 10 * (i // 2)) for i in range(6)]
    await recovered.flush_to_storage()
    assert recovered.metadata.get_by_name(SEGMENT).storage_length == recovered.length(SEGMENT)  # type: ignore[union-attr]
    await check_every_time(recovered, appends)


async def test_offset_at_time_with_a_clock_that_goes_back_never_skips_a_later_event(env: ContainerEnv) -> None:
    clock = Clock(5_000)
    c = await start(env, clock)
    await c.create_segment(SEGMENT)
    first = await append_at(c, clock, 5_000)
    second = await append_at(c, clock, 4_000)  # the clock stepped back: ingested "at" 5,000 still
    assert await c.offset_at_time(SEGMENT, 4_500) == first
    assert await c.offset_at_time(SEGMENT, 5_001) == c.length(SEGMENT)
    await c.flush_to_storage()
    assert await c.offset_at_time(SEGMENT, 4_500) == first
    assert second > first


async def test_offset_at_and_before_time_with_a_merged_transaction_in_memory_then_in_tier2(env: ContainerEnv) -> None:
    clock = Clock(100)
    c = await start(env, clock)
    await c.create_segment(SEGMENT)
    txn = SEGMENT + "#transaction." + "a" * 32
    await c.create_segment(txn)
    await append_at(c, clock, 100)
    await append_at(c, clock, 110)
    clock.now = 150
    await c.append(txn, encode_events([b"in the transaction"] * 4))
    clock.now = 300
    merged = await c.merge(SEGMENT, txn)
    after = await append_at(c, clock, 310)
    # the transaction's events (written at 150) carry the merge time, 300, in memory and in Tier-2 alike
    for tier in ("memory", "tier2"):
        if tier == "tier2":
            await c.flush_to_storage()
        assert await c.offset_at_time(SEGMENT, 120) == merged.target_offset, tier
        assert await c.offset_at_time(SEGMENT, 300) == merged.target_offset, tier
        assert await c.offset_at_time(SEGMENT, 301) == after, tier
        assert await c.offset_at_time(SEGMENT, 311) == c.length(SEGMENT), tier
        assert await c.end_offset_before_time(SEGMENT, 120) == merged.target_offset, tier
        assert await c.end_offset_before_time(SEGMENT, 300) == merged.target_offset, tier
        assert await c.end_offset_before_time(SEGMENT, 301) == after, tier
        assert await c.end_offset_before_time(SEGMENT, 311) == c.length(SEGMENT), tier
        assert await c.end_offset_before_time(SEGMENT, 100) == 0, tier
    info = await c.get_info(SEGMENT)
    assert info.last_modified_ms >= 310


def metadata_with(segment_id: int, storage_length: int = 0) -> ContainerMetadata:
    metadata = ContainerMetadata(0)
    metadata.add(SegmentMetadata(segment_id=segment_id, name=f"s{segment_id}", storage_length=storage_length))
    return metadata


def append(segment_id: int, offset: int, ms: int, size: int = 10) -> AppendOperation:
    return AppendOperation(segment_id=segment_id, data=b"x" * size, offset=offset, ingest_time_ms=ms)


def test_index_find_with_shared_milliseconds_an_older_clock_and_a_merge() -> None:
    index = IngestTimeIndex(metadata_with(1))
    index.on_committed([append(1, 0, 10), append(1, 10, 10), append(1, 20, 20), append(1, 30, 15)])
    assert index.entries(1) == 2  # 10 shares 0's entry; 15 (older clock) counts as 20
    assert index.find(1, 10, 0).offset == 0
    assert index.find(1, 11, 0).offset == 20
    assert index.find(1, 16, 0).offset == 20
    assert index.find(1, 21, 0).offset is None
    assert index.find(1, 11, 25).offset == 25  # from inside the 20 ms entry
    assert index.find(1, 11, 15).older_before and not index.find(1, 10, 15).older_before
    index.on_committed([MergeOperation(segment_id=1, source_id=2, target_offset=40, length=30), append(1, 70, 30)])
    assert index.find(1, 21, 0).offset == 40  # the merged range: any time
    assert index.find(1, 31, 0).offset == 40
    assert index.find(1, 31, 70).offset is None
    assert not index.find(1, 25, 75).older_before  # a merge lies between the covering entry and 75
    assert index.find(9, 0, 0).offset is None and not index.find(9, 0, 0).older_before


def test_index_trims_what_tier2_holds_and_forgets_deleted_and_merged_segments() -> None:
    metadata = metadata_with(1)
    index = IngestTimeIndex(metadata)
    index.on_committed([append(1, 10 * i, 100 + i) for i in range(63)])
    assert index.entries(1) == 63
    metadata.get(1).storage_length = 305  # type: ignore[union-attr]
    index.on_committed([append(1, 630, 163)])  # the 64th entry trims
    assert index.entries(1) == 64 - 30  # the entry holding 305 (offset 300) stays
    assert index.find(1, 131, 305).offset == 310 and index.find(1, 130, 305).offset == 305
    assert index.find(1, 131, 305).older_before
    index.trim(1, 10_000)
    assert index.entries(1) == 1 and index.find(1, 163, 640).offset == 640
    index.on_committed([append(2, 0, 1), MergeOperation(segment_id=1, source_id=2, target_offset=640, length=10)])
    assert index.entries(2) == 0 and index.entries(1) == 2
    index.on_committed([DeleteOperation(segment_id=1)])
    assert index.entries(1) == 0
