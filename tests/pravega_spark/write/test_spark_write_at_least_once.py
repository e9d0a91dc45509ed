"""The at-least-once write task (``exactlyOnce=false``) against a real standalone, without a Spark session: a
task that fails mid-write and is retried stores every row once; a retry that reads its rows in another order
loses none; a chunk an earlier attempt stored in part is finished, not repeated; a scale mid-write."""

from __future__ import annotations

import asyncio
import itertools
import queue
import time
import uuid
import zlib
from collections.abc import AsyncIterator, Iterator, Sequence

import pyarrow as pa
import pytest
from standalone_process import StandaloneProcess

from controller_client import ControllerClient, ScalingPolicy, StreamConfiguration, StreamManager
from controller_client.model import qualified_segment_name
from pravega_spark.options.write import WriteOptions
from pravega_spark.write import plain as sink_plain
from pravega_spark.write.plain import PlainTaskWriter, chunk_writer_id
from pravega_spark.write.sink import SinkColumns, _TaskInfo, _write_task
from segment_store.protocol import encode_events

pytestmark = pytest.mark.spark

SCOPE = "sinkalo"
_names = itertools.count()
COLUMNS = SinkColumns("event", "routing_key")


@pytest.fixture
async def manager(standalone: StandaloneProcess) -> AsyncIterator[StreamManager]:
    controller = await ControllerClient.connect(standalone.controller_uri)
    manager = StreamManager(controller)
    await manager.create_scope(SCOPE)
    try:
        yield manager
    finally:
        await manager.close()
        await controller.close()


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> int:
    """Chunks of 4 KiB, so that a few hundred rows make many of them."""
    monkeypatch.setattr(sink_plain, "MIN_CHUNK_BYTES", 4096)
    monkeypatch.setattr(sink_plain, "MAX_CHUNK_BYTES", 4096)
    return 4096


async def _stream(manager: StreamManager, segments: int) -> str:
    stream = f"a{next(_names)}"
    await manager.create_stream(SCOPE, stream, StreamConfiguration(ScalingPolicy.fixed(segments)))
    return stream


def _options(standalone: StandaloneProcess, stream: str) -> WriteOptions:
    return WriteOptions.parse(
        {"controller": standalone.controller_uri, "scope": SCOPE, "stream": stream, "exactlyOnce": "false"}
    )


def _rows(count: int) -> tuple[list[bytes], list[str | None]]:
    """Rows ``<key>:<n>`` (n counting per key), a tenth of them without a routing key."""
    keys: list[str | None] = [f"k{i % 7}" if i % 10 else None for i in range(count)]
    return [b"%s:%05d" % ((key or "-").encode(), i) for i, key in enumerate(keys)], keys


def _batches(rows: Sequence[bytes], keys: Sequence[str | None], size: int) -> list[pa.RecordBatch]:
    return [
        pa.record_batch(
            [pa.array(rows[i : i + size], pa.binary()), pa.array(keys[i : i + size], pa.string())],
            names=["event", "routing_key"],
        )
        for i in range(0, len(rows), size)
    ]


async def _read(manager: StreamManager, stream: str) -> list[tuple[int, bytes]]:
    """Every event of the stream as (segment id, payload), each segment in order."""
    end = await manager.tail_cut(SCOPE, stream)
    async with manager.create_reader(SCOPE, stream, end=end) as reader:
        return [(event.segment_id, event.data) async for event in reader]


def _assert_key_order(events: list[tuple[int, bytes]]) -> None:
    """Rows of one routing key are in write order within each segment."""
    per_key: dict[tuple[int, bytes], list[bytes]] = {}
    for segment, event in events:
        key = event.split(b":")[0]
        if key != b"-":
            per_key.setdefault((segment, key), []).append(event)
    assert all(rows == sorted(rows) for rows in per_key.values())


class _FailingInput:
    """A task's input that stops after ``batches`` and waits (in the task's input thread) until the test says
    whether to go on, then fails as a lost executor would."""

    def __init__(self, batches: list[pa.RecordBatch]) -> None:
        self._batches = batches
        self.waiting: queue.Queue[None] = queue.Queue()
        self._go: queue.Queue[None] = queue.Queue()

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        yield from self._batches
        self.waiting.put(None)
        self._go.get(timeout=120)
        raise RuntimeError("executor lost mid-write")

    def fail(self) -> None:
        self._go.put(None)


async def _stored_bytes(manager: StreamManager, stream: str) -> int:
    cut = await manager.tail_cut(SCOPE, stream)
    return sum(cut.positions.values())


async def test_task_failing_mid_write_then_retried_stores_every_row_once(
    manager: StreamManager, standalone: StandaloneProcess, small_chunks: int
) -> None:
    stream = await _stream(manager, segments=2)
    rows, keys = _rows(2_000)
    batches = _batches(rows, keys, 50)
    task = _TaskInfo(partition=1, attempt=0, query_id="query-r", batch_id=7)
    first = _FailingInput(batches[:24])  # about half of the rows, then the executor is lost

    attempt = asyncio.create_task(_write_task(_options(standalone, stream), COLUMNS, iter(first), task))
    await asyncio.to_thread(first.waiting.get, True, 60)
    written = sum(len(r) + 8 for r in rows[: 24 * 50])
    deadline = time.monotonic() + 60
    while await _stored_bytes(manager, stream) < written // 2:  # chunks of the first half being stored
        assert time.monotonic() < deadline, "the first attempt stored nothing"
        await asyncio.sleep(0.02)
    first.fail()
    with pytest.raises(RuntimeError, match="executor lost"):
        await attempt
    before = [event for _, event in await _read(manager, stream)]
    assert 0 < len(before) < len(rows) and len(set(before)) == len(before)

    retried = _TaskInfo(partition=1, attempt=1, query_id="query-r", batch_id=7)
    message = await _write_task(_options(standalone, stream), COLUMNS, iter(batches), retried)

    assert message.rows == len(rows)
    events = await _read(manager, stream)
    assert sorted(event for _, event in events) == sorted(rows)  # each row once: the retry skipped what was stored
    _assert_key_order(events)


async def test_retry_reading_its_rows_in_another_order_loses_none(
    manager: StreamManager, standalone: StandaloneProcess, small_chunks: int
) -> None:
    stream = await _stream(manager, segments=2)
    rows, keys = _rows(600)
    task = _TaskInfo(partition=0, attempt=0, query_id="query-o", batch_id=1)
    await _write_task(_options(standalone, stream), COLUMNS, iter(_batches(rows, keys, 50)), task)

    # the same rows, in another order (as a shuffle's output may come): other chunks, other writer ids
    reordered = _batches(rows[::-1], keys[::-1], 50)
    retried = _TaskInfo(partition=0, attempt=1, query_id="query-o", batch_id=1)
    await _write_task(_options(standalone, stream), COLUMNS, iter(reordered), retried)

    events = [event for _, event in await _read(manager, stream)]
    assert sorted(events) == sorted(rows + rows)  # at least once: written again, nothing skipped wrongly


async def test_chunk_stored_in_part_by_an_earlier_attempt_is_finished_not_repeated(
    manager: StreamManager, standalone: StandaloneProcess
) -> None:
    stream = await _stream(manager, segments=1)
    rows, keys = _rows(1_000)
    task = _TaskInfo(partition=2, attempt=0, query_id="query-p", batch_id=3)
    segment = qualified_segment_name(SCOPE, stream, (await manager.current_segments(SCOPE, stream))[0].segment_id)
    framed = encode_events(rows)  # the rows are one chunk (far below a chunk's size)
    session_id = chunk_writer_id(task.writer_id(), segment, 0, len(rows), len(framed), zlib.crc32(framed))
    async with manager.client.writer(segment, session_id) as earlier:  # an earlier attempt stored 400 of them
        await (await earlier.write_many(rows[:400]))

    retried = _TaskInfo(partition=2, attempt=1, query_id="query-p", batch_id=3)
    await _write_task(_options(standalone, stream), COLUMNS, iter(_batches(rows, keys, 100)), retried)

    assert [event for _, event in await _read(manager, stream)] == rows  # in order, each once


async def test_write_across_a_scale_moves_what_was_not_stored_to_the_successors(
    manager: StreamManager, standalone: StandaloneProcess
) -> None:
    stream = await _stream(manager, segments=1)
    rows, keys = _rows(3_000)
    batches = _batches(rows, keys, 100)
    [only] = await manager.current_segments(SCOPE, stream)
    writer = PlainTaskWriter(manager, _options(standalone, stream), uuid.uuid4(), chunk_bytes=4096)
    try:
        for batch in batches[:12]:
            await writer.write(batch.column("event"), batch.column("routing_key"))
        # some of them stored before the seal (the rest may still be on their way: moved to the successors)
        first = qualified_segment_name(SCOPE, stream, only.segment_id)
        deadline = time.monotonic() + 60
        while (await manager.client.get_segment_info(first)).write_offset == 0:
            assert time.monotonic() < deadline, "nothing reached the segment"
            await asyncio.sleep(0.02)
        controller = manager.controller
        started = await controller.scale(SCOPE, stream, [only.segment_id], [(0.0, 0.5), (0.5, 1.0)], 0)
        deadline = time.monotonic() + 60
        while not await controller.check_scale(SCOPE, stream, started.epoch):
            assert time.monotonic() < deadline, "the scale did not complete"
            await asyncio.sleep(0.02)
        for batch in batches[12:]:
            await writer.write(batch.column("event"), batch.column("routing_key"))
        await writer.finish()
    except BaseException:
        await writer.cancel()
        raise

    assert writer.scales_followed == 1
    events = await _read(manager, stream)
    assert sorted(event for _, event in events) == sorted(rows)
    successors = {s.segment_id for s in started.new_segments}
    assert {segment for segment, _ in events} == {only.segment_id} | successors
    _assert_key_order(events)
    moved = [event for segment, event in events if segment in successors]
    assert rows[-1] in moved  # rows written after the scale went to the successors
