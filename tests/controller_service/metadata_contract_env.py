"""Fixtures and helpers of the metadata store contract tests (``test_metadata_store_contract*.py``): a
store over the in-memory or the ZooKeeper coordination store, a manual clock, an active stream, a scale."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from controller.metadata import (
    StreamMetadataStore,
    StreamState,
)
from controller_client.model import (
    ScalingPolicy,
    StreamConfiguration,
    segment_id,
)
from segstore_shared.coordination.store import CoordinationStore

Connect = Callable[[], Awaitable[CoordinationStore]]
SC, ST = "scope1", "stream1"
S0, S1 = segment_id(0, 0), segment_id(1, 0)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def config(segments: int = 2, tags: tuple[str, ...] = ()) -> StreamConfiguration:
    return StreamConfiguration(ScalingPolicy.fixed(segments), tags=tags)


async def active_stream(store: StreamMetadataStore, segments: int = 2, tags: tuple[str, ...] = ()) -> None:
    await store.create_scope(SC)
    await store.create_stream(SC, ST, config(segments, tags), 1000)
    await store.set_state(SC, ST, StreamState.ACTIVE)


async def do_scale(store: StreamMetadataStore, seal: list[int], ranges: list[tuple[float, float]], t: int) -> None:
    await store.submit_scale(SC, ST, seal, ranges, t)
    await store.set_state(SC, ST, StreamState.SCALING)
    await store.start_scale(SC, ST, manual=True)
    await store.scale_create_new_epoch(SC, ST)
    await store.scale_complete(SC, ST, dict.fromkeys(seal, 100))
    await store.set_state(SC, ST, StreamState.ACTIVE)
