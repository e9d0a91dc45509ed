"""Segment reader over scripted connections: prefetch, short replies, tail, end, truncation, reconnect."""

from __future__ import annotations

import asyncio

import pytest
from client_fakes import FakeNetwork, FakePeer, FakeStore

from segment_store.client import (
    ClientConfig,
    ConnectionConfig,
    ConnectionPool,
    ReaderConfig,
    RetryPolicy,
    SegmentClient,
    SegmentIsTruncatedError,
)
from segment_store.protocol import ReadSegment, SegmentIsTruncated, SegmentRead, WireCommand, encode_events

pytestmark = pytest.mark.unit

SEGMENT = "scope/stream/0"


async def _noop_sleep(seconds: float) -> None:
    await asyncio.sleep(0)


def _client(handler, read_request_bytes: int = 100, prefetch_bytes: int = 400) -> tuple[SegmentClient, FakeNetwork]:
    network = FakeNetwork(handler)
    config = ClientConfig(
        connection=ConnectionConfig(keepalive_interval_ms=0),
        reader=ReaderConfig(read_request_bytes, prefetch_bytes, RetryPolicy(max_attempts=4, sleep=_noop_sleep)),
    )
    return SegmentClient(("fake", 1), config, ConnectionPool(config.connection, config.pool, network.connect)), network


def _reads(network: FakeNetwork) -> list[ReadSegment]:
    return [c for p in network.peers for c in p.sent(ReadSegment)]  # type: ignore[misc]


async def test_read_with_prefetch_keeps_requests_in_flight_and_returns_all_bytes() -> None:
    store = FakeStore()
    store.create(SEGMENT).data += bytes(range(256)) * 4
    client, network = _client(store)
    reader = client.reader(SEGMENT, end_offset=1024)
    first = await reader.read()
    assert first == bytes(range(100))
    await asyncio.sleep(0.01)
    assert len(_reads(network)) == 4  # 400 bytes of prefetch, 100 per request
    data = first
    while chunk := await reader.read():
        data += chunk
    assert data == bytes(range(256)) * 4
    assert reader.at_end and reader.offset == 1024
    offsets = [r.offset for r in _reads(network)]
    assert sorted(offsets) == list(range(0, 1001, 100))  # each range asked once


async def test_read_with_short_replies_requests_the_gap_before_later_data() -> None:
    store = FakeStore()
    store.create(SEGMENT).data += bytes(i % 251 for i in range(1000))
    store.read_reply_limit = 30  # the server answers at most 30 bytes per request
    client, network = _client(store)
    reader = client.reader(SEGMENT, end_offset=1000)
    data = b""
    while chunk := await reader.read():
        data += chunk
    assert data == bytes(i % 251 for i in range(1000))
    assert len(_reads(network)) > 30


async def test_read_events_with_events_split_across_replies_parses_them() -> None:
    store = FakeStore()
    payloads = [b"event-%d" % i * (i % 7 + 1) for i in range(200)]
    store.create(SEGMENT).data += encode_events(payloads)
    store.segments[SEGMENT].sealed = True
    client, _network = _client(store, read_request_bytes=37, prefetch_bytes=370)
    reader = client.reader(SEGMENT)
    events = [e async for e in reader]
    assert [e.data for e in events] == payloads
    assert events[1].offset == 8 + len(payloads[0])
    assert reader.at_end


async def test_read_at_tail_waits_and_returns_new_data() -> None:
    store = FakeStore()
    segment = store.create(SEGMENT)
    segment.data += b"abc"
    client, network = _client(store)
    reader = client.reader(SEGMENT)
    assert await reader.read() == b"abc"
    pending = asyncio.ensure_future(reader.read())
    await asyncio.sleep(0.01)
    assert not pending.done()
    tail_reads = [r for r in _reads(network) if r.offset == 3]
    assert len(tail_reads) == 1  # at the tail only one request is kept in flight
    segment.data += b"defg"
    peer = next(p for p in network.peers if tail_reads[0] in p.commands)
    peer.reply(SegmentRead(SEGMENT, 3, True, False, b"defg", tail_reads[0].request_id))
    assert await asyncio.wait_for(pending, 1) == b"defg"


async def test_read_at_tail_with_empty_reply_reissues() -> None:
    def handler(peer: FakePeer, command: WireCommand) -> None:
        if isinstance(command, ReadSegment):
            if len(peer.sent(ReadSegment)) < 3:
                peer.reply(SegmentRead(SEGMENT, command.offset, True, False, b"", command.request_id))
            else:
                peer.reply(SegmentRead(SEGMENT, command.offset, True, False, b"late", command.request_id))

    client, network = _client(handler, prefetch_bytes=100)
    reader = client.reader(SEGMENT)
    assert await asyncio.wait_for(reader.read(), 1) == b"late"
    assert [r.offset for r in _reads(network)] == [0, 0, 0, 4]  # then the rest of the range, at the tail


async def test_read_below_start_raises_truncated_and_seek_goes_on() -> None:
    store = FakeStore()
    store.create(SEGMENT).data += b"0123456789"

    def handler(peer: FakePeer, command: WireCommand) -> None:
        if isinstance(command, ReadSegment) and command.offset < 4:
            peer.reply(SegmentIsTruncated(command.request_id, SEGMENT, 4, "", command.offset))
            return
        store(peer, command)

    client, _network = _client(handler)
    reader = client.reader(SEGMENT, end_offset=10)
    with pytest.raises(SegmentIsTruncatedError) as info:
        await reader.read()
    assert info.value.start_offset == 4
    reader.seek(info.value.start_offset)
    assert await reader.read() == b"456789"


async def test_read_with_connection_loss_reissues_from_the_same_offset() -> None:
    store = FakeStore()
    store.create(SEGMENT).data += bytes(range(200))
    drops = {"left": 1}

    def handler(peer: FakePeer, command: WireCommand) -> None:
        if isinstance(command, ReadSegment) and command.offset == 100 and drops["left"]:
            drops["left"] -= 1
            peer.drop()
            return
        store(peer, command)

    client, network = _client(handler, prefetch_bytes=100)
    reader = client.reader(SEGMENT, end_offset=200)
    data = b""
    while chunk := await asyncio.wait_for(reader.read(), 1):
        data += chunk
    assert data == bytes(range(200))
    assert len(network.peers) == 2


async def test_read_of_sealed_segment_ends_at_end_of_segment() -> None:
    store = FakeStore()
    segment = store.create(SEGMENT)
    segment.data += b"x" * 250
    segment.sealed = True
    client, _network = _client(store)
    reader = client.reader(SEGMENT)
    total = 0
    while chunk := await reader.read():
        total += len(chunk)
    assert total == 250 and reader.at_end
    assert await reader.read() == b""


class _NoAnswer:
    """A connection source whose connections never come: every read waits until cancelled."""

    async def connection_for(self, segment: str) -> None:
        await asyncio.Event().wait()


async def test_a_caller_cancelled_while_a_seek_drops_its_read_is_cancelled() -> None:
    """The caller and the read it waits on cancelled in the same turn (a seek dropped the read as the caller's task
    was cancelled): the caller ends, cancelled, instead of issuing the read again and waiting on."""
    from segment_store.client.reader import SegmentReader

    reader = SegmentReader(_NoAnswer(), SEGMENT)  # type: ignore[arg-type]
    waiting = asyncio.create_task(reader.read())
    for _ in range(3):
        await asyncio.sleep(0)  # let it issue its read and wait on it
    assert reader.requests_sent >= 1
    reader.seek(0)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(waiting, 5)
    await reader.close()
