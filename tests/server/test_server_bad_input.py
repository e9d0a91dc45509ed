"""Bad input over raw sockets: the server answers an error or closes only that connection, never
crashes; other connections keep working and nothing stored is damaged."""

from __future__ import annotations

import asyncio
import struct
import uuid
from collections.abc import AsyncIterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from wire_peer import WirePeer

from segment_store.protocol import (
    AppendBlockEnd,
    CreateSegment,
    DataAppended,
    Event,
    GetStreamSegmentInfo,
    Hello,
    ReadSegment,
    SegmentCreated,
    SegmentRead,
    SetupAppend,
    StreamSegmentInfo,
    build_append_block_end,
    encode,
    encode_events,
    local_hello,
)
from segment_store.server.service import SegmentStoreService

SEGMENT = "bad/input/0.#epoch.0"
HEADER = struct.Struct(">ii")


@pytest.fixture
async def service() -> AsyncIterator[SegmentStoreService]:
    s = await SegmentStoreService.start_in_memory(container_count=2)
    peer = await WirePeer.connect(s.endpoint)
    assert await peer.request(CreateSegment(1, SEGMENT, 0, 0, "", 0)) == SegmentCreated(1, SEGMENT)
    writer = uuid.uuid4()
    await peer.request(SetupAppend(2, writer, SEGMENT, ""))
    reply = await peer.request(build_append_block_end(writer, [b"precious"] * 10, 10, 3))
    assert isinstance(reply, DataAppended)
    await peer.close()
    yield s
    await s.stop()


async def assert_healthy(service: SegmentStoreService) -> None:
    """A fresh connection works, and the stored data is what it was."""
    peer = await WirePeer.connect(service.endpoint)
    info = await peer.request(GetStreamSegmentInfo(1, SEGMENT, ""))
    assert isinstance(info, StreamSegmentInfo) and info.write_offset == len(encode_events([b"precious"] * 10))
    read = await peer.request(ReadSegment(SEGMENT, 0, 1 << 20, "", 2))
    assert isinstance(read, SegmentRead) and read.data == encode_events([b"precious"] * 10)
    await peer.close()


def frame(type_code: int, body: bytes, declared: int | None = None) -> bytes:
    return HEADER.pack(type_code, len(body) if declared is None else declared) + body


BAD_INPUTS = {
    "unknown type": frame(9999, b"\x00" * 16),
    "negative length": HEADER.pack(1, -5),
    "oversized length": HEADER.pack(1, 64 * 1024 * 1024),
    "truncated body": frame(1, b"\x00\x00"),  # Hello needs 8 bytes
    "garbage": b"\xff" * 100,
    "event outside a block": encode(Event(b"stray")),
    "block end without setup": encode(AppendBlockEnd(uuid.uuid4(), 0, encode_events([b"x"]), 1, 1, 1)),
    "reply sent as request": encode(SegmentCreated(1, "x")),
}


@pytest.mark.parametrize("name", list(BAD_INPUTS))
async def test_bad_input_closes_only_that_connection(service: SegmentStoreService, name: str) -> None:
    bystander = await WirePeer.connect(service.endpoint)
    bad = await WirePeer.connect(service.endpoint)
    bad.send_raw(BAD_INPUTS[name])
    assert await bad.closed_by_server(), f"{name}: the server kept the connection open"
    assert isinstance(await bystander.request(GetStreamSegmentInfo(7, SEGMENT, "")), StreamSegmentInfo)
    await bystander.close()
    await assert_healthy(service)


async def test_request_before_hello_and_incompatible_version_close(service: SegmentStoreService) -> None:
    early = await WirePeer.connect(service.endpoint, hello=False)
    early.send(GetStreamSegmentInfo(1, SEGMENT, ""))
    assert await early.closed_by_server()
    old = await WirePeer.connect(service.endpoint, hello=False)
    old.send(Hello(2, 1))
    reply = await old.receive()
    assert reply == local_hello()  # told what we speak, then closed
    assert await old.closed_by_server()
    await assert_healthy(service)


async def test_truncated_frame_then_disconnect_is_harmless(service: SegmentStoreService) -> None:
    peer = await WirePeer.connect(service.endpoint)
    writer = uuid.uuid4()
    await peer.request(SetupAppend(1, writer, SEGMENT, ""))
    whole = encode(build_append_block_end(writer, [b"never"] * 100, 100, 5))
    peer.send_raw(whole[: len(whole) // 2])
    await peer.close()
    await asyncio.sleep(0.05)
    await assert_healthy(service)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(min_size=1, max_size=300))
async def test_random_bytes_after_hello_never_hurt_the_server(service: SegmentStoreService, data: bytes) -> None:
    peer = await WirePeer.connect(service.endpoint)
    peer.send_raw(data)
    try:
        while True:
            await peer.receive(timeout=0.2)
    except (ConnectionError, TimeoutError):
        pass
    await peer.close()
    await assert_healthy(service)
