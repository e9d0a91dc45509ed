"""Ingestion times of a range as ``(offset, ms)`` runs (segstore's ``ReadIngestTimes``), with a manual clock: from
memory, from Tier-2, across both and after recovery; a merged transaction's rule (its merge time, everywhere; a
merge logged without its time by an older version: the untimed mark rule); the in-memory index on its own."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from container_env import ContainerEnv
from test_offset_at_time import Clock, append, append_at, metadata_with, start

from segment_store.logs.operations import MergeOperation
from segment_store.protocol import encode_events
from segment_store.reading.ingest_times import IngestTimeIndex
from segstore_shared.contracts import SegmentNotExistsError, SegmentTruncatedError

pytestmark = pytest.mark.unit

SEGMENT = "scope/stream/0.#epoch.0"
ALL = 2**63 - 1


@pytest.fixture
async def env() -> AsyncIterator[ContainerEnv]:
    e = ContainerEnv()
    yield e
    await e.close()


async def test_runs_are_the_same_from_memory_tier2_both_and_after_recovery(env: ContainerEnv) -> None:
    clock = Clock(1_000)
    c = await start(env, clock)
    await c.create_segment(SEGMENT)
    appends = [(await append_at(c, clock, 1_000 + 10 * (i // 2)), 1_000 + 10 * (i // 2)) for i in range(8)]
    expected = [(at, ms) for i, (at, ms) in enumerate(appends) if i % 2 == 0]  # two appends a millisecond
    length = c.length(SEGMENT)
    assert await c.ingest_time_runs(SEGMENT, 0, ALL, 100) == (length, expected)
    await c.flush_to_storage()
    assert await c.ingest_time_runs(SEGMENT, 0, ALL, 100) == (length, expected)
    later = [(await append_at(c, clock, 2_000 + i), 2_000 + i) for i in range(3)]
    length = c.length(SEGMENT)
    assert await c.ingest_time_runs(SEGMENT, 0, ALL, 100) == (length, expected + later)  # Tier-2 and memory
    assert await c.ingest_time_runs(SEGMENT, 0, ALL, 2) == (expected[2][0], expected[:2])
    inside = appends[3][0] + 5
    assert await c.ingest_time_runs(SEGMENT, inside, later[1][0], 100) == (
        later[1][0],
        [(inside, appends[3][1]), *expected[2:], later[0]],
    )
    await c.stop()
    recovered = await start(env, clock)
    assert await recovered.ingest_time_runs(SEGMENT, 0, ALL, 100) == (length, expected + later)
    await recovered.truncate(SEGMENT, appends[2][0])
    with pytest.raises(SegmentTruncatedError):
        await recovered.ingest_time_runs(SEGMENT, 0, ALL, 100)
    with pytest.raises(SegmentNotExistsError):
        await recovered.ingest_time_runs("scope/stream/9.#epoch.0", 0, ALL, 100)


async def test_a_merged_transaction_gets_its_merge_time_in_memory_in_tier2_and_after_recovery(
    env: ContainerEnv,
) -> None:
    clock = Clock(100)
    c = await start(env, clock)
    await c.create_segment(SEGMENT)
    txn = SEGMENT + "#transaction." + "a" * 32
    await c.create_segment(txn)
    await append_at(c, clock, 100)
    clock.now = 150
    await c.append(txn, encode_events([b"in the transaction"] * 4))
    second = await append_at(c, clock, 200)  # after the transaction's writes, before its commit
    clock.now = 300
    await c.seal(txn)
    merged = await c.merge(SEGMENT, txn)
    end = merged.target_offset + merged.length
    expected = [(0, 100), (second, 200), (merged.target_offset, 300)]
    assert await c.ingest_time_runs(SEGMENT, 0, ALL, 100) == (end, expected)  # the merge time, nothing after it
    clock.now = 400
    after = await append_at(c, clock, 400)
    assert after == end
    expected.append((after, 400))
    assert (await c.ingest_time_runs(SEGMENT, 0, ALL, 100))[1] == expected
    await c.flush_to_storage()
    assert (await c.ingest_time_runs(SEGMENT, 0, ALL, 100))[1] == expected  # Tier-2: rewritten at the merge time
    assert await c.offset_at_time(SEGMENT, 201) == merged.target_offset
    assert await c.end_offset_before_time(SEGMENT, 300) == merged.target_offset
    assert await c.end_offset_before_time(SEGMENT, 301) == after
    await c.stop()
    recovered = await start(env, clock)
    assert (await recovered.ingest_time_runs(SEGMENT, 0, ALL, 100))[1] == expected


async def test_a_merge_replayed_from_tier1_keeps_its_time(env: ContainerEnv) -> None:
    clock = Clock(100)
    c = await start(env, clock)
    await c.create_segment(SEGMENT)
    txn = SEGMENT + "#transaction." + "b" * 32
    await c.create_segment(txn)
    await append_at(c, clock, 100)
    clock.now = 150
    await c.append(txn, encode_events([b"x"] * 3))
    await c.seal(txn)
    clock.now = 250
    merged = await c.merge(SEGMENT, txn)
    await c.stop()
    clock.now = 900
    recovered = await start(env, clock)  # the merge comes back from Tier-1 with its time
    runs = (await recovered.ingest_time_runs(SEGMENT, 0, ALL, 100))[1]
    assert runs == [(0, 100), (merged.target_offset, 250)]


def test_index_gives_a_timed_merge_its_time_and_the_next_append_an_entry() -> None:
    index = IngestTimeIndex(metadata_with(1))
    index.on_committed([append(1, 0, 10)])
    index.on_committed([MergeOperation(segment_id=1, source_id=2, target_offset=10, length=20, merge_time_ms=40)])
    index.on_committed([append(1, 30, 40)])  # the merge's millisecond: an entry all the same (a known boundary)
    assert index.entries(1) == 3
    assert index.runs(1, 0, 40, 40) == [(0, 10), (10, 40)]
    assert index.append_start_at_or_before(1, 35) == 30
    assert index.find(1, 11, 0).offset == 10
    assert index.end_before(1, 40, 0, 40).offset == 10
    assert index.end_before(1, 41, 0, 40).offset == 40
    assert index.end_before(1, 10, 0, 40).offset is None  # at or below the start: Tier-2 decides


def test_index_runs_with_shared_milliseconds_a_merge_and_an_append_in_the_merges_millisecond() -> None:
    index = IngestTimeIndex(metadata_with(1))
    index.on_committed([append(1, 0, 10), append(1, 10, 10), append(1, 20, 20)])
    assert index.runs(1, 0, 30, 20) == [(0, 10), (20, 20)]
    assert index.runs(1, 15, 25, 20) == [(15, 10), (20, 20)]
    index.on_committed([MergeOperation(segment_id=1, source_id=2, target_offset=30, length=30)])
    assert index.runs(1, 0, 60, 25) == [(0, 10), (20, 20), (30, 25)]  # no append after it: the last modification
    index.on_committed([append(1, 60, 20)])  # an older clock after the merge: still an entry, at 20
    assert index.entries(1) == 4
    assert index.runs(1, 0, 70, 25) == [(0, 10), (20, 20)]  # the merge gets the next append's time
    assert index.runs(1, 35, 70, 25) == [(35, 20)]
    assert index.runs(1, 70, 70, 25) == [] and index.runs(9, 5, 10, 7) == [(5, 7)]
