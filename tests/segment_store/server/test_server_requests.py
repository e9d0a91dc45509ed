"""The wire server over real TCP: every request family, appends with dedup, errors as replies."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator

import pytest
from wire_peer import WirePeer

from segment_store.protocol import (
    AppendSetup,
    ConditionalAttributeUpdate,
    CreateSegment,
    CreateTableSegment,
    CreateTransientSegment,
    DataAppended,
    DeleteSegment,
    ErrorMessage,
    GetSegmentAttribute,
    GetStreamSegmentInfo,
    InvalidEventNumber,
    KeepAlive,
    LocateOffsetAtTime,
    MergeSegments,
    NoSuchSegment,
    OffsetAtTimeLocated,
    ReadSegment,
    ReadTable,
    RemoveTableKeys,
    SealSegment,
    SegmentAlreadyExists,
    SegmentAttribute,
    SegmentAttributeUpdated,
    SegmentCreated,
    SegmentDeleted,
    SegmentIsSealed,
    SegmentIsTruncated,
    SegmentRead,
    SegmentSealed,
    SegmentsMerged,
    SegmentTruncated,
    SetupAppend,
    StreamSegmentInfo,
    TableEntriesUpdated,
    TableKeyBadVersion,
    TableKeysRemoved,
    TableRead,
    TruncateSegment,
    UpdateSegmentAttribute,
    UpdateTableEntries,
    WrongHost,
    build_append_block_end,
    encode_events,
    parse_events,
)
from segment_store.protocol import TableEntry as WireEntry
from segment_store.protocol import TableKey as WireKey
from segment_store.protocol import TableValue as WireValue
from segment_store.server.service import SegmentStoreService, ServiceConfig
from segstore_shared.contracts import NULL_ATTRIBUTE_VALUE

pytestmark = pytest.mark.integration

SEGMENT = "scope/stream/0.#epoch.0"


@pytest.fixture
async def service() -> AsyncIterator[SegmentStoreService]:
    s = await SegmentStoreService.start_in_memory(container_count=4)
    yield s
    await s.stop()


@pytest.fixture
async def peer(service: SegmentStoreService) -> AsyncIterator[WirePeer]:
    p = await WirePeer.connect(service.endpoint)
    yield p
    await p.close()


async def create(peer: WirePeer, name: str, request_id: int = 1) -> None:
    reply = await peer.request(CreateSegment(request_id, name, 0, 0, "", 0))
    assert reply == SegmentCreated(request_id, name)


async def read_all(peer: WirePeer, name: str, offset: int = 0) -> bytes:
    info = await peer.request(GetStreamSegmentInfo(90, name, ""))
    assert isinstance(info, StreamSegmentInfo)
    data = bytearray()
    while offset + len(data) < info.write_offset:
        reply = await peer.request(ReadSegment(name, offset + len(data), 1 << 20, "", 91))
        assert isinstance(reply, SegmentRead), reply
        data += reply.data
    return bytes(data)


def block(writer: uuid.UUID, first_event: int, count: int, request_id: int = 0) -> tuple[bytes, object]:
    payloads = [f"event-{first_event + i}".encode() for i in range(count)]
    return encode_events(payloads), build_append_block_end(writer, payloads, first_event + count - 1, request_id)


async def test_create_with_duplicate_name_answers_already_exists(peer: WirePeer) -> None:
    await create(peer, SEGMENT)
    assert isinstance(await peer.request(CreateSegment(2, SEGMENT, 0, 0, "", 0)), SegmentAlreadyExists)


async def test_appends_with_pipelined_blocks_ack_cumulatively_and_read_back(peer: WirePeer) -> None:
    await create(peer, SEGMENT)
    writer = uuid.uuid4()
    setup = await peer.request(SetupAppend(3, writer, SEGMENT, ""))
    assert setup == AppendSetup(3, SEGMENT, writer, NULL_ATTRIBUTE_VALUE)
    expected = bytearray()
    for i in range(50):
        data, command = block(writer, i * 10 + 1, 10, request_id=100 + i)
        expected += data
        peer.send(command)  # type: ignore[arg-type]
    acked = 0
    offsets = []
    while acked < 500:
        reply = await peer.receive()
        assert isinstance(reply, DataAppended), reply
        assert reply.previous_event_number == (acked if acked else NULL_ATTRIBUTE_VALUE)
        acked = reply.event_number
        offsets.append(reply.current_segment_write_offset)
    assert offsets == sorted(offsets) and offsets[-1] == len(expected)
    assert await read_all(peer, SEGMENT) == bytes(expected)
    assert [e.data for e in parse_events(bytes(expected))][:2] == [b"event-1", b"event-2"]


async def test_setup_append_after_reconnect_returns_last_event_and_duplicates_are_refused(
    service: SegmentStoreService, peer: WirePeer
) -> None:
    await create(peer, SEGMENT)
    writer = uuid.uuid4()
    await peer.request(SetupAppend(1, writer, SEGMENT, ""))
    _, command = block(writer, 1, 5)
    assert isinstance(await peer.request(command), DataAppended)  # type: ignore[arg-type]
    other = await WirePeer.connect(service.endpoint)
    assert (await other.request(SetupAppend(2, writer, SEGMENT, ""))).last_event_number == 5  # type: ignore[attr-defined]
    _, resend = block(writer, 1, 5, request_id=7)  # the same events again: acknowledged, not stored twice
    reply = await other.request(resend)  # type: ignore[arg-type]
    assert isinstance(reply, DataAppended) and reply.event_number == 5
    _, backwards = block(writer, 1, 3, request_id=8)  # event numbers going backwards: a protocol violation
    other.send(backwards)  # type: ignore[arg-type]
    assert await other.closed_by_server()
    third = await WirePeer.connect(service.endpoint)  # a new connection set up below the stored number
    third.send(SetupAppend(9, writer, SEGMENT, ""))
    await third.receive()
    _, stale = block(writer, 1, 2, request_id=10)
    assert isinstance(await third.request(stale), InvalidEventNumber)  # type: ignore[arg-type]
    assert await third.closed_by_server()
    info = await peer.request(GetStreamSegmentInfo(3, SEGMENT, ""))
    assert isinstance(info, StreamSegmentInfo) and info.write_offset == len(block(writer, 1, 5)[0])


async def test_sealed_truncated_and_missing_segments_answer_their_errors(peer: WirePeer) -> None:
    await create(peer, SEGMENT)
    writer = uuid.uuid4()
    await peer.request(SetupAppend(1, writer, SEGMENT, ""))
    data, command = block(writer, 1, 3)
    await peer.request(command)  # type: ignore[arg-type]
    assert await peer.request(TruncateSegment(2, SEGMENT, 4, "")) == SegmentTruncated(2, SEGMENT)
    reply = await peer.request(ReadSegment(SEGMENT, 0, 100, "", 3))
    assert isinstance(reply, SegmentIsTruncated) and reply.start_offset == 4
    assert await peer.request(SealSegment(4, SEGMENT, "")) == SegmentSealed(4, SEGMENT)
    assert isinstance(await peer.request(SealSegment(5, SEGMENT, "")), SegmentIsSealed)
    _, more = block(writer, 4, 1, request_id=6)
    assert isinstance(await peer.request(more), SegmentIsSealed)  # type: ignore[arg-type]
    end = await peer.request(ReadSegment(SEGMENT, len(data), 100, "", 7))
    assert isinstance(end, SegmentRead) and end.end_of_segment and end.data == b""
    info = await peer.request(GetStreamSegmentInfo(8, SEGMENT, ""))
    assert isinstance(info, StreamSegmentInfo) and info.is_sealed and info.start_offset == 4
    assert isinstance(await peer.request(ReadSegment("no/such/0", 0, 10, "", 9)), NoSuchSegment)
    assert isinstance(await peer.request(GetStreamSegmentInfo(10, "no/such/0", "")), NoSuchSegment)
    assert await peer.request(DeleteSegment(11, SEGMENT, "")) == SegmentDeleted(11, SEGMENT)
    assert isinstance(await peer.request(DeleteSegment(12, SEGMENT, "")), NoSuchSegment)


async def test_read_at_tail_waits_for_an_append(peer: WirePeer, service: SegmentStoreService) -> None:
    await create(peer, SEGMENT)
    reader = await WirePeer.connect(service.endpoint)
    reader.send(ReadSegment(SEGMENT, 0, 1000, "", 5))
    await asyncio.sleep(0.1)
    writer = uuid.uuid4()
    await peer.request(SetupAppend(1, writer, SEGMENT, ""))
    data, command = block(writer, 1, 2)
    await peer.request(command)  # type: ignore[arg-type]
    reply = await reader.receive()
    assert isinstance(reply, SegmentRead) and reply.data == data and reply.at_tail
    await reader.close()


async def test_merge_and_attributes(peer: WirePeer) -> None:
    txn = SEGMENT + "#transaction." + "a" * 32
    await create(peer, SEGMENT)
    await create(peer, txn, 2)
    writer = uuid.uuid4()
    await peer.request(SetupAppend(3, writer, txn, ""))
    data, command = block(writer, 1, 4)
    await peer.request(command)  # type: ignore[arg-type]
    merged = await peer.request(MergeSegments(4, SEGMENT, txn, "", ()))
    assert merged == SegmentsMerged(4, SEGMENT, txn, len(data))
    assert await read_all(peer, SEGMENT) == data
    attribute = uuid.uuid4()
    unset = await peer.request(GetSegmentAttribute(5, SEGMENT, attribute, ""))
    assert unset == SegmentAttribute(5, NULL_ATTRIBUTE_VALUE)
    ok = await peer.request(UpdateSegmentAttribute(6, SEGMENT, attribute, 10, NULL_ATTRIBUTE_VALUE, ""))
    assert ok == SegmentAttributeUpdated(6, True)
    stale = await peer.request(UpdateSegmentAttribute(7, SEGMENT, attribute, 11, 9, ""))
    assert stale == SegmentAttributeUpdated(7, False)
    assert await peer.request(GetSegmentAttribute(8, SEGMENT, attribute, "")) == SegmentAttribute(8, 10)


async def test_table_commands_round_trip_with_versions(peer: WirePeer) -> None:
    table = "_system/tables/kv"
    assert await peer.request(CreateTableSegment(1, table, "", False, 0, 0)) == SegmentCreated(1, table)
    put = UpdateTableEntries(2, table, "", (WireEntry(WireKey(b"k1", -1), WireValue(b"v1")),), -1)
    updated = await peer.request(put)
    assert isinstance(updated, TableEntriesUpdated) and len(updated.updated_versions) == 1
    version = updated.updated_versions[0]
    again = UpdateTableEntries(3, table, "", (WireEntry(WireKey(b"k1", -1), WireValue(b"x")),), -1)
    assert isinstance(await peer.request(again), TableKeyBadVersion)
    read = await peer.request(ReadTable(4, table, "", (WireKey(b"k1", -(2**63)), WireKey(b"nope", -(2**63)))))
    assert isinstance(read, TableRead)
    assert read.entries[0] == WireEntry(WireKey(b"k1", version), WireValue(b"v1"))
    assert read.entries[1].key.key_version == -1
    removed = await peer.request(RemoveTableKeys(5, table, "", (WireKey(b"k1", version),), -1))
    assert removed == TableKeysRemoved(5, table)


async def test_wrong_host_for_a_container_not_running_here() -> None:
    service = await SegmentStoreService.start_in_memory(container_count=4, config=ServiceConfig(containers=(0,)))
    try:
        peer = await WirePeer.connect(service.endpoint)
        foreign = next(f"s/t/{i}" for i in range(100) if service.registry.container_id(f"s/t/{i}") != 0)
        assert isinstance(await peer.request(CreateSegment(1, foreign, 0, 0, "", 0)), WrongHost)
        local = next(f"s/t/{i}" for i in range(100) if service.registry.container_id(f"s/t/{i}") == 0)
        assert await peer.request(CreateSegment(2, local, 0, 0, "", 0)) == SegmentCreated(2, local)
        await peer.close()
    finally:
        await service.stop()


async def test_keepalive_is_echoed_and_bad_arguments_answer_error_message(peer: WirePeer) -> None:
    assert await peer.request(KeepAlive()) == KeepAlive()
    await create(peer, SEGMENT)
    reply = await peer.request(TruncateSegment(2, SEGMENT, 10_000, ""))
    assert isinstance(reply, ErrorMessage) and "offset" in reply.message


async def test_conditional_merge_applies_target_attributes_atomically(peer: WirePeer) -> None:
    txn1 = SEGMENT + "#transaction." + "1" * 32
    txn2 = SEGMENT + "#transaction." + "2" * 32
    for i, name in enumerate([SEGMENT, txn1, txn2]):
        await create(peer, name, i + 1)
    marker = uuid.uuid4()
    first = ConditionalAttributeUpdate(marker, ConditionalAttributeUpdate.REPLACE_IF_EQUALS, 1, NULL_ATTRIBUTE_VALUE)
    merged = await peer.request(MergeSegments(10, SEGMENT, txn1, "", (first,)))
    assert isinstance(merged, SegmentsMerged)
    again = await peer.request(MergeSegments(11, SEGMENT, txn1, "", (first,)))  # a retry: already merged
    assert isinstance(again, SegmentsMerged) and again.new_target_write_offset == merged.new_target_write_offset
    stale = await peer.request(MergeSegments(12, SEGMENT, txn2, "", (first,)))  # condition fails: nothing merged
    assert stale == SegmentAttributeUpdated(12, False)
    assert await peer.request(GetSegmentAttribute(13, SEGMENT, marker, "")) == SegmentAttribute(13, 1)
    info = await peer.request(GetStreamSegmentInfo(14, txn2, ""))
    assert isinstance(info, StreamSegmentInfo) and info.exists and info.is_sealed


async def test_merge_with_missing_source_or_target_names_the_missing_one(peer: WirePeer) -> None:
    """The controller treats a missing transaction segment as merged already and a missing target as an error: the
    reply must say which one is missing (it named the target for both, so a commit whose transaction segment was gone
    retried for ever, as ``NoSuchSegment`` of the stream segment)."""
    await create(peer, SEGMENT)
    txn = SEGMENT + "#transaction." + "cd" * 16
    gone = await peer.request(MergeSegments(2, SEGMENT, txn, "", ()))
    assert gone == NoSuchSegment(2, txn, "", -1)
    await create(peer, txn, 3)
    target = "scope/stream/0.#epoch.5"  # the same container as the transaction segment
    missing = await peer.request(MergeSegments(4, target, txn, "", ()))
    assert isinstance(missing, NoSuchSegment) and missing.segment == target
    info = await peer.request(GetStreamSegmentInfo(5, txn, ""))
    assert isinstance(info, StreamSegmentInfo) and info.exists


async def test_transient_segment_is_deleted_when_its_connection_closes(service: SegmentStoreService) -> None:
    peer = await WirePeer.connect(service.endpoint)
    await create(peer, SEGMENT)
    writer = uuid.uuid4()
    created = await peer.request(CreateTransientSegment(2, writer, SEGMENT, ""))
    assert isinstance(created, SegmentCreated) and created.segment == f"{SEGMENT}#transient.{writer.hex}"
    await peer.close()
    other = await WirePeer.connect(service.endpoint)
    for _ in range(100):
        if isinstance(await other.request(GetStreamSegmentInfo(3, created.segment, "")), NoSuchSegment):
            break
        await asyncio.sleep(0.02)
    assert isinstance(await other.request(GetStreamSegmentInfo(4, created.segment, "")), NoSuchSegment)
    assert isinstance(await other.request(GetStreamSegmentInfo(5, SEGMENT, "")), StreamSegmentInfo)
    await other.close()


async def test_locate_offset_at_time_answers_the_first_event_ingested_at_or_after_it(peer: WirePeer) -> None:
    await create(peer, SEGMENT)
    writer = uuid.uuid4()
    await peer.request(SetupAppend(1, writer, SEGMENT, ""))
    first, command = block(writer, 1, 3, request_id=2)
    await peer.request(command)  # type: ignore[arg-type]
    await asyncio.sleep(0.003)
    between = int(time.time() * 1000) + 1
    await asyncio.sleep(0.003)
    second, command = block(writer, 4, 2, request_id=3)
    await peer.request(command)  # type: ignore[arg-type]
    assert await peer.request(LocateOffsetAtTime(4, SEGMENT, 0, "")) == OffsetAtTimeLocated(4, SEGMENT, 0)
    assert await peer.request(LocateOffsetAtTime(5, SEGMENT, between, "")) == OffsetAtTimeLocated(
        5, SEGMENT, len(first)
    )
    future = between + 3_600_000
    end = len(first) + len(second)
    assert await peer.request(LocateOffsetAtTime(6, SEGMENT, future, "")) == OffsetAtTimeLocated(6, SEGMENT, end)
    assert isinstance(await peer.request(LocateOffsetAtTime(7, "no/such/0", 0, "")), NoSuchSegment)
