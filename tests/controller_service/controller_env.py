"""A controller core over in-memory parts for workflow tests: in-memory coordination store, a real
(in-memory) segment store service on loopback, a segment client, and a fixed container mapping."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from controller.config import ControllerConfig
from controller.core import ControllerCore
from controller.metadata import StreamMetadataStore
from controller.segment_ops import SegmentStoreOps
from segment_store.client import SegmentClient
from segment_store.client.retry import RetryPolicy
from segment_store.server.service import SegmentStoreService
from segstore_shared.coordination.memory_store import MemoryCoordinationServer

FAST_RETRY = RetryPolicy(max_attempts=3, initial_delay_ms=1.0, max_delay_ms=5.0)


class StaticHosts:
    """Every segment on one endpoint (the in-memory service runs all containers)."""

    def __init__(self, endpoint: tuple[str, int]) -> None:
        self.endpoint = endpoint

    def endpoint_of_segment(self, segment: str) -> tuple[str, int] | None:
        return self.endpoint


class CrashingOps(SegmentStoreOps):
    """Segment operations that raise ``Crash`` once a chosen operation has been called ``after`` times:
    a controller dying midway through a workflow (the steps before it happened, the rest did not)."""

    def __init__(self, client: SegmentClient) -> None:
        super().__init__(client, FAST_RETRY)
        self.crash_on: str | None = None
        self.after = 0
        self.calls: dict[str, int] = {}

    def __getattribute__(self, name: str) -> Any:
        attribute = super().__getattribute__(name)
        if name.startswith("_") or not callable(attribute) or name == "client":
            return attribute

        async def wrapped(*args: Any, **kwargs: Any) -> Any:
            calls = self.calls[name] = self.calls.get(name, 0) + 1
            if self.crash_on == name and calls > self.after:
                raise Crash(f"crashed in {name}")
            return await attribute(*args, **kwargs)

        return wrapped


class Crash(Exception):
    pass


@dataclass
class ControllerEnv:
    service: SegmentStoreService
    client: SegmentClient
    coordination: MemoryCoordinationServer
    config: ControllerConfig
    cores: list[ControllerCore]
    clock: list[int]

    @classmethod
    async def start(cls, **config: Any) -> ControllerEnv:
        service = await SegmentStoreService.start_in_memory(container_count=4)
        client = SegmentClient(service.endpoint)
        quiet = {
            "txn_timeout_check_s": 3600.0,
            "retention_period_s": 3600.0,
            "auto_scale_period_s": 3600.0,
            "watermark_period_s": 3600.0,
        }
        settings: dict[str, Any] = quiet | config
        return cls(service, client, MemoryCoordinationServer(), ControllerConfig(**settings), [], [1_000_000])

    def core(self, ops: SegmentStoreOps | None = None) -> ControllerCore:
        """A new controller over the same metadata (a restart when the previous one is dropped)."""
        store = StreamMetadataStore(self.coordination.connect(), "/controller", clock_ms=lambda: self.clock[0])
        core = ControllerCore(
            self.config,
            store,
            ops or SegmentStoreOps(self.client, FAST_RETRY),
            StaticHosts(self.service.endpoint),  # type: ignore[arg-type]
            clock_ms=lambda: self.clock[0],
        )
        self.cores.append(core)
        return core

    def crashing_core(self) -> tuple[ControllerCore, CrashingOps]:
        ops = CrashingOps(self.client)
        return self.core(ops), ops

    async def close(self) -> None:
        for core in self.cores:
            await core.stop()
        await self.client.close()
        await self.service.stop()


async def read_events(client: SegmentClient, segment: str) -> list[bytes]:
    info = await client.get_segment_info(segment)
    events: list[bytes] = []
    async for event in client.reader(segment, offset=info.start_offset, end_offset=info.write_offset):
        events.append(bytes(event.data))
    return events


async def write_events(client: SegmentClient, segment: str, events: list[bytes]) -> None:
    async with client.writer(segment) as writer:
        await writer.write_many(events)


Step = Callable[[], Awaitable[object]]
