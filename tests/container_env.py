"""A segment container over the real in-memory Tier-1 and a fault-injectable in-memory Tier-2, for tests."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from segment_store.containers.config import ContainerConfig
from segment_store.containers.segment_container import ContainerState, SegmentContainer
from segment_store.logs.config import DurableLogConfig
from segment_store.reading.cache import CacheBudget, CacheConfig
from segment_store.storage.backends.faulty import FaultyChunkStorage
from segment_store.storage.backends.memory import MemoryChunkStorage
from segment_store.storage.chunked_storage import ChunkedSegmentStorage
from segment_store.storage.segment_storage import SegmentStorage
from segment_store.storage.storage_config import ChunkedStorageConfig
from segment_store.tier1.memory_log import InMemoryDurableDataLogFactory
from segment_store.writer.config import WriterConfig

SMALL = ContainerConfig(
    durable_log=DurableLogConfig(
        max_frame_bytes=8192,
        checkpoint_min_commit_count=10,
        checkpoint_commit_count=50,
        checkpoint_total_commit_length_bytes=256 * 1024,
    ),
    writer=WriterConfig(
        flush_threshold_bytes=64 * 1024, flush_max_age_s=0.05, retry_min_delay_s=0.01, retry_max_delay_s=0.05
    ),
    cache=CacheConfig(max_bytes=64 * 1024 * 1024),
)


class ContainerEnv:
    """Tier-1 and Tier-2 that outlive container instances, so tests can restart and "crash" containers."""

    def __init__(
        self, config: ContainerConfig = SMALL, chunks: Any = None, storage_config: ChunkedStorageConfig | None = None
    ) -> None:
        self.config = config
        self.storage_config = storage_config or ChunkedStorageConfig(gc_delay_s=0)
        self.tier1 = InMemoryDurableDataLogFactory()
        self.chunks = chunks if chunks is not None else FaultyChunkStorage(MemoryChunkStorage())
        self.instances: list[SegmentContainer] = []

    def storage(self, container_id: int, snapshot_info: Any) -> SegmentStorage:
        return ChunkedSegmentStorage(self.chunks, container_id, snapshot_info, self.storage_config)

    async def start(
        self, container_id: int = 0, config: ContainerConfig | None = None, cache: CacheBudget | None = None
    ) -> SegmentContainer:
        container = SegmentContainer(
            container_id, self.tier1.create_log(container_id), self.storage, config or self.config, cache
        )
        await container.start()
        self.instances.append(container)
        return container

    async def close(self) -> None:
        for container in self.instances:
            await container.stop()


async def crash(container: SegmentContainer) -> None:
    """Stop a container's tasks abruptly, as a killed process would: no drain, no close, no final flush."""
    tasks = [*container.durable_log._tasks]
    if container.writer._task is not None:
        tasks.append(container.writer._task)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    container.state = ContainerState.STOPPED


async def settle(container: SegmentContainer, segment: str) -> None:
    """Queue an empty append to ``segment`` past the throttle (``submit_append``, as the wire server does once
    it has room) and wait until it is durable. The durable log completes appends in the order they were
    queued, each completion waking its waiter before this one's: when this returns, every append queued
    before it is done and the task that awaited it has run on to its next wait. An append still pending
    then was not queued before: it waits for room."""
    done: asyncio.Future[BaseException | None] = asyncio.get_running_loop().create_future()
    container.submit_append(segment, b"", lambda _op, error: done.set_result(error))
    assert await asyncio.wait_for(done, 30) is None


async def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    """Poll ``condition`` until it holds; fail naming ``what`` after ``timeout_s``."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting until {what}"
        await asyncio.sleep(0.01)


def tier2_refusals(records: list[logging.LogRecord], container_id: int) -> int:
    """How many flush attempts of the container's storage writer Tier-2 has refused: the writer logs each one
    it will retry (``caplog.records``)."""
    refused = f"container {container_id}: Tier-2 unavailable, retrying"
    return sum(
        1 for r in records if r.name == "segment_store.writer.storage_writer" and r.getMessage().startswith(refused)
    )
