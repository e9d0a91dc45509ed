"""EventStreamWriter against a real segment store and the fake controller: routing, order, scaling, errors."""

from __future__ import annotations

import asyncio
import dataclasses
from collections import defaultdict

import pytest
from fake_controller import FakeController

from controller_client.errors import StreamNotFoundError, StreamSealedError
from controller_client.model import ScalingPolicy, StreamConfiguration, StreamCut, qualified_segment_name
from controller_client.readers.stream_reader import StreamEvent
from controller_client.stream_manager import StreamManager
from controller_client.writers.event_writer import EventWriterConfig
from controller_client.writers.routing import hash_to_range
from segment_store.client import RetryPolicy, SegmentStatus, WriterConfig, WrongHostError
from segment_store.protocol import WrongHost, encode_events

pytestmark = pytest.mark.integration

SCOPE = "sc"


async def _stream(manager: StreamManager, name: str, segments: int) -> None:
    await manager.create_scope(SCOPE)
    assert await manager.create_stream(SCOPE, name, StreamConfiguration(ScalingPolicy.fixed(segments)))


async def _wait_stored(manager: StreamManager, stream: str, segment_id: int, events: list[bytes]) -> None:
    """Wait until the segment store holds ``events``, the segment's whole content so far."""
    name = qualified_segment_name(SCOPE, stream, segment_id)
    length = len(encode_events(events))
    deadline = asyncio.get_running_loop().time() + 10
    while (await manager.client.get_segment_info(name)).write_offset < length:
        assert asyncio.get_running_loop().time() < deadline, f"{name}: {events} not stored"
        await asyncio.sleep(0.01)


async def _read_all(manager: StreamManager, stream: str) -> list[StreamEvent]:
    end = await manager.tail_cut(SCOPE, stream)
    async with manager.create_reader(SCOPE, stream, end=end) as reader:
        return [event async for event in reader]


def _check_exactly_once_in_order(events: list[StreamEvent], written: dict[str, int]) -> None:
    """Every ``key:n`` for n < written[key] appears once, and each key's events come in n order."""
    seen: dict[str, list[int]] = defaultdict(list)
    for event in events:
        key, number = event.data.decode().split(":")[:2]
        seen[key].append(int(number))
    assert set(seen) == set(written)
    for key, numbers in seen.items():
        assert numbers == list(range(written[key])), f"key {key}: {numbers[:20]}..."


async def test_write_with_many_routing_keys_keeps_per_key_order(manager: StreamManager) -> None:
    await _stream(manager, "keys", 4)
    written: dict[str, int] = defaultdict(int)
    async with await manager.create_writer(SCOPE, "keys") as writer:
        acks = []
        for i in range(2_000):
            key = f"key-{i % 37}"
            acks.append(await writer.write_event(f"{key}:{written[key]}".encode(), key))
            written[key] += 1
        await writer.flush()
        assert all(a.done() and a.exception() is None for a in acks)
        assert len(writer.current_segments()) == 4
    events = await _read_all(manager, "keys")
    assert len(events) == 2_000
    _check_exactly_once_in_order(events, written)
    # Routing is Pravega's: each event sits in the segment that owns its key's hash.
    segments = {s.segment_id: s for s in await manager.current_segments(SCOPE, "keys")}
    for event in events:
        key = event.data.decode().partition(":")[0]
        position = hash_to_range(key)
        assert segments[event.segment_id].key_start <= position <= segments[event.segment_id].key_end


async def test_write_across_a_scale_loses_and_duplicates_nothing(
    manager: StreamManager, controller: FakeController
) -> None:
    await _stream(manager, "scaling", 2)
    original = await manager.current_segments(SCOPE, "scaling")
    written: dict[str, int] = defaultdict(int)
    writer = await manager.create_writer(SCOPE, "scaling")
    scaled = asyncio.Event()

    async def scale_midway() -> None:
        await asyncio.sleep(0.02)
        upper = original[1]  # [0.5, 1.0) -> [0.5, 0.75) + [0.75, 1.0)
        await controller.scale(SCOPE, "scaling", [upper.segment_id], [(0.5, 0.75), (0.75, 1.0)])
        scaled.set()

    scaler = asyncio.create_task(scale_midway())
    i = 0
    while not scaled.is_set() or i < 6_000:
        key = f"k{i % 23}"
        await writer.write_event(f"{key}:{written[key]}".encode(), key)
        written[key] += 1
        i += 1
        if i % 25 == 0:
            await asyncio.sleep(0)  # let the scale and the acks in
    await scaler
    await writer.flush()
    assert writer.scales_followed == 1
    current = {s.segment_id for s in writer.current_segments()}
    assert original[0].segment_id in current and original[1].segment_id not in current
    assert len(current) == 3
    await writer.close()

    events = await _read_all(manager, "scaling")
    assert len(events) == sum(written.values())
    _check_exactly_once_in_order(events, written)
    after = {e.segment_id for e in events} - {s.segment_id for s in original}
    assert len(after) == 2  # both successors got events


async def test_write_across_two_scales_with_pending_events_resends_them(
    manager: StreamManager, controller: FakeController
) -> None:
    await _stream(manager, "twice", 1)
    [only] = await manager.current_segments(SCOPE, "twice")
    writer = await manager.create_writer(SCOPE, "twice")
    written: dict[str, int] = defaultdict(int)
    # Queue events without letting the loop run, so they are unacknowledged when the segment is sealed.
    for i in range(300):
        key = f"k{i % 5}"
        await writer.write_event(f"{key}:{written[key]}".encode(), key)
        written[key] += 1
    halves = await controller.scale(SCOPE, "twice", [only.segment_id], [(0.0, 0.5), (0.5, 1.0)])
    await controller.scale(SCOPE, "twice", [halves[0].segment_id], [(0.0, 0.25), (0.25, 0.5)])
    for i in range(300):
        key = f"k{i % 5}"
        await writer.write_event(f"{key}:{written[key]}".encode(), key)
        written[key] += 1
    await writer.flush()
    assert writer.scales_followed >= 2
    await writer.close()
    events = await _read_all(manager, "twice")
    assert len(events) == 600
    _check_exactly_once_in_order(events, written)


async def test_write_across_a_scale_with_lost_acks_resends_only_what_was_not_stored(
    manager: StreamManager, controller: FakeController
) -> None:
    """A failure reply may overtake acknowledgements: what the sealed segment stored is not resent."""
    await _stream(manager, "lostacks", 1)
    [only] = await manager.current_segments(SCOPE, "lostacks")
    writer = await manager.create_writer(SCOPE, "lostacks")
    await (await writer.write_event(b"k:0", "k"))
    [sink] = writer._sinks.values()
    session = sink.writer
    # Fault injection around the real session: acknowledgements from here on are lost on the way.
    session._on_appended = lambda event_number, write_offset: None  # type: ignore[method-assign]
    stored = [await writer.write_event(f"k:{n}".encode(), "k") for n in range(1, 10)]
    await _wait_stored(manager, "lostacks", only.segment_id, [f"k:{n}".encode() for n in range(10)])
    assert not any(f.done() for f in stored)  # stored by the segment store, never acknowledged to the session
    await controller.scale(SCOPE, "lostacks", [only.segment_id], [(0.0, 1.0)])
    # A whole block goes out at once, even with earlier appends unacknowledged; it meets the seal.
    last = await writer.write_event(b"k:10:" + bytes(70_000), "k")
    await writer.flush()
    assert last.done() and all(f.done() for f in stored)
    assert writer.events_resent == 1  # only k:10; k:1..k:9 are confirmed by the writer attribute
    await writer.close()
    events = await _read_all(manager, "lostacks")
    _check_exactly_once_in_order(events, {"k": 11})


async def test_write_across_a_scale_while_the_sealed_segment_moves_follows_it(
    manager: StreamManager, controller: FakeController
) -> None:
    """Looking for the seal may meet the segment's container moving (WrongHost, found by ``segstore selftest``):
    the writer tries again, it neither hangs with its events pending nor sends what was stored twice."""
    await _stream(manager, "moving", 1)
    [only] = await manager.current_segments(SCOPE, "moving")
    writer = await manager.create_writer(SCOPE, "moving")
    await (await writer.write_event(b"k:0", "k"))
    sealed_name = qualified_segment_name(SCOPE, "moving", only.segment_id)
    real_info = manager.client.get_segment_info
    moving = {"left": 3}

    async def info_while_moving(name: str) -> SegmentStatus:  # a wrapper around the real call: 3 WrongHost replies
        if name == sealed_name and moving["left"] > 0:
            moving["left"] -= 1
            raise WrongHostError(WrongHost(-1, name, "", ""))
        return await real_info(name)

    manager.client.get_segment_info = info_while_moving  # type: ignore[method-assign,assignment]
    try:
        await controller.scale(SCOPE, "moving", [only.segment_id], [(0.0, 1.0)])
        for n in range(1, 20):
            await writer.write_event(f"k:{n}".encode(), "k")
        await asyncio.wait_for(writer.flush(), 30)
    finally:
        manager.client.get_segment_info = real_info  # type: ignore[method-assign]
    assert moving["left"] == 0 and writer.scales_followed == 1
    await writer.close()
    _check_exactly_once_in_order(await _read_all(manager, "moving"), {"k": 20})


async def test_write_across_a_scale_whose_seal_commits_late_resends_only_what_was_not_stored(
    manager: StreamManager, controller: FakeController
) -> None:
    """The seal shows committed only after the writer's first look gave up (a loaded Tier-1): the writer looks
    again instead of resending every unacknowledged event, some of which the sealed segment stored."""
    await _stream(manager, "latecommit", 1)
    [only] = await manager.current_segments(SCOPE, "latecommit")
    writer = await manager.create_writer(SCOPE, "latecommit", EventWriterConfig(seal_confirm_attempts=5))
    await (await writer.write_event(b"k:0", "k"))
    [sink] = writer._sinks.values()
    sink.writer._on_appended = lambda event_number, write_offset: None  # type: ignore[method-assign]  # acks lost
    stored = [await writer.write_event(f"k:{n}".encode(), "k") for n in range(1, 10)]
    await _wait_stored(manager, "latecommit", only.segment_id, [f"k:{n}".encode() for n in range(10)])
    sealed_name = qualified_segment_name(SCOPE, "latecommit", only.segment_id)
    real_info = manager.client.get_segment_info
    late = {"left": 8}  # more than one look's 5 attempts

    async def info_seal_late(name: str) -> SegmentStatus:  # a wrapper around the real call
        info = await real_info(name)
        if name == sealed_name and info.sealed and late["left"] > 0:
            late["left"] -= 1
            return dataclasses.replace(info, sealed=False)
        return info

    manager.client.get_segment_info = info_seal_late  # type: ignore[method-assign,assignment]
    try:
        await controller.scale(SCOPE, "latecommit", [only.segment_id], [(0.0, 1.0)])
        last = await writer.write_event(b"k:10:" + bytes(70_000), "k")
        await asyncio.wait_for(writer.flush(), 30)
    finally:
        manager.client.get_segment_info = real_info  # type: ignore[method-assign]
    assert late["left"] == 0 and last.done() and all(f.done() for f in stored)
    assert writer.events_resent == 1  # only k:10
    await writer.close()
    _check_exactly_once_in_order(await _read_all(manager, "latecommit"), {"k": 11})


async def test_write_to_sealed_stream_fails_with_stream_sealed(
    manager: StreamManager, controller: FakeController
) -> None:
    await _stream(manager, "sealed", 2)
    writer = await manager.create_writer(SCOPE, "sealed")
    await (await writer.write_event(b"before", "a"))
    await manager.seal_stream(SCOPE, "sealed")
    with pytest.raises(StreamSealedError):
        await (await writer.write_event(b"after", "a"))
    with pytest.raises(StreamSealedError):
        await writer.write_event(b"again", "b")
    with pytest.raises(StreamSealedError):
        await writer.close()
    with pytest.raises(StreamSealedError):
        await manager.create_writer(SCOPE, "sealed")


async def test_write_after_the_segments_vanish_fails_with_stream_not_found(
    manager: StreamManager, controller: FakeController
) -> None:
    await _stream(manager, "vanish", 1)
    [segment] = await manager.current_segments(SCOPE, "vanish")
    writer = await manager.create_writer(SCOPE, "vanish")
    await (await writer.write_event(b"kept", "k"))
    await controller.client.delete_segment(qualified_segment_name(SCOPE, "vanish", segment.segment_id))
    with pytest.raises(StreamNotFoundError):
        await (await writer.write_event(b"lost", "k"))
    with pytest.raises(StreamNotFoundError):
        await writer.write_event(b"again", "k")
    assert isinstance(writer.failure, StreamNotFoundError)


async def test_create_writer_on_missing_stream_raises(manager: StreamManager) -> None:
    await manager.create_scope(SCOPE)
    with pytest.raises(StreamNotFoundError):
        await manager.create_writer(SCOPE, "missing")


async def test_write_with_small_window_applies_backpressure(manager: StreamManager) -> None:
    await _stream(manager, "window", 1)
    window = 4 * 1024
    config = EventWriterConfig(segment_writer=WriterConfig(max_block_bytes=1024, max_unacked_bytes=window))
    writer = await manager.create_writer(SCOPE, "window", config)
    [segment] = writer.current_segments()
    name = qualified_segment_name(SCOPE, "window", segment.segment_id)
    peak = 0
    for i in range(400):
        await writer.write_event(bytes(100) + str(i).encode(), "k")
        sessions = [s for s in writer._sinks.values() if s.name == name]
        peak = max(peak, sessions[0].writer.unacked_bytes)
    await writer.close()
    assert 0 < peak <= window
    info = await manager.segment_info(SCOPE, "window", segment.segment_id)
    assert info.write_offset == sum(8 + 100 + len(str(i)) for i in range(400))


async def test_writer_window_bounds_unacked_bytes_over_all_segments(manager: StreamManager) -> None:
    """The writer-wide window holds however many segments there are, and a producer that never yields
    between writes still makes progress (it waits for acknowledgements when the window is full)."""
    await _stream(manager, "writerwindow", 8)
    window = 6 * 1024
    config = EventWriterConfig(max_unacked_bytes=window)
    written: dict[str, int] = defaultdict(int)
    writer = await manager.create_writer(SCOPE, "writerwindow", config)
    peak = 0
    for i in range(3_000):
        key = f"key-{i % 50}"
        await writer.write_event(f"{key}:{written[key]}:".encode() + bytes(60), key)
        written[key] += 1
        peak = max(peak, writer.unacked_bytes)
    assert len(writer._sinks) == 8
    await writer.close()
    assert writer.unacked_bytes == 0
    assert window - 100 < peak <= window
    _check_exactly_once_in_order(await _read_all(manager, "writerwindow"), written)


async def test_a_producer_that_never_yields_has_its_events_sent_while_it_writes(manager: StreamManager) -> None:
    """Sessions send at the end of a turn of the event loop or on an ack: a producer that never suspends gives
    them neither, so every max_unacked_bytes / 8 routed in one turn the writer has its sessions send."""
    await _stream(manager, "noyield", 16)
    writer = await manager.create_writer(SCOPE, "noyield", EventWriterConfig(max_unacked_bytes=1024 * 1024))
    written: dict[str, int] = defaultdict(int)
    for k in range(256):  # every session set up and idle
        await writer.write_event(f"key-{k}:{written[f'key-{k}']}:".encode(), f"key-{k}")
        written[f"key-{k}"] += 1
    await writer.flush()
    sinks = list(writer._sinks.values())
    assert len(sinks) == 16
    before = sum(sink.writer.blocks_sent for sink in sinks)
    turns: list[int] = []
    asyncio.get_running_loop().call_soon(turns.append, 1)  # runs at the event loop's next turn
    size = 0
    while size < 300 * 1024:  # more than twice the send point (128 KiB), in one turn of the event loop
        key = f"key-{size % 256}"
        event = f"{key}:{written[key]}:".encode() + bytes(100)
        await writer.write_event(event, key)
        written[key] += 1
        size += len(event)
    assert not turns, "the producer yielded"
    assert sum(sink.writer.blocks_sent for sink in sinks) - before >= 2 * len(sinks)
    await writer.close()
    _check_exactly_once_in_order(await _read_all(manager, "noyield"), written)


async def test_write_events_in_bulk_keeps_per_key_order_within_the_window(manager: StreamManager) -> None:
    await _stream(manager, "bulk", 4)
    writer = await manager.create_writer(SCOPE, "bulk", EventWriterConfig(max_unacked_bytes=8 * 1024))
    written: dict[str, int] = defaultdict(int)
    events = []
    for i in range(3_000):
        key = f"key-{i % 50}"
        events.append((f"{key}:{written[key]}:".encode() + bytes(40), key))
        written[key] += 1
    done = await writer.write_events(events[:1_500])
    rest = await writer.write_events(iter(events[1_500:]))
    nothing = await writer.write_events([])
    await asyncio.wait_for(asyncio.gather(done, rest, nothing), 10)
    assert writer.unacked_bytes == 0
    await writer.close()
    _check_exactly_once_in_order(await _read_all(manager, "bulk"), written)


async def test_a_caller_cancelling_a_shared_write_future_does_not_break_flush(manager: StreamManager) -> None:
    """Events written together share one future; a caller that cancels it (``asyncio.wait_for`` timing out)
    must not make ``flush``/``close`` fail nor lose the events: the writer waits on its own state."""
    await _stream(manager, "cancelled", 1)
    writer = await manager.create_writer(SCOPE, "cancelled")
    first = await writer.write_event(b"k:0", "k")
    second = await writer.write_event(b"k:1", "k")
    assert first is second  # one block, one future
    first.cancel()
    later = await writer.write_event(b"k:2", "k")
    assert later is not first and not later.cancelled()
    await asyncio.wait_for(writer.flush(), 10)
    await later
    await writer.close()
    assert [e.data for e in await _read_all(manager, "cancelled")] == [b"k:0", b"k:1", b"k:2"]


async def test_writer_window_lets_one_event_larger_than_the_window_through_alone(manager: StreamManager) -> None:
    await _stream(manager, "bigevent", 2)
    writer = await manager.create_writer(SCOPE, "bigevent", EventWriterConfig(max_unacked_bytes=1024))
    small = await writer.write_event(b"k:0:small", "k")
    big = await writer.write_event(b"k:1:" + bytes(5_000), "k")  # waits for "small", then goes alone
    assert small.done()
    await big
    await writer.close()
    assert [e.data[:4] for e in await _read_all(manager, "bigevent")] == [b"k:0:", b"k:1:"]


async def test_write_waiting_for_the_writer_window_raises_the_writer_failure(
    manager: StreamManager, controller: FakeController
) -> None:
    await _stream(manager, "windowfail", 1)
    [segment] = await manager.current_segments(SCOPE, "windowfail")
    writer = await manager.create_writer(SCOPE, "windowfail", EventWriterConfig(max_unacked_bytes=300))
    await (await writer.write_event(b"k:0", "k"))
    [sink] = writer._sinks.values()
    sink.writer._on_appended = lambda event_number, write_offset: None  # type: ignore[method-assign]
    first = await writer.write_event(b"k:1:" + bytes(200), "k")  # stored, its ack lost on the way
    blocked = asyncio.create_task(writer.write_event(b"k:2:" + bytes(200), "k"))
    await _wait_stored(manager, "windowfail", segment.segment_id, [b"k:0", b"k:1:" + bytes(200)])
    assert not blocked.done() and writer.unacked_bytes == 204  # no ack will make room in the window
    await controller.client.delete_segment(qualified_segment_name(SCOPE, "windowfail", segment.segment_id))
    connection = sink.writer._connection
    assert connection is not None
    connection.abort("test: the connection drops")  # the session sets up again: NoSuchSegment
    with pytest.raises(StreamNotFoundError):
        await asyncio.wait_for(blocked, 10)
    with pytest.raises(StreamNotFoundError):
        await first
    assert writer.unacked_bytes == 0


async def test_writer_id_is_shared_and_server_deduplicates_a_reused_writer(manager: StreamManager) -> None:
    await _stream(manager, "dedup", 1)
    writer = await manager.create_writer(SCOPE, "dedup")
    await (await writer.write_event(b"one", "k"))
    await writer.close()
    # A second writer with the same id continues after the stored event numbers (no clash, no loss).
    again = await manager.create_writer(SCOPE, "dedup", writer_id=writer.writer_id)
    await (await again.write_event(b"two", "k"))
    await again.close()
    events = await _read_all(manager, "dedup")
    assert [e.data for e in events] == [b"one", b"two"]


async def test_writer_controller_retry_config_is_used(manager: StreamManager, controller: FakeController) -> None:
    await _stream(manager, "flaky", 1)
    failures = [2]
    real = controller.get_current_segments

    async def flaky(scope: str, stream: str):
        if failures[0]:
            failures[0] -= 1
            from controller_client.errors import ControllerUnavailableError

            raise ControllerUnavailableError("down")
        return await real(scope, stream)

    controller.get_current_segments = flaky
    config = EventWriterConfig(controller_retry=RetryPolicy(max_attempts=3, initial_delay_ms=1, max_delay_ms=1))
    writer = await manager.create_writer(SCOPE, "flaky", config)
    assert failures == [0]
    await writer.close()
    assert isinstance(await manager.head_cut(SCOPE, "flaky"), StreamCut)


async def test_write_event_never_overtakes_a_write_waiting_for_the_writer_lock(manager: StreamManager) -> None:
    await _stream(manager, "lock-order", 1)
    async with await manager.create_writer(SCOPE, "lock-order") as writer:
        await (await writer.write_event(b"k:0", "k"))  # the session is up: later writes take the fast path
        await writer._lock.acquire()  # as a scale being followed would hold it
        waiting = asyncio.ensure_future(writer.write_event(b"k:1", "k"))
        await asyncio.sleep(0)  # it now waits for the lock
        writer._lock.release()  # the waiter is woken but has not run yet
        await writer.write_event(b"k:2", "k")  # must queue behind it, not route at once
        await waiting
        await writer.flush()
    assert [e.data for e in await _read_all(manager, "lock-order")] == [b"k:0", b"k:1", b"k:2"]
