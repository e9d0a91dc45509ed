"""Flow control: bounded unacknowledged bytes per connection, slow readers, connection limit, idle timeout."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from container_env import wait_until
from wire_peer import WirePeer

from segment_store.containers.config import ContainerConfig
from segment_store.protocol import (
    CreateSegment,
    DataAppended,
    ReadSegment,
    SegmentCreated,
    SetupAppend,
    build_append_block_end,
    encode,
)
from segment_store.server.config import ServerConfig
from segment_store.server.service import SegmentStoreService, ServiceConfig
from segment_store.storage.backends.faulty import FaultyChunkStorage
from segment_store.storage.backends.memory import MemoryChunkStorage
from segment_store.tier1.memory_log import InMemoryDurableDataLogFactory
from segment_store.writer.config import WriterConfig

pytestmark = pytest.mark.integration

KIB = 1024
SEGMENT = "flow/control/0.#epoch.0"
BLOCKS = 800  # x 30 KB: far more than the socket buffers hold


async def start(server: ServerConfig, container: ContainerConfig | None = None) -> SegmentStoreService:
    service = SegmentStoreService(
        ServiceConfig(server=server, container=container or ContainerConfig(), container_count=1),
        InMemoryDurableDataLogFactory(),
        FaultyChunkStorage(MemoryChunkStorage()),
    )
    await service.start()
    return service


async def test_unacknowledged_appends_pause_the_connection_and_resume(tmp_path: object) -> None:
    server = ServerConfig(port=0, connection_high_watermark_bytes=256 * KIB, connection_low_watermark_bytes=128 * KIB)
    container = ContainerConfig(
        max_append_bytes=64 * KIB,
        max_unflushed_bytes=128 * KIB,
        writer=WriterConfig(
            flush_threshold_bytes=64 * KIB, flush_max_age_s=0.01, retry_min_delay_s=0.01, retry_max_delay_s=0.02
        ),
    )
    service = await start(server, container)
    chunks = service.chunks
    assert isinstance(chunks, FaultyChunkStorage)
    try:
        peer = await WirePeer.connect(service.endpoint)
        assert await peer.request(CreateSegment(1, SEGMENT, 0, 0, "", 0)) == SegmentCreated(1, SEGMENT)
        writer = uuid.uuid4()
        await peer.request(SetupAppend(2, writer, SEGMENT, ""))
        connection = next(iter(service.connections))
        peak = 0
        count = service.tracker.changed

        def counted(delta: int) -> None:  # every change of the connection's bytes passes here: the exact peak
            nonlocal peak
            count(delta)
            peak = max(peak, connection.outstanding_bytes)

        service.tracker.changed = counted  # type: ignore[method-assign]
        with chunks.outage():  # Tier-2 down: the container throttles, acks stop, bytes pile up
            sender = asyncio.create_task(send_blocks(peer, writer, BLOCKS))
            await wait_until(lambda: connection._reading_paused, "the connection stops reading")
            assert not sender.done(), "the client was never pushed back"  # 24 MB do not fit in socket buffers
        # the watermark + what one socket read delivers (asyncio reads up to 256 KiB) + one frame
        assert peak <= 256 * KIB + 256 * KIB + 64 * KIB, f"{peak} unacknowledged bytes held for one connection"
        await asyncio.wait_for(sender, 30)
        acked = 0
        while acked < BLOCKS * 10:
            reply = await peer.receive(timeout=30)
            assert isinstance(reply, DataAppended), reply
            acked = reply.event_number
        assert connection.outstanding_bytes == 0 and service.tracker.total_bytes == 0
        await peer.close()
    finally:
        await service.stop()


async def send_blocks(peer: WirePeer, writer: uuid.UUID, count: int) -> None:
    for i in range(count):
        payloads = [bytes(3000)] * 10
        peer.writer.write(encode(build_append_block_end(writer, payloads, (i + 1) * 10, i)))
        await peer.writer.drain()


async def test_peer_that_does_not_read_replies_is_not_read_either() -> None:
    service = await start(ServerConfig(port=0, write_buffer_high_bytes=64 * KIB, max_read_bytes=64 * KIB))
    try:
        peer = await WirePeer.connect(service.endpoint)
        assert await peer.request(CreateSegment(1, SEGMENT, 0, 0, "", 0)) == SegmentCreated(1, SEGMENT)
        writer = uuid.uuid4()
        await peer.request(SetupAppend(2, writer, SEGMENT, ""))
        await peer.request(build_append_block_end(writer, [bytes(60 * KIB)], 1, 3))
        connection = next(iter(service.connections))
        request = encode(ReadSegment(SEGMENT, 0, 64 * KIB, "", 4))
        for _ in range(2000):  # 2000 x 60 KiB of replies requested, none read
            peer.writer.write(request)
        # steady: not reading, the write buffer over its limit (no request starts) and no request running
        await wait_until(
            lambda: connection._reading_paused and connection._write_paused and connection._running == 0,
            "the connection stops reading and answering",
        )
        transport = connection._transport
        # bounded by the write buffer limit + one reply per request allowed to run at once (32), not by 2000
        assert transport is not None and transport.get_write_buffer_size() < (2 + 32) * 64 * KIB
        await peer.close()
    finally:
        await service.stop()


async def test_connections_beyond_the_limit_are_refused_and_idle_ones_closed() -> None:
    service = await start(ServerConfig(port=0, max_connections=2, idle_timeout_s=0.5))
    try:
        first = await WirePeer.connect(service.endpoint)
        second = await WirePeer.connect(service.endpoint)
        third = await WirePeer.connect(service.endpoint, hello=False)
        assert await third.closed_by_server(timeout=2)
        assert await first.closed_by_server(timeout=3), "an idle connection was not closed"
        await second.close()
        again = await WirePeer.connect(service.endpoint)  # room again
        await again.close()
    finally:
        await service.stop()
