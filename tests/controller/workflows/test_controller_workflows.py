"""Controller workflows against a real (in-memory) segment store: what each does to segments and
metadata, and that a controller dying midway leaves work the next controller finishes."""

from __future__ import annotations

import asyncio
import logging
import uuid

import pytest
from controller_env import FAST_RETRY, ControllerEnv, Crash, read_events, write_events

from controller.core import ControllerCore
from controller.errors import (
    LeaseTooLargeError,
    ScalePreconditionError,
    ScopeNotFoundError,
    StreamBeingCreatedError,
    StreamNotSealedError,
    StreamSealedError,
    TxnStateError,
)
from controller.metadata import StreamState
from controller.segment_ops import SegmentStoreOps
from controller_client.model import (
    RetentionPolicy,
    ScalingPolicy,
    StreamConfiguration,
    StreamCut,
    TxnState,
    qualified_segment_name,
    segment_id,
    transaction_segment_name,
)
from segment_store.client import NoSuchSegmentError

pytestmark = pytest.mark.integration

FOUR = StreamConfiguration(ScalingPolicy.fixed(4))


def name(stream: str, sid: int, scope: str = "s") -> str:
    return qualified_segment_name(scope, stream, sid)


async def test_create_stream_creates_its_segments_and_is_idempotent(env: ControllerEnv) -> None:
    core = env.core()
    assert await core.create_scope("s")
    assert await core.create_stream("s", "st", FOUR)
    assert not await core.create_stream("s", "st", StreamConfiguration(ScalingPolicy.fixed(2)))
    segments = await core.current_segments("s", "st")
    assert [round(r.key_end, 2) for r in segments] == [0.25, 0.5, 0.75, 1.0]
    for r in segments:
        assert (await env.client.get_segment_info(name("st", r.segment_id))).exists
    assert await core.store.get_state("s", "st") == StreamState.ACTIVE


async def test_create_stream_in_missing_scope_fails_and_writes_nothing(env: ControllerEnv) -> None:
    core = env.core()
    with pytest.raises(ScopeNotFoundError):
        await core.create_stream("nope", "st", FOUR)
    assert not await core.scope_exists("nope")


async def test_create_stream_interrupted_midway_is_finished_by_the_next_controller(env: ControllerEnv) -> None:
    core, ops = env.crashing_core()
    await core.create_scope("s")
    ops.crash_on, ops.after = "create_segment", 2
    with pytest.raises(Crash):
        await core.create_stream("s", "st", FOUR)
    assert await core.store.get_state("s", "st") == StreamState.CREATING

    successor = env.core()
    await successor.streams.resume("s", "st")
    assert await successor.store.get_state("s", "st") == StreamState.ACTIVE
    for r in await successor.current_segments("s", "st"):
        assert (await env.client.get_segment_info(name("st", r.segment_id))).exists


async def test_policy_loops_skip_a_stream_still_being_created_and_report_a_broken_one(
    env: ControllerEnv, caplog: pytest.LogCaptureFixture
) -> None:
    core, ops = env.crashing_core()
    await core.create_scope("s")
    ops.crash_on, ops.after = "create_segment", 2
    with pytest.raises(Crash):
        await core.create_stream("s", "creating", FOUR)
    await core.store._coord.delete(core.store._sp("s", "creating", "config"))  # as if listed mid-creation
    ops.crash_on = None
    await core.create_stream("s", "broken", FOUR)
    await core.store._coord.delete(core.store._sp("s", "broken", "config"))
    with caplog.at_level(logging.ERROR, logger="controller.core"):
        await core.apply_auto_scaling()
        await core.apply_retention()
    failed = sorted(record.getMessage() for record in caplog.records)
    assert failed == ["auto-scale of s/broken failed", "retention of s/broken failed"]


async def test_scale_splits_a_segment_seals_it_and_links_successors(env: ControllerEnv) -> None:
    core = env.core()
    await core.create_scope("s")
    await core.create_stream("s", "st", StreamConfiguration(ScalingPolicy.fixed(2)))
    await write_events(env.client, name("st", 0), [b"before-1", b"before-2"])

    new, epoch = await core.scale("s", "st", [0], [(0.0, 0.25), (0.25, 0.5)], 0)
    assert epoch == 0 and [s.segment_id for s in new] == [segment_id(2, 1), segment_id(3, 1)]
    await core.streams.run_scale("s", "st")

    assert (await env.client.get_segment_info(name("st", 0))).sealed
    successors = await core.successors("s", "st", 0)
    assert {s.segment_id: p for s, p in successors.items()} == {segment_id(2, 1): [0], segment_id(3, 1): [0]}
    assert await core.check_scale("s", "st", 0) == "SUCCESS"
    assert sorted(s.segment_id for s in await core.current_segments("s", "st")) == [
        1,
        segment_id(2, 1),
        segment_id(3, 1),
    ]
    assert await read_events(env.client, name("st", 0)) == [b"before-1", b"before-2"]


async def test_scale_with_ranges_that_do_not_cover_the_sealed_segment_is_rejected(env: ControllerEnv) -> None:
    core = env.core()
    await core.create_scope("s")
    await core.create_stream("s", "st", StreamConfiguration(ScalingPolicy.fixed(2)))
    with pytest.raises(ScalePreconditionError):
        await core.scale("s", "st", [0], [(0.0, 0.2)], 0)
    transition, _ = await core.store.get_epoch_transition("s", "st")
    assert transition.is_empty


async def test_scale_interrupted_after_sealing_is_completed_by_the_next_controller(env: ControllerEnv) -> None:
    core, ops = env.crashing_core()
    await core.create_scope("s")
    await core.create_stream("s", "st", StreamConfiguration(ScalingPolicy.fixed(2)))
    ops.crash_on, ops.after = "seal_segment", 0
    await core.streams.submit_scale("s", "st", [1], [(0.5, 0.75), (0.75, 1.0)], 1)
    with pytest.raises(Crash):
        await core.streams.run_scale("s", "st")
    assert (await core.store.get_active_epoch("s", "st")).epoch == 0

    successor = env.core()
    await successor.streams.resume("s", "st")
    assert (await successor.store.get_active_epoch("s", "st")).epoch == 1
    assert await successor.store.get_state("s", "st") == StreamState.ACTIVE
    assert (await env.client.get_segment_info(name("st", 1))).sealed


async def _txn_write(env: ControllerEnv, stream: str, txn, segments, events: list[bytes]) -> None:  # type: ignore[no-untyped-def]
    for r in segments:
        await write_events(env.client, transaction_segment_name(name(stream, r.segment_id), txn), events)


async def test_committed_transaction_lands_in_its_segments_and_aborted_one_disappears(env: ControllerEnv) -> None:
    core = env.core()
    await core.create_scope("s")
    await core.create_stream("s", "st", StreamConfiguration(ScalingPolicy.fixed(2)))
    committed, segments = await core.create_transaction("s", "st", 10_000)
    aborted, _ = await core.create_transaction("s", "st", 10_000)
    await _txn_write(env, "st", committed, segments, [b"c1", b"c2"])
    await _txn_write(env, "st", aborted, segments, [b"a1"])

    await core.abort_transaction("s", "st", aborted)
    await core.commit_transaction("s", "st", committed)
    await core.txns.wait_committed("s", "st")

    assert await core.transaction_state("s", "st", committed) == TxnState.COMMITTED
    for r in segments:
        assert await read_events(env.client, name("st", r.segment_id)) == [b"c1", b"c2"]
    with pytest.raises(TxnStateError):
        await core.commit_transaction("s", "st", aborted)


async def test_transaction_from_before_a_scale_rolls_over_when_committed(env: ControllerEnv) -> None:
    core = env.core()
    await core.create_scope("s")
    await core.create_stream("s", "st", StreamConfiguration(ScalingPolicy.fixed(1)))
    txn, segments = await core.create_transaction("s", "st", 60_000)
    await _txn_write(env, "st", txn, segments, [b"in-txn"])
    await core.scale("s", "st", [0], [(0.0, 0.5), (0.5, 1.0)], 0)
    await core.streams.run_scale("s", "st")

    await core.commit_transaction("s", "st", txn)
    await core.txns.wait_committed("s", "st")

    active = await core.store.get_active_epoch("s", "st")
    assert active.epoch == 3  # epoch 2 repeats epoch 0 (the transaction's), epoch 3 repeats epoch 1
    rolled = segment_id(0, 2)
    assert await read_events(env.client, name("st", rolled)) == [b"in-txn"]
    assert (await env.client.get_segment_info(name("st", rolled))).sealed
    assert sorted(s.segment_id for s in active.segments) == [segment_id(1, 3), segment_id(2, 3)]
    assert await core.transaction_state("s", "st", txn) == TxnState.COMMITTED


async def test_commit_interrupted_midway_is_finished_by_the_next_controller(env: ControllerEnv) -> None:
    core, ops = env.crashing_core()
    await core.create_scope("s")
    await core.create_stream("s", "st", StreamConfiguration(ScalingPolicy.fixed(2)))
    txn, segments = await core.create_transaction("s", "st", 60_000)
    await _txn_write(env, "st", txn, segments, [b"x"])
    ops.crash_on, ops.after = "commit_txn_segment", 1
    core.txns.retry_delay_s = 3600  # the dying controller does not retry
    await core.commit_transaction("s", "st", txn)
    assert await core.transaction_state("s", "st", txn) == TxnState.COMMITTING
    await core.stop()

    successor = env.core()
    await successor.txns.resume("s", "st")
    await successor.txns.wait_committed("s", "st")
    assert await successor.transaction_state("s", "st", txn) == TxnState.COMMITTED
    for r in segments:
        assert await read_events(env.client, name("st", r.segment_id)) == [b"x"]


async def test_a_commit_marked_while_the_committer_ends_its_pass_is_still_committed(env: ControllerEnv) -> None:
    """The committer found nothing to commit and is ending its pass when a transaction is marked for commit:
    the commit asks for another pass (before, it saw the committer running, and the transaction stayed
    COMMITTING until something else woke a committer)."""
    core = env.core()
    await core.create_scope("s")
    await core.create_stream("s", "st", StreamConfiguration(ScalingPolicy.fixed(1)))
    txn, segments = await core.create_transaction("s", "st", 60_000)
    await _txn_write(env, "st", txn, segments, [b"late"])
    checked, release = asyncio.Event(), asyncio.Event()
    find_batch = core.store.start_committing_transactions

    async def find_then_hold(scope: str, stream: str):  # type: ignore[no-untyped-def]
        found = await find_batch(scope, stream)
        if not checked.is_set():  # the first pass: it found nothing and holds before it ends
            checked.set()
            await release.wait()
        return found

    core.store.start_committing_transactions = find_then_hold  # type: ignore[method-assign]
    core.txns.schedule_commits("s", "st")
    await checked.wait()
    await core.commit_transaction("s", "st", txn)
    release.set()
    await core.txns.wait_committed("s", "st")

    assert await core.transaction_state("s", "st", txn) == TxnState.COMMITTED
    assert await read_events(env.client, name("st", segments[0].segment_id)) == [b"late"]


async def test_a_commit_pass_that_hangs_logs_where_it_waits(
    env: ControllerEnv, caplog: pytest.LogCaptureFixture
) -> None:
    core = env.core()
    await core.create_scope("s")
    await core.create_stream("s", "st", StreamConfiguration(ScalingPolicy.fixed(1)))
    txn, _ = await core.create_transaction("s", "st", 60_000)
    hang = asyncio.Event()
    merge = core.txns._ops.commit_txn_segment

    async def hanging_merge(*args):  # type: ignore[no-untyped-def]
        await hang.wait()
        await merge(*args)

    core.txns._ops.commit_txn_segment = hanging_merge  # type: ignore[method-assign]
    core.txns.slow_warning_s = 0.2
    with caplog.at_level(logging.WARNING, logger="controller.workflows.transactions"):
        await core.commit_transaction("s", "st", txn)
        while not any("still running" in r.getMessage() for r in caplog.records):
            await asyncio.sleep(0.05)
        hang.set()
        await core.txns.wait_committed("s", "st")
    warning = next(r.getMessage() for r in caplog.records if "still running" in r.getMessage())
    assert warning.startswith("committing transactions of s/st still running after 0 s; it waits at:")
    assert "in hanging_merge" in warning and "in process_commits" in warning
    assert await core.transaction_state("s", "st", txn) == TxnState.COMMITTED


async def test_transaction_whose_lease_expires_is_aborted(env: ControllerEnv) -> None:
    core = env.core()
    await core.create_scope("s")
    await core.create_stream("s", "st", StreamConfiguration(ScalingPolicy.fixed(1)))
    txn, _ = await core.create_transaction("s", "st", 1_000)
    env.clock[0] += 500
    assert await core.ping_transaction("s", "st", txn, 1_000) == TxnState.OPEN
    env.clock[0] += 900
    assert await core.txns.abort_expired() == 0  # the ping renewed it
    env.clock[0] += 200
    assert await core.txns.abort_expired() == 1
    state = await core.transaction_state("s", "st", txn)
    assert state in (TxnState.ABORTING, TxnState.ABORTED)
    with pytest.raises(LeaseTooLargeError):
        await core.create_transaction("s", "st", env.config.txn_max_lease_ms + 1)


class AbortedWhileCreating(SegmentStoreOps):
    """Segment operations whose first transaction segment create lands only after another controller aborted the
    transaction (its lease ran out while a segment store failed over, the create being retried meanwhile)."""

    def __init__(self, env: ControllerEnv, other: ControllerCore) -> None:
        super().__init__(env.client, FAST_RETRY)
        self._other = other
        self.txn_id: uuid.UUID | None = None

    async def create_txn_segment(self, scope: str, stream: str, segment_id: int, txn_id: uuid.UUID) -> None:
        if self.txn_id is None:
            self.txn_id = txn_id
            await self._other.abort_transaction(scope, stream, txn_id)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 30
            while await self._other.transaction_state(scope, stream, txn_id) != TxnState.ABORTED:
                assert loop.time() < deadline, "the abort never finished"
                await asyncio.sleep(0.01)
        await super().create_txn_segment(scope, stream, segment_id, txn_id)


async def test_transaction_aborted_while_its_segments_are_created_fails_and_leaves_no_segment(
    env: ControllerEnv,
) -> None:
    other = env.core()
    ops = AbortedWhileCreating(env, other)
    core = env.core(ops)
    await core.create_scope("s")
    await core.create_stream("s", "st", StreamConfiguration(ScalingPolicy.fixed(1)))
    with pytest.raises(TxnStateError, match="aborted: cannot begin"):
        await core.create_transaction("s", "st", 10_000)
    assert ops.txn_id is not None
    segment = transaction_segment_name(name("st", segment_id(0, 0)), ops.txn_id)
    with pytest.raises(NoSuchSegmentError):
        await env.client.get_segment_info(segment)  # not left behind, holding writes to an aborted transaction
    assert not core.txns.tracked("s", "st", ops.txn_id)


async def test_truncate_drops_data_before_the_cut(env: ControllerEnv) -> None:
    core = env.core()
    await core.create_scope("s")
    await core.create_stream("s", "st", StreamConfiguration(ScalingPolicy.fixed(1)))
    await write_events(env.client, name("st", 0), [b"old"] * 10)
    length = (await env.client.get_segment_info(name("st", 0))).write_offset
    await core.truncate_stream(StreamCut("s", "st", {0: length}))
    info = await env.client.get_segment_info(name("st", 0))
    assert info.start_offset == length
    assert await core.segments_at_time("s", "st", 0) == {0: length}


async def test_seal_then_delete_removes_segments_and_metadata(env: ControllerEnv) -> None:
    core = env.core()
    await core.create_scope("s")
    await core.create_stream("s", "st", StreamConfiguration(ScalingPolicy.fixed(2)))
    with pytest.raises(StreamNotSealedError):
        await core.delete_stream("s", "st")
    await core.seal_stream("s", "st")
    with pytest.raises(StreamSealedError):
        await core.update_stream("s", "st", StreamConfiguration(ScalingPolicy.fixed(2)))
    await core.delete_stream("s", "st")
    assert not await core.stream_exists("s", "st")
    for sid in (0, 1):
        with pytest.raises(NoSuchSegmentError):
            await env.client.get_segment_info(name("st", sid))


async def test_size_retention_truncates_at_a_recorded_cut_keeping_the_minimum(env: ControllerEnv) -> None:
    core = env.core()
    await core.create_scope("s")
    policy = RetentionPolicy.by_size_bytes(100)
    await core.create_stream("s", "st", StreamConfiguration(ScalingPolicy.fixed(1), retention=policy))
    for _ in range(3):
        await write_events(env.client, name("st", 0), [b"x" * 92])  # 100 bytes with the event header
        env.clock[0] += 1000
        await core.apply_retention()
    info = await env.client.get_segment_info(name("st", 0))
    assert info.write_offset == 300
    assert info.start_offset == 200  # the newest recorded cut that still leaves >= 100 bytes


async def test_a_stream_still_being_created_is_listed_but_its_segments_wait_for_it(env: ControllerEnv) -> None:
    core, ops = env.crashing_core()
    await core.create_scope("s")
    ops.crash_on, ops.after = "create_segment", 2
    with pytest.raises(Crash):
        await core.create_stream("s", "st", FOUR)
    assert await core.stream_exists("s", "st")
    assert (await core.list_streams("s", "", 10, None))[0] == ["st"]
    for lookup in (
        core.current_segments("s", "st"),
        core.segments_at_time("s", "st", 0),
        core.create_transaction("s", "st", 10_000),
    ):
        with pytest.raises(StreamBeingCreatedError) as raised:
            await lookup
        assert raised.value.retriable  # gRPC UNAVAILABLE: clients retry
    await env.core().streams.resume("s", "st")
    assert len(await core.current_segments("s", "st")) == 4
    assert len(await core.segments_at_time("s", "st", 0)) == 4
