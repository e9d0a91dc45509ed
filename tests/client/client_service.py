"""Helpers of the client tests that run against a real in-memory segment store."""

from __future__ import annotations

import dataclasses

from segment_store.client import ClientConfig, ConnectionConfig, RetryPolicy, WriterConfig
from segment_store.server.service import SegmentStoreService


def fast_retry_config() -> ClientConfig:
    """Reconnects in milliseconds, so fault tests stay fast."""
    retry = RetryPolicy(max_attempts=50, initial_delay_ms=2, max_delay_ms=50)
    return ClientConfig(connection=ConnectionConfig(connect_timeout_ms=2_000), writer=WriterConfig(retry=retry))


async def restart(service: SegmentStoreService) -> SegmentStoreService:
    """Stop ``service`` and start a new one on the same port over the same in-memory Tier-1 and Tier-2
    (a segment store process restart that keeps its data)."""
    port = service.endpoint[1]
    data_logs = service.data_logs  # the in-memory logs survive their factory's close
    await service.stop()
    config = dataclasses.replace(service.config, server=dataclasses.replace(service.config.server, port=port))
    again = SegmentStoreService(config, data_logs, service.chunks)
    await again.start()
    return again
