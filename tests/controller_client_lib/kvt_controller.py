"""A real controller for the key-value table client tests: the controller core over in-memory coordination, serving
gRPC on loopback, in front of an in-memory segment store; the tests talk to it with ``ControllerClient``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from fake_controller import fast_client_config

from controller.config import ControllerConfig
from controller.core import ControllerCore
from controller.metadata import StreamMetadataStore
from controller.rpc.servicer import start_grpc_server
from controller.segment_ops import SegmentStoreOps
from controller_client.controller.api import ControllerClient
from segment_store.client import SegmentClient
from segment_store.client.retry import RetryPolicy
from segment_store.server.service import SegmentStoreService
from segstore_shared.coordination.memory_store import MemoryCoordinationServer


class OneEndpoint:
    """Every segment on the in-memory segment store (it runs all containers)."""

    def __init__(self, endpoint: tuple[str, int]) -> None:
        self.endpoint = endpoint

    def endpoint_of_segment(self, segment: str) -> tuple[str, int] | None:
        return self.endpoint


@dataclass
class KvtController:
    service: SegmentStoreService
    core: ControllerCore
    uri: str


@asynccontextmanager
async def kvt_controller() -> AsyncIterator[KvtController]:
    service = await SegmentStoreService.start_in_memory(container_count=4, port=0)
    client = SegmentClient(service.endpoint, fast_client_config())
    store = StreamMetadataStore(MemoryCoordinationServer().connect())
    ops = SegmentStoreOps(client, RetryPolicy(max_attempts=3, initial_delay_ms=1.0, max_delay_ms=5.0))
    core = ControllerCore(ControllerConfig(), store, ops, OneEndpoint(service.endpoint))  # type: ignore[arg-type]
    server, port = await start_grpc_server(core, "127.0.0.1", 0, 16)
    try:
        yield KvtController(service, core, f"tcp://127.0.0.1:{port}")
    finally:
        await server.stop(None)
        await client.close()
        await service.stop()


async def connect(uri: str) -> ControllerClient:
    return await ControllerClient.connect(uri)
