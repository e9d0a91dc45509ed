"""The sink's write task (what runs on an executor) against a real standalone, without a Spark session:
lease renewal while the input is slow, a bad row, and the at-least-once writer id."""

from __future__ import annotations

import asyncio
import contextlib
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
from controller_client.model import TxnState, qualified_segment_name
from controller_client.ports import ControllerApi
from controller_client.writers.txn_writer import Transaction
from pravega_spark.errors import SegstoreSchemaError
from pravega_spark.options.write import WriteOptions
from pravega_spark.write.commit_log import BatchCommitter
from pravega_spark.write.plain import chunk_writer_id
from pravega_spark.write.sink import SinkColumns, _TaskInfo, _write_task
from segment_store.protocol import encode_events

pytestmark = pytest.mark.spark

SCOPE = "sinktask"
_names = itertools.count()


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


async def _stream(manager: StreamManager, segments: int = 2) -> str:
    stream = f"t{next(_names)}"
    await manager.create_stream(SCOPE, stream, StreamConfiguration(ScalingPolicy.fixed(segments)))
    return stream


def _options(standalone: StandaloneProcess, stream: str, **extra: str) -> WriteOptions:
    return WriteOptions.parse({"controller": standalone.controller_uri, "scope": SCOPE, "stream": stream, **extra})


def _batch(rows: Sequence[bytes | None], keys: Sequence[str | None] | None = None) -> pa.RecordBatch:
    columns = [pa.array(rows, pa.binary())]
    if keys is not None:
        columns.append(pa.array(keys, pa.string()))
    return pa.record_batch(columns, names=["event", "routing_key"][: len(columns)])


async def _events(manager: StreamManager, stream: str) -> list[bytes]:
    end = await manager.tail_cut(SCOPE, stream)
    async with manager.create_reader(SCOPE, stream, end=end) as reader:
        return sorted([event.data async for event in reader])


class _GatedInput:
    """A task's input that the test paces: after each batch the task's next request for input waits (in the
    task's input thread) until the test lets it through; the test learns of each wait on ``asked``."""

    def __init__(self, batches: list[pa.RecordBatch], log: list[str]) -> None:
        self._batches = batches
        self._log = log
        self.asked: queue.Queue[None] = queue.Queue()
        self._go: queue.Queue[bool] = queue.Queue()

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        for batch in self._batches:
            yield batch
            self.asked.put(None)  # the task has taken the batch and waits for more input
            if not self._go.get(timeout=120):
                raise RuntimeError("the test ended before the input did")
        self._log.append("end of input")

    async def next_wait(self) -> None:
        await asyncio.to_thread(self.asked.get, True, 60)

    def release(self) -> None:
        self._go.put(True)

    def close(self) -> None:
        self._go.put(False)


async def _outlive_a_lease(controller: ControllerApi, stream: str, lease_ms: int) -> None:
    """Return once the controller has aborted a transaction of ``lease_ms`` begun now and never renewed: a
    transaction whose lease was last renewed before this call has run out and been aborted by then too."""
    txn_id, _ = await controller.create_transaction(SCOPE, stream, lease_ms)
    deadline = time.monotonic() + 30
    while await controller.check_transaction_state(SCOPE, stream, txn_id) != TxnState.ABORTED:
        assert time.monotonic() < deadline, "the controller did not abort an expired transaction"
        await asyncio.sleep(0.05)


async def test_task_with_slow_input_keeps_its_transaction_alive(
    manager: StreamManager, standalone: StandaloneProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each time the task waits for input, the wait lasts until the controller has aborted an unrenewed
    transaction begun during it (so the task's own lease ran out too unless renewed); the task's renewals are
    observed by wrapping ``Transaction.ping``."""
    stream = await _stream(manager)
    lease_ms = 1500
    options = _options(standalone, stream, transactionTimeoutMs=str(lease_ms))
    log: list[str] = []  # "ping <txn id>" as each lease renewal succeeds, and "end of input", in order
    pinged = asyncio.Event()
    renew = Transaction.ping

    async def observed_ping(txn: Transaction, lease: int | None = None) -> None:
        await renew(txn, lease)
        log.append(f"ping {txn.txn_id}")
        pinged.set()

    monkeypatch.setattr(Transaction, "ping", observed_ping)
    rows = [[b"slow-%d-%d" % (n, i) for i in range(50)] for n in range(3)]
    gate = _GatedInput([_batch(r) for r in rows], log)
    task = asyncio.create_task(
        _write_task(options, SinkColumns("event", None), iter(gate), _TaskInfo(0, 0, None, None))
    )
    try:
        for _ in rows:
            await gate.next_wait()
            renewals = len(log)
            await _outlive_a_lease(manager.controller, stream, lease_ms)  # the task waits for input meanwhile
            assert len(log) > renewals, "the task did not renew its lease while it waited for input"
            [txn_id] = {entry.split()[1] for entry in log}
            state = await manager.controller.check_transaction_state(SCOPE, stream, uuid.UUID(txn_id))
            assert state == TxnState.OPEN  # renewed; an unrenewed one would have been aborted with the other
            pinged.clear()
            await asyncio.wait_for(pinged.wait(), 30)
            gate.release()  # just after a renewal: the next background one is a ping interval away
        message = await asyncio.wait_for(task, 60)
    finally:
        gate.close()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task

    assert f"ping {txn_id}" in log[log.index("end of input") :]  # renewed as the task ended: a full lease
    assert message.rows == 150 and message.txn_ids == (txn_id,)
    committer = BatchCommitter(manager.controller, None, SCOPE, stream, options.transaction_timeout_ms)
    await committer.commit_unlogged([uuid.UUID(t) for t in message.txn_ids], "test")
    assert await _events(manager, stream) == sorted(e for r in rows for e in r)


async def test_task_with_a_null_event_fails_naming_the_column(
    manager: StreamManager, standalone: StandaloneProcess
) -> None:
    stream = await _stream(manager)
    batches = iter([_batch([b"ok"] * 10), _batch([b"a", None, b"c"])])

    with pytest.raises(SegstoreSchemaError, match=r"^column 'event': must not be null \(row 1"):
        await _write_task(
            _options(standalone, stream), SinkColumns("event", None), batches, _TaskInfo(0, 0, None, None)
        )

    assert await _events(manager, stream) == []  # its transaction was aborted, never committed


async def test_task_without_rows_opens_no_transaction(manager: StreamManager, standalone: StandaloneProcess) -> None:
    stream = await _stream(manager)
    batches = iter([_batch([])])
    message = await _write_task(
        _options(standalone, stream), SinkColumns("event", None), batches, _TaskInfo(2, 0, "q", 9)
    )
    assert (message.txn_ids, message.rows, message.partition, message.query_id, message.batch_id) == ((), 0, 2, "q", 9)


async def test_at_least_once_task_writes_at_once_under_a_deterministic_writer_id(
    manager: StreamManager, standalone: StandaloneProcess
) -> None:
    stream = await _stream(manager, segments=1)
    task = _TaskInfo(partition=3, attempt=0, query_id="query-1", batch_id=4)
    rows = [b"plain-%d" % i for i in range(300)]
    keys: list[str | None] = [f"k{i % 3}" if i % 2 else None for i in range(300)]

    message = await _write_task(
        _options(standalone, stream, exactlyOnce="false"),
        SinkColumns("event", "routing_key"),
        iter([_batch(rows[:100], keys[:100]), _batch(rows[100:], keys[100:])]),
        task,
    )

    assert message.txn_ids == () and message.rows == 300
    assert await _events(manager, stream) == sorted(rows)  # visible without a commit
    assert message.writer_id == str(task.writer_id()) == str(_TaskInfo(3, 1, "query-1", 4).writer_id())
    assert _TaskInfo(3, 0, "query-1", 5).writer_id() != task.writer_id()
    assert _TaskInfo(3, 0, None, None, "w").writer_id() == _TaskInfo(3, 1, None, None, "w").writer_id()
    assert _TaskInfo(3, 0, None, None, "w").writer_id() != _TaskInfo(3, 0, None, None, "v").writer_id()
    segment = qualified_segment_name(SCOPE, stream, (await manager.current_segments(SCOPE, stream))[0].segment_id)
    # one chunk (the rows are far below a chunk's size): the segment store tracks its session's last event
    # number, under a writer id that names the chunk's content; a retry's session is checked against it
    framed = encode_events(rows)
    chunk_id = chunk_writer_id(uuid.UUID(message.writer_id), segment, 0, 300, len(framed), zlib.crc32(framed))
    session = manager.client.writer(segment, chunk_id)
    try:
        assert await session.open() == 300
    finally:
        await session.close()


async def test_task_over_more_segments_than_pooled_connections(
    manager: StreamManager, standalone: StandaloneProcess
) -> None:
    stream = await _stream(manager, segments=9)
    options = _options(standalone, stream)
    rows = [b"%05d" % i for i in range(3_000)]
    keys: list[str | None] = [f"key-{i % 37}" for i in range(3_000)]
    batches = iter([_batch(rows[i : i + 500], keys[i : i + 500]) for i in range(0, 3_000, 500)])

    message = await _write_task(options, SinkColumns("event", "routing_key"), batches, _TaskInfo(0, 0, None, None))
    committer = BatchCommitter(manager.controller, None, SCOPE, stream, options.transaction_timeout_ms)
    await committer.commit_unlogged([uuid.UUID(t) for t in message.txn_ids], "test")

    end = await manager.tail_cut(SCOPE, stream)
    per_key: dict[int, list[int]] = {}
    async with manager.create_reader(SCOPE, stream, end=end) as reader:
        async for event in reader:
            per_key.setdefault(int(event.data) % 37, []).append(int(event.data))
    assert sorted(i for ids in per_key.values() for i in ids) == list(range(3_000))
    assert all(ids == sorted(ids) for ids in per_key.values())  # each key in write order
    assert len(await manager.current_segments(SCOPE, stream)) == 9
