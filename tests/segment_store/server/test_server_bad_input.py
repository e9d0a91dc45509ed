"""Bad input over raw sockets: the server answers an error or closes only that connection, never
crashes; other connections keep working and nothing stored is damaged."""

from __future__ import annotations

import asyncio
import dataclasses
import struct
import uuid
from collections.abc import AsyncIterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from protocol_strategies import for_command
from wire_peer import WirePeer

from segment_store.protocol import (
    REGISTRY,
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
    WireCommand,
    build_append_block_end,
    encode,
    encode_events,
    local_hello,
)
from segment_store.server.service import SegmentStoreService

pytestmark = pytest.mark.integration

REGISTRY_BY_NAME = {cls.__name__: cls for cls in REGISTRY.values()}

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


REQUEST_TYPES = [REGISTRY_BY_NAME[name] for name in (  # what the segment store serves (server/requests.py, appends)
    "ReadSegment", "GetStreamSegmentInfo", "CreateSegment", "CreateTransientSegment", "UpdateSegmentPolicy",
    "SealSegment", "TruncateSegment", "DeleteSegment", "MergeSegments", "MergeSegmentsBatch", "GetSegmentAttribute",
    "UpdateSegmentAttribute", "FlushToStorage", "ListStorageChunks", "LocateOffsetAtTime", "ListStorageChunkLocations",
    "ReadIngestTimes", "LocateOffsetBeforeTime", "CreateTableSegment",
    "DeleteTableSegment", "UpdateTableEntries", "RemoveTableKeys", "ReadTable", "ReadTableKeys", "ReadTableEntries",
    "ReadTableEntriesDelta", "GetTableSegmentInfo", "LocateOffset", "SetupAppend", "AppendBlockEnd",
    "ConditionalAppend",
)]  # fmt: skip


SENTINEL_ID = -424242


async def send_then_check_alive(service: SegmentStoreService, command: WireCommand) -> None:
    """Send ``command``, then a request whose reply proves the connection is served (a read at the tail may wait
    for data meanwhile): every reply until then must be a reply, or the server closes this connection only."""
    peer = await WirePeer.connect(service.endpoint)
    peer.send(command, GetStreamSegmentInfo(SENTINEL_ID, SEGMENT, ""))
    try:
        while True:
            reply = await peer.receive(timeout=10)
            assert type(reply) not in REQUEST_TYPES, f"{command!r} answered with a request: {reply!r}"
            if isinstance(reply, StreamSegmentInfo) and reply.request_id == SENTINEL_ID:
                break
    except ConnectionError:
        pass
    await peer.close()
    await assert_healthy(service)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(command=st.one_of([for_command(cls) for cls in REQUEST_TYPES]))
async def test_well_formed_requests_with_any_field_values(service: SegmentStoreService, command: WireCommand) -> None:
    """Every request the server serves, well framed, with any field values (negative or huge offsets, lengths
    and event numbers, any names and ids): each reply decodes as a reply (an error reply when the values are
    wrong), or the server closes that connection only; the server keeps serving and stored data is unchanged."""
    await send_then_check_alive(service, command)


def on_the_stored_segment(command: WireCommand) -> WireCommand:
    field = "segment_name" if hasattr(command, "segment_name") else "segment"
    return dataclasses.replace(command, **{field: SEGMENT})  # type: ignore[type-var]


READ_ONLY = [REGISTRY_BY_NAME[name] for name in ("ReadSegment", "GetStreamSegmentInfo", "GetSegmentAttribute",
                                                  "LocateOffsetAtTime", "LocateOffset", "ListStorageChunks",
                                                  "ListStorageChunkLocations", "ReadIngestTimes",
                                                  "LocateOffsetBeforeTime")]  # fmt: skip


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(command=st.one_of([for_command(cls).map(on_the_stored_segment) for cls in READ_ONLY]))
async def test_reads_of_a_stored_segment_with_any_offsets(service: SegmentStoreService, command: WireCommand) -> None:
    """Read-only requests on a segment that holds data, with any offsets, lengths, times and attribute ids: a
    reply (data or an error reply), never a hang or a crash, and the segment unchanged."""
    await send_then_check_alive(service, command)
