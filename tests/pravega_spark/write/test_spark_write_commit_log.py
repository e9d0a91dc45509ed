"""The sink's commit log and exactly-once batch commit against a real standalone (no Spark session).

Each test opens real transactions, writes events into them, and drives :class:`BatchCommitter` through the
situations a Spark driver meets: a first commit, a replayed batch, a crash between recording and committing,
recorded transactions whose lease ran out, an expired lease on a new transaction, and Spark's ``abort``.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import AsyncIterator

import pyarrow as pa
import pytest
from standalone_process import StandaloneProcess

from controller_client import ControllerClient, ScalingPolicy, StreamConfiguration, StreamManager, TxnState
from controller_client.writers.routing import KeyHasher, hash_to_range
from controller_client.writers.txn_writer import Transaction, TxnWriterConfig
from pravega_spark.errors import CommitLogError
from pravega_spark.write.commit_log import (
    DONE,
    PENDING,
    BatchCommitter,
    BatchRecord,
    CommitLog,
    CommitOutcome,
    commit_table_name,
)
from pravega_spark.write.framing import Router as _Router
from segment_store.client import SegmentClient

pytestmark = pytest.mark.spark

SCOPE = "commitlog"
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


async def _new_stream(manager: StreamManager) -> str:
    stream = f"s{next(_names)}"
    await manager.create_stream(SCOPE, stream, StreamConfiguration(ScalingPolicy.fixed(2)))
    return stream


async def _txn(manager: StreamManager, stream: str, events: list[bytes], lease_ms: int = 60_000) -> Transaction:
    writer = manager.create_txn_writer(SCOPE, stream, TxnWriterConfig(lease_ms=lease_ms))
    txn = await writer.begin()
    for i, event in enumerate(events):
        await txn.write_event(event, routing_key=f"k{i % 5}")
    await txn.flush()
    return txn


async def _events(manager: StreamManager, stream: str) -> list[bytes]:
    end = await manager.tail_cut(SCOPE, stream)
    async with manager.create_reader(SCOPE, stream, end=end) as reader:
        return sorted([event.data async for event in reader])


def _committer(manager: StreamManager, stream: str, hook: object = None, lease_ms: int = 60_000) -> BatchCommitter:
    log = CommitLog(manager.client, SCOPE, stream)
    return BatchCommitter(manager.controller, log, SCOPE, stream, lease_ms, crash_hook=hook)  # type: ignore[arg-type]


def _rows(prefix: str, n: int = 20) -> list[bytes]:
    return [f"{prefix}-{i}".encode() for i in range(n)]


async def test_commit_with_a_new_batch_commits_and_records_it(manager: StreamManager) -> None:
    stream = await _new_stream(manager)
    a, b = await _txn(manager, stream, _rows("a")), await _txn(manager, stream, _rows("b"))
    committer = _committer(manager, stream)
    assert await _events(manager, stream) == []

    outcome = await committer.commit("q1", 0, [a.txn_id, b.txn_id])

    assert outcome is CommitOutcome.COMMITTED
    assert await _events(manager, stream) == sorted(_rows("a") + _rows("b"))
    assert await a.check_status() == TxnState.COMMITTED
    assert committer.log is not None
    record, _ = await committer.log.get("q1", 0) or (None, 0)
    assert record == BatchRecord(DONE, (a.txn_id, b.txn_id))
    assert committer.log.table == commit_table_name(SCOPE, stream)


async def test_commit_with_a_replayed_batch_aborts_the_new_transactions(manager: StreamManager) -> None:
    stream = await _new_stream(manager)
    first = await _txn(manager, stream, _rows("x"))
    committer = _committer(manager, stream)
    assert await committer.commit("q", 7, [first.txn_id]) is CommitOutcome.COMMITTED
    replay = await _txn(manager, stream, _rows("x"))  # the same rows, written again by the replayed batch

    assert await committer.commit("q", 7, [replay.txn_id]) is CommitOutcome.ALREADY_DONE

    assert await replay.wait_for_state() == TxnState.ABORTED
    assert await _events(manager, stream) == sorted(_rows("x"))
    # another query (or the same query's next batch) is not confused with it
    other = await _txn(manager, stream, _rows("y"))
    assert await committer.commit("other-query", 7, [other.txn_id]) is CommitOutcome.COMMITTED
    assert await _events(manager, stream) == sorted(_rows("x") + _rows("y"))


class _Crash(Exception):
    pass


async def test_commit_with_a_crash_after_recording_finishes_the_recorded_transactions(manager: StreamManager) -> None:
    stream = await _new_stream(manager)
    recorded = await _txn(manager, stream, _rows("r"))

    def crash(point: str, batch_id: int) -> None:
        if point == "recorded":
            raise _Crash(point)

    with pytest.raises(_Crash):
        await _committer(manager, stream, crash).commit("q", 3, [recorded.txn_id])
    assert await recorded.check_status() == TxnState.OPEN  # recorded, not committed: the driver "died"
    assert await _events(manager, stream) == []

    replay = await _txn(manager, stream, _rows("r"))
    outcome = await _committer(manager, stream).commit("q", 3, [replay.txn_id])

    assert outcome is CommitOutcome.RECOVERED
    assert await recorded.check_status() == TxnState.COMMITTED
    assert await replay.wait_for_state() == TxnState.ABORTED
    assert await _events(manager, stream) == sorted(_rows("r"))


async def test_commit_with_a_crash_after_committing_does_not_commit_twice(manager: StreamManager) -> None:
    stream = await _new_stream(manager)
    first = await _txn(manager, stream, _rows("c"))

    def crash(point: str, batch_id: int) -> None:
        if point == "committed":
            raise _Crash(point)

    with pytest.raises(_Crash):
        await _committer(manager, stream, crash).commit("q", 0, [first.txn_id])
    assert await _events(manager, stream) == sorted(_rows("c"))

    replay = await _txn(manager, stream, _rows("c"))
    assert await _committer(manager, stream).commit("q", 0, [replay.txn_id]) is CommitOutcome.ALREADY_DONE
    assert await replay.wait_for_state() == TxnState.ABORTED
    assert await _events(manager, stream) == sorted(_rows("c"))


async def test_commit_with_recorded_transactions_aborted_commits_the_new_ones(manager: StreamManager) -> None:
    stream = await _new_stream(manager)
    lost = await _txn(manager, stream, _rows("l"))
    log = CommitLog(manager.client, SCOPE, stream)
    assert await log.insert("q", 5, BatchRecord(PENDING, (lost.txn_id,))) is not None
    await lost.abort()  # e.g. its lease ran out while the driver was down
    assert await lost.wait_for_state() == TxnState.ABORTED

    replay = await _txn(manager, stream, _rows("l"))
    assert await _committer(manager, stream).commit("q", 5, [replay.txn_id]) is CommitOutcome.COMMITTED

    assert await _events(manager, stream) == sorted(_rows("l"))
    found = await log.get("q", 5)
    assert found is not None and found[0] == BatchRecord(DONE, (replay.txn_id,))


async def test_commit_with_an_expired_lease_fails_before_anything_is_visible(manager: StreamManager) -> None:
    stream = await _new_stream(manager)
    ok = await _txn(manager, stream, _rows("ok"))
    expired = await _txn(manager, stream, _rows("late"), lease_ms=1_000)
    assert await expired.wait_for_state(timeout_s=30) == TxnState.ABORTED

    with pytest.raises(CommitLogError, match="transactionTimeoutMs"):
        await _committer(manager, stream).commit("q", 0, [ok.txn_id, expired.txn_id])

    assert await _events(manager, stream) == []
    assert await ok.check_status() == TxnState.OPEN
    assert await _committer(manager, stream).log.get("q", 0) is None  # type: ignore[union-attr]


async def test_abort_keeps_the_transactions_a_record_holds(manager: StreamManager) -> None:
    stream = await _new_stream(manager)
    recorded, other = await _txn(manager, stream, _rows("k")), await _txn(manager, stream, _rows("o"))
    log = CommitLog(manager.client, SCOPE, stream)
    await log.insert("q", 1, BatchRecord(PENDING, (recorded.txn_id,)))

    await _committer(manager, stream).abort("q", 1, [recorded.txn_id, other.txn_id])

    assert await other.wait_for_state() == TxnState.ABORTED
    assert await recorded.check_status() == TxnState.OPEN
    assert await _committer(manager, stream).commit("q", 1, []) is CommitOutcome.RECOVERED
    assert await _events(manager, stream) == sorted(_rows("k"))


async def test_commit_log_lives_in_a_durable_table_segment(manager: StreamManager) -> None:
    stream = await _new_stream(manager)
    log = CommitLog(manager.client, SCOPE, stream)
    txn = uuid.uuid4()
    version = await log.insert("q", 2, BatchRecord(PENDING, (txn,)))
    assert version is not None
    assert await log.insert("q", 2, BatchRecord(PENDING, ())) is None  # insert-only
    assert await log.replace("q", 2, BatchRecord(DONE, (txn,)), version + 1000) is None  # stale version
    # a second client (another driver process) sees the same record
    async with SegmentClient(manager.resolver) as other:  # type: ignore[arg-type]
        found = await CommitLog(other, SCOPE, stream).get("q", 2)
    assert found == (BatchRecord(PENDING, (txn,)), version)
    await log.forget("q", 2)
    assert await log.get("q", 2) is None


# ---- routing of Arrow batches (no network) -------------------------------------------------------------------


def _segments(n: int) -> list:  # type: ignore[type-arg]
    from controller_client import SegmentRange

    return [SegmentRange(i, i / n, (i + 1) / n) for i in range(n)]


def test_router_with_routing_keys_uses_the_pravega_hash_and_keeps_order() -> None:
    router = _Router(_segments(3), KeyHasher())
    keys = [f"user-{i % 11}" if i % 13 else None for i in range(2_000)]
    events = pa.array([f"{i}".encode() for i in range(2_000)], pa.binary())

    parts = router.split(events, pa.array(keys, pa.string()))

    seen: list[int] = []
    for segment, part in parts:
        rows = [int(e) for e in part.to_pylist()]
        assert rows == sorted(rows)  # order within a segment = order in the batch
        for row in rows:
            if keys[row] is not None:
                assert segment.owns(hash_to_range(keys[row]))
        seen += rows
    assert sorted(seen) == list(range(2_000))


def test_router_without_keys_spreads_contiguous_slices_over_all_segments() -> None:
    router = _Router(_segments(4), KeyHasher())
    events = pa.array([b"e%d" % i for i in range(1_001)], pa.binary())

    parts = router.split(events, None)

    assert {segment.segment_id for segment, _ in parts} == {0, 1, 2, 3}
    assert [len(p) for _, p in parts] == [251, 251, 251, 248]
    assert pa.concat_arrays([p for _, p in parts]).equals(events)
