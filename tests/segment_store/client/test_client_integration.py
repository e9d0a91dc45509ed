"""The client against a real in-memory segment store over TCP: appends, reads, conditional appends,
typed errors for each failure reply, admin calls."""

from __future__ import annotations

import asyncio
import contextlib
import uuid

import pytest

from segment_store.client import (
    ConditionalCheckFailedError,
    ErrorMessageError,
    NoSuchSegmentError,
    ReaderConfig,
    SegmentAlreadyExistsError,
    SegmentClient,
    SegmentIsSealedError,
    SegmentIsTruncatedError,
    WriterConfig,
    WrongHostError,
)
from segment_store.server.service import SegmentStoreService, ServiceConfig

pytestmark = pytest.mark.integration

SEGMENT = "scope/stream/0.#epoch.0"


async def _read_all_events(client: SegmentClient, segment: str, **reader: int) -> list[bytes]:
    info = await client.get_segment_info(segment)
    config = ReaderConfig(**reader) if reader else None
    return [e.data async for e in client.reader(segment, end_offset=info.write_offset, config=config)]


async def test_round_trip_with_100k_small_events_keeps_order(client: SegmentClient) -> None:
    await client.create_segment(SEGMENT)
    count = 100_000
    async with client.writer(SEGMENT) as writer:
        for i in range(count):
            await writer.write(b"event-%06d" % i)
        await writer.flush()
        assert writer.acked_event_number == count
    info = await client.get_segment_info(SEGMENT)
    assert info.write_offset == count * (8 + 12)
    events = await _read_all_events(client, SEGMENT, read_request_bytes=64 * 1024, prefetch_bytes=512 * 1024)
    assert events == [b"event-%06d" % i for i in range(count)]


async def test_concurrent_writers_with_shared_segment_keep_each_writer_in_order(client: SegmentClient) -> None:
    await client.create_segment(SEGMENT)
    writers, per_writer = 8, 3_000

    async def produce(n: int) -> None:
        async with client.writer(SEGMENT, config=WriterConfig(max_block_bytes=4096)) as writer:
            for i in range(per_writer):
                ack = await writer.write(b"%d:%d" % (n, i))
                if i % 500 == 0:
                    await ack  # mix waiting for acks with pipelining

    await asyncio.gather(*(produce(n) for n in range(writers)))
    events = await _read_all_events(client, SEGMENT)
    assert len(events) == writers * per_writer
    seen: dict[int, list[int]] = {}
    for event in events:
        n, i = event.split(b":")
        seen.setdefault(int(n), []).append(int(i))
    assert all(seen[n] == list(range(per_writer)) for n in range(writers))


async def test_concurrent_writers_with_many_segments_store_everything(client: SegmentClient) -> None:
    segments = [f"scope/stream/{i}.#epoch.0" for i in range(6)]
    await asyncio.gather(*(client.create_segment(s) for s in segments))

    async def produce(segment: str) -> None:
        async with client.writer(segment) as writer:
            await writer.write_many(b"%s-%d" % (segment.encode(), i) for i in range(2_000))

    await asyncio.gather(*(produce(s) for s in segments))
    for segment in segments:
        assert await _read_all_events(client, segment) == [b"%s-%d" % (segment.encode(), i) for i in range(2_000)]


async def test_read_with_prefetch_returns_exactly_the_written_bytes(client: SegmentClient) -> None:
    await client.create_segment(SEGMENT)
    blob = bytes(i * 7 % 256 for i in range(3 * 1024 * 1024 + 17))
    async with client.writer(SEGMENT) as writer:
        for start in range(0, len(blob), 100_000):
            await writer.write(blob[start : start + 100_000])
    await client.seal_segment(SEGMENT)
    reader = client.reader(SEGMENT, config=ReaderConfig(read_request_bytes=256 * 1024, prefetch_bytes=1024 * 1024))
    data = bytearray()
    while chunk := await reader.read():
        data += chunk
    events = [e.data for e in _parse(bytes(data))]
    assert b"".join(events) == blob
    assert reader.at_end and reader.requests_sent >= 12


def _parse(data: bytes):
    from segment_store.protocol import parse_events

    return parse_events(data)


async def test_read_at_tail_waits_for_new_events(client: SegmentClient) -> None:
    await client.create_segment(SEGMENT)
    reader = client.reader(SEGMENT)
    pending = asyncio.ensure_future(reader.next_event())
    await asyncio.sleep(0.05)
    assert not pending.done()
    async with client.writer(SEGMENT) as writer:
        await writer.append(b"first")
        event = await asyncio.wait_for(pending, 5)
        assert event is not None and event.data == b"first" and event.offset == 0
        await writer.append(b"second")
        event = await asyncio.wait_for(reader.next_event(), 5)
        assert event is not None and event.data == b"second"
    await client.seal_segment(SEGMENT)
    assert await asyncio.wait_for(reader.next_event(), 5) is None
    await reader.close()


async def test_conditional_appends_with_expected_offsets(client: SegmentClient) -> None:
    await client.create_segment(SEGMENT)
    async with client.conditional_writer(SEGMENT) as writer:
        length = await writer.append(b"a", 0)
        assert length == 9
        length = await writer.append_many([b"bb", b"ccc"], length)
        assert length == 9 + 10 + 11
        with pytest.raises(ConditionalCheckFailedError):
            await writer.append(b"stale", 9)
        assert await writer.append(b"d", length) == length + 9
    assert await _read_all_events(client, SEGMENT) == [b"a", b"bb", b"ccc", b"d"]


async def test_conditional_appends_with_racing_writers_let_one_win_per_offset(client: SegmentClient) -> None:
    await client.create_segment(SEGMENT)
    writers = [client.conditional_writer(SEGMENT) for _ in range(4)]

    async def race(n: int) -> int:
        wins = 0
        for _ in range(30):
            offset = (await client.get_segment_info(SEGMENT)).write_offset
            try:
                await writers[n].append(b"w%d" % n, offset)
                wins += 1
            except ConditionalCheckFailedError:
                pass
        return wins

    wins = await asyncio.gather(*(race(n) for n in range(4)))
    info = await client.get_segment_info(SEGMENT)
    assert info.write_offset == sum(wins) * 10
    for writer in writers:
        await writer.close()


async def test_segment_lifecycle_with_merge_truncate_attributes(client: SegmentClient) -> None:
    await client.create_segment(SEGMENT)
    source = SEGMENT + "#transaction.1"
    await client.create_segment(source)
    async with client.writer(source) as writer:
        await writer.append(b"txn")
    await client.seal_segment(source)
    assert await client.merge_segments(SEGMENT, source) == 11
    attribute = uuid.uuid4()
    assert await client.get_segment_attribute(SEGMENT, attribute) is None
    assert await client.update_segment_attribute(SEGMENT, attribute, 5, None)
    assert not await client.update_segment_attribute(SEGMENT, attribute, 6, 4)
    assert await client.get_segment_attribute(SEGMENT, attribute) == 5
    await client.truncate_segment(SEGMENT, 11)
    info = await client.get_segment_info(SEGMENT)
    assert (info.start_offset, info.write_offset) == (11, 11)
    await client.flush_to_storage(0)
    await client.delete_segment(SEGMENT)
    with contextlib.suppress(NoSuchSegmentError):  # what Pravega's Java server answers
        assert not (await client.get_segment_info(SEGMENT)).exists  # what this server answers
    with pytest.raises(NoSuchSegmentError):
        await client.delete_segment(SEGMENT)


async def test_merge_batch_with_several_sources_returns_offsets(client: SegmentClient) -> None:
    await client.create_segment(SEGMENT)
    sources = [SEGMENT + f"#transaction.{i}" for i in range(3)]
    for source in sources:
        await client.create_segment(source)
        async with client.writer(source) as writer:
            await writer.append(b"x" * 2)
        await client.seal_segment(source)
    assert await client.merge_segments_batch(SEGMENT, sources) == [10, 20, 30]


async def test_create_transient_segment_returns_its_name(client: SegmentClient) -> None:
    await client.create_segment(SEGMENT)
    name = await client.create_transient_segment(SEGMENT, uuid.uuid4())
    assert name.startswith(SEGMENT) and name != SEGMENT
    assert (await client.get_segment_info(name)).write_offset == 0


# ---- typed errors from the real server ------------------------------------------------------------------------


async def test_error_no_such_segment(client: SegmentClient) -> None:
    with pytest.raises(NoSuchSegmentError) as info:
        await client.seal_segment("scope/stream/missing")
    assert info.value.segment == "scope/stream/missing"
    with pytest.raises(NoSuchSegmentError):
        await client.writer("scope/stream/missing").open()


async def test_error_segment_already_exists(client: SegmentClient) -> None:
    await client.create_segment(SEGMENT)
    with pytest.raises(SegmentAlreadyExistsError):
        await client.create_segment(SEGMENT)


async def test_error_segment_is_sealed_fails_the_writer(client: SegmentClient) -> None:
    await client.create_segment(SEGMENT)
    writer = client.writer(SEGMENT)
    await writer.append(b"before")
    await client.seal_segment(SEGMENT)
    ack = await writer.write(b"after")
    with pytest.raises(SegmentIsSealedError):
        await asyncio.wait_for(ack, 5)
    assert writer.unacked_events() == [b"after"]
    with pytest.raises(SegmentIsSealedError):
        await writer.close()


async def test_error_segment_is_truncated_on_read_below_start(client: SegmentClient) -> None:
    await client.create_segment(SEGMENT)
    async with client.writer(SEGMENT) as writer:
        for i in range(10):
            await writer.write(b"%d" % i)
    await client.truncate_segment(SEGMENT, 27)
    with pytest.raises(SegmentIsTruncatedError) as info:
        await client.read_segment(SEGMENT, 0, 100)
    assert info.value.start_offset == 27
    reader = client.reader(SEGMENT, end_offset=90)
    with pytest.raises(SegmentIsTruncatedError):
        await reader.next_event()
    reader.seek(27)
    assert [e.data async for e in reader] == [b"%d" % i for i in range(3, 10)]


async def test_error_message_for_illegal_argument(client: SegmentClient) -> None:
    await client.create_segment(SEGMENT)
    with pytest.raises(ErrorMessageError) as info:
        await client.truncate_segment(SEGMENT, 1000)  # beyond the length
    assert not info.value.retriable


async def test_error_wrong_host_for_container_not_here() -> None:
    config = ServiceConfig(container_count=4, containers=(0,))
    service = await SegmentStoreService.start_in_memory(container_count=4, port=0, config=config)
    try:
        async with SegmentClient(service.endpoint) as client:
            failures = []
            for i in range(20):
                try:
                    await client.create_segment(f"scope/stream/{i}")
                except WrongHostError as error:
                    failures.append(error)
            assert failures and all(f.retriable for f in failures)
            assert failures[0].segment.startswith("scope/stream/")
    finally:
        await service.stop()


class _Replies:
    """A ReplyListener that records what the server sends to one writer id."""

    def __init__(self) -> None:
        self.replies: list[object] = []
        self.lost = asyncio.Event()

    def on_appended(self, connection: object, event_number: int, write_offset: int) -> None:
        self.replies.append(("appended", event_number))

    def on_reply(self, connection: object, reply: object) -> None:
        self.replies.append(reply)

    def on_connection_lost(self, connection: object, error: object) -> None:
        self.lost.set()


async def test_error_invalid_event_number_when_a_writer_id_races_itself(service: SegmentStoreService) -> None:
    from segment_store.client import InvalidEventNumberError, error_for_reply, open_connection
    from segment_store.protocol import AppendSetup, InvalidEventNumber, SetupAppend, encode_append_batch

    writer_id = uuid.uuid4()
    async with SegmentClient(service.endpoint) as client:
        await client.create_segment(SEGMENT)
    first, second = await open_connection(service.endpoint), await open_connection(service.endpoint)
    try:
        listeners = _Replies(), _Replies()
        for connection, listener, request_id in ((first, listeners[0], 1), (second, listeners[1], 2)):
            connection.register_writer(writer_id, request_id, listener)
        await first.request(SetupAppend(1, writer_id, SEGMENT, ""), AppendSetup)
        first.send_frame(encode_append_batch(writer_id, [b"a"], 5, 1))
        await _until(lambda: ("appended", 5) in listeners[0].replies)
        setup = await second.request(SetupAppend(2, writer_id, SEGMENT, ""), AppendSetup)
        assert setup.last_event_number == 5
        first.send_frame(encode_append_batch(writer_id, [b"b"], 10, 1))
        await _until(lambda: ("appended", 10) in listeners[0].replies)
        second.send_frame(encode_append_batch(writer_id, [b"c"], 7, 2))  # chained on 5, but 10 is stored
        await asyncio.wait_for(listeners[1].lost.wait(), 5)  # the server closes, as Java does
        (reply,) = [r for r in listeners[1].replies if isinstance(r, InvalidEventNumber)]
        error = error_for_reply(reply)
        assert isinstance(error, InvalidEventNumberError) and error.writer_id == writer_id
    finally:
        first.close()
        second.close()


async def _until(condition, timeout_s: float = 5.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not condition():
            await asyncio.sleep(0.001)


async def test_locate_offset_answers_the_first_event_start_at_or_after_the_target(client: SegmentClient) -> None:
    await client.create_segment(SEGMENT)
    async with client.writer(SEGMENT) as writer:
        for payload in (b"first", b"", b"third event"):
            await writer.append(payload)
    starts, length = [0, 13, 21], 21 + 8 + 11
    for target in range(-1, length + 2):
        expected = next((s for s in starts if s >= target), length)
        assert await client.locate_offset(SEGMENT, target) == expected, target
    with pytest.raises(NoSuchSegmentError):
        await client.locate_offset("scope/stream/9.#epoch.0", 0)
