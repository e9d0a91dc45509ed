"""Append sessions over scripted connections: batching, window, acks, reconnect bookkeeping, failures."""

from __future__ import annotations

import asyncio
import functools
import logging
import uuid
from collections.abc import Callable

import pytest
from client_fakes import FakeNetwork, FakeStore

from segment_store.client import (
    ClientClosedError,
    ClientConfig,
    ConditionalCheckFailedError,
    ConnectionConfig,
    ConnectionLostError,
    ConnectionPool,
    InvalidEventNumberError,
    NoSuchSegmentError,
    RetryPolicy,
    SegmentClient,
    SegmentIsSealedError,
    SegmentWriter,
    WriterConfig,
)
from segment_store.client.session import SessionState
from segment_store.protocol import (
    AppendBlockEnd,
    ConditionalAppend,
    ConditionalBlockEnd,
    ConditionalCheckFailed,
    DataAppended,
    InvalidEventNumber,
    SetupAppend,
    WireCommand,
    encode_events,
    parse_events,
)

pytestmark = pytest.mark.unit

SEGMENT = "scope/stream/0"


async def _noop_sleep(seconds: float) -> None:
    await asyncio.sleep(0)


def _client(store: FakeStore, **writer: int) -> tuple[SegmentClient, FakeNetwork]:
    network = FakeNetwork(store)
    retry = RetryPolicy(max_attempts=5, sleep=_noop_sleep)
    config = ClientConfig(
        connection=ConnectionConfig(keepalive_interval_ms=0),
        writer=WriterConfig(retry=retry, **writer),
    )
    return SegmentClient(("fake", 1), config, ConnectionPool(config.connection, config.pool, network.connect)), network


def _blocks(network: FakeNetwork) -> list[AppendBlockEnd]:
    return [c for peer in network.peers for c in peer.sent(AppendBlockEnd)]


async def test_write_when_idle_sends_at_once_and_acks() -> None:
    store = FakeStore()
    store.create(SEGMENT)
    client, _network = _client(store)
    writer = client.writer(SEGMENT)
    ack = await writer.write(b"one")
    await asyncio.wait_for(ack, 1)
    assert store.events(SEGMENT) == [b"one"]
    assert writer.acked_event_number == 1 and writer.unacked_bytes == 0
    await writer.close()


async def test_write_in_one_loop_turn_coalesces_into_blocks_of_max_size() -> None:
    store = FakeStore()
    store.create(SEGMENT)
    client, network = _client(store, max_block_bytes=1000, max_unacked_bytes=100_000)
    writer = client.writer(SEGMENT)
    await writer.open()
    acks = [await writer.write(b"x" * 92) for _ in range(50)]  # 100 framed bytes each, no await in between
    await asyncio.gather(*acks)
    blocks = _blocks(network)
    assert len(blocks) == 5
    assert all(len(b.data) == 1000 and b.num_events == 10 for b in blocks)
    assert [b.last_event_number for b in blocks] == [10, 20, 30, 40, 50]
    assert len(store.events(SEGMENT)) == 50


async def test_write_framed_numbers_each_event_and_shares_blocks_with_other_writes() -> None:
    store = FakeStore()
    store.create(SEGMENT)
    client, network = _client(store, max_block_bytes=1000, max_unacked_bytes=100_000)
    writer = client.writer(SEGMENT)
    await writer.open()
    first = await writer.write(b"head")
    framed = await writer.write_framed(encode_events([b"a", b"bb", b"ccc"]), 3)
    await asyncio.gather(first, framed)
    assert store.events(SEGMENT) == [b"head", b"a", b"bb", b"ccc"]
    assert writer.last_event_number == 4 and writer.acked_event_number == 4
    assert [b.num_events for b in _blocks(network)] == [4]  # one turn of the loop, one block
    await writer.close()


async def test_write_of_a_mutable_buffer_stores_it_as_it_was_when_written() -> None:
    store = FakeStore()
    store.create(SEGMENT)
    store.hold_acks = True
    client, _network = _client(store, max_block_bytes=1000, max_unacked_bytes=100_000)
    writer = client.writer(SEGMENT)
    await writer.open()
    first = await writer.write(b"first")  # idle: sent at once; what follows waits for its ack
    buffer = bytearray(b"abc")
    acks = [await writer.write(buffer), writer.write_nowait(memoryview(buffer))]
    framed = bytearray(encode_events([b"xyz"]))
    acks.append(await writer.write_framed(framed, 1))
    buffer[:] = b"ZZZ"  # the caller reuses its buffers before the block leaves
    framed[-3:] = b"ZZZ"
    store.hold_acks = False
    store.release()
    await asyncio.wait_for(asyncio.gather(first, *acks), 1)
    assert store.events(SEGMENT) == [b"first", b"abc", b"abc", b"xyz"]
    await writer.close()


async def test_write_framed_refuses_counts_and_sizes_that_cannot_be_right() -> None:
    store = FakeStore()
    store.create(SEGMENT)
    client, _network = _client(store, max_block_bytes=1000)
    writer = client.writer(SEGMENT)
    with pytest.raises(ValueError, match="cannot hold 2 framed events"):
        await writer.write_framed(encode_events([b"a"]), 2)
    with pytest.raises(ValueError, match="exceed max_block_bytes"):
        await writer.write_framed(encode_events([b"x" * 600, b"y" * 600]), 2)
    big = await writer.write_framed(encode_events([b"z" * 5000]), 1)  # one event may exceed a block
    await asyncio.wait_for(big, 1)
    assert store.events(SEGMENT) == [b"z" * 5000]
    await writer.close()


async def test_write_while_acks_outstanding_accumulates_until_an_ack() -> None:
    store = FakeStore()
    store.create(SEGMENT)
    store.hold_acks = True
    client, network = _client(store, max_block_bytes=10_000, max_unacked_bytes=100_000)
    writer = client.writer(SEGMENT)
    await writer.open()
    first = await writer.write(b"first")
    await asyncio.sleep(0.01)
    assert len(_blocks(network)) == 1  # idle: sent at once
    later = [await writer.write(b"e%d" % i) for i in range(20)]
    await asyncio.sleep(0.01)
    assert len(_blocks(network)) == 1  # busy: held back
    store.hold_acks = False
    store.release()
    await asyncio.gather(first, *later)
    blocks = _blocks(network)
    assert len(blocks) == 2 and blocks[1].num_events == 20


async def test_write_with_full_window_waits_for_acks() -> None:
    store = FakeStore()
    store.create(SEGMENT)
    store.hold_acks = True
    client, _network = _client(store, max_block_bytes=100, max_unacked_bytes=300)
    writer = client.writer(SEGMENT)
    await writer.open()
    for _ in range(3):
        await writer.write(b"x" * 92)
    blocked = asyncio.ensure_future(writer.write(b"x" * 92))
    await asyncio.sleep(0.01)
    assert not blocked.done() and writer.unacked_bytes == 300
    store.hold_acks = False
    store.release()
    await asyncio.wait_for(blocked, 1)
    await writer.flush()
    assert writer.unacked_bytes == 0


async def test_write_nowait_queues_only_when_nothing_would_wait() -> None:
    store = FakeStore()
    store.create(SEGMENT)
    store.hold_acks = True
    client, _network = _client(store, max_block_bytes=100, max_unacked_bytes=300)
    writer = client.writer(SEGMENT)
    assert writer.write_nowait(b"x" * 92) is None  # not set up yet: write() opens the session
    await writer.open()
    acks = [writer.write_nowait(b"x" * 92) for _ in range(3)]
    assert all(ack is not None for ack in acks) and writer.unacked_bytes == 300
    assert writer.write_nowait(b"x" * 92) is None and writer.last_event_number == 3  # full: nothing queued
    store.hold_acks = False
    store.release()
    await writer.flush()
    assert store.events(SEGMENT) == [b"x" * 92] * 3 and writer.write_nowait(b"y") is not None
    await writer.close()
    assert store.events(SEGMENT)[-1] == b"y" and writer.write_nowait(b"z") is None  # closed


class _Progress:
    """A ProgressListener recording what it is told."""

    def __init__(self) -> None:
        self.levels: list[int] = []
        self.errors: list[BaseException] = []

    def stored_through(self, event_number: int) -> None:
        self.levels.append(event_number)

    def session_failed(self, error: BaseException) -> None:
        self.errors.append(error)


async def test_offer_and_put_queue_without_futures_and_the_listener_learns_each_ack() -> None:
    store = FakeStore()
    store.create(SEGMENT)
    store.hold_acks = True
    client, _network = _client(store, max_block_bytes=100, max_unacked_bytes=300)
    writer = client.writer(SEGMENT)
    progress = _Progress()
    writer.set_listener(progress)
    assert not writer.offer(b"x" * 92)  # not set up yet: put() opens the session
    await writer.put(b"x" * 92)  # event 1
    assert writer.offer(b"x" * 92) and writer.offer(b"x" * 92)  # events 2, 3: the window (300) is full
    assert not writer.offer(b"y") and writer.last_event_number == 3  # nothing queued
    await asyncio.sleep(0.01)
    assert progress.levels == [] and len(store.held) == 3  # one block each (max 100 bytes)
    first, _second, third = store.held
    store.held.clear()
    first[0].reply(first[1])
    third[0].reply(third[1])  # covers 2 and 3 as well
    await asyncio.wait_for(writer.flush(), 1)
    assert progress.levels == [1, 3] and writer.unacked_bytes == 0
    store.hold_acks = False
    await writer.put(b"z")
    await writer.flush()
    assert progress.levels == [1, 3, 4] and progress.errors == []
    assert store.events(SEGMENT) == [b"x" * 92] * 3 + [b"z"]
    await writer.close()


async def test_write_nowait_after_offer_in_the_same_block_gets_a_future_for_both() -> None:
    store = FakeStore()
    store.create(SEGMENT)
    store.hold_acks = True
    client, network = _client(store, max_block_bytes=1000, max_unacked_bytes=100_000)
    writer = client.writer(SEGMENT)
    await writer.open()
    first = await writer.write(b"first")  # idle: sent at the end of this turn; what follows waits for its ack
    await asyncio.sleep(0)
    started = writer.writes_started
    assert writer.offer(b"a")
    ack = writer.write_nowait(b"b")
    assert ack is not None and writer.writes_started == started + 1  # a and b: one pending write
    store.hold_acks = False
    store.release()
    await asyncio.wait_for(asyncio.gather(first, ack), 1)
    assert writer.acked_event_number == 3 and [b.num_events for b in _blocks(network)] == [1, 2]
    await writer.close()


async def test_listener_learns_the_failure_of_a_sealed_segment() -> None:
    store = FakeStore()
    segment = store.create(SEGMENT)
    client, _network = _client(store)
    writer = client.writer(SEGMENT)
    progress = _Progress()
    writer.set_listener(progress)
    await writer.put(b"stored")
    await writer.flush()
    segment.sealed = True
    await writer.put(b"late")
    with pytest.raises(SegmentIsSealedError):
        await writer.flush()
    assert progress.levels == [1]
    assert len(progress.errors) == 1 and isinstance(progress.errors[0], SegmentIsSealedError)
    assert writer.unacked_events() == [b"late"]
    with pytest.raises(SegmentIsSealedError):
        await writer.close()


async def test_events_of_many_sizes_are_framed_with_their_own_length() -> None:
    store = FakeStore()
    store.create(SEGMENT)
    client, _network = _client(store, max_block_bytes=1 << 16, max_unacked_bytes=1 << 20)
    writer = client.writer(SEGMENT)
    await writer.open()
    payloads = [bytes([i % 251]) * (i % 300) for i in range(5000)]  # sizes repeat: shared event headers
    for payload in payloads:
        if not writer.offer(payload):
            await writer.put(payload)
    await writer.flush()
    assert store.events(SEGMENT) == payloads
    await writer.close()


async def test_ack_cumulative_completes_every_write_up_to_it() -> None:
    store = FakeStore()
    store.create(SEGMENT)
    store.hold_acks = True
    client, _network = _client(store, max_block_bytes=100)
    writer = client.writer(SEGMENT)
    await writer.open()
    acks = [await writer.write(b"x" * 92) for _ in range(4)]
    await asyncio.sleep(0.01)
    last = store.held[-1]
    store.held.clear()
    last[0].reply(last[1])  # only the last DataAppended: it covers every event up to 4
    await asyncio.wait_for(asyncio.gather(*acks), 1)


async def test_reconnect_with_unacked_blocks_resends_only_what_the_server_lacks() -> None:
    store = FakeStore()
    store.create(SEGMENT)
    client, network = _client(store, max_block_bytes=1000, max_unacked_bytes=1_000_000)
    writer = client.writer(SEGMENT)
    await writer.open()
    store.drop_after_blocks = 3  # the third block is stored, then the connection dies: its ack is lost
    acks = [await writer.write(b"%06d" % i) for i in range(500)]
    await asyncio.wait_for(asyncio.gather(*acks), 5)
    assert [int(e) for e in store.events(SEGMENT)] == list(range(500))
    assert store.duplicates == 0
    assert writer.setups == 2 and len(network.peers) == 2
    setups = network.peers[1].sent(SetupAppend)
    assert len(setups) == 1
    resent = network.peers[1].sent(AppendBlockEnd)
    first_resent = resent[0]
    assert isinstance(first_resent, AppendBlockEnd)
    assert parse_events(first_resent.data)[0].data == b"%06d" % (3 * (1000 // 14))  # after 3 stored blocks


async def test_reconnect_with_setup_inside_a_write_drops_its_stored_events() -> None:
    store = FakeStore()
    segment = store.create(SEGMENT)
    client, network = _client(store)
    writer = client.writer(SEGMENT, writer_id=uuid.UUID(int=1))
    await writer.open()
    store.hold_acks = True
    ack = await writer.write_many([b"a", b"b", b"c", b"d"])
    await asyncio.sleep(0.01)
    # Pretend the server kept only events 1..2 of that write (its attribute says 2), then the link fails.
    segment.data = bytearray(b"".join(b"\x00\x00\x00\x00\x00\x00\x00\x01" + x for x in (b"a", b"b")))
    segment.writers[writer.writer_id] = 2
    store.hold_acks = False
    store.held.clear()
    network.peers[0].drop()
    await asyncio.wait_for(ack, 1)
    assert store.events(SEGMENT) == [b"a", b"b", b"c", b"d"]
    block = network.peers[1].sent(AppendBlockEnd)[0]
    assert isinstance(block, AppendBlockEnd) and block.num_events == 2 and block.last_event_number == 4


async def test_reconnect_with_refused_connections_retries_with_backoff() -> None:
    store = FakeStore()
    store.create(SEGMENT)
    client, network = _client(store)
    writer = client.writer(SEGMENT)
    await writer.open()
    network.refuse = 3
    network.peers[0].drop()
    await asyncio.sleep(0)
    ack = await writer.write(b"after")
    await asyncio.wait_for(ack, 1)
    assert store.events(SEGMENT) == [b"after"]


async def test_reconnect_with_retries_exhausted_fails_pending_writes() -> None:
    store = FakeStore()
    store.create(SEGMENT)
    client, network = _client(store)
    writer = client.writer(SEGMENT)
    await writer.open()
    store.hold_acks = True
    ack = await writer.write(b"lost?")
    await asyncio.sleep(0)
    network.refuse = 100
    network.peers[0].drop()
    with pytest.raises(ConnectionLostError):
        await asyncio.wait_for(ack, 1)
    assert writer.state is SessionState.FAILED
    assert writer.unacked_events() == [b"lost?"]
    with pytest.raises(ConnectionLostError):
        await writer.write(b"more")


async def test_invalid_event_number_reply_sets_up_again() -> None:
    store = FakeStore()
    store.create(SEGMENT)
    client, network = _client(store)
    writer = client.writer(SEGMENT)
    await writer.open()
    await writer.append(b"1")
    peer = network.peers[0]
    peer.reply(InvalidEventNumber(writer.writer_id, writer._request_id, "", 1))
    await asyncio.sleep(0.01)
    assert writer.setups == 2
    await writer.append(b"2")
    assert store.events(SEGMENT) == [b"1", b"2"]


async def _until(condition: Callable[[], bool], what: str) -> None:
    for _ in range(10_000):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError(f"not reached: {what}")


async def test_repeated_invalid_event_numbers_back_off_between_reconnects_then_fail_past_the_budget() -> None:
    """A server that accepts every setup and refuses the resent appends (``InvalidEventNumber`` while appends of
    the previous connection are still in flight; seen in the self-test: 40 reconnects in 0.4 s failed a writer):
    the first reconnect goes at once, each further one after the policy's growing pause, so the budget spans the
    backoff, not a burst; past ``max_attempts`` reconnects without progress the writer fails."""
    pauses: list[float] = []

    async def sleep(seconds: float) -> None:
        pauses.append(seconds)
        await asyncio.sleep(0)

    store = FakeStore()
    store.create(SEGMENT)
    network = FakeNetwork(store)
    retry = RetryPolicy(max_attempts=4, initial_delay_ms=10, max_delay_ms=40, jitter_fraction=0, sleep=sleep)
    config = ClientConfig(connection=ConnectionConfig(keepalive_interval_ms=0), writer=WriterConfig(retry=retry))
    client = SegmentClient(("fake", 1), config, ConnectionPool(config.connection, config.pool, network.connect))
    writer = client.writer(SEGMENT)
    await writer.open()
    for setups in range(2, 6):
        network.peers[-1].reply(InvalidEventNumber(writer.writer_id, writer._request_id, "", 1))
        await _until(functools.partial(lambda n: writer.setups == n, setups), f"setup {setups}")
    assert pauses == [0.01, 0.02, 0.04]  # none before the first reconnect
    network.peers[-1].reply(InvalidEventNumber(writer.writer_id, writer._request_id, "", 1))
    await _until(lambda: writer.state is SessionState.FAILED, "the writer fails")
    assert isinstance(writer.failure, InvalidEventNumberError)
    await client.close()


async def test_sealed_segment_fails_pending_writes_with_typed_error() -> None:
    store = FakeStore()
    segment = store.create(SEGMENT)
    client, _network = _client(store)
    writer = client.writer(SEGMENT)
    await writer.append(b"stored")
    segment.sealed = True
    acks = [await writer.write(b"late%d" % i) for i in range(3)]
    for ack in acks:
        with pytest.raises(SegmentIsSealedError) as info:
            await ack
        assert info.value.segment == SEGMENT
    assert writer.unacked_events() == [b"late0", b"late1", b"late2"]
    with pytest.raises(SegmentIsSealedError):
        await writer.close()


async def test_a_failed_write_nobody_awaits_is_no_never_retrieved_error() -> None:
    """A caller may drop a write's future (a transaction it aborts): the session's failure is raised by close,
    flush and the next write, so the future's own error is not reported as never retrieved."""
    store = FakeStore()
    segment = store.create(SEGMENT)
    client, _network = _client(store)
    writer = client.writer(SEGMENT)
    await writer.append(b"stored")
    segment.sealed = True
    dropped = await writer.write(b"late")
    with pytest.raises(SegmentIsSealedError):
        await writer.close()
    # asyncio logs "Future exception was never retrieved" when a future with this flag set is collected
    assert not dropped._log_traceback
    assert isinstance(dropped.exception(), SegmentIsSealedError)  # still there for a caller who awaits it


async def test_open_with_missing_segment_raises_no_such_segment() -> None:
    client, _network = _client(FakeStore())
    writer = client.writer("missing")
    with pytest.raises(NoSuchSegmentError):
        await writer.open()


async def test_open_with_reused_writer_id_continues_after_stored_events() -> None:
    store = FakeStore()
    store.create(SEGMENT).writers[uuid.UUID(int=9)] = 41
    client, network = _client(store)
    writer = client.writer(SEGMENT, writer_id=uuid.UUID(int=9))
    assert await writer.open() == 41
    await writer.append(b"next")
    block = network.peers[0].sent(AppendBlockEnd)[0]
    assert isinstance(block, AppendBlockEnd) and block.last_event_number == 42


async def test_ack_beyond_what_was_sent_sets_up_again() -> None:
    store = FakeStore()
    store.create(SEGMENT)
    client, network = _client(store)
    writer = client.writer(SEGMENT)
    await writer.append(b"1")
    network.peers[0].reply(DataAppended(writer.writer_id, 99, 1, writer._request_id, 0))
    await asyncio.sleep(0.01)
    assert writer.setups == 2 and writer.acked_event_number == 1


# ---- conditional ----------------------------------------------------------------------------------------------


def _conditional_handler(store: FakeStore):
    def handle(peer, command: WireCommand) -> None:
        if isinstance(command, ConditionalAppend | ConditionalBlockEnd):
            segment = store.segments[SEGMENT]
            if command.expected_offset != len(segment.data):
                peer.reply(ConditionalCheckFailed(command.writer_id, command.event_number, command.request_id))
                return
        store(peer, command)

    return handle


async def test_conditional_append_with_right_offset_returns_new_length() -> None:
    store = FakeStore()
    store.create(SEGMENT)
    network = FakeNetwork(_conditional_handler(store))
    client = SegmentClient(("fake", 1), pool=ConnectionPool(connect=network.connect))
    async with client.conditional_writer(SEGMENT) as writer:
        assert await writer.append(b"abc", 0) == 11
        assert await writer.append_many([b"d", b"e"], 11) == 29
        with pytest.raises(ConditionalCheckFailedError):
            await writer.append(b"stale", 11)
        assert await writer.append(b"f", 29) == 38
    assert store.events(SEGMENT) == [b"abc", b"d", b"e", b"f"]
    assert len(network.peers[0].sent(ConditionalBlockEnd)) == 1


async def test_conditional_append_with_connection_lost_after_store_is_not_repeated() -> None:
    store = FakeStore()
    store.create(SEGMENT)
    store.drop_after_blocks = 1
    network = FakeNetwork(_conditional_handler(store))
    retry = RetryPolicy(sleep=_noop_sleep)
    config = ClientConfig(writer=WriterConfig(retry=retry))
    client = SegmentClient(("fake", 1), config, ConnectionPool(connect=network.connect))
    writer = client.conditional_writer(SEGMENT)
    assert await asyncio.wait_for(writer.append(b"once", 0), 1) == 12
    assert store.events(SEGMENT) == [b"once"]
    assert writer.setups == 2
    await writer.close()


async def _closed_under_writer(store: FakeStore, caplog: pytest.LogCaptureFixture) -> tuple[SegmentWriter, list[str]]:
    """A writer that wrote one event (acknowledged unless the store holds acks), then its client closed (a
    manager closed before its writers): the writer and the session's warnings."""
    client, _network = _client(store)
    writer = client.writer(SEGMENT)
    ack = await writer.write(b"one")
    if not store.hold_acks:
        await asyncio.wait_for(ack, 1)
    with caplog.at_level(logging.DEBUG, logger="segment_store.client.session"):
        await client.pool.close()  # what closing the client that made the pool does
        for _ in range(1000):  # the lost connection, then the reconnect that finds the pool closed
            if writer.state is SessionState.FAILED:
                break
            await asyncio.sleep(0)
    assert writer.state is SessionState.FAILED and isinstance(writer.failure, ClientClosedError)
    if store.hold_acks:
        with pytest.raises(ClientClosedError):
            await ack
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    return writer, warnings


async def test_client_closed_under_an_idle_writer_is_no_warning(caplog: pytest.LogCaptureFixture) -> None:
    store = FakeStore()
    store.create(SEGMENT)
    writer, warnings = await _closed_under_writer(store, caplog)
    assert warnings == []
    assert writer.unacked_events() == [] and store.events(SEGMENT) == [b"one"]
    assert any("ends with its closed client" in r.getMessage() for r in caplog.records)


async def test_client_closed_under_a_writer_with_unacked_events_warns(caplog: pytest.LogCaptureFixture) -> None:
    store = FakeStore()
    store.create(SEGMENT)
    store.hold_acks = True
    writer, warnings = await _closed_under_writer(store, caplog)
    assert len(warnings) == 1 and "failed: ClientClosedError" in warnings[0]
    assert writer.unacked_events() == [b"one"]
