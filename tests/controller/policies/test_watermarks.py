"""Watermarks (controller.watermarking, controller_client.watermarks): Pravega's serialization, the stream-cut
upper bound, and the rounds over writers with different clocks — a dead or silent writer stops holding watermarks
back after its timeout, watermarks never move backwards, a restarted controller goes on from the mark segment — and
our event writer noting times through gRPC, read back by ``StreamManager.watermarks``."""

from __future__ import annotations

import itertools
import struct
from collections.abc import AsyncIterator

import grpc
import pytest
from controller_env import ControllerEnv

from controller.core import ControllerCore
from controller.metadata import WriterMarkStatus
from controller.policies.cuts import add_to_upper_bound, missing_ranges
from controller.rpc.servicer import start_grpc_server
from controller_client.controller.api import ControllerClient
from controller_client.errors import InvalidArgumentError
from controller_client.model import ScalingPolicy, StreamConfiguration, StreamCut, segment_id
from controller_client.stream_manager import StreamManager
from controller_client.watermarks import SegmentWithRange, Watermark, WatermarkFormatError
from segment_store.client import NoSuchSegmentError

pytestmark = pytest.mark.integration

S, T = "wm", "events"


def seg(number: int, low: float, high: float, epoch: int = 0) -> SegmentWithRange:
    return SegmentWithRange(segment_id(number, epoch), low, high)


# ---- the format ----------------------------------------------------------------------------------------------


def test_a_watermark_is_serialized_as_pravegas_versioned_serializer() -> None:
    watermark = Watermark(10, 20, {seg(1, 0.0, 0.5): 300})
    segment = struct.pack(">qdd", 1, 0.0, 0.5)
    nested = bytes((0, 0, 1, 0)) + struct.pack(">i", len(segment)) + segment
    body = struct.pack(">qq", 10, 20) + bytes((1,)) + nested + struct.pack(">q", 300)
    assert watermark.encode() == bytes((0, 0, 1, 0)) + struct.pack(">i", len(body)) + body
    assert Watermark.decode(watermark.encode()) == watermark


def test_big_cuts_use_compact_counts_and_garbage_is_refused() -> None:
    for size in (0, 127, 128, 20_000):
        cut = {SegmentWithRange(i, i / (size + 1), (i + 1) / (size + 1)): i for i in range(size)}
        assert Watermark.decode(Watermark(1, 2, cut).encode()).stream_cut == cut
    for garbage in (b"", b"\x00\x00\x01\x00\x00\x00\x00\x40", b"\x01\x00\x01", Watermark(1, 2, {}).encode()[:-1]):
        with pytest.raises(WatermarkFormatError):
            Watermark.decode(garbage)


# ---- the upper bound -----------------------------------------------------------------------------------------


def test_the_upper_bound_takes_the_furthest_offset_and_the_latest_segments() -> None:
    upper: dict[SegmentWithRange, int] = {}
    add_to_upper_bound({seg(0, 0.0, 0.5): 10, seg(1, 0.5, 1.0): 5}, upper)
    add_to_upper_bound({seg(0, 0.0, 0.5): 7, seg(1, 0.5, 1.0): 9}, upper)
    assert upper == {seg(0, 0.0, 0.5): 10, seg(1, 0.5, 1.0): 9}
    successor = seg(2, 0.0, 0.25, epoch=1)  # a scale split segment 0
    add_to_upper_bound({successor: 3}, upper)
    assert upper == {successor: 3, seg(1, 0.5, 1.0): 9}
    add_to_upper_bound({seg(0, 0.0, 0.5): 99}, upper)  # a predecessor of what is there is left out
    assert upper == {successor: 3, seg(1, 0.5, 1.0): 9}
    assert missing_ranges(upper) == [(0.25, 0.5)]
    assert missing_ranges({}) == [(0.0, 1.0)]


# ---- rounds --------------------------------------------------------------------------------------------------


async def stream(core: ControllerCore, timeout_ms: int = 0, segments: int = 2) -> None:
    await core.create_scope(S)
    config = StreamConfiguration(ScalingPolicy.fixed(segments), timestamp_aggregation_timeout_ms=timeout_ms)
    await core.create_stream(S, T, config)


async def note(core: ControllerCore, writer: str, time_ms: int, **offsets: int) -> WriterMarkStatus:
    cut = StreamCut(S, T, {segment_id(int(k[1:]), 0): v for k, v in offsets.items()})
    return await core.note_writer_mark(writer, cut, time_ms)


async def marks_of(core: ControllerCore) -> list[Watermark]:
    state = await core.watermarking._read_previous(S, T)
    assert state.previous is None or state.end > 0
    from controller.periodic.watermarking import mark_segment
    from segment_store.protocol import parse_events

    name = mark_segment(S, T)
    data = (await core._ops.client.read_segment(name, 0, state.end)).data if state.end else b""
    return [Watermark.decode(event.data) for event in parse_events(bytes(data))]


async def test_writers_with_different_clocks_give_the_slowest_time_and_the_furthest_position(
    env: ControllerEnv,
) -> None:
    core = env.core()
    await stream(core, timeout_ms=60_000)
    assert await note(core, "a", 1_000, s0=10) == WriterMarkStatus.SUCCESS
    assert await note(core, "b", 5_000, s0=4, s1=20) == WriterMarkStatus.SUCCESS
    first = await core.watermarking.run(S, T)
    assert first is not None and (first.lower_time_bound, first.upper_time_bound) == (1_000, 5_000)
    assert first.positions() == {segment_id(0, 0): 10, segment_id(1, 0): 20}
    assert await core.watermarking.run(S, T) is None, "a has noted nothing after the watermark: it waits for a"
    assert await note(core, "a", 900, s0=11) == WriterMarkStatus.INVALID_TIME
    assert await note(core, "a", 1_100, s0=9) == WriterMarkStatus.INVALID_POSITION
    assert await note(core, "a", 6_000, s0=30) == WriterMarkStatus.SUCCESS
    second = await core.watermarking.run(S, T)
    assert second is not None and (second.lower_time_bound, second.upper_time_bound) == (5_000, 6_000)
    assert second.positions() == {segment_id(0, 0): 30, segment_id(1, 0): 20}
    assert await marks_of(core) == [first, second]


async def test_with_no_timeout_a_writer_that_did_not_report_since_is_dropped_at_once(env: ControllerEnv) -> None:
    core = env.core()
    await stream(core)  # timestamp_aggregation_timeout_ms 0, Pravega's default
    await note(core, "a", 1_000, s0=10)
    await note(core, "b", 5_000, s1=20)
    assert await core.watermarking.run(S, T) is not None  # [1000, 5000]
    dropped = await core.watermarking.run(S, T)  # a said nothing after 1000: it no longer counts
    assert dropped is not None and (dropped.lower_time_bound, dropped.upper_time_bound) == (5_000, 5_000)
    assert list(await core.store.list_writer_marks(S, T)) == ["b"]


async def test_a_silent_writer_holds_watermarks_back_until_its_timeout(env: ControllerEnv) -> None:
    core = env.core()
    await stream(core, timeout_ms=10_000)
    await note(core, "fast", 1_000, s0=1)
    await note(core, "silent", 2_000, s1=1)
    assert (await core.watermarking.run(S, T)) is not None  # [1000, 2000]
    await note(core, "fast", 3_000, s0=2)
    assert await core.watermarking.run(S, T) is not None  # both past 1000: [2000, 3000]
    await note(core, "fast", 4_000, s0=3)
    assert await core.watermarking.run(S, T) is None, "the silent writer (2000) holds it back"
    env.clock[0] += 9_999
    assert await core.watermarking.run(S, T) is None
    env.clock[0] += 1
    latest = await core.watermarking.run(S, T)
    assert latest is not None and latest.lower_time_bound == 4_000
    assert "silent" not in await core.store.list_writer_marks(S, T), "its mark is gone"


async def test_a_removed_writer_stops_holding_back_at_once_and_a_restart_goes_on(env: ControllerEnv) -> None:
    core = env.core()
    await stream(core, timeout_ms=60_000)
    await note(core, "a", 1_000, s0=1)
    await note(core, "b", 1_500, s1=1)
    assert await core.watermarking.run(S, T) is not None  # [1000, 1500]
    await note(core, "a", 2_000, s0=2)
    assert await core.watermarking.run(S, T) is not None  # [1500, 2000]
    await note(core, "a", 3_000, s0=3)
    assert await core.watermarking.run(S, T) is None
    assert await core.remove_writer(S, T, "b")
    assert not await core.remove_writer(S, T, "nobody")
    third = await core.watermarking.run(S, T)
    assert third is not None and third.lower_time_bound == 3_000

    restarted = env.core()  # a new controller: the previous watermark comes from the mark segment
    await note(restarted, "a", 3_000, s0=4)
    assert await restarted.watermarking.run(S, T) is None, "not after the last watermark: nothing"
    await note(restarted, "a", 3_500, s0=5)
    fourth = await restarted.watermarking.run(S, T)
    assert fourth is not None and fourth.lower_time_bound == 3_500
    marks = await marks_of(restarted)
    assert [m.lower_time_bound for m in marks] == [1_000, 1_500, 3_000, 3_500]
    for before, after in itertools.pairwise(marks):
        assert all(after.positions().get(s, 0) >= o for s, o in before.positions().items())


async def test_deleting_the_stream_deletes_its_watermarks(env: ControllerEnv) -> None:
    core = env.core()
    await stream(core)
    await note(core, "a", 1_000, s0=1)
    assert await core.watermarking.run(S, T) is not None
    await core.seal_stream(S, T)
    await core.delete_stream(S, T)
    from controller.periodic.watermarking import mark_segment

    with pytest.raises(NoSuchSegmentError):
        await core._ops.client.get_segment_info(mark_segment(S, T))


# ---- our writer, over gRPC -------------------------------------------------------------------------------------


@pytest.fixture
async def served(env: ControllerEnv) -> AsyncIterator[tuple[ControllerCore, StreamManager]]:
    core = env.core()
    server, port = await start_grpc_server(core, "127.0.0.1", 0, 16)
    manager = StreamManager(ControllerClient(grpc.aio.insecure_channel(f"127.0.0.1:{port}")))
    try:
        yield core, manager
    finally:
        await manager.close()
        await manager.controller.close()  # type: ignore[attr-defined]
        await server.stop(None)


async def test_event_writers_note_times_that_become_watermarks_readers_can_read(
    served: tuple[ControllerCore, StreamManager],
) -> None:
    core, manager = served
    await manager.create_scope(S)
    await manager.create_stream(S, T, StreamConfiguration(ScalingPolicy.fixed(2)))
    assert await manager.watermarks(S, T) == []
    async with await manager.create_writer(S, T) as early, await manager.create_writer(S, T) as late:
        for i in range(20):
            await early.write_event(b"e%d" % i, routing_key=f"k{i}")
            await late.write_event(b"l%d" % i, routing_key=f"k{i}")
        await early.note_time(1_000)
        await late.note_time(9_000)
        with pytest.raises(InvalidArgumentError, match="before the one it noted last"):
            await late.note_time(8_000)
        watermark = await core.watermarking.run(S, T)
        assert watermark is not None and (watermark.lower_time_bound, watermark.upper_time_bound) == (1_000, 9_000)
        tail = await manager.tail_cut(S, T)
        assert watermark.positions() == dict(tail.positions), "every event written before the times is inside"
    assert await manager.watermarks(S, T) == [watermark]
    assert not await core.store.list_writer_marks(S, T) or all(
        not mark.alive for mark in (await core.store.list_writer_marks(S, T)).values()
    ), "closed writers told the controller they are gone"


async def test_a_transaction_committed_with_a_time_notes_its_writer_once_merged(
    served: tuple[ControllerCore, StreamManager],
) -> None:
    core, manager = served
    await manager.create_scope(S)
    await manager.create_stream(S, T, StreamConfiguration(ScalingPolicy.fixed(2)))
    writer = manager.create_txn_writer(S, T)
    txn = await writer.begin()
    for i in range(10):
        await txn.write_event(b"t%d" % i, routing_key=f"k{i}")
    await txn.commit(timestamp_ms=7_000)
    await core.txns.wait_committed(S, T)
    marks = await core.store.list_writer_marks(S, T)
    assert marks[str(writer.writer_id)].timestamp == 7_000
    assert dict(marks[str(writer.writer_id)].position) == dict((await manager.tail_cut(S, T)).positions)
    watermark = await core.watermarking.run(S, T)
    assert watermark is not None and watermark.lower_time_bound == 7_000
    plain = await writer.begin()
    await plain.write_event(b"no time")
    await plain.commit()
    await core.txns.wait_committed(S, T)
    assert (await core.store.list_writer_marks(S, T))[str(writer.writer_id)].timestamp == 7_000, "no time: no mark"
