"""Connection, pool, errors registry, retry and config: unit tests over a scripted byte-level transport."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from client_fakes import FakeNetwork, FakePeer

from segment_store.client import (
    ClientConfig,
    ConnectionConfig,
    ConnectionLostError,
    ConnectionPool,
    NoSuchSegmentError,
    PoolConfig,
    RequestTimeoutError,
    RetryPolicy,
    SegmentClient,
    UnexpectedReplyError,
    WriterConfig,
    error_for_reply,
)
from segment_store.client import errors as client_errors
from segment_store.client.connection import Connection
from segment_store.client.errors import is_failure_reply
from segment_store.protocol import (
    REGISTRY,
    AppendBlockEnd,
    AuthTokenCheckFailed,
    AuthTokenErrorCode,
    ConditionalCheckFailed,
    CreateSegment,
    DataAppended,
    ErrorMessage,
    ErrorMessageCode,
    GetStreamSegmentInfo,
    Hello,
    IncompatibleVersionError,
    InvalidEventNumber,
    KeepAlive,
    NoSuchSegment,
    OperationUnsupported,
    SegmentAlreadyExists,
    SegmentCreated,
    SegmentIsSealed,
    SegmentIsTruncated,
    SegmentSealed,
    StreamSegmentInfo,
    TableKeyBadVersion,
    TableKeyDoesNotExist,
    TableSegmentNotEmpty,
    WrongHost,
    encode,
)
from segment_store.protocol.constants import HEADER
from segment_store.protocol.cork import CORK_BYTES
from segstore_shared.contracts import (
    SegmentExistsError,
    SegmentNotExistsError,
    SegmentSealedError,
    SegmentTruncatedError,
)
from segstore_shared.errors import SegstoreError
from segstore_shared.table_errors import TableKeyBadVersionError, TableKeyNotExistsError, TableSegmentNotEmptyError

pytestmark = pytest.mark.unit

ENDPOINT = ("fake", 1)


async def _connected(handler=None, config: ConnectionConfig | None = None) -> tuple[Connection, FakePeer]:
    connection = Connection(ENDPOINT, config or ConnectionConfig(keepalive_interval_ms=0))
    peer = FakePeer(handler)
    peer.attach(connection)
    await connection.handshake()
    return connection, peer


def _info(request_id: int, name: str = "s") -> StreamSegmentInfo:
    return StreamSegmentInfo(request_id, name, True, False, False, 1, 10, 0)


# ---- connection -----------------------------------------------------------------------------------------------


async def test_handshake_with_compatible_hello_sends_hello_first() -> None:
    connection, peer = await _connected()
    assert isinstance(peer.commands[0], Hello)
    assert connection.wire_version == 15
    assert connection.is_open


async def test_handshake_with_incompatible_hello_raises_and_closes() -> None:
    connection = Connection(ENDPOINT, ConnectionConfig(keepalive_interval_ms=0))
    peer = FakePeer(hello=Hello(100, 90))
    peer.attach(connection)
    with pytest.raises(IncompatibleVersionError):
        await connection.handshake()
    assert not connection.is_open


async def test_request_with_replies_out_of_order_routes_by_request_id() -> None:
    connection, peer = await _connected()
    first = asyncio.ensure_future(connection.request(GetStreamSegmentInfo(11, "a", ""), StreamSegmentInfo))
    second = asyncio.ensure_future(connection.request(GetStreamSegmentInfo(12, "b", ""), StreamSegmentInfo))
    await asyncio.sleep(0)
    peer.reply(_info(12, "b"))
    peer.reply(_info(11, "a"))
    assert (await first).segment_name == "a"
    assert (await second).segment_name == "b"
    assert connection.load == 0


async def test_request_with_reply_split_into_single_bytes_decodes() -> None:
    connection, peer = await _connected()
    pending = asyncio.ensure_future(connection.request(GetStreamSegmentInfo(5, "x", ""), StreamSegmentInfo))
    await asyncio.sleep(0)
    peer.reply(_info(5, "x"), byte_by_byte=True)
    assert (await pending).write_offset == 10


async def test_request_with_failure_reply_raises_typed_error() -> None:
    connection, peer = await _connected()
    pending = asyncio.ensure_future(connection.request(GetStreamSegmentInfo(7, "gone", ""), StreamSegmentInfo))
    await asyncio.sleep(0)
    peer.reply(NoSuchSegment(7, "gone", "trace", -1))
    with pytest.raises(NoSuchSegmentError) as info:
        await pending
    assert info.value.segment == "gone" and not info.value.retriable
    assert connection.is_open


async def test_request_with_wrong_reply_type_raises_unexpected_reply() -> None:
    connection, peer = await _connected()
    pending = asyncio.ensure_future(connection.request(CreateSegment(8, "s", 0, 0, "", 0), SegmentCreated))
    await asyncio.sleep(0)
    peer.reply(SegmentSealed(8, "s"))
    with pytest.raises(UnexpectedReplyError):
        await pending


async def test_request_with_connection_loss_fails_every_pending_request_retriably() -> None:
    connection, peer = await _connected()
    pending = [
        asyncio.ensure_future(connection.request(GetStreamSegmentInfo(i, "s", ""), StreamSegmentInfo))
        for i in range(20, 25)
    ]
    await asyncio.sleep(0)
    peer.drop()
    for future in pending:
        with pytest.raises(ConnectionLostError) as info:
            await future
        assert info.value.retriable and isinstance(info.value, ConnectionError)
    assert not connection.is_open
    with pytest.raises(ConnectionLostError):
        connection.send(KeepAlive())


async def test_request_with_garbage_from_server_fails_the_connection() -> None:
    connection, peer = await _connected()
    pending = asyncio.ensure_future(connection.request(GetStreamSegmentInfo(30, "s", ""), StreamSegmentInfo))
    await asyncio.sleep(0)
    peer.send_bytes(b"\x00\x00\x00\x77\x00\x00\x00\x01x")  # unknown type code 119
    with pytest.raises(ConnectionLostError, match="protocol error"):
        await pending
    assert peer.closed


async def test_request_with_no_reply_times_out_and_keeps_the_connection() -> None:
    connection, _peer = await _connected()
    with pytest.raises(RequestTimeoutError) as info:
        await connection.request(GetStreamSegmentInfo(31, "s", ""), StreamSegmentInfo, timeout_s=0.01)
    assert info.value.retriable
    assert connection.is_open and connection.load == 0


async def test_keepalive_with_short_interval_sends_keepalives() -> None:
    connection, peer = await _connected(config=ConnectionConfig(keepalive_interval_ms=5))
    await asyncio.sleep(0.05)
    assert len(peer.sent(KeepAlive)) >= 2
    peer.reply(KeepAlive())  # an echo is ignored
    await asyncio.sleep(0)
    assert connection.is_open
    connection.close()
    await connection.wait_closed()


async def test_keepalive_with_silent_peer_aborts_the_connection() -> None:
    """A segment store that stops answering (frozen, cut off) is dropped: pending requests fail retriably."""
    config = ConnectionConfig(keepalive_interval_ms=10, silent_peer_timeout_ms=30)
    connection, peer = await _connected(config=config)
    pending = asyncio.ensure_future(connection.request(GetStreamSegmentInfo(41, "s", ""), StreamSegmentInfo))
    await connection.wait_closed()
    assert not connection.is_open
    with pytest.raises(ConnectionLostError, match="nothing from the segment store") as info:
        await pending
    assert info.value.retriable
    assert len(peer.sent(KeepAlive)) >= 2


async def test_keepalive_with_echoing_peer_keeps_the_connection() -> None:
    config = ConnectionConfig(keepalive_interval_ms=10, silent_peer_timeout_ms=50)
    connection, peer = await _connected(config=config)
    for _ in range(12):  # 120 ms, well past the 50 ms of silence allowed
        await asyncio.sleep(0.01)
        peer.reply(KeepAlive())
    assert connection.is_open
    connection.close()
    await connection.wait_closed()


def test_silent_peer_timeout_needs_two_keepalive_intervals() -> None:
    with pytest.raises(ValueError, match="silent_peer_timeout_ms"):
        ConnectionConfig(keepalive_interval_ms=1000, silent_peer_timeout_ms=1500)


def _count_writes(peer: FakePeer) -> list[int]:
    """The number of commands in each transport write, from now on."""
    writes: list[int] = []
    received = peer.received

    def counting(data: bytes) -> None:
        before = len(peer.commands)
        received(data)
        writes.append(len(peer.commands) - before)

    peer.received = counting  # type: ignore[method-assign]
    return writes


async def test_send_with_frames_in_one_turn_goes_out_in_one_write_in_order() -> None:
    connection, peer = await _connected()
    writes = _count_writes(peer)
    for request_id in (1, 2, 3):
        connection.send(GetStreamSegmentInfo(request_id, "s", ""))
    assert writes == []  # queued until the loop turns
    await asyncio.sleep(0)
    assert writes == [3]
    assert [c.request_id for c in peer.sent(GetStreamSegmentInfo)] == [1, 2, 3]


async def test_send_with_cork_bytes_queued_writes_at_once() -> None:
    connection, peer = await _connected()
    writes = _count_writes(peer)
    connection.send(GetStreamSegmentInfo(1, "s", ""))
    big = AppendBlockEnd(uuid.uuid4(), CORK_BYTES, bytes(CORK_BYTES), 1, 1, 2)
    connection.send_frame(encode(big))
    assert writes == [2]  # the small frame first, then the big one, without waiting for the loop
    await asyncio.sleep(0)
    assert writes == [2]
    assert [type(c) for c in peer.commands[-2:]] == [GetStreamSegmentInfo, AppendBlockEnd]


async def test_close_with_queued_frames_sends_them_and_abort_drops_them() -> None:
    connection, peer = await _connected()
    connection.send(GetStreamSegmentInfo(1, "s", ""))
    connection.close()
    assert [c.request_id for c in peer.sent(GetStreamSegmentInfo)] == [1]
    connection, peer = await _connected()
    connection.send(GetStreamSegmentInfo(2, "s", ""))
    connection.abort("broken")
    await asyncio.sleep(0)
    assert peer.sent(GetStreamSegmentInfo) == []


class _Session:
    """A ReplyListener logging what reaches it (into a log shared by several) and, if told, failing the
    connection when its first ack arrives."""

    def __init__(self, name: str, log: list[tuple], abort_on_ack: bool = False) -> None:
        self.name, self.log, self.abort_on_ack = name, log, abort_on_ack

    def on_appended(self, connection: Connection, event_number: int, write_offset: int) -> None:
        self.log.append((self.name, "appended", event_number, write_offset))
        if self.abort_on_ack:
            connection.abort("test: the session gives up")

    def on_reply(self, connection: Connection, reply: object) -> None:
        self.log.append((self.name, type(reply).__name__))

    def on_connection_lost(self, connection: Connection, error: ConnectionLostError) -> None:
        self.log.append((self.name, "lost"))


async def test_acks_and_replies_in_one_read_reach_their_sessions_in_wire_order() -> None:
    connection, peer = await _connected()
    log: list[tuple] = []
    a, b, stranger = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    connection.register_writer(a, 11, _Session("a", log))
    connection.register_writer(b, 12, _Session("b", log))
    frames = [
        DataAppended(a, 1, 0, 11, 100),
        DataAppended(b, 5, 0, 12, 200),
        DataAppended(stranger, 9, 0, 99, 300),  # nobody's: dropped, and what follows is decoded
        ConditionalCheckFailed(a, 2, 11),
        DataAppended(a, 2, 1, 11, 150),
        KeepAlive(),
        DataAppended(b, 6, 5, 12, 250),
    ]
    peer.send_bytes(b"".join(encode(frame) for frame in frames))
    await asyncio.sleep(0)
    assert log == [
        ("a", "appended", 1, 100),
        ("b", "appended", 5, 200),
        ("a", "ConditionalCheckFailed"),
        ("a", "appended", 2, 150),
        ("b", "appended", 6, 250),
    ]


async def test_acks_split_across_reads_or_without_optional_fields_are_delivered() -> None:
    connection, peer = await _connected()
    log: list[tuple] = []
    writer_id = uuid.uuid4()
    connection.register_writer(writer_id, 11, _Session("w", log))
    short = HEADER.pack(DataAppended.TYPE_CODE, 24) + writer_id.bytes + (3).to_bytes(8, "big")  # no optional fields
    stream = b"".join(
        [encode(DataAppended(writer_id, 1, 0, 11, 100)), encode(DataAppended(writer_id, 2, 1, 11, 200)), short]
    )
    assert len(stream) == 56 + 56 + 32
    for start, end in ((0, 30), (30, 70), (70, 144)):  # reads ending inside the first and the second ack
        peer.send_bytes(stream[start:end])
    peer.send_bytes(encode(DataAppended(writer_id, 4, 3, 11, 400)))  # whole again
    await asyncio.sleep(0)
    assert log == [
        ("w", "appended", 1, 100),
        ("w", "appended", 2, 200),
        ("w", "appended", 3, -1),
        ("w", "appended", 4, 400),
    ]


async def test_a_session_that_fails_the_connection_on_an_ack_stops_the_acks_after_it() -> None:
    connection, peer = await _connected()
    log: list[tuple] = []
    a, b = uuid.uuid4(), uuid.uuid4()
    connection.register_writer(a, 11, _Session("a", log, abort_on_ack=True))
    connection.register_writer(b, 12, _Session("b", log))
    peer.send_bytes(encode(DataAppended(a, 1, 0, 11, 100)) + encode(DataAppended(b, 1, 0, 12, 100)))
    await asyncio.sleep(0)
    assert log[0] == ("a", "appended", 1, 100)
    assert sorted(log[1:]) == [("a", "lost"), ("b", "lost")]  # b's ack came on a connection already dead
    assert connection.error is not None


async def test_close_with_pending_request_fails_it() -> None:
    connection, _peer = await _connected()
    pending = asyncio.ensure_future(connection.request(GetStreamSegmentInfo(40, "s", ""), StreamSegmentInfo))
    await asyncio.sleep(0)
    connection.close()
    with pytest.raises(ConnectionLostError, match="closed by the client"):
        await pending
    await connection.wait_closed()


# ---- pool -----------------------------------------------------------------------------------------------------


def _answer_info(peer: FakePeer, command) -> None:
    if isinstance(command, GetStreamSegmentInfo):
        peer.reply(_info(command.request_id, command.segment_name))


async def test_pool_with_idle_connection_reuses_it() -> None:
    network = FakeNetwork(_answer_info)
    pool = ConnectionPool(connect=network.connect)
    first = await pool.get(ENDPOINT)
    assert await pool.get(ENDPOINT) is first
    await pool.close()


async def test_pool_with_busy_connections_opens_up_to_the_bound() -> None:
    network = FakeNetwork()  # never answers: every connection stays busy
    pool = ConnectionPool(
        ConnectionConfig(keepalive_interval_ms=0), PoolConfig(max_connections_per_endpoint=3), network.connect
    )
    pending = []
    for i in range(10):
        connection = await pool.get(ENDPOINT)
        pending.append(
            asyncio.ensure_future(connection.request(GetStreamSegmentInfo(100 + i, "s", ""), StreamSegmentInfo))
        )
        await asyncio.sleep(0)
    assert len(network.peers) == 3
    await pool.close()
    for future in pending:
        with pytest.raises(ConnectionLostError):
            await future


async def test_pool_with_broken_connection_discards_it() -> None:
    network = FakeNetwork(_answer_info)
    pool = ConnectionPool(connect=network.connect)
    first = await pool.get(ENDPOINT)
    network.peers[0].drop()
    await asyncio.sleep(0)
    second = await pool.get(ENDPOINT)
    assert second is not first and second.is_open
    assert pool.connections(ENDPOINT) == [second]
    await pool.close()


async def test_client_with_closed_pool_raises_client_closed() -> None:
    network = FakeNetwork(_answer_info)
    client = SegmentClient(ENDPOINT, pool=ConnectionPool(connect=network.connect))
    assert (await client.get_segment_info("s")).write_offset == 10
    await client.pool.close()
    with pytest.raises(client_errors.ClientClosedError):
        await client.get_segment_info("s")


# ---- errors registry ------------------------------------------------------------------------------------------

WRITER = uuid.UUID(int=7)
FAILURES = [
    (WrongHost(1, "s", "host:1", ""), client_errors.WrongHostError, True, None),
    (NoSuchSegment(1, "s", "", 5), client_errors.NoSuchSegmentError, False, SegmentNotExistsError),
    (SegmentIsSealed(1, "s", "", 9), client_errors.SegmentIsSealedError, False, SegmentSealedError),
    (SegmentIsTruncated(1, "s", 100, "", 3), client_errors.SegmentIsTruncatedError, False, SegmentTruncatedError),
    (SegmentAlreadyExists(1, "s", ""), client_errors.SegmentAlreadyExistsError, False, SegmentExistsError),
    (InvalidEventNumber(WRITER, 1, "", 4), client_errors.InvalidEventNumberError, False, None),
    (ConditionalCheckFailed(WRITER, 4, 1), client_errors.ConditionalCheckFailedError, False, None),
    (TableKeyBadVersion(1, "t", ""), client_errors.TableKeyBadVersionReplyError, False, TableKeyBadVersionError),
    (TableKeyDoesNotExist(1, "t", ""), client_errors.TableKeyDoesNotExistReplyError, False, TableKeyNotExistsError),
    (TableSegmentNotEmpty(1, "t", ""), client_errors.TableSegmentNotEmptyReplyError, False, TableSegmentNotEmptyError),
    (OperationUnsupported(1, "ListStorageChunks", ""), client_errors.OperationUnsupportedError, False, None),
    (
        ErrorMessage(1, "s", "bad offset", ErrorMessageCode.ILLEGAL_ARGUMENT_EXCEPTION),
        client_errors.ErrorMessageError,
        False,
        None,
    ),
    (
        AuthTokenCheckFailed(1, "", AuthTokenErrorCode.TOKEN_CHECK_FAILED),
        client_errors.AuthTokenCheckFailedError,
        False,
        None,
    ),
]


@pytest.mark.parametrize(("reply", "error_type", "retriable", "contract"), FAILURES)
def test_error_for_reply_with_each_failure_reply_builds_its_typed_error(reply, error_type, retriable, contract) -> None:
    error = error_for_reply(reply)
    assert type(error) is error_type
    assert error.reply is reply and error.request_id == 1
    assert error.retriable is retriable
    assert isinstance(error, SegstoreError)
    if contract is not None:
        assert isinstance(error, contract)


def test_error_for_reply_with_details_keeps_them() -> None:
    assert error_for_reply(WrongHost(1, "s", "h:2", "")).correct_host == "h:2"
    truncated = error_for_reply(SegmentIsTruncated(1, "s", 100, "", 3))
    assert (truncated.start_offset, truncated.offset) == (100, 3)
    message = error_for_reply(ErrorMessage(1, "s", "m", ErrorMessageCode.ILLEGAL_ARGUMENT_EXCEPTION))
    assert message.code is ErrorMessageCode.ILLEGAL_ARGUMENT_EXCEPTION and message.message == "m"
    expired = error_for_reply(AuthTokenCheckFailed(1, "", AuthTokenErrorCode.TOKEN_EXPIRED))
    assert expired.retriable


def test_error_registry_with_every_failure_command_covers_it() -> None:
    failures = {
        "WrongHost", "SegmentIsSealed", "SegmentAlreadyExists", "NoSuchSegment", "InvalidEventNumber",
        "SegmentIsTruncated", "OperationUnsupported", "AuthTokenCheckFailed", "ErrorMessage",
        "TableSegmentNotEmpty", "TableKeyDoesNotExist", "TableKeyBadVersion", "ConditionalCheckFailed",
    }  # fmt: skip
    mapped = {cls.__name__ for cls in REGISTRY.values() if is_failure_reply(cls.__new__(cls))}
    assert mapped == failures


# ---- retry and config -----------------------------------------------------------------------------------------


async def test_retry_with_retriable_errors_backs_off_then_succeeds() -> None:
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    policy = RetryPolicy(max_attempts=5, initial_delay_ms=10, max_delay_ms=25, jitter_fraction=0.0, sleep=sleep)
    calls = 0

    async def flaky() -> str:
        nonlocal calls
        calls += 1
        if calls < 4:
            raise ConnectionLostError("down")
        return "ok"

    assert await policy.call(flaky) == "ok"
    assert slept == [0.01, 0.02, 0.025]


async def test_retry_with_non_retriable_error_raises_at_once() -> None:
    policy = RetryPolicy(max_attempts=5, sleep=lambda s: asyncio.sleep(0))
    calls = 0

    async def missing() -> None:
        nonlocal calls
        calls += 1
        raise error_for_reply(NoSuchSegment(1, "s", "", -1))

    with pytest.raises(NoSuchSegmentError):
        await policy.call(missing)
    assert calls == 1


async def test_retry_with_attempts_exhausted_raises_last_error() -> None:
    policy = RetryPolicy(max_attempts=3, sleep=lambda s: asyncio.sleep(0))

    async def down() -> None:
        raise ConnectionLostError("down")

    with pytest.raises(ConnectionLostError):
        await policy.call(down)


def test_config_with_bad_values_names_the_key() -> None:
    with pytest.raises(ValueError, match="max_unacked_bytes"):
        WriterConfig(max_block_bytes=1 << 20, max_unacked_bytes=1 << 10)
    with pytest.raises(ValueError, match="max_attempts"):
        RetryPolicy(max_attempts=0)
    with pytest.raises(ValueError, match=r"connection\.nope"):
        ClientConfig.from_mapping({"connection.nope": 1})


def test_config_from_mapping_with_strings_converts_types() -> None:
    config = ClientConfig.from_mapping({"connection.request_timeout_ms": "250", "writer.max_block_bytes": "65536"})
    assert config.connection.request_timeout_ms == 250
    assert config.writer.max_block_bytes == 65536
