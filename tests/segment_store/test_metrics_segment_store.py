"""The segment store's metrics, read from its registry (no HTTP: tests/system/test_metrics.py scrapes)."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from segment_store.metrics import SegmentStoreMetrics, StoreMetrics
from segment_store.server.config import ServerConfig
from segment_store.server.service import SegmentStoreService, ServiceConfig
from segment_store.storage.backends.memory import MemoryChunkStorage
from segment_store.tier1.log import DurableDataLog
from segment_store.tier1.memory_log import InMemoryDurableDataLogFactory

pytestmark = pytest.mark.unit

FREE_PORT = ServerConfig(port=0)
"""The wire server on a free port (the default, 12345, is a standalone's running on this machine)."""

FAMILIES = {
    "segstore_appends": "counter",
    "segstore_append_bytes": "counter",
    "segstore_append_latency_seconds": "histogram",
    "segstore_throttled_appends": "counter",
    "segstore_reads": "counter",
    "segstore_read_bytes": "counter",
    "segstore_tier1_write_latency_seconds": "histogram",
    "segstore_tier1_written_bytes": "counter",
    "segstore_tier2_write_latency_seconds": "histogram",
    "segstore_tier2_written_bytes": "counter",
    "segstore_tier2_backlog_bytes": "gauge",
    "segstore_cache_used_bytes": "gauge",
    "segstore_cache_limit_bytes": "gauge",
    "segstore_cache_evicted_bytes": "counter",
    "segstore_connections": "gauge",
    "segstore_containers_owned": "gauge",
    "segstore_container_recovery_seconds": "histogram",
    "segstore_ready": "gauge",
}


def scrape(metrics: StoreMetrics) -> dict[str, float]:
    """Every sample of the registry by name and labels, as text: ``name{label="v"}`` -> value."""
    assert metrics.registry is not None
    text = generate_latest(metrics.registry).decode()
    samples: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        samples[f"#{family.name}"] = 1.0
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            samples[f"{sample.name}{{{labels}}}"] = sample.value
    return samples


class HeldRecoveryFactory(InMemoryDurableDataLogFactory):
    """In-memory Tier-1 whose logs' ``initialize`` waits for ``release`` (a container stuck in recovery)."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    def create_log(self, log_id: int) -> DurableDataLog:  # type: ignore[override]
        log = super().create_log(log_id)
        initialize = log.initialize

        async def held(timeout: float = 60.0) -> None:
            self.entered.set()
            await self.release.wait()
            await initialize(timeout)

        log.initialize = held  # type: ignore[method-assign]
        return log


async def test_families_with_load_move() -> None:
    metrics = SegmentStoreMetrics()
    service = SegmentStoreService(
        ServiceConfig(server=FREE_PORT, container_count=2),
        InMemoryDurableDataLogFactory(),
        MemoryChunkStorage(),
        metrics=metrics,
    )
    await service.start()
    try:
        before = scrape(metrics)
        for family, kind in FAMILIES.items():
            assert f"#{family}" in before, (family, kind)
        assert before["segstore_containers_owned{}"] == 2
        assert before["segstore_ready{}"] == 1
        assert before["segstore_container_recovery_seconds_count{}"] == 2
        name = "scope/stream/0.#epoch.0"
        container = service.registry.for_segment(name)
        await container.create_segment(name)
        for i in range(10):
            await container.append(name, b"event %d" % i)
        await container.read(name, 0, 1000)
        await container.flush_to_storage()
        after = scrape(metrics)
        assert after["segstore_appends_total{}"] == 10
        assert after["segstore_append_bytes_total{}"] == sum(len(b"event %d" % i) for i in range(10))
        assert after["segstore_append_latency_seconds_count{}"] == 10
        assert after['segstore_reads_total{source="cache"}'] == 1
        cid = f'container="{container.container_id}"'
        assert after[f"segstore_tier1_written_bytes_total{{{cid}}}"] > 0
        assert after[f"segstore_tier1_write_latency_seconds_count{{{cid}}}"] > 0
        assert after[f"segstore_tier2_written_bytes_total{{{cid}}}"] > 0
        assert after[f"segstore_tier2_backlog_bytes{{{cid}}}"] == 0
        assert after["segstore_cache_used_bytes{}"] > 0
    finally:
        await service.stop()


async def test_ready_with_recovery_in_progress() -> None:
    logs = HeldRecoveryFactory()
    service = SegmentStoreService(
        ServiceConfig(server=FREE_PORT, container_count=1), logs, MemoryChunkStorage(), metrics=SegmentStoreMetrics()
    )
    starting = asyncio.create_task(service.start())
    await logs.entered.wait()
    assert not service.ready()
    assert scrape(service.metrics)["segstore_ready{}"] == 0
    logs.release.set()
    await starting
    try:
        assert service.ready()
    finally:
        await service.stop()


async def test_ready_with_container_stopped() -> None:
    service = await SegmentStoreService.start_in_memory(2)
    try:
        assert service.ready()
        await service.registry.stop_container(1)
        assert not service.ready()
    finally:
        await service.stop()
