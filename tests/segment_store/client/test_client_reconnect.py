"""Reconnect in the middle of a load against the real server: connections killed on either side, and the
segment store restarted on the same in-memory state. Every event is stored exactly once, in order."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
from client_service import fast_retry_config, restart

from segment_store.client import ReaderConfig, SegmentClient, WriterConfig
from segment_store.server.service import SegmentStoreService

pytestmark = pytest.mark.integration

SEGMENT = "scope/stream/0.#epoch.0"


async def _events(client: SegmentClient, segment: str) -> list[bytes]:
    info = await client.get_segment_info(segment)
    return [e.data async for e in client.reader(segment, end_offset=info.write_offset)]


async def _keep_doing(action: Callable[[], Awaitable[None] | None], every_s: float, stop: asyncio.Event) -> int:
    count = 0
    while not stop.is_set():
        await asyncio.sleep(every_s)
        if stop.is_set():
            break
        result = action()
        if result is not None:
            await result
        count += 1
    return count


async def _write_load(client: SegmentClient, segment: str, tag: bytes, count: int) -> int:
    config = WriterConfig(
        max_block_bytes=8 * 1024, max_unacked_bytes=256 * 1024, retry=fast_retry_config().writer.retry
    )
    async with client.writer(segment, config=config) as writer:
        for i in range(count):
            ack = await writer.write(b"%s-%06d" % (tag, i))
            if i % 1_000 == 999:
                await ack  # a round trip now and then, so the load spans many kills
        await writer.flush()
        return writer.setups


async def test_reconnect_with_server_side_connections_closed_loses_and_duplicates_nothing(
    service: SegmentStoreService, client: SegmentClient
) -> None:
    await client.create_segment(SEGMENT)

    def close_server_connections() -> None:
        for connection in list(service.connections):
            connection.close()

    stop = asyncio.Event()
    killer = asyncio.ensure_future(_keep_doing(close_server_connections, 0.005, stop))
    setups = await _write_load(client, SEGMENT, b"w", 30_000)
    stop.set()
    kills = await killer
    assert kills >= 3 and setups > 1
    assert await _events(client, SEGMENT) == [b"w-%06d" % i for i in range(30_000)]


async def test_reconnect_with_client_transports_aborted_and_concurrent_writers(
    service: SegmentStoreService, client: SegmentClient
) -> None:
    segments = [SEGMENT, "scope/stream/1.#epoch.0"]
    for segment in segments:
        await client.create_segment(segment)

    def abort_client_connections() -> None:
        for connection in [c for s in segments for c in client.pool.connections(service.endpoint)]:
            if connection._transport is not None:
                connection._transport.abort()

    stop = asyncio.Event()
    killer = asyncio.ensure_future(_keep_doing(abort_client_connections, 0.015, stop))
    loads = [_write_load(client, segments[n % 2], b"%d" % n, 8_000) for n in range(4)]
    setups = await asyncio.gather(*loads)
    stop.set()
    await killer
    assert max(setups) > 1
    for n, segment in enumerate(segments):
        events = await _events(client, segment)
        for writer in (n, n + 2):
            mine = [e for e in events if e.startswith(b"%d-" % writer)]
            assert mine == [b"%d-%06d" % (writer, i) for i in range(8_000)]
        assert len(events) == 16_000


async def test_reconnect_with_segment_store_restarted_mid_load(service: SegmentStoreService) -> None:
    current = service
    count = 60_000
    async with SegmentClient(service.endpoint, fast_retry_config()) as client:
        await client.create_segment(SEGMENT)
        writer = client.writer(SEGMENT, config=WriterConfig(max_block_bytes=16 * 1024, max_unacked_bytes=256 * 1024))
        await writer.open()

        async def restart_at(*progress: int) -> None:
            nonlocal current
            for mark in progress:
                while writer.acked_event_number < mark:
                    await asyncio.sleep(0.001)
                current = await restart(current)

        restarts = asyncio.ensure_future(restart_at(10_000, 30_000))
        for i in range(count):
            ack = await writer.write(b"r-%06d" % i)
            if i % 1_000 == 999:
                await ack
        await asyncio.wait_for(writer.flush(), 30)
        await restarts
        assert writer.setups >= 3
        await writer.close()
        assert await _events(client, SEGMENT) == [b"r-%06d" % i for i in range(count)]
    if current is not service:
        await current.stop()


async def test_reader_with_connections_killed_mid_read_returns_every_byte_once(
    service: SegmentStoreService, client: SegmentClient
) -> None:
    await client.create_segment(SEGMENT)
    async with client.writer(SEGMENT) as writer:
        await writer.write_many(b"%07d" % i for i in range(100_000))
    info = await client.get_segment_info(SEGMENT)
    config = ReaderConfig(read_request_bytes=16 * 1024, prefetch_bytes=64 * 1024)
    reader = client.reader(SEGMENT, end_offset=info.write_offset, config=config)

    def close_server_connections() -> None:
        for connection in list(service.connections):
            connection.close()

    stop = asyncio.Event()
    killer = asyncio.ensure_future(_keep_doing(close_server_connections, 0.01, stop))
    events = []
    while (event := await reader.next_event()) is not None:
        events.append(event.data)
        if len(events) % 5_000 == 0:
            await asyncio.sleep(0.002)  # let the killer run between replies
    stop.set()
    kills = await killer
    assert events == [b"%07d" % i for i in range(100_000)]
    ranges = -(-info.write_offset // config.read_request_bytes)
    assert kills >= 3 and reader.requests_sent > ranges  # requests were lost and issued again
