"""Durable log over the in-memory Tier-1: ordered acks, recovery, checkpoints and truncation, failures."""

from __future__ import annotations

import asyncio

import pytest
from container_env import wait_until

from segment_store.logs.config import DurableLogConfig
from segment_store.logs.durable_log import DurableLog, LogState
from segment_store.logs.operations import (
    AppendOperation,
    MapSegmentOperation,
    Operation,
    SealOperation,
)
from segment_store.metadata import ContainerMetadata
from segment_store.tier1.log import LogAddress
from segment_store.tier1.memory_log import InMemoryDurableDataLog, SharedLogState
from segstore_shared.contracts import ContainerOfflineError, SegmentNotExistsError, SegmentSealedError

pytestmark = pytest.mark.unit

SMALL = DurableLogConfig(
    max_frame_bytes=4096,
    checkpoint_min_commit_count=5,
    checkpoint_commit_count=20,
    checkpoint_total_commit_length_bytes=1 << 20,
)


class FailingLog(InMemoryDurableDataLog):
    """The real in-memory log, made to fail appends once ``fail_after`` entries were written."""

    def __init__(self, shared: SharedLogState, fail_after: int) -> None:
        super().__init__(shared)
        self.fail_after = fail_after

    def append(self, data: bytes | bytearray) -> asyncio.Future[LogAddress]:
        if len(self._shared.entries) >= self.fail_after:
            future: asyncio.Future[LogAddress] = asyncio.get_running_loop().create_future()
            future.set_exception(OSError("injected Tier-1 write failure"))
            return future
        return super().append(data)


async def open_log(shared: SharedLogState, config: DurableLogConfig = SMALL, data_log=None) -> DurableLog:  # type: ignore[no-untyped-def]
    log = DurableLog(ContainerMetadata(7), data_log or InMemoryDurableDataLog(shared), config)
    seen: list[Operation] = []
    log.add_listener(seen.extend)
    log.seen = seen  # type: ignore[attr-defined]
    await log.recover()
    log.start()
    return log


async def create(log: DurableLog, name: str) -> int:
    op = await log.add(MapSegmentOperation(name=name))
    return op.segment_id  # type: ignore[attr-defined]


async def test_add_with_many_concurrent_appends_acks_in_order() -> None:
    log = await open_log(SharedLogState())
    sid = await create(log, "s")
    futures = [log.add(AppendOperation(segment_id=sid, data=bytes([i % 256]) * 700)) for i in range(200)]
    done = await asyncio.gather(*futures)
    assert [op.offset for op in done] == [i * 700 for i in range(200)]  # type: ignore[attr-defined]
    assert [op.sequence_number for op in done] == sorted(op.sequence_number for op in done)
    assert log.metadata.get(sid).length == 200 * 700
    appended = [op for op in log.seen if isinstance(op, AppendOperation)]  # type: ignore[attr-defined]
    assert len(appended) == 200
    await log.close()


async def test_add_with_invalid_operation_fails_only_it() -> None:
    log = await open_log(SharedLogState())
    sid = await create(log, "s")
    await log.add(SealOperation(segment_id=sid))
    bad = log.add(AppendOperation(segment_id=sid, data=b"x"))
    missing = log.add(AppendOperation(segment_id=999, data=b"x"))
    good = log.add(MapSegmentOperation(name="t"))
    with pytest.raises(SegmentSealedError):
        await bad
    with pytest.raises(SegmentNotExistsError):
        await missing
    assert (await good).segment_id != sid  # type: ignore[attr-defined]
    await log.close()


async def test_add_then_calls_back_once_in_order_and_survives_a_raising_callback() -> None:
    log = await open_log(SharedLogState())
    sid = await create(log, "s")
    calls: list[tuple[int | None, str | None]] = []
    everything = asyncio.Event()

    def record(op: Operation | None, error: BaseException | None) -> None:
        calls.append((op.offset if op is not None else None, type(error).__name__ if error else None))  # type: ignore[attr-defined]
        if len(calls) == 4:
            everything.set()

    def broken(op: Operation | None, error: BaseException | None) -> None:
        raise RuntimeError("a caller's bug")

    log.add_then(AppendOperation(segment_id=sid, data=b"a" * 10), record)
    log.add_then(AppendOperation(segment_id=sid, data=b"b" * 10), broken)
    log.add_then(AppendOperation(segment_id=999, data=b"x"), record)  # fails validation: only it
    log.add_then(AppendOperation(segment_id=sid, data=b"c" * 10), record)
    assert calls == []  # nothing is durable yet
    await asyncio.wait_for(log.add(MapSegmentOperation(name="later")), 5)  # behind all four: they are done
    log.add_then(AppendOperation(segment_id=sid, data=b"d" * 10), record)
    await asyncio.wait_for(everything.wait(), 5)
    assert calls == [(None, "SegmentNotExistsError"), (0, None), (20, None), (30, None)]  # validation: at once
    assert log.state is LogState.RUNNING and log.metadata.get(sid).length == 40
    await log.close()
    log.add_then(AppendOperation(segment_id=sid, data=b"e"), record)  # a closed log answers at once
    assert calls[-1] == (None, "ContainerOfflineError")


async def test_recover_with_acknowledged_operations_rebuilds_metadata_and_listeners() -> None:
    shared = SharedLogState()
    log = await open_log(shared)
    sid = await create(log, "s")
    payload = [bytes([i]) * (i * 31 % 5000 + 1) for i in range(60)]  # spans frames
    for p in payload:
        await log.add(AppendOperation(segment_id=sid, data=p))
    await log.add(SealOperation(segment_id=sid))
    expected = [s.to_json() for s in log.metadata.segments()]
    await log.close()

    again = await open_log(shared)
    assert [s.to_json() for s in again.metadata.segments()] == expected
    replayed = b"".join(op.data for op in again.seen if isinstance(op, AppendOperation))  # type: ignore[attr-defined]
    assert replayed == b"".join(payload)
    with pytest.raises(SegmentSealedError):
        await again.add(AppendOperation(segment_id=sid, data=b"x"))
    await again.close()


async def test_truncate_with_checkpoint_recovers_from_it() -> None:
    shared = SharedLogState()
    log = await open_log(shared)
    sid = await create(log, "s")
    for i in range(50):
        await log.add(AppendOperation(segment_id=sid, data=b"%03d" % i))
    cp = await log.checkpoint()
    for i in range(50, 60):
        await log.add(AppendOperation(segment_id=sid, data=b"%03d" % i))
    assert await log.truncate(cp) is not None
    assert len(log.memory_log) == 10
    await log.close()

    again = await open_log(shared)
    assert again.metadata.get(sid).length == 180
    replayed = b"".join(op.data for op in again.seen if isinstance(op, AppendOperation))  # type: ignore[attr-defined]
    assert replayed == b"".join(b"%03d" % i for i in range(50, 60))
    await again.close()


async def test_truncate_with_no_checkpoint_below_does_nothing() -> None:
    log = await open_log(SharedLogState())
    sid = await create(log, "s")
    await log.add(AppendOperation(segment_id=sid, data=b"abc"))
    assert await log.truncate(0) is None
    await log.close()


async def test_policy_with_many_commits_writes_checkpoints() -> None:
    shared = SharedLogState()
    log = await open_log(shared)
    sid = await create(log, "s")
    for _ in range(70):
        await log.add(AppendOperation(segment_id=sid, data=b"e"))
    # the checkpoints the policy asks for are written after the commits that asked for them
    await wait_until(lambda: len(log._truncation_points) >= 3, "three checkpoints are written", 10)  # type: ignore[attr-defined]
    await log.close()


async def test_restarts_each_before_the_checkpoint_count_still_checkpoint_and_truncate() -> None:
    """The count of operations since the last checkpoint carries over a restart (recovery counts what it replays):
    a container that restarts every 12 operations (the policy asks for 20) still checkpoints and truncates Tier-1."""
    shared = SharedLogState()
    log = await open_log(shared)
    sid = await create(log, "s")
    await log.close()
    for instance in range(3):
        log = await open_log(shared)
        for i in range(12):
            await log.add(AppendOperation(segment_id=sid, data=b"%d-%02d" % (instance, i)))
        await log.close()
    again = await open_log(shared)
    assert again._truncation_points, "no checkpoint in Tier-1 after 37 operations"  # type: ignore[attr-defined]
    checkpoint = again._truncation_points[-1].checkpoint_sequence  # type: ignore[attr-defined]
    assert await again.truncate(checkpoint) is not None
    await again.close()
    last = await open_log(shared)
    assert last.metadata.get(sid).length == 36 * 4
    await last.close()


async def test_recovery_that_replays_past_the_checkpoint_count_checkpoints_at_start() -> None:
    shared = SharedLogState()
    lazy = DurableLogConfig(max_frame_bytes=4096, checkpoint_min_commit_count=100, checkpoint_commit_count=1000)
    log = await open_log(shared, lazy)
    sid = await create(log, "s")
    for i in range(30):
        await log.add(AppendOperation(segment_id=sid, data=b"%02d" % i))
    await log.close()
    again = await open_log(shared)  # SMALL: 31 replayed operations are past its 20
    await wait_until(lambda: bool(again._truncation_points), "a checkpoint right after recovery", 10)  # type: ignore[attr-defined]
    await again.close()


async def test_tier1_failure_with_ops_in_flight_fails_them_and_rolls_back() -> None:
    shared = SharedLogState()
    log = await open_log(shared, data_log=FailingLog(shared, fail_after=3))
    sid = await create(log, "s")
    ok = await log.add(AppendOperation(segment_id=sid, data=b"a" * 100))
    doomed = [log.add(AppendOperation(segment_id=sid, data=b"b" * 3000)) for _ in range(5)]
    results = await asyncio.gather(*doomed, return_exceptions=True)
    assert any(isinstance(r, ContainerOfflineError) for r in results)
    acked = [r for r in results if not isinstance(r, BaseException)]
    assert log.state is LogState.FAILED
    assert log.metadata.get(sid).length == 100 + 3000 * len(acked)
    assert log.updater.segment_by_id(sid).length == log.metadata.get(sid).length  # pending rolled back
    with pytest.raises(ContainerOfflineError):
        await log.add(AppendOperation(segment_id=sid, data=b"c"))
    await log.close()

    again = await open_log(shared)  # Tier-1 holds exactly what was acknowledged
    assert again.metadata.get(sid).length == ok.offset + 100 + 3000 * len(acked)  # type: ignore[attr-defined]
    await again.close()


async def test_second_owner_with_recovery_fences_first() -> None:
    shared = SharedLogState()
    first = await open_log(shared)
    sid = await create(first, "s")
    await first.add(AppendOperation(segment_id=sid, data=b"abc"))
    second = await open_log(shared)
    with pytest.raises(ContainerOfflineError):
        await first.add(AppendOperation(segment_id=sid, data=b"zombie"))
    assert first.state is LogState.FAILED
    assert second.metadata.get(sid).length == 3
    await second.add(AppendOperation(segment_id=sid, data=b"def"))
    assert second.metadata.get(sid).length == 6
    await first.close()
    await second.close()


async def test_recover_with_file_ledger_log_replays_fsynced_frames(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from segment_store.tier1.file.config import FileLedgerLogConfig
    from segment_store.tier1.file.ledger_log import FileLedgerLog
    from segstore_shared.coordination.memory_store import MemoryCoordinationServer

    server = MemoryCoordinationServer()
    config = FileLedgerLogConfig(root_dir=tmp_path)

    async def open_file_log() -> DurableLog:
        return await open_log(SharedLogState(), data_log=FileLedgerLog("container-7", config, server.connect()))

    log = await open_file_log()
    sid = await create(log, "s")
    payload = [bytes([i % 256]) * (i * 97 % 9000 + 1) for i in range(120)]
    acks = await asyncio.gather(*(log.add(AppendOperation(segment_id=sid, data=p)) for p in payload))
    assert [a.offset for a in acks] == sorted(a.offset for a in acks)  # type: ignore[attr-defined]
    await log.close()

    again = await open_file_log()
    assert again.metadata.get(sid).length == sum(map(len, payload))
    replayed = b"".join(op.data for op in again.seen if isinstance(op, AppendOperation))  # type: ignore[attr-defined]
    assert replayed == b"".join(payload)
    await again.close()
