"""Reader groups over a real in-memory segment store and the fake controller: balance, scaling, checkpoints,
reset, readers going offline. Processes, kill -9 and the official client: test_reader_group_processes.py."""

from __future__ import annotations

import asyncio
import dataclasses
from collections import defaultdict
from types import SimpleNamespace

import pytest
from fake_controller import FakeController
from moving_segments import MovingSegments

from controller_client.model import ReaderGroupRetention, ScalingPolicy, StreamConfiguration, StreamCut
from controller_client.reader_groups.group import CheckpointTimeoutError, ReaderGroup, ReaderGroupNotInitializedError
from controller_client.reader_groups.reader import EventStreamReader, GroupReaderConfig
from controller_client.reader_groups.state import ReaderAlreadyOnlineError, ReaderOfflineError
from controller_client.stream_manager import StreamManager
from segment_store.client import ReaderConfig, RetryPolicy

pytestmark = pytest.mark.integration

SCOPE, STREAM = "rg", "events"
FAST = GroupReaderConfig(refresh_interval_s=0.02, reader_timeout_s=None)


async def _stream(manager: StreamManager, segments: int) -> None:
    await manager.create_scope(SCOPE)
    await manager.create_stream(SCOPE, STREAM, StreamConfiguration(ScalingPolicy.fixed(segments)))


async def _write(manager: StreamManager, keys: int, start: int, count: int) -> None:
    async with await manager.create_writer(SCOPE, STREAM) as writer:
        for i in range(start, start + count):
            await writer.write_event(f"k{i % keys}:{i}".encode(), routing_key=f"k{i % keys}")
        await writer.flush()


async def _group(manager: StreamManager, name: str = "g") -> ReaderGroup:
    return await manager.create_reader_group(SCOPE, name, [StreamCut(SCOPE, STREAM, {})])


async def _drain(reader: EventStreamReader, into: list[tuple[str, bytes]], until: asyncio.Event) -> None:
    """Read until the group is finished (or ``until`` is set and nothing came for a while)."""
    while True:
        event = await reader.next_event(timeout_s=0.05)
        if event is None:
            if reader.group_finished or until.is_set():
                return
            continue
        if event.data is not None:
            into.append((reader.name, event.data))


async def _first_event(reader: EventStreamReader, into: list[tuple[str, bytes]]) -> None:
    """Read until ``reader``'s first event (after it acquired segments)."""
    while True:
        event = await reader.next_event(timeout_s=0.05)
        if event is not None and event.data is not None:
            into.append((reader.name, event.data))
            return


def _check_once_in_key_order(read: list[tuple[str, bytes]], total: int) -> None:
    numbers = [int(data.split(b":")[1]) for _, data in read]
    assert sorted(numbers) == list(range(total)), "every event exactly once"
    per_key: dict[bytes, list[int]] = defaultdict(list)
    for _, data in read:
        key, number = data.split(b":")
        per_key[key].append(int(number))
    for key, seen in per_key.items():
        assert seen == sorted(seen), f"key {key!r} out of order"


async def test_two_readers_split_the_segments_and_follow_a_scale(
    manager: StreamManager, controller: FakeController
) -> None:
    await _stream(manager, 4)
    await _write(manager, 16, 0, 400)
    group = await _group(manager)
    readers = [await group.create_reader(f"r{i}", FAST) for i in range(2)]
    read: list[tuple[str, bytes]] = []
    for reader in readers:  # each takes its share first: a reader with events at hand does not yield to the other
        await asyncio.wait_for(_first_event(reader, read), 30)
    stop = asyncio.Event()
    tasks = [asyncio.create_task(_drain(r, read, stop)) for r in readers]
    # split two segments, then merge three of the new ones: successors wait for all their predecessors
    current = await manager.current_segments(SCOPE, STREAM)
    created = await controller.scale(SCOPE, STREAM, [current[0].segment_id], [(0.0, 0.125), (0.125, 0.25)])
    await _write(manager, 16, 400, 300)
    await controller.scale(
        SCOPE, STREAM, [created[1].segment_id, current[1].segment_id, current[2].segment_id], [(0.125, 0.75)]
    )
    await _write(manager, 16, 700, 300)
    await manager.seal_stream(SCOPE, STREAM)
    await asyncio.wait_for(asyncio.gather(*tasks), 30)
    _check_once_in_key_order([(r, d) for r, d in read], 1000)
    # read per reader: each key was read by one reader at a time, and both readers read
    assert {name for name, _ in read} == {"r0", "r1"}
    for reader in readers:
        await reader.close()
    assert await group.online_readers() == []


async def test_a_joining_reader_gets_its_share_and_a_closing_one_hands_over_exactly(manager: StreamManager) -> None:
    await _stream(manager, 4)
    await _write(manager, 8, 0, 200)
    group = await _group(manager)
    first = await group.create_reader("first", FAST)
    read: list[tuple[str, bytes]] = []
    while len(read) < 50:
        event = await first.next_event(timeout_s=5)
        assert event is not None and event.data is not None
        read.append(("first", event.data))
    assert len(first.positions) == 4
    second = await group.create_reader("second", FAST)
    with pytest.raises(ReaderAlreadyOnlineError):
        await group.create_reader("second", FAST)
    # the first reader gives two segments back, one per refresh, at exactly what it returned
    while len(second.positions) < 2:
        for reader in (first, second):
            event = await reader.next_event(timeout_s=0.05)
            if event is not None and event.data is not None:
                read.append((reader.name, event.data))
    assert len(first.positions) == 2
    await first.close()  # hands its segments over at the exact positions
    stop = asyncio.Event()
    await asyncio.wait_for(_drain_count(second, read, 200), 20)
    stop.set()
    _check_once_in_key_order(read, 200)
    with pytest.raises(Exception, match="closed"):
        await first.next_event(timeout_s=0.01)


async def _drain_count(reader: EventStreamReader, into: list[tuple[str, bytes]], total: int) -> None:
    while len(into) < total:
        event = await reader.next_event(timeout_s=0.05)
        if event is not None and event.data is not None:
            into.append((reader.name, event.data))


async def test_a_silent_reader_is_taken_offline_and_its_segments_resume_at_its_last_report(
    manager: StreamManager,
) -> None:
    await _stream(manager, 2)
    await _write(manager, 4, 0, 100)
    group = await _group(manager)
    timing = GroupReaderConfig(refresh_interval_s=0.02, reader_timeout_s=0.5)
    dying = await group.create_reader("dying", timing)
    read: list[tuple[str, bytes]] = []
    await _drain_count(dying, read, 30)  # reads, reports, then never calls again (as if its process stopped)
    survivor = await group.create_reader("survivor", timing)

    async def until_all_read() -> None:
        while len({d for _, d in read}) < 100:
            event = await survivor.next_event(timeout_s=0.05)
            if event is not None and event.data is not None:
                read.append(("survivor", event.data))

    await asyncio.wait_for(until_all_read(), 30)
    assert await group.online_readers() == ["survivor"]
    numbers = [int(d.split(b":")[1]) for _, d in read]
    assert set(numbers) == set(range(100)), "nothing lost"
    assert len(numbers) - len(set(numbers)) <= 30, "repeats only what the dead reader returned since its report"
    with pytest.raises(ReaderOfflineError):
        await dying.next_event(timeout_s=0.01)


async def test_reader_offline_with_positions(manager: StreamManager) -> None:
    await _stream(manager, 1)
    await _write(manager, 1, 0, 20)
    group = await _group(manager)
    reader = await group.create_reader("r", FAST)
    first = await reader.next_event(timeout_s=5)
    assert first is not None and first.segment is not None
    assert await group.reader_offline("r", {first.segment: first.offset})  # re-read from the first event
    assert not await group.reader_offline("r")
    other = await group.create_reader("other", FAST)
    again = await other.next_event(timeout_s=5)
    assert again is not None and again.data == first.data


async def test_checkpoint_then_reset_reads_again_from_it(manager: StreamManager, controller: FakeController) -> None:
    await _stream(manager, 2)
    await _write(manager, 8, 0, 100)
    group = await manager.create_reader_group(
        SCOPE, "cp", [StreamCut(SCOPE, STREAM, {})], retention=ReaderGroupRetention.AUTOMATIC
    )
    readers = [await group.create_reader(f"r{i}", FAST) for i in range(2)]
    before: list[bytes] = []
    markers: list[str] = []

    async def read_until_marker(reader: EventStreamReader) -> None:
        while True:
            event = await reader.next_event(timeout_s=0.05)
            if event is None:
                continue
            if event.is_checkpoint:
                assert event.checkpoint is not None
                markers.append(event.checkpoint)
                return
            assert event.data is not None
            before.append(event.data)

    while len(before) < 40:  # read some first
        for reader in readers:
            event = await reader.next_event(timeout_s=0.05)
            if event is not None and event.data is not None:
                before.append(event.data)
    waiting = [asyncio.create_task(read_until_marker(r)) for r in readers]
    checkpoint = await group.initiate_checkpoint("c1", timeout_s=20)
    await asyncio.gather(*waiting)
    assert markers == ["c1", "c1"]
    assert sum(checkpoint.positions.values()) > 0
    # the subscriber group published the checkpoint as its position
    assert controller.subscriber_cuts[f"{SCOPE}/cp"][-1] == checkpoint.stream_cut(SCOPE, STREAM)
    after: list[bytes] = []
    await asyncio.wait_for(_drain_all(readers, after, 100 - len(before)), 20)
    assert sorted(before + after) == sorted(f"k{i % 8}:{i}".encode() for i in range(100))
    # reset: the readers are offline, new readers read exactly what came after the checkpoint
    await group.reset(checkpoint)
    with pytest.raises(ReaderOfflineError):
        for _ in range(10):
            await readers[0].next_event(timeout_s=0.05)
    again = await group.create_reader("again", FAST)
    replay: list[bytes] = []
    await asyncio.wait_for(_drain_all([again], replay, len(after)), 20)
    assert sorted(replay) == sorted(after)
    assert [c.name for c in await group.checkpoints()] == ["c1"]


async def _drain_all(readers: list[EventStreamReader], into: list[bytes], total: int) -> None:
    while len(into) < total:
        for reader in readers:
            event = await reader.next_event(timeout_s=0.02)
            if event is not None and event.data is not None:
                into.append(event.data)


async def test_a_checkpoint_times_out_while_a_reader_does_not_read(manager: StreamManager) -> None:
    await _stream(manager, 1)
    group = await _group(manager)
    await group.create_reader("idle", FAST)
    with pytest.raises(CheckpointTimeoutError, match="idle"):
        await group.initiate_checkpoint("c", timeout_s=0.2)


async def test_open_and_delete(manager: StreamManager, controller: FakeController) -> None:
    await _stream(manager, 1)
    with pytest.raises(ReaderGroupNotInitializedError):
        await manager.reader_group(SCOPE, "missing")
    await _group(manager, "temp")
    opened = await manager.reader_group(SCOPE, "temp")
    assert [f"{s}" for s in opened.streams] == [f"{SCOPE}/{STREAM}"]
    await manager.delete_reader_group(SCOPE, "temp")
    assert (SCOPE, "temp") not in controller.reader_groups
    with pytest.raises(ReaderGroupNotInitializedError):
        await manager.reader_group(SCOPE, "temp")


async def test_a_subscriber_group_checkpoints_itself_silently_and_publishes_each_checkpoint(
    manager: StreamManager, controller: FakeController
) -> None:
    await _stream(manager, 2)
    await _write(manager, 4, 0, 200)
    group = await manager.create_reader_group(
        SCOPE,
        "auto",
        [StreamCut(SCOPE, STREAM, {})],
        retention=ReaderGroupRetention.AUTOMATIC,
        automatic_checkpoint_ms=100,
    )
    initial = len(controller.subscriber_cuts[f"{SCOPE}/auto"])  # the head, published when created
    readers = [await group.create_reader(f"r{i}", FAST) for i in range(2)]
    read: list[bytes] = []
    while len(read) < 200 or len(controller.subscriber_cuts[f"{SCOPE}/auto"]) < initial + 2:
        for reader in readers:
            event = await reader.next_event(timeout_s=0.02)
            assert event is None or not event.is_checkpoint, "automatic checkpoints are silent"
            if event is not None and event.data is not None:
                read.append(event.data)
    assert sorted(read) == sorted(f"k{i % 4}:{i}".encode() for i in range(200))
    published = controller.subscriber_cuts[f"{SCOPE}/auto"][initial:]
    names = [c.name for c in await group.checkpoints()]
    assert all(name.startswith("segstore-auto-") for name in names) and len(names) >= 2
    offsets = [sum(cut.positions.values()) for cut in published]
    assert offsets == sorted(offsets), "published positions never go back"


async def test_a_reader_waiting_with_a_timeout_ends_when_cancelled_as_an_item_arrives(manager: StreamManager) -> None:
    """A task reading in a loop is cancelled in the loop turn after an item reached its wait: the cancel ends it
    (``asyncio.wait_for`` on Python 3.11 returned the item and lost the cancel; the loop then read on for ever)."""
    await _stream(manager, 1)
    quiet = GroupReaderConfig(refresh_interval_s=60.0, reader_timeout_s=None)
    reader = await (await _group(manager)).create_reader("r", quiet)

    async def follow() -> None:
        while True:
            await reader.next_event(timeout_s=5.0)

    task = asyncio.create_task(follow())
    while not reader._queue._getters:  # type: ignore[attr-defined]  # past its first refresh: it waits on its queue
        await asyncio.sleep(0.001)
    reader._queue.put_nowait((SimpleNamespace(active=False), None))  # type: ignore[arg-type]  # an item of no use
    await asyncio.sleep(0)  # the queue's getter took it; the reading task has not resumed yet
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        async with asyncio.timeout(10.0):
            await task
    await reader.close()


async def test_a_group_reader_outlives_any_number_of_container_moves(manager: StreamManager) -> None:
    """A group's reader on a segment whose container moves eight times (every read answered ``WrongHost`` for a
    while, its segment reader restarted again and again) reads every event once and in order (it failed after its
    fifth restart in all, however far apart)."""
    await _stream(manager, 1)
    moving = MovingSegments(manager.client)
    fast = RetryPolicy(max_attempts=1_000, initial_delay_ms=2, max_delay_ms=10)
    segment_reader = ReaderConfig(retry=RetryPolicy(max_attempts=3, initial_delay_ms=2, max_delay_ms=5))
    config = dataclasses.replace(FAST, segment_reader=segment_reader, segment_retry=fast, segment_retry_timeout_s=5.0)
    reader = await (await _group(manager)).create_reader("r", config)
    read: list[tuple[str, bytes]] = []

    async def read_up_to(count: int) -> None:
        async with asyncio.timeout(10.0):
            while len(read) < count:
                event = await reader.next_event(timeout_s=10.0)
                if event is not None and event.data is not None:
                    read.append((reader.name, event.data))

    written = 0
    for _ in range(8):
        await _write(manager, 4, written, 20)
        written += 20
        await read_up_to(written)
        refused = moving.refused
        moving.moving = True
        await _write(manager, 4, written, 5)  # wakes the reader waiting at the tail
        written += 5
        async with asyncio.timeout(10.0):
            while moving.refused < refused + 10:  # the reader tries again and again (with backoff)
                await asyncio.sleep(0.01)
        moving.moving = False
    await read_up_to(written)
    await reader.close()
    _check_once_in_key_order(read, written)
    assert moving.refused >= 80
