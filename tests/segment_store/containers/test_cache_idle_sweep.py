"""A real in-memory segment store over TCP sweeps its idle cache: flushed data leaves it, memory is returned to the
OS, and reads come back exactly from Tier-2."""

from __future__ import annotations

import pytest
from client_service import fast_retry_config
from container_env import wait_until

from segment_store.client import SegmentClient
from segment_store.containers.config import ContainerConfig
from segment_store.reading.cache import CacheConfig
from segment_store.server.service import SegmentStoreService, ServiceConfig

pytestmark = pytest.mark.integration

SEGMENT = "scope/stream/0.#epoch.0"


async def test_idle_cache_with_flushed_data_empties_and_reads_come_back_from_tier2() -> None:
    cache = CacheConfig(idle_evict_s=0.3, idle_check_s=0.1)
    config = ServiceConfig(container=ContainerConfig(cache=cache))
    service = await SegmentStoreService.start_in_memory(container_count=2, port=0, config=config)
    try:
        async with SegmentClient(service.endpoint, fast_retry_config()) as client:
            await client.create_segment(SEGMENT)
            events = [b"%06d" % i + bytes(994) for i in range(10_000)]  # 10 MB: 20 MB of churn, enough to release
            async with client.writer(SEGMENT) as writer:
                for event in events:
                    await writer.write(event)
                await writer.flush()
            budget = service.registry.cache
            assert budget.used_bytes >= 10_000_000
            await client.flush_to_storage(service.registry.container_id(SEGMENT))
            await wait_until(lambda: budget.used_bytes == 0, "the idle cache is empty")
            await wait_until(lambda: service.registry.memory_releases >= 1, "memory went back to the OS")
            info = await client.get_segment_info(SEGMENT)
            read = [e.data async for e in client.reader(SEGMENT, end_offset=info.write_offset)]
            assert read == events
    finally:
        await service.stop()
