"""Fixtures of the client tests that run against a real in-memory segment store over TCP."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from client_service import fast_retry_config

from segment_store.client import SegmentClient
from segment_store.server.service import SegmentStoreService


@pytest.fixture
async def service() -> AsyncIterator[SegmentStoreService]:
    service = await SegmentStoreService.start_in_memory(container_count=4, port=0)
    try:
        yield service
    finally:
        await service.stop()


@pytest.fixture
async def client(service: SegmentStoreService) -> AsyncIterator[SegmentClient]:
    async with SegmentClient(service.endpoint, fast_retry_config()) as client:
        yield client
