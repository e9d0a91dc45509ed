"""Fixtures of the client library tests: a real in-memory segment store over TCP, the fake controller,
and a StreamManager resolving endpoints through it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from fake_controller import FakeController, fast_client_config

from controller_client.stream_manager import StreamManager, StreamManagerConfig
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
async def controller(service: SegmentStoreService) -> AsyncIterator[FakeController]:
    async with SegmentClient(service.endpoint, fast_client_config()) as client:
        yield FakeController(client, service.endpoint)


@pytest.fixture
async def manager(controller: FakeController) -> AsyncIterator[StreamManager]:
    async with StreamManager(controller, config=StreamManagerConfig(client=fast_client_config())) as manager:
        yield manager
