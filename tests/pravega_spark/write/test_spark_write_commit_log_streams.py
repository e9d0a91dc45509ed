"""The sink's exactly-once batch commit of transactions on several streams (per-row targets) against a real
standalone (no Spark session): the record names each transaction's stream, a crash after recording is finished on
every stream by the next run, a replayed batch commits nothing twice, and ``abort`` reaches every stream.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import AsyncIterator

import pytest
from standalone_process import StandaloneProcess

from controller_client import ControllerClient, ScalingPolicy, StreamConfiguration, StreamManager, TxnState
from controller_client.writers.txn_writer import Transaction, TxnWriterConfig
from pravega_spark.write.commit_log import (
    DONE,
    PENDING,
    BatchCommitter,
    BatchRecord,
    CommitLog,
    CommitOutcome,
    commit_table_name,
)

pytestmark = pytest.mark.spark

SCOPE = "commitlogrows"
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


async def _streams(manager: StreamManager, n: int) -> list[str]:
    names = [f"s{next(_names)}" for _ in range(n)]
    for name in names:
        await manager.create_stream(SCOPE, name, StreamConfiguration(ScalingPolicy.fixed(2)))
    return names


async def _txn(manager: StreamManager, stream: str, prefix: str) -> Transaction:
    writer = manager.create_txn_writer(SCOPE, stream, TxnWriterConfig(lease_ms=60_000))
    txn = await writer.begin()
    for i in range(10):
        await txn.write_event(f"{prefix}-{i}".encode(), routing_key=f"k{i % 3}")
    await txn.flush()
    return txn


async def _events(manager: StreamManager, stream: str) -> list[bytes]:
    end = await manager.tail_cut(SCOPE, stream)
    async with manager.create_reader(SCOPE, stream, end=end) as reader:
        return sorted([event.data async for event in reader])


def _rows(prefix: str) -> list[bytes]:
    return sorted(f"{prefix}-{i}".encode() for i in range(10))


def _committer(
    manager: StreamManager, txns: dict[uuid.UUID, str], hook: object = None, stream: str = ""
) -> BatchCommitter:
    """A committer as the sink makes it for rows naming their streams: without a ``stream`` option (``""``) its
    log is the scope's table of no stream; ``txns`` names each transaction's stream."""
    log = CommitLog(manager.client, SCOPE, stream)
    streams = {txn: (SCOPE, name) for txn, name in txns.items()}
    return BatchCommitter(manager.controller, log, SCOPE, stream, 60_000, crash_hook=hook, streams=streams)  # type: ignore[arg-type]


class _Crash(Exception):
    pass


async def test_commit_on_three_streams_records_each_transactions_stream(manager: StreamManager) -> None:
    names = await _streams(manager, 3)
    txns = {(await _txn(manager, name, name)).txn_id: name for name in names}
    committer = _committer(manager, txns)

    assert await committer.commit("q", 0, list(txns)) is CommitOutcome.COMMITTED

    for name in names:
        assert await _events(manager, name) == _rows(name)
    assert committer.log is not None and committer.log.table == commit_table_name(SCOPE, "")
    record, _ = await committer.log.get("q", 0) or (None, 0)
    assert record == BatchRecord(DONE, tuple(txns), {t: (SCOPE, n) for t, n in txns.items()})


async def test_a_crash_after_recording_is_finished_on_every_stream_and_the_replay_aborted(
    manager: StreamManager,
) -> None:
    names = await _streams(manager, 2)
    recorded = {(await _txn(manager, name, name)).txn_id: name for name in names}

    def crash(point: str, batch_id: int) -> None:
        if point == "recorded":
            raise _Crash(point)

    with pytest.raises(_Crash):
        await _committer(manager, recorded, crash).commit("q", 4, list(recorded))
    for name in names:
        assert await _events(manager, name) == []  # recorded, not committed: the driver "died"

    replays = [await _txn(manager, name, name) for name in names]  # the replayed batch writes the rows again
    replayed = {t.txn_id: name for t, name in zip(replays, names, strict=True)}
    # the new driver knows only its own transactions' streams; the record tells it the recorded ones'
    assert await _committer(manager, replayed).commit("q", 4, list(replayed)) is CommitOutcome.RECOVERED

    for txn in replays:
        assert await txn.wait_for_state() == TxnState.ABORTED
    for name in names:
        assert await _events(manager, name) == _rows(name)  # once
    again = [await _txn(manager, name, name) for name in names]
    later = {t.txn_id: name for t, name in zip(again, names, strict=True)}
    assert await _committer(manager, later).commit("q", 4, list(later)) is CommitOutcome.ALREADY_DONE
    for txn in again:
        assert await txn.wait_for_state() == TxnState.ABORTED


async def test_abort_reaches_every_stream_but_spares_recorded_transactions(manager: StreamManager) -> None:
    names = await _streams(manager, 2)
    kept, dropped = await _txn(manager, names[0], "k"), await _txn(manager, names[1], "d")
    log = CommitLog(manager.client, SCOPE, "")
    await log.insert("q", 1, BatchRecord(PENDING, (kept.txn_id,), {kept.txn_id: (SCOPE, names[0])}))

    committer = _committer(manager, {dropped.txn_id: names[1]})
    await committer.abort("q", 1, [kept.txn_id, dropped.txn_id])

    assert await kept.check_status() == TxnState.OPEN
    assert await dropped.wait_for_state() == TxnState.ABORTED


async def test_a_committer_with_a_stream_option_keeps_its_records_as_before(manager: StreamManager) -> None:
    home, other = await _streams(manager, 2)
    mine, theirs = await _txn(manager, home, "h"), await _txn(manager, other, "o")
    committer = _committer(manager, {mine.txn_id: home, theirs.txn_id: other}, stream=home)

    assert await committer.commit("q", 0, [mine.txn_id, theirs.txn_id]) is CommitOutcome.COMMITTED

    assert committer.log is not None and committer.log.table == commit_table_name(SCOPE, home)
    record, _ = await committer.log.get("q", 0) or (None, 0)
    assert record == BatchRecord(DONE, (mine.txn_id, theirs.txn_id), {theirs.txn_id: (SCOPE, other)})
    assert b'"streams"' not in BatchRecord(DONE, (mine.txn_id,)).encode()  # one stream: the record as it was
