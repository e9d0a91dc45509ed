"""Segment container: the public operations, recovery, Tier-2 flushing, throttling and failures."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator

import pytest
from container_env import SMALL, ContainerEnv, settle, tier2_refusals, wait_until

from segment_store.containers.config import ContainerConfig
from segment_store.containers.registry import ContainerRegistry
from segment_store.containers.segment_container import ContainerState
from segment_store.protocol import encode_events
from segment_store.reading.cache import CacheBudget, CacheConfig
from segstore_shared.contracts import (
    NULL_ATTRIBUTE_VALUE,
    AttributeUpdate,
    AttributeUpdateType,
    BadAttributeUpdateError,
    BadOffsetError,
    ContainerNotOwnedError,
    ContainerOfflineError,
    SegmentExistsError,
    SegmentNotExistsError,
    SegmentSealedError,
    SegmentTruncatedError,
    SegmentType,
    ThrottledTimeoutError,
    TooLargeError,
)

pytestmark = pytest.mark.unit

WRITER = 0x1234_5678_9ABC_DEF0_0FED_CBA9_8765_4321


@pytest.fixture
async def env() -> AsyncIterator[ContainerEnv]:
    e = ContainerEnv()
    yield e
    await e.close()


async def read_all(container, name: str, offset: int = 0) -> bytes:  # type: ignore[no-untyped-def]
    info = await container.get_info(name)
    out = bytearray()
    position = max(offset, info.start_offset)
    while position < info.length:
        result = await container.read(name, position, info.length - position)
        out += result.data
        position += len(result.data)
    return bytes(out)


def events(prefix: bytes, count: int, size: int = 100) -> bytes:
    return encode_events([prefix + i.to_bytes(4, "big") + os.urandom(size - len(prefix) - 4) for i in range(count)])


async def test_append_with_fresh_segment_reads_back_and_reports_info(env: ContainerEnv) -> None:
    c = await env.start()
    await c.create_segment("scope/stream/0.#epoch.0")
    blocks = [events(b"b%d" % i, 10) for i in range(20)]
    offsets = [await c.append("scope/stream/0.#epoch.0", b) for b in blocks]
    assert offsets == [sum(len(b) for b in blocks[:i]) for i in range(20)]
    assert await read_all(c, "scope/stream/0.#epoch.0") == b"".join(blocks)
    info = await c.get_info("scope/stream/0.#epoch.0")
    assert (info.length, info.start_offset, info.sealed, info.deleted) == (len(b"".join(blocks)), 0, False, False)
    assert info.segment_type == SegmentType.STREAM


async def test_create_with_existing_name_and_append_to_missing_segment_fail(env: ContainerEnv) -> None:
    c = await env.start()
    await c.create_segment("a")
    with pytest.raises(SegmentExistsError):
        await c.create_segment("a")
    with pytest.raises(SegmentNotExistsError):
        await c.append("missing", b"x")
    with pytest.raises(SegmentNotExistsError):
        await c.read("missing", 0, 10)
    with pytest.raises(ValueError, match="segment name"):
        await c.create_segment("")


async def test_append_with_wrong_expected_offset_changes_nothing(env: ContainerEnv) -> None:
    c = await env.start()
    await c.create_segment("s")
    await c.append("s", b"abc", expected_offset=0)
    with pytest.raises(BadOffsetError):
        await c.append("s", b"zzz", expected_offset=0)
    assert await c.append("s", b"def", expected_offset=3) == 3
    assert await read_all(c, "s") == b"abcdef"


async def test_append_larger_than_limit_is_refused(env: ContainerEnv) -> None:
    c = await env.start(config=ContainerConfig(max_append_bytes=1000, max_unflushed_bytes=10_000))
    await c.create_segment("s")
    with pytest.raises(TooLargeError):
        await c.append("s", b"x" * 1001)
    assert (await c.get_info("s")).length == 0


async def test_seal_with_appends_refuses_more_and_reads_end_of_segment(env: ContainerEnv) -> None:
    c = await env.start()
    await c.create_segment("s")
    await c.append("s", b"hello")
    assert await c.seal("s") == 5
    with pytest.raises(SegmentSealedError):
        await c.append("s", b"more")
    with pytest.raises(SegmentSealedError):
        await c.seal("s")
    end = await c.read("s", 5, 10, timeout_s=5)
    assert end.end_of_segment and end.data == b""


async def test_truncate_with_reads_below_start_fails_as_truncated(env: ContainerEnv) -> None:
    c = await env.start()
    await c.create_segment("s")
    await c.append("s", b"0123456789")
    await c.truncate("s", 4)
    assert (await c.get_info("s")).start_offset == 4
    with pytest.raises(SegmentTruncatedError):
        await c.read("s", 2, 5)
    assert (await c.read("s", 4, 100)).data == b"456789"


async def test_merge_with_transaction_moves_bytes_to_parent_end(env: ContainerEnv) -> None:
    c = await env.start()
    parent = "sc/st/1.#epoch.0"
    txn = parent + "#transaction." + "ab" * 16
    await c.create_segment(parent)
    await c.create_segment(txn, SegmentType.STREAM | SegmentType.TRANSIENT)
    await c.append(parent, b"parent-")
    await c.append(txn, b"txn-data")
    result = await c.merge(parent, txn)
    assert (result.target_offset, result.length, result.target_length) == (7, 8, 15)
    assert await read_all(c, parent) == b"parent-txn-data"
    with pytest.raises(SegmentNotExistsError):
        await c.get_info(txn)
    await c.flush_to_storage()
    assert await c.storage.read(parent, 0, 15) == b"parent-txn-data"
    assert not await c.storage.exists(txn)
    assert await read_all(c, parent) == b"parent-txn-data"


async def test_delete_with_recreate_starts_empty(env: ContainerEnv) -> None:
    c = await env.start()
    await c.create_segment("s")
    await c.append("s", b"old data")
    await c.flush_to_storage()
    await c.delete_segment("s")
    with pytest.raises(SegmentNotExistsError):
        await c.get_info("s")
    await c.create_segment("s")
    await c.append("s", b"new")
    await c.flush_to_storage()
    assert await read_all(c, "s") == b"new"
    assert await c.storage.read("s", 0, 3) == b"new"
    assert (await c.storage.info("s")).length == 3


async def test_attributes_with_conditions_and_accumulate(env: ContainerEnv) -> None:
    c = await env.start()
    await c.create_segment("s", attributes={WRITER: 5})
    assert await c.get_attributes("s", [WRITER, 42]) == {WRITER: 5, 42: NULL_ATTRIBUTE_VALUE}
    await c.append("s", b"e", [AttributeUpdate(WRITER, AttributeUpdateType.REPLACE_IF_EQUALS, 6, 5)])
    with pytest.raises(BadAttributeUpdateError):
        await c.append("s", b"dup", [AttributeUpdate(WRITER, AttributeUpdateType.REPLACE_IF_EQUALS, 6, 5)])
    await c.update_attributes("s", [AttributeUpdate(42, AttributeUpdateType.ACCUMULATE, 3)])
    await c.update_attributes("s", [AttributeUpdate(42, AttributeUpdateType.ACCUMULATE, 4)])
    assert await c.get_attributes("s", [WRITER, 42]) == {WRITER: 6, 42: 7}
    assert (await c.get_info("s")).length == 1


async def test_read_at_tail_waits_for_the_next_append(env: ContainerEnv) -> None:
    c = await env.start()
    await c.create_segment("s")
    reader = asyncio.create_task(c.read("s", 0, 100, timeout_s=10))
    await asyncio.sleep(0.05)
    assert not reader.done()
    await c.append("s", b"arrived")
    assert (await asyncio.wait_for(reader, 5)).data == b"arrived"
    timed_out = await c.read("s", 7, 100, timeout_s=0.05)
    assert timed_out.at_tail_timeout


async def test_flush_to_storage_with_event_segment_writes_parquet_rows(env: ContainerEnv) -> None:
    c = await env.start()
    await c.create_segment("sc/st/0.#epoch.0")
    data = events(b"ev", 500)
    await c.append("sc/st/0.#epoch.0", data)
    await c.flush_to_storage()
    info = await c.get_info("sc/st/0.#epoch.0")
    assert info.storage_length == info.length == len(data)
    chunks = await c.storage.chunks("sc/st/0.#epoch.0")
    assert sum(ch.length for ch in chunks) == len(data)
    assert await c.storage.read("sc/st/0.#epoch.0", 0, len(data)) == data


async def test_restart_with_flushed_and_unflushed_data_recovers_everything(env: ContainerEnv) -> None:
    c = await env.start()
    expected: dict[str, bytearray] = {}
    for i in range(5):
        await c.create_segment(f"seg-{i}")
        expected[f"seg-{i}"] = bytearray()
    for round_ in range(40):
        for name, data in expected.items():
            block = events(name.encode() + b"%d" % round_, 3)
            await c.append(name, block)
            data += block
        if round_ == 20:
            await c.flush_to_storage()
    await c.seal("seg-0")
    await c.truncate("seg-1", 100)
    await c.stop()
    c2 = await env.start()
    for name, data in expected.items():
        info = await c2.get_info(name)
        assert info.length == len(data)
        assert await read_all(c2, name) == bytes(data)[info.start_offset :]
    assert (await c2.get_info("seg-0")).sealed
    assert (await c2.get_info("seg-1")).start_offset == 100


async def test_crash_without_stop_with_new_owner_fences_and_keeps_acked_data(env: ContainerEnv) -> None:
    old = await env.start()
    await old.create_segment("s")
    acked = bytearray()
    for i in range(200):
        block = events(b"%d" % i, 2)
        await old.append("s", block)
        acked += block
    env.instances.remove(old)  # crash: never stopped
    new = await env.start()
    with pytest.raises(ContainerOfflineError):
        await old.append("s", b"zombie")
    assert await read_all(new, "s") == bytes(acked)
    await old.stop()


async def test_tier1_truncates_after_flush_and_recovery_reads_tier2(env: ContainerEnv) -> None:
    c = await env.start()
    await c.create_segment("s")
    data = bytearray()
    for i in range(300):  # many commits: several checkpoints
        block = events(b"%d" % i, 4)
        await c.append("s", block)
        data += block
    await c.flush_to_storage()
    await c.append("s", b"")  # commits drive checkpoints; let the writer truncate
    for _ in range(100):
        await c.flush_to_storage()
        if env.tier1._logs[0].truncation is not None:
            break
        await c.durable_log.checkpoint()
        await asyncio.sleep(0.01)
    assert env.tier1._logs[0].truncation is not None, "Tier-1 was never truncated"
    await c.stop()
    c2 = await env.start()
    assert await read_all(c2, "s") == bytes(data)


async def test_tier2_outage_throttles_appends_and_catches_up(
    env: ContainerEnv, caplog: pytest.LogCaptureFixture
) -> None:
    config = ContainerConfig(
        durable_log=SMALL.durable_log,
        writer=SMALL.writer,
        cache=SMALL.cache,
        max_append_bytes=16 * 1024,
        max_unflushed_bytes=64 * 1024,
    )
    c = await env.start(config=config)
    await c.create_segment("s")
    with env.chunks.outage():
        appends = [asyncio.create_task(c.append("s", events(b"%d" % i, 20))) for i in range(60)]
        await asyncio.sleep(0)  # each append takes its first step: it is queued, or it waits for room
        await settle(c, "s")
        held = [t for t in appends if not t.done()]
        assert held and c.throttled, "no append was throttled"
        assert not any(t.done() and t.exception() for t in appends), "an append failed instead of waiting"
        refused = tier2_refusals(caplog.records, 0)  # the writer, which alone can make room, keeps failing:
        await wait_until(lambda: tier2_refusals(caplog.records, 0) >= refused + 2, "the writer failed twice more")
        await settle(c, "s")
        assert not any(t.done() for t in held), "a throttled append went on while Tier-2 was down"
        assert c.unflushed_bytes <= 64 * 1024 + 16 * 1024
    await asyncio.wait_for(asyncio.gather(*appends), 20)  # Tier-2 is back: the writer makes room
    await c.flush_to_storage()
    info = await c.get_info("s")
    assert info.storage_length == info.length
    assert await c.storage.read("s", 0, info.length) == await read_all(c, "s")


async def test_tier1_failure_takes_container_offline(env: ContainerEnv) -> None:
    c = await env.start()
    await c.create_segment("s")
    await c.append("s", b"before")
    env.tier1.create_log(0)  # another instance of the log...
    await env.tier1.create_log(0).initialize()  # ...that fences this container's
    with pytest.raises(ContainerOfflineError):
        await c.append("s", b"after")
    assert c.state is ContainerState.FAILED
    with pytest.raises(ContainerOfflineError):
        await c.read("s", 0, 10)
    c2 = await env.start()
    assert await read_all(c2, "s") == b"before"


async def test_reads_with_small_cache_come_back_from_tier2(env: ContainerEnv) -> None:
    config = ContainerConfig(
        durable_log=SMALL.durable_log,
        writer=SMALL.writer,
        cache=type(SMALL.cache)(max_bytes=256 * 1024),
        max_append_bytes=64 * 1024,
        max_unflushed_bytes=200 * 1024,
    )
    c = await env.start(config=config)
    await c.create_segment("s")
    data = bytearray()
    for i in range(100):
        block = events(b"%d" % i, 100)
        await c.append("s", block)
        data += block
    await c.flush_to_storage()
    c.read_index.evict()
    assert c.read_index.budget.used_bytes <= 256 * 1024
    assert await read_all(c, "s") == bytes(data)


async def test_containers_sharing_a_cache_throttle_together_and_resume_when_one_evicts(
    env: ContainerEnv, caplog: pytest.LogCaptureFixture
) -> None:
    budget = CacheBudget(CacheConfig(max_bytes=256 * 1024))
    config = ContainerConfig(
        durable_log=SMALL.durable_log,
        writer=SMALL.writer,
        max_append_bytes=64 * 1024,
        max_unflushed_bytes=16 * 1024 * 1024,  # only the cache throttles here
    )
    busy = await env.start(0, config, budget)
    quiet = await env.start(1, config, budget)
    await busy.create_segment("s")
    await quiet.create_segment("t")
    with env.chunks.outage():  # nothing reaches Tier-2, so nothing in the cache may be evicted
        appended = 0
        while not budget.over_budget:  # ~65 KB each, until the cache holds more than its budget
            assert appended < 100, "the cache never went over its budget"
            await busy.append("s", events(b"%d" % appended, 600))
            appended += 1
        held = busy.read_index.budget.used_bytes
        assert held > 256 * 1024 and budget.used_bytes == held + quiet.read_index.budget.used_bytes
        assert busy.throttled and quiet.throttled  # the quiet one too: one budget
        blocked = asyncio.create_task(busy.append("s", events(b"%d" % appended, 600)))
        waiting = asyncio.create_task(quiet.append("t", b"small"))
        await asyncio.sleep(0)  # both take their first step: they are queued, or they wait for room
        refused = tier2_refusals(caplog.records, 0)  # the busy one's writer, which alone can make room, fails:
        await wait_until(lambda: tier2_refusals(caplog.records, 0) >= refused + 2, "the writer failed twice more")
        await settle(busy, "s")
        await settle(quiet, "t")
        assert not blocked.done(), "the busy container was not throttled"
        assert not waiting.done(), "the quiet container was not throttled"
    # Tier-2 is back: the busy container flushes and evicts; the quiet one, which flushed nothing, resumes.
    await asyncio.wait_for(asyncio.gather(blocked, waiting), 20)
    assert await read_all(quiet, "t") == b"small"
    await busy.flush_to_storage()
    busy.read_index.evict()
    assert budget.used_bytes <= 256 * 1024
    await busy.stop()  # a stopped container's cache leaves the budget
    assert budget.used_bytes == quiet.read_index.budget.used_bytes and budget.accounts == 1


async def test_registry_containers_share_one_cache_budget() -> None:
    env = ContainerEnv()
    registry = ContainerRegistry(3, env.tier1, env.storage, SMALL)
    try:
        containers = [await registry.start_container(cid) for cid in range(3)]
        assert all(c.read_index.budget.budget is registry.cache for c in containers)
        assert registry.cache.config.max_bytes == SMALL.cache.max_bytes and registry.cache.accounts == 3
        await registry.stop_container(1)
        assert registry.cache.accounts == 2
    finally:
        await registry.close()


async def test_create_with_deleted_namesake_waits_for_its_tier2_removal(env: ContainerEnv) -> None:
    c = await env.start(
        config=ContainerConfig(
            durable_log=SMALL.durable_log,
            writer=SMALL.writer,
            cache=SMALL.cache,
            namesake_removal_timeout_s=0.3,
        )
    )
    await c.create_segment("s")
    await c.append("s", b"old")
    await c.flush_to_storage()
    with env.chunks.outage():
        await c.delete_segment("s")  # durable in Tier-1; Tier-2 cannot delete yet
        with pytest.raises(ThrottledTimeoutError):
            await c.create_segment("s")
    await c.create_segment("s")  # Tier-2 is back: the old segment goes first
    await c.append("s", b"new")
    await c.flush_to_storage()
    assert await c.storage.read("s", 0, 3) == b"new"
    assert (await c.storage.info("s")).length == 3


async def test_registry_routes_segments_by_hash_and_transactions_with_parent() -> None:
    env = ContainerEnv()
    registry = ContainerRegistry(4, env.tier1, env.storage, env.config)
    try:
        for cid in range(4):
            await registry.start_container(cid)
        names = [f"scope/stream/{n}.#epoch.0" for n in range(40)]
        owners = {registry.container_id(n) for n in names}
        assert owners == {0, 1, 2, 3}
        for name in names:
            await registry.for_segment(name).create_segment(name)
            txn = name + "#transaction." + "1" * 32
            assert registry.container_id(txn) == registry.container_id(name)
            assert registry.container_id(name.replace(".#epoch.0", ".#epoch.3")) == registry.container_id(name)
            await registry.for_segment(txn).create_segment(txn)
            await registry.for_segment(txn).append(txn, b"t")
            await registry.for_segment(name).merge(name, txn)
        for cid in range(4):
            assert {s for s in registry.get(cid).segment_names() if s.startswith("scope/")} == {
                n for n in names if registry.container_id(n) == cid
            }
        await registry.stop_container(2)
        stranger = next(n for n in names if registry.container_id(n) == 2)
        with pytest.raises(ContainerNotOwnedError):
            registry.for_segment(stranger)
    finally:
        await registry.close()
