"""A merge retried while the first attempt's merge still waits for Tier-1 must not pass for done.

The controller takes ``NoSuchSegment`` naming the transaction segment as "merged already" and then records the
transaction COMMITTED. A retry (or a second controller's attempt) that arrives while the first attempt's merge is
taken but not durable finds the source gone from the *pending* state only: the first merge may still fail (a Tier-1
failure rolls it back), so the answer must make the controller retry, as it names the target. Tier-1
acknowledgements are held (:mod:`held_tier1`) so the race is reproduced deterministically (the self-test run of
seed 1127529609 logged it once: ``NoSuchSegment selftest/txns/0.#epoch.3``, 6 ms after the first merge committed).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest
from held_tier1 import HeldLogFactory, Tier1Gate
from wire_peer import WirePeer

from segment_store.protocol import (
    CreateSegment,
    MergeSegments,
    NoSuchSegment,
    SealSegment,
    SegmentCreated,
    SegmentSealed,
    SegmentsMerged,
)
from segment_store.server.config import ServerConfig
from segment_store.server.service import SegmentStoreService, ServiceConfig
from segment_store.storage.backends.memory import MemoryChunkStorage

pytestmark = pytest.mark.integration

SEGMENT = "race/stream/0.#epoch.0"
TXN = SEGMENT + "#transaction." + "ef" * 16


@pytest.fixture
async def service() -> AsyncIterator[tuple[SegmentStoreService, Tier1Gate]]:
    gate = Tier1Gate()
    service = SegmentStoreService(
        ServiceConfig(server=ServerConfig(port=0), container_count=1), HeldLogFactory(gate), MemoryChunkStorage()
    )
    await service.start()
    try:
        yield service, gate
    finally:
        gate.release()
        await service.stop()


async def until(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():
        assert loop.time() < deadline, "condition not reached"
        await asyncio.sleep(0.001)


async def test_merge_retried_while_the_first_is_in_flight_answers_as_missing_target(
    service: tuple[SegmentStoreService, Tier1Gate],
) -> None:
    store, gate = service
    first = await WirePeer.connect(store.endpoint)
    second = await WirePeer.connect(store.endpoint)
    try:
        for request_id, name in ((1, SEGMENT), (2, TXN)):
            assert await first.request(CreateSegment(request_id, name, 0, 0, "", 0)) == SegmentCreated(request_id, name)
        assert await first.request(SealSegment(3, TXN, "")) == SegmentSealed(3, TXN)  # the controller seals first
        updater = store.registry.for_segment(SEGMENT).durable_log.updater
        gate.hold()
        first.send(MergeSegments(6, SEGMENT, TXN, "", ()))
        await until(lambda: updater.segment_by_name(TXN) is None)  # the merge is taken, not durable

        retried = await second.request(MergeSegments(4, SEGMENT, TXN, "", ()))

        assert isinstance(retried, NoSuchSegment) and retried.segment == SEGMENT  # not "merged": retry
        gate.release()
        assert await first.receive() == SegmentsMerged(6, SEGMENT, TXN, 0)
        again = await second.request(MergeSegments(5, SEGMENT, TXN, "", ()))
        assert again == SegmentsMerged(5, SEGMENT, TXN, 0)  # durable now: the retry learns it is done
    finally:
        await first.close()
        await second.close()
