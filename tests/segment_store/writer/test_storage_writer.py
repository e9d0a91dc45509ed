"""Storage writer: Tier-2 faults and crashes at each stage of a flush, replay without duplicates."""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import AsyncIterator
from dataclasses import replace

import pytest
from container_env import SMALL, ContainerEnv, crash

from segment_store.containers.config import ContainerConfig
from segment_store.containers.registry import ContainerRegistry
from segment_store.containers.segment_container import ContainerState, SegmentContainer
from segment_store.logs.operations import AppendOperation
from segment_store.protocol import encode_events
from segment_store.storage.storage_config import ChunkedStorageConfig
from segment_store.writer.aggregator import SegmentAggregator
from segment_store.writer.config import WriterConfig

pytestmark = pytest.mark.unit


@pytest.fixture
async def env() -> AsyncIterator[ContainerEnv]:
    e = ContainerEnv()
    yield e
    await e.close()


def block(tag: str, count: int = 20) -> bytes:
    return encode_events([f"{tag}-{i}".encode() * 5 for i in range(count)])


async def fill(c: SegmentContainer, name: str, blocks: int, tag: str = "e") -> bytes:
    data = bytearray()
    for i in range(blocks):
        b = block(f"{tag}{i}")
        await c.append(name, b)
        data += b
    return bytes(data)


async def assert_tier2_exact(c: SegmentContainer, name: str, expected: bytes) -> None:
    """Tier-2 holds exactly ``expected`` (no byte twice), and the container reads it back."""
    info = await c.storage.info(name)
    assert info.length == len(expected)
    chunks = await c.storage.chunks(name)
    assert sum(ch.length for ch in chunks) == len(expected) - info.start_offset or info.start_offset > 0
    assert (
        await c.storage.read(name, info.start_offset, len(expected) - info.start_offset)
        == expected[info.start_offset :]
    )
    segment = await c.get_info(name)
    assert segment.storage_length == segment.length == len(expected)


def data_chunk(op: str, name: str) -> bool:
    return name.startswith("data/")


def journal_object(op: str, name: str) -> bool:
    return name.startswith("system/") and "/journal/" in name


async def test_flush_with_transient_chunk_write_failures_retries_without_duplicates(env: ContainerEnv) -> None:
    c = await env.start()
    await c.create_segment("s")
    fault = env.chunks.inject(data_chunk, ops=["write_chunk"], times=3)
    data = await fill(c, "s", 30)
    await asyncio.wait_for(c.flush_to_storage(), 10)
    assert fault.hits == 3
    await assert_tier2_exact(c, "s", data)


async def test_flush_with_journal_write_that_landed_but_failed_applies_once(env: ContainerEnv) -> None:
    c = await env.start()
    await c.create_segment("s")
    await c.flush_to_storage()
    fault = env.chunks.inject(journal_object, ops=["write_chunk"], after=True, times=1)
    data = await fill(c, "s", 30)
    await asyncio.wait_for(c.flush_to_storage(), 10)
    assert fault.hits == 1
    await assert_tier2_exact(c, "s", data)
    await c.stop()
    c2 = await env.start()
    await assert_tier2_exact(c2, "s", data)


async def test_crash_after_flush_before_tier1_truncation_replays_without_duplicates(env: ContainerEnv) -> None:
    c = await env.start()
    await c.create_segment("s")
    data = await fill(c, "s", 20)
    await c.flush_to_storage()
    await crash(c)
    c2 = await env.start()
    more = await fill(c2, "s", 5, tag="after")
    await c2.flush_to_storage()
    await assert_tier2_exact(c2, "s", data + more)


async def test_crash_with_chunk_written_but_not_recorded_recovers_and_sweeps(env: ContainerEnv) -> None:
    c = await env.start()
    await c.create_segment("s")
    env.chunks.inject(journal_object, ops=["write_chunk"])  # every journal record fails: chunks are orphans
    env.chunks.inject(data_chunk, ops=["delete", "delete_if_exists"])  # ...and their cleanup fails too
    data = await fill(c, "s", 30)
    await asyncio.sleep(0.3)  # the writer tries (and fails) to flush several times
    assert (await c.get_info("s")).storage_length == 0
    await crash(c)
    env.chunks.clear()
    c2 = await env.start()
    await asyncio.wait_for(c2.flush_to_storage(), 10)
    await assert_tier2_exact(c2, "s", data)
    referenced = {ch.chunk_name for ch in await c2.storage.chunks("s")}
    listed = {n for n in env.chunks.list("data/")}
    assert listed == referenced, "orphan chunks of the failed flushes survived the boot sweep"


async def test_merge_replayed_after_crash_is_not_applied_twice(env: ContainerEnv) -> None:
    c = await env.start()
    parent, txn = "p/s/0.#epoch.0", "p/s/0.#epoch.0#transaction." + "0f" * 16
    await c.create_segment(parent)
    await c.create_segment(txn)
    head = await fill(c, parent, 5, "p")
    tail = await fill(c, txn, 5, "t")
    await c.merge(parent, txn)
    await c.flush_to_storage()
    await crash(c)
    c2 = await env.start()
    await c2.flush_to_storage()
    await assert_tier2_exact(c2, parent, head + tail)
    assert not await c2.storage.exists(txn)


async def test_merge_whose_source_operations_tier1_no_longer_holds_is_replayed_after_a_crash(
    env: ContainerEnv,
) -> None:
    """A transaction written, sealed and flushed; Tier-1 truncated past its operations; then merged, and the
    container crashes before the merge reaches Tier-2. Recovery replays the merge, so the source's metadata must
    stay for it (the self-test's crash loop: recovery dropped it as "merged, none of its operations left", and the
    replayed merge then failed the container at every restart: SegmentNotExistsError)."""
    c = await env.start()
    parent, txn = "p/s/0.#epoch.0", "p/s/0.#epoch.0#transaction." + "0d" * 16
    await c.create_segment(parent)
    await c.create_segment(txn)
    head = await fill(c, parent, 3, "p")
    tail = await fill(c, txn, 3, "t")
    await c.seal(txn)
    await c.flush_to_storage()
    await c.durable_log.checkpoint()
    await c.append(parent, block("mark"))  # an operation after the checkpoint for the writer to move past
    head += block("mark")
    await c.flush_to_storage()
    env.chunks.inject(journal_object, ops=["write_chunk"])  # the merge cannot reach Tier-2
    await c.merge(parent, txn)
    await crash(c)
    env.chunks.clear()
    c2 = await env.start()
    await asyncio.wait_for(c2.flush_to_storage(), 10)
    assert c2.state is ContainerState.RUNNING
    await assert_tier2_exact(c2, parent, head + tail)
    assert not await c2.storage.exists(txn)


async def test_transaction_merged_before_its_flush_is_written_to_tier2_once_at_its_merge_time() -> None:
    """Its merge flushes it: its rows are written with the merge time at once, and the concat has nothing to
    rewrite (one chunk write for it, not two: Spark's exactly-once sink writes every micro-batch this way)."""
    lazy = replace(SMALL, writer=replace(SMALL.writer, flush_max_age_s=3600.0))  # flushed by request only
    env = ContainerEnv(lazy)
    try:
        c = await env.start()
        parent, txn = "p/s/0.#epoch.0", "p/s/0.#epoch.0#transaction." + "0e" * 16
        await c.create_segment(parent)
        await c.create_segment(txn)
        head = await fill(c, parent, 3, "p")
        await c.flush_to_storage()
        tail = await fill(c, txn, 3, "t")
        before, merging = len(env.chunks.calls), int(time.time() * 1000)
        merged = await c.merge(parent, txn)
        merged_by = int(time.time() * 1000)
        total = len(head) + len(tail)
        # no flush request: that forces every aggregator, the transaction's own first (with its own times)
        deadline = asyncio.get_running_loop().time() + 30
        while (await c.get_info(parent)).storage_length < total:
            assert asyncio.get_running_loop().time() < deadline, "the merge never reached Tier-2"
            await asyncio.sleep(0.01)
        written = [name for op, name in env.chunks.calls[before:] if op == "write_chunk" and data_chunk(op, name)]
        assert len(written) == 1, written  # the transaction's bytes, once
        await assert_tier2_exact(c, parent, head + tail)
        assert (await c.storage.chunks(parent))[-1].chunk_name == written[0]
        runs = await c.storage.ingest_runs(parent, merged.target_offset, total, 10)
        assert len(runs) == 1 and runs[0][0] == merged.target_offset == len(head), runs
        assert merging <= runs[0][1] <= merged_by, (runs, merging, merged_by)
        assert not await c.storage.exists(txn)
    finally:
        await env.close()


async def test_two_merges_replayed_after_crash_keep_the_full_tier2_length(env: ContainerEnv) -> None:
    """Replaying the first of two merges already in Tier-2 must not pull the storage length back to the end
    of the first one (the second merge would then be applied at a wrong offset and fail the container)."""
    c = await env.start()
    parent = "p/s/0.#epoch.0"
    txns = [f"{parent}#transaction." + f"{i:02x}" * 16 for i in (1, 2)]
    await c.create_segment(parent)
    data = await fill(c, parent, 3, "p")
    for i, txn in enumerate(txns):
        await c.create_segment(txn)
        part = await fill(c, txn, 4, f"t{i}")
        await c.seal(txn)
        await c.merge(parent, txn)
        data += part
    await c.flush_to_storage()
    await crash(c)
    c2 = await env.start()
    more = await fill(c2, parent, 2, "after")
    await asyncio.wait_for(c2.flush_to_storage(), 10)
    await assert_tier2_exact(c2, parent, data + more)
    for txn in txns:
        assert not await c2.storage.exists(txn)


async def _merge_two_txns_then_delete_parent(c: SegmentContainer, flush_before_delete: bool) -> list[str]:
    parent = "p/s/0.#epoch.0"
    txns = [f"{parent}#transaction." + f"{i:02x}" * 16 for i in (3, 4)]
    await c.create_segment(parent)
    await fill(c, parent, 3, "p")
    for i, txn in enumerate(txns):
        await c.create_segment(txn)
        await fill(c, txn, 40, f"t{i}")
        await c.seal(txn)
        await c.merge(parent, txn)
    if flush_before_delete:
        await c.flush_to_storage()
    await c.seal(parent)
    await c.delete_segment(parent)
    return [parent, *txns]


async def _assert_all_gone_and_writer_idle(c: SegmentContainer, names: list[str]) -> None:
    await asyncio.wait_for(c.flush_to_storage(), 10)
    for name in names:
        assert not await c.storage.exists(name), f"{name} left behind in Tier-2"
        assert c.metadata.get_by_name(name) is None and not c.metadata.has_dead(name), f"{name} still in metadata"
    assert c.writer.pending_segments == 0, "operations of deleted segments are still pending (the writer spins)"
    assert c.writer.truncation_sequence > c.metadata.sequence_number - 1


@pytest.mark.parametrize("flush_before_delete", [True, False], ids=["merged-in-tier2", "merges-pending"])
async def test_parent_deleted_after_merges_leaves_no_pending_sources(
    env: ContainerEnv, flush_before_delete: bool
) -> None:
    c = await env.start()
    names = await _merge_two_txns_then_delete_parent(c, flush_before_delete)
    await _assert_all_gone_and_writer_idle(c, names)


@pytest.mark.parametrize("flush_before_delete", [True, False], ids=["merged-in-tier2", "merges-pending"])
async def test_parent_deleted_after_merges_replayed_after_crash_leaves_no_pending_sources(
    env: ContainerEnv, flush_before_delete: bool
) -> None:
    """After a restart the log replays merges into a parent it deletes later: the merge sources must end too
    (not stay pending and due forever, which spun the writer and held Tier-1 back)."""
    c = await env.start()
    names = await _merge_two_txns_then_delete_parent(c, flush_before_delete)
    await crash(c)
    c2 = await env.start()
    await _assert_all_gone_and_writer_idle(c2, names)


async def test_delete_and_recreate_replayed_after_crash_keeps_the_new_segment(env: ContainerEnv) -> None:
    c = await env.start()
    await c.create_segment("s")
    await fill(c, "s", 5, "old")
    await c.flush_to_storage()
    await c.delete_segment("s")
    await c.create_segment("s")
    new = await fill(c, "s", 3, "new")
    await c.flush_to_storage()
    await crash(c)
    c2 = await env.start()
    await c2.flush_to_storage()
    await assert_tier2_exact(c2, "s", new)


async def test_truncate_deletes_only_tier2_chunks_wholly_below_start(env: ContainerEnv) -> None:
    c = await env.start()
    await c.create_segment("s")
    data = bytearray()
    for i in range(6):
        data += await fill(c, "s", 10, f"r{i}")
        await c.flush_to_storage()  # one chunk (at least) per round
    cut = len(data) // 2 + 7
    await c.truncate("s", cut)
    await c.flush_to_storage()
    info = await c.storage.info("s")
    assert info.start_offset == cut
    chunks = await c.storage.chunks("s")
    assert chunks[0].start_offset <= cut < chunks[0].start_offset + chunks[0].length
    listed = set(env.chunks.list("data/"))
    assert listed == {ch.chunk_name for ch in chunks}
    assert await c.storage.read("s", cut, len(data) - cut) == bytes(data[cut:])


async def test_seal_reaches_tier2(env: ContainerEnv) -> None:
    c = await env.start()
    await c.create_segment("s")
    await c.create_segment("empty")
    data = await fill(c, "s", 3)
    await c.seal("s")
    await c.seal("empty")
    await c.flush_to_storage()
    assert (await c.storage.info("s")).sealed
    assert (await c.storage.info("empty")).sealed
    assert (await c.get_info("s")).storage_length == len(data)


async def test_non_retriable_tier2_error_fails_container_and_registry_restarts_it(env: ContainerEnv) -> None:
    registry = ContainerRegistry(1, env.tier1, env.storage, env.config, restart_delay_s=0.05)
    try:
        c = await registry.start_container(0)
        await c.create_segment("s")
        env.chunks.inject(data_chunk, ops=["write_chunk"], error=lambda op, n: RuntimeError("disk on fire"), times=1)
        data = await fill(c, "s", 10)
        for _ in range(200):
            if c.failure is not None:
                break
            await asyncio.sleep(0.01)
        assert isinstance(c.failure, RuntimeError)
        assert c.state in (ContainerState.FAILED, ContainerState.STOPPED)  # failed, then stopped for the restart
        for _ in range(500):
            if registry.running == [0] and registry.get(0) is not c:
                break
            await asyncio.sleep(0.01)
        c2 = registry.get(0)
        assert c2 is not c
        await asyncio.wait_for(c2.flush_to_storage(), 10)
        await assert_tier2_exact(c2, "s", data)
    finally:
        await registry.close()


async def test_flush_to_storage_wakes_an_idle_writer_at_once(env: ContainerEnv) -> None:
    lazy = ContainerConfig(writer=WriterConfig(flush_max_age_s=60.0))
    c = await env.start(config=lazy)
    await c.create_segment("s")
    await c.append("s", b"x" * 100)
    await asyncio.sleep(0.05)  # the writer has taken the append and sleeps until it is 60 s old
    await asyncio.wait_for(c.flush_to_storage(), 2)
    assert (await c.get_info("s")).storage_length == 100


async def test_writer_with_commits_in_a_row_takes_them_in_few_iterations_and_flushes_on_request(
    env: ContainerEnv,
) -> None:
    paced = ContainerConfig(writer=WriterConfig(flush_max_age_s=60.0, min_iteration_interval_s=0.5))
    c = await env.start(config=paced)
    await c.create_segment("s")
    reads = 0
    operation_log = c.durable_log.memory_log
    read = operation_log.read

    async def counting(*args: object) -> object:
        nonlocal reads
        reads += 1
        return await read(*args)  # type: ignore[arg-type]

    operation_log.read = counting  # type: ignore[method-assign]
    data = await fill(c, "s", 40)  # 40 commits, one after the other, well within 0.5 s
    assert reads <= 3, f"{reads} iterations for 40 commits"
    began = asyncio.get_running_loop().time()
    await asyncio.wait_for(c.flush_to_storage(), 5)
    assert asyncio.get_running_loop().time() - began < 0.4  # the request cuts the pause
    await assert_tier2_exact(c, "s", data)


async def test_iterations_look_only_at_segments_with_queued_operations(env: ContainerEnv) -> None:
    c = await env.start()
    names = [f"s{i}" for i in range(200)]
    for name in names:
        await c.create_segment(name)
        await c.append(name, block(name, 2))
    await asyncio.wait_for(c.flush_to_storage(), 10)
    looked_at: set[str] = set()
    due_in = SegmentAggregator.due_in

    def counting(self: SegmentAggregator, now: float) -> float | None:
        looked_at.add(self.target.name)
        return due_in(self, now)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(SegmentAggregator, "due_in", counting)
        data = await fill(c, "s7", 30)
        await asyncio.sleep(0.2)  # iterations while appends wait for their age (0.05 s) or size
        await asyncio.wait_for(c.flush_to_storage(), 10)
    assert looked_at == {"s7"}  # the 199 flushed segments cost the writer nothing
    await assert_tier2_exact(c, "s7", block("s7", 2) + data)
    assert c.writer.pending_segments == 0


async def test_stop_right_after_a_commit_does_not_hang(env: ContainerEnv) -> None:
    for _ in range(20):
        c = await env.start()
        env.instances.remove(c)
        if "s" not in c.segment_names():
            await c.create_segment("s")
        await c.append("s", b"y")
        await asyncio.wait_for(c.stop(), 5)  # the writer is woken by this commit in the same loop turn


async def test_flush_larger_than_a_tier2_chunk_is_split() -> None:
    mib = 1024 * 1024  # flushes may be larger than Tier-2's chunks: the writer cuts them
    env = ContainerEnv(storage_config=ChunkedStorageConfig(max_chunk_bytes=mib))
    big = ContainerConfig(writer=WriterConfig(flush_threshold_bytes=200 * mib, max_flush_bytes=200 * mib))
    try:
        c = await env.start(config=big)
        await c.create_segment("s")
        data = bytearray()
        for i in range(40):
            b = encode_events([bytes([i]) * 100_000])
            await c.append("s", b)
            data += b
        await c.flush_to_storage()
        await assert_tier2_exact(c, "s", bytes(data))
        assert len(await c.storage.chunks("s")) >= 4
    finally:
        await env.close()


async def test_queued_appends_keep_no_operation_objects() -> None:
    # appends wait in the writer for up to flush_max_age_s by the thousand: as operation objects (each with its
    # attribute updates) they made the garbage collector's full passes long; they are queued as bytes
    mib64 = 64 * 1024 * 1024
    quiet = replace(SMALL, writer=WriterConfig(flush_threshold_bytes=mib64, max_flush_bytes=mib64, flush_max_age_s=60))
    env = ContainerEnv(config=quiet)
    try:
        c = await env.start()
        await c.create_segment("s")
        data = await fill(c, "s", 300, tag="gc-probe")

        def live_appends() -> int:  # of this test (other tests' garbage may hold theirs)
            gc.collect()
            return sum(1 for o in gc.get_objects() if type(o) is AppendOperation and b"gc-probe" in bytes(o.data))

        # the writer takes the committed appends from the log within an iteration; each look walks the whole heap
        # (seconds in a test process that has run thousands of tests), so looks are few and the loop runs between
        for _ in range(40):
            if live_appends() < 5:
                break
            await asyncio.sleep(0.2)
        assert live_appends() < 5
        assert c.writer.pending_segments == 1 and (await c.get_info("s")).storage_length == 0
        await c.flush_to_storage()
        await assert_tier2_exact(c, "s", data)
    finally:
        await env.close()
