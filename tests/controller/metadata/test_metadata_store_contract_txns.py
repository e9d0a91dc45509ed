"""Contract of the stream metadata store, continued: transactions, reader groups and writer marks, over the
in-memory and the ZooKeeper coordination stores."""

from __future__ import annotations

import uuid

import pytest
from metadata_contract_env import S0, S1, SC, ST, Clock, active_stream, config, do_scale

from controller.metadata import (
    UNBOUNDED,
    ReaderGroupConfigRecord,
    ReaderGroupRetentionType,
    StreamMetadataStore,
    StreamState,
    WriterMark,
    WriterMarkStatus,
)
from controller.metadata.errors import (
    DataNotFoundError,
    GenerationMismatchError,
    IllegalStreamStateError,
    IllegalTxnTransitionError,
    InvalidStreamCutError,
    ReaderGroupExistsError,
    ReaderGroupNotFoundError,
    ScalePreconditionError,
    ScopeNotFoundError,
    TxnMaxExecutionTimeExceededError,
    TxnNotFoundError,
    WriteConflictError,
)
from controller_client.model import (
    StreamCut,
    TxnState,
    segment_id,
)

pytestmark = [pytest.mark.contract, pytest.mark.timeout(120)]


# ---- transactions ---------------------------------------------------------------------------------------------
async def test_txn_commit_lifecycle(store: StreamMetadataStore, clock: Clock) -> None:
    await active_stream(store)
    txn = uuid.uuid4()
    info = await store.create_txn(SC, ST, txn, 10_000, 60_000)
    assert info.epoch == 0 and info.record.lease_expiry_ms == clock.now + 10_000
    assert await store.create_txn(SC, ST, txn, 10_000) == info  # idempotent
    clock.now += 5000
    assert await store.ping_txn(SC, ST, txn, 10_000) == clock.now + 10_000
    assert await store.get_txn_status(SC, ST, txn) == TxnState.OPEN
    assert await store.seal_txn(SC, ST, txn, True, writer_id="w1", commit_time_ms=77) == (TxnState.COMMITTING, 0)
    assert await store.seal_txn(SC, ST, txn, True) == (TxnState.COMMITTING, 0)
    with pytest.raises(IllegalTxnTransitionError):
        await store.seal_txn(SC, ST, txn, False)
    with pytest.raises(IllegalTxnTransitionError):
        await store.ping_txn(SC, ST, txn, 1000)
    assert (await store.get_txn(SC, ST, txn)).record.writer_id == "w1"
    batch, _ = await store.start_committing_transactions(SC, ST)
    assert batch.epoch == 0 and batch.txn_ids == (txn,) and not batch.is_rolling
    await store.complete_commit_batch(SC, ST)
    await store.complete_commit_batch(SC, ST)
    assert (await store.get_commit_batch(SC, ST))[0].is_empty
    assert await store.get_txn_status(SC, ST, txn) == TxnState.COMMITTED
    assert await store.seal_txn(SC, ST, txn, True) == (TxnState.COMMITTED, 0)
    with pytest.raises(TxnNotFoundError):
        await store.get_txn(SC, ST, txn)
    assert await store.list_active_txns(SC, ST) == []
    clock.now += 1000
    assert await store.purge_completed_txns(SC, ST, clock.now - 500) == 1
    assert await store.get_txn_status(SC, ST, txn) == TxnState.UNKNOWN


async def test_txn_abort_and_unknown(store: StreamMetadataStore) -> None:
    await active_stream(store)
    txn = uuid.uuid4()
    await store.create_txn(SC, ST, txn, 1000)
    with pytest.raises(IllegalTxnTransitionError):
        await store.complete_aborted_txn(SC, ST, txn)  # not sealed yet
    assert await store.seal_txn(SC, ST, txn, False) == (TxnState.ABORTING, 0)
    with pytest.raises(IllegalTxnTransitionError):
        await store.seal_txn(SC, ST, txn, True)
    await store.complete_aborted_txn(SC, ST, txn)
    await store.complete_aborted_txn(SC, ST, txn)
    assert await store.get_txn_status(SC, ST, txn) == TxnState.ABORTED
    with pytest.raises(IllegalTxnTransitionError):
        await store.seal_txn(SC, ST, txn, True)
    assert await store.get_txn_status(SC, ST, uuid.uuid4()) == TxnState.UNKNOWN
    with pytest.raises(TxnNotFoundError):
        await store.seal_txn(SC, ST, uuid.uuid4(), True)
    with pytest.raises(TxnNotFoundError):
        await store.ping_txn(SC, ST, uuid.uuid4(), 1)


async def test_txn_timeouts_with_stored_expiry(store: StreamMetadataStore, clock: Clock) -> None:
    await active_stream(store)
    short, long_, capped = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    await store.create_txn(SC, ST, short, 1000)
    await store.create_txn(SC, ST, long_, 100_000)
    await store.create_txn(SC, ST, capped, 100_000, 5000)
    with pytest.raises(TxnMaxExecutionTimeExceededError):
        await store.ping_txn(SC, ST, capped, 10_000)
    assert await store.list_expired_txns(SC, ST) == []
    clock.now += 2000
    assert [t.txn_id for t in await store.list_expired_txns(SC, ST)] == [short]
    clock.now += 4000
    assert {t.txn_id for t in await store.list_expired_txns(SC, ST)} == {short, capped}
    assert {t.txn_id for t in await store.list_open_txns(SC, ST)} == {short, long_, capped}
    await store.set_state(SC, ST, StreamState.SEALING)
    with pytest.raises(IllegalStreamStateError):
        await store.create_txn(SC, ST, uuid.uuid4(), 1000)


async def test_txn_commit_order_and_batch_validation(store: StreamMetadataStore) -> None:
    await active_stream(store)
    txns = [uuid.uuid4() for _ in range(4)]
    for t in txns:
        await store.create_txn(SC, ST, t, 10_000)
    for t in reversed(txns[1:]):
        await store.seal_txn(SC, ST, t, True)
    epoch, committing = await store.get_committing_txns_in_lowest_epoch(SC, ST)
    assert epoch == 0 and [c.txn_id for c in committing] == list(reversed(txns[1:]))
    orders = [c.record.commit_order for c in committing]
    assert orders == sorted(orders) and len(set(orders)) == 3
    with pytest.raises(IllegalTxnTransitionError):
        await store.start_commit_batch(SC, ST, 0, [txns[0]])  # still open
    record, _ = await store.start_commit_batch(SC, ST, 0, [txns[3]])
    assert record.txn_ids == (txns[3],)
    assert (await store.start_commit_batch(SC, ST, 0, [txns[2]]))[0] == record  # the batch in progress


async def test_rolling_txn_over_a_scale(store: StreamMetadataStore) -> None:
    await active_stream(store)
    txn = uuid.uuid4()
    assert (await store.create_txn(SC, ST, txn, 60_000)).epoch == 0
    await do_scale(store, [S1], [(0.5, 1.0)], 2000)
    s2 = segment_id(2, 1)
    await store.seal_txn(SC, ST, txn, True)
    await store.set_state(SC, ST, StreamState.COMMITTING_TXN)
    batch, _ = await store.start_committing_transactions(SC, ST)
    assert batch.epoch == 0
    with pytest.raises(IllegalStreamStateError):
        await store.start_rolling_txn(SC, ST, 0)  # not the active epoch
    rolling, _ = await store.start_rolling_txn(SC, ST, 1)
    assert rolling.is_rolling and (rolling.new_txn_epoch, rolling.new_active_epoch) == (2, 3)
    assert (await store.start_rolling_txn(SC, ST, 1))[0] == rolling
    dup_txn, dup_active = await store.rolling_txn_create_duplicate_epochs(SC, ST, {segment_id(0, 2): 5}, 2500)
    assert [s.segment_id for s in dup_txn.segments] == [segment_id(0, 2), segment_id(1, 2)]
    assert dup_txn.reference_epoch == 0 and dup_active.reference_epoch == 1
    assert [s.segment_id for s in dup_active.segments] == [segment_id(0, 3), segment_id(2, 3)]
    assert await store.rolling_txn_create_duplicate_epochs(SC, ST, {}, 9999) == (dup_txn, dup_active)
    with pytest.raises(IllegalStreamStateError):
        await store.complete_commit_batch(SC, ST)  # rolling not complete
    assert (await store.get_active_epoch(SC, ST)).epoch == 1
    new_active = await store.complete_rolling_txn(SC, ST, {S0: 11, s2: 22})
    assert new_active.epoch == 3 and (await store.get_active_epoch(SC, ST)) == dup_active
    assert (await store.complete_rolling_txn(SC, ST, {})).epoch == 3
    await store.complete_commit_batch(SC, ST)
    await store.set_state(SC, ST, StreamState.ACTIVE)
    assert await store.get_txn_status(SC, ST, txn) == TxnState.COMMITTED
    succ = await store.get_successors(SC, ST, s2)
    assert {r.segment_id: p for r, p in succ.items()} == {segment_id(1, 2): [s2]}
    assert [h.epoch for h in await store.get_epoch_history(SC, ST)] == [0, 1, 2, 3]
    assert await store.get_sealed_sizes(SC, ST, [segment_id(0, 2), S0, s2]) == {segment_id(0, 2): 5, S0: 11, s2: 22}
    later = await store.create_txn(SC, ST, uuid.uuid4(), 1000)
    assert later.epoch == 1  # the active duplicate's reference epoch
    # a manual scale submitted against the duplicated epoch is re-based onto the duplicate
    await store.submit_scale(SC, ST, [segment_id(2, 3)], [(0.5, 0.6), (0.6, 1.0)], 4000)
    record, _ = await store.start_scale(SC, ST, manual=True)
    assert record.active_epoch == 3


@pytest.mark.parametrize("manual", [True, False])
async def test_start_scale_after_rolling_txn(store: StreamMetadataStore, manual: bool) -> None:
    await active_stream(store)
    txn = uuid.uuid4()
    await store.create_txn(SC, ST, txn, 60_000)
    await do_scale(store, [S1], [(0.5, 1.0)], 2000)
    s2 = segment_id(2, 1)
    await store.submit_scale(SC, ST, [s2], [(0.5, 0.7), (0.7, 1.0)], 3000)  # submitted against epoch 1
    await store.seal_txn(SC, ST, txn, True)
    await store.start_committing_transactions(SC, ST)
    await store.start_rolling_txn(SC, ST, 1)
    await store.rolling_txn_create_duplicate_epochs(SC, ST, {}, 2500)
    await store.complete_rolling_txn(SC, ST, {})
    await store.complete_commit_batch(SC, ST)
    if not manual:  # an auto scale computed for another epoch is discarded
        with pytest.raises(ScalePreconditionError):
            await store.start_scale(SC, ST, manual=False)
        assert (await store.get_epoch_transition(SC, ST))[0].is_empty
        return
    moved, _ = await store.start_scale(SC, ST, manual=True)  # re-based onto the duplicate of epoch 1
    assert moved.active_epoch == 3 and moved.segments_to_seal == {segment_id(2, 3)}
    await store.scale_create_new_epoch(SC, ST)
    current = await store.scale_complete(SC, ST)
    expected = [segment_id(0, 3), segment_id(3, 4), segment_id(4, 4)]
    assert current.epoch == 4 and [s.segment_id for s in current.segments] == expected
    assert (await store.get_active_epoch(SC, ST)).epoch == 4


# ---- reader groups --------------------------------------------------------------------------------------------
def rg_config(streams: dict[str, object], retention: ReaderGroupRetentionType) -> ReaderGroupConfigRecord:
    return ReaderGroupConfigRecord(
        retention_type=retention,
        starting_stream_cuts=streams,  # type: ignore[arg-type]
        ending_stream_cuts=dict.fromkeys(streams, UNBOUNDED),
    )


async def test_reader_group_lifecycle_with_subscriptions(store: StreamMetadataStore) -> None:
    await active_stream(store)
    await store.create_stream(SC, "other", config(1), 1)
    cfg = rg_config(
        {f"{SC}/{ST}": UNBOUNDED, f"{SC}/other": StreamCut(SC, "other", {0: 5})}, ReaderGroupRetentionType.AUTOMATIC
    )
    created = await store.create_reader_group(SC, "rg", cfg)
    assert created.generation == 0 and created.reader_group_id.int != 0
    assert await store.create_reader_group(SC, "rg", cfg) == created
    assert await store.get_reader_group(SC, "rg") == created
    with pytest.raises(ReaderGroupExistsError):
        await store.create_reader_group(SC, "rg", rg_config({}, ReaderGroupRetentionType.NONE))
    assert await store.list_subscribers(SC, ST) == [f"{SC}/rg"]
    assert await store.list_subscribers(SC, "other") == [f"{SC}/rg"]
    assert (await store.list_reader_groups(SC))[0] == ["rg"]
    with pytest.raises(GenerationMismatchError):
        await store.update_reader_group(SC, "rg", cfg, 5)
    narrowed = rg_config({f"{SC}/{ST}": UNBOUNDED}, ReaderGroupRetentionType.AUTOMATIC)
    updated = await store.update_reader_group(SC, "rg", narrowed, 0)
    assert updated.generation == 1 and updated.reader_group_id == created.reader_group_id and not updated.updating
    assert await store.list_subscribers(SC, "other") == []
    assert [s.generation for s in await store.get_subscribers(SC, ST)] == [1]
    off = await store.update_reader_group(
        SC, "rg", rg_config({f"{SC}/{ST}": UNBOUNDED}, ReaderGroupRetentionType.NONE), 1
    )
    assert off.generation == 2 and await store.list_subscribers(SC, ST) == []
    with pytest.raises(ReaderGroupNotFoundError):
        await store.delete_reader_group(SC, "rg", uuid.uuid4())
    await store.delete_reader_group(SC, "rg", created.reader_group_id)
    with pytest.raises(ReaderGroupNotFoundError):
        await store.get_reader_group(SC, "rg")
    with pytest.raises(ScopeNotFoundError):
        await store.create_reader_group("nope", "rg", cfg)


async def test_subscriber_stream_cut_with_checks(store: StreamMetadataStore) -> None:
    await active_stream(store)
    group = await store.create_reader_group(
        SC, "rg", rg_config({f"{SC}/{ST}": UNBOUNDED}, ReaderGroupRetentionType.MANUAL)
    )
    sub, rg_id = f"{SC}/rg", group.reader_group_id
    first = await store.update_subscriber_stream_cut(SC, ST, sub, rg_id, 0, {S0: 5, S1: 6})
    assert first.truncation_cut == {S0: 5, S1: 6}
    await store.update_subscriber_stream_cut(SC, ST, sub, rg_id, 0, {S0: 5, S1: 6})  # equal: fine
    with pytest.raises(InvalidStreamCutError):
        await store.update_subscriber_stream_cut(SC, ST, sub, rg_id, 0, {S0: 4, S1: 9})
    with pytest.raises(InvalidStreamCutError):
        await store.update_subscriber_stream_cut(SC, ST, sub, rg_id, 0, {S0: 9})
    with pytest.raises(ReaderGroupNotFoundError):
        await store.update_subscriber_stream_cut(SC, ST, sub, uuid.uuid4(), 0, {S0: 9, S1: 9})
    await store.update_reader_group(SC, "rg", rg_config({f"{SC}/{ST}": UNBOUNDED}, ReaderGroupRetentionType.MANUAL), 0)
    with pytest.raises(GenerationMismatchError):
        await store.update_subscriber_stream_cut(SC, ST, sub, rg_id, 0, {S0: 9, S1: 9})
    assert (await store.get_subscribers(SC, ST))[0].truncation_cut == {S0: 5, S1: 6}
    with pytest.raises(ReaderGroupNotFoundError):
        await store.update_subscriber_stream_cut(SC, ST, f"{SC}/ghost", rg_id, 0, {S0: 9, S1: 9})
    plain = await store.create_reader_group(
        SC, "plain", rg_config({f"{SC}/{ST}": UNBOUNDED}, ReaderGroupRetentionType.NONE)
    )
    with pytest.raises(DataNotFoundError):  # a group that does not subscribe
        await store.update_subscriber_stream_cut(SC, ST, f"{SC}/plain", plain.reader_group_id, 0, {S0: 9, S1: 9})


# ---- writer marks ---------------------------------------------------------------------------------------------
async def test_writer_marks(store: StreamMetadataStore) -> None:
    await active_stream(store)
    writer = "writer/1.x"
    assert await store.note_writer_mark(SC, ST, writer, 100, {S0: 5}) == WriterMarkStatus.SUCCESS
    assert await store.note_writer_mark(SC, ST, writer, 99, {S0: 6}) == WriterMarkStatus.INVALID_TIME
    assert await store.note_writer_mark(SC, ST, writer, 101, {S0: 4}) == WriterMarkStatus.INVALID_POSITION
    assert await store.note_writer_mark(SC, ST, writer, 101, {S0: 7, S1: 1}) == WriterMarkStatus.SUCCESS
    assert await store.note_writer_mark(SC, ST, "w2", 5, {}) == WriterMarkStatus.SUCCESS
    marks = await store.list_writer_marks(SC, ST)
    assert marks == {writer: WriterMark(101, {S0: 7, S1: 1}, True), "w2": WriterMark(5, {}, True)}
    await store.shutdown_writer(SC, ST, writer)
    assert not (await store.get_writer_mark(SC, ST, writer)).alive
    with pytest.raises(WriteConflictError):
        await store.remove_writer(SC, ST, writer, WriterMark(1, {}, True))
    await store.remove_writer(SC, ST, writer, WriterMark(101, {S0: 7, S1: 1}, False))
    await store.remove_writer(SC, ST, writer)
    with pytest.raises(DataNotFoundError):
        await store.get_writer_mark(SC, ST, writer)
