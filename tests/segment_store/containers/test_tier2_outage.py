"""Tier-2 outage with a real S3 endpoint: the moto server is stopped (SIGSTOP) under a running container.

Appends go on until ``max_unflushed_bytes`` wait for Tier-2, then they are throttled: they
wait, they do not fail, and nothing is lost. When the server is back, the storage writer
catches up, Tier-1 is truncated again, and a restarted container reads everything back from
Tier-2 with no unreferenced chunk left behind (a PUT that timed out may land late: the boot
sweep deletes it).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator

import pytest
from container_env import SMALL, ContainerEnv, settle, tier2_refusals, wait_until
from s3_fixtures import MotoServer, new_s3_storage, s3_server_fixture  # noqa: F401 (a fixture)

from segment_store.containers.config import ContainerConfig
from segment_store.containers.segment_container import SegmentContainer
from segment_store.protocol import encode_events
from segment_store.storage.data_chunk_names import data_prefix
from segment_store.storage.storage_config import ChunkedStorageConfig

pytestmark = pytest.mark.integration

MAX_APPEND = 16 * 1024
MAX_UNFLUSHED = 128 * 1024


@pytest.fixture
async def env(s3_server: MotoServer) -> AsyncIterator[ContainerEnv]:
    client = s3_server.client(connect_timeout_s=0.5, read_timeout_s=0.5)  # an outage shows within 0.5 s
    config = ContainerConfig(
        durable_log=SMALL.durable_log,
        writer=SMALL.writer,
        cache=SMALL.cache,
        max_append_bytes=MAX_APPEND,
        max_unflushed_bytes=MAX_UNFLUSHED,
    )
    storage_config = ChunkedStorageConfig(retry_delay_s=0.01, gc_delay_s=0.2, compaction_enabled=False)
    e = ContainerEnv(config, chunks=new_s3_storage(s3_server, client=client), storage_config=storage_config)
    yield e
    if s3_server.paused:
        s3_server.resume()
    await e.close()
    e.chunks.close()


def block(i: int) -> bytes:
    return encode_events([i.to_bytes(4, "big") + os.urandom(500) for _ in range(25)])  # ~12.7 KiB


async def truncation_after(env: ContainerEnv, container: SegmentContainer, before: object) -> object:
    """Drive checkpoints until Tier-1 is truncated beyond ``before``; return the new truncation point."""
    for _ in range(200):
        await container.flush_to_storage()
        now = env.tier1._logs[0].truncation
        if now is not None and (before is None or now > before):
            return now
        await container.durable_log.checkpoint()
        await container.append("s", b"")  # the writer moves Tier-1's truncation when it reads an operation after it
        await asyncio.sleep(0.01)
    raise AssertionError(f"Tier-1 was not truncated beyond {before}")


async def test_s3_outage_throttles_appends_without_failing_and_writer_catches_up(
    env: ContainerEnv, s3_server: MotoServer, caplog: pytest.LogCaptureFixture
) -> None:
    c = await env.start()
    await c.create_segment("s")
    expected = bytearray()
    for i in range(20):
        piece = block(i)
        await c.append("s", piece)
        expected += piece
    truncated = await truncation_after(env, c, None)

    blocks = [block(1000 + i) for i in range(60)]  # ~760 KiB: far more than may wait for Tier-2
    appended = 0

    async def producer() -> None:
        nonlocal appended
        for piece in blocks:
            await c.append("s", piece)
            appended += 1

    with s3_server.outage():
        task = asyncio.create_task(producer())
        await wait_until(lambda: c.throttled, "the appends Tier-2 does not take reach the budget")
        await settle(c, "s")  # the producer's append in flight is done: it has gone on to its next one
        stalled_at = appended
        refused = tier2_refusals(caplog.records, 0)  # the writer, which alone can make room, keeps failing:
        await wait_until(lambda: tier2_refusals(caplog.records, 0) >= refused + 2, "the writer failed twice more")
        await settle(c, "s")  # had the producer's next append been queued, it would be done and the producer on
        assert not task.done(), "no append was throttled"
        assert appended == stalled_at, "appends went on past the budget"
        assert 0 < appended < len(blocks) and c.throttled
        assert c.unflushed_bytes <= MAX_UNFLUSHED + MAX_APPEND
        assert (await c.get_info("s")).storage_length < len(expected) + appended * len(blocks[0])
    await asyncio.wait_for(task, 60)  # the server is back: every throttled append completes
    for piece in blocks:
        expected += piece
    await c.flush_to_storage()
    info = await c.get_info("s")
    assert info.length == info.storage_length == len(expected)
    assert await c.storage.read("s", 0, len(expected)) == bytes(expected)
    await truncation_after(env, c, truncated)  # Tier-1 truncates again

    await c.stop()
    restarted = await env.start()
    assert await restarted.storage.read("s", 0, len(expected)) == bytes(expected)
    storage = restarted.storage
    referenced = storage.journal.metadata.referenced_chunks()  # type: ignore[attr-defined]
    assert set(env.chunks.list(data_prefix(0))) == referenced  # late-landing PUTs were swept
