"""Contract of the stream metadata store, run over the in-memory and the ZooKeeper coordination
stores: both must behave identically (the store is one class over the coordination port)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from controller.metadata import (
    UNBOUNDED,
    CreateStreamStatus,
    ReaderGroupConfigRecord,
    ReaderGroupRetentionType,
    ScaleStatus,
    StreamCutComparison,
    StreamMetadataStore,
    StreamState,
    WriterMark,
    WriterMarkStatus,
)
from controller.metadata.errors import (
    DataNotFoundError,
    GenerationMismatchError,
    IllegalStateTransitionError,
    IllegalStreamStateError,
    IllegalTxnTransitionError,
    InvalidStreamCutError,
    OperationConflictError,
    ReaderGroupExistsError,
    ReaderGroupNotFoundError,
    ScaleConflictError,
    ScaleInputError,
    ScalePreconditionError,
    ScopeNotEmptyError,
    ScopeNotFoundError,
    StreamNotFoundError,
    TxnMaxExecutionTimeExceededError,
    TxnNotFoundError,
    WriteConflictError,
)
from controller_client.model import (
    ScalingPolicy,
    SegmentRange,
    StreamConfiguration,
    StreamCut,
    TxnState,
    even_ranges,
    segment_id,
)
from segment_store.coordination.kazoo_store import KazooCoordinationStore
from segment_store.coordination.memory_store import MemoryCoordinationServer
from segment_store.coordination.store import CoordinationStore

pytestmark = pytest.mark.timeout(120)
Connect = Callable[[], Awaitable[CoordinationStore]]
SC, ST = "scope1", "stream1"
S0, S1 = segment_id(0, 0), segment_id(1, 0)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


@pytest.fixture(params=["memory", "zookeeper"])
async def connect(request: pytest.FixtureRequest) -> AsyncIterator[Connect]:
    sessions: list[CoordinationStore] = []
    if request.param == "memory":
        server = MemoryCoordinationServer()

        async def open_session() -> CoordinationStore:
            sessions.append(server.connect())
            return sessions[-1]
    else:
        hosts: str = request.getfixturevalue("zk_chroot")

        async def open_session() -> CoordinationStore:
            sessions.append(await KazooCoordinationStore.connect(hosts))
            return sessions[-1]

    yield open_session
    for session in sessions:
        await session.close()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def store(connect: Connect, clock: Clock) -> StreamMetadataStore:
    return StreamMetadataStore(await connect(), clock_ms=clock)


def config(segments: int = 2, tags: tuple[str, ...] = ()) -> StreamConfiguration:
    return StreamConfiguration(ScalingPolicy.fixed(segments), tags=tags)


async def active_stream(store: StreamMetadataStore, segments: int = 2, tags: tuple[str, ...] = ()) -> None:
    await store.create_scope(SC)
    await store.create_stream(SC, ST, config(segments, tags), 1000)
    await store.set_state(SC, ST, StreamState.ACTIVE)


async def do_scale(store: StreamMetadataStore, seal: list[int], ranges: list[tuple[float, float]], t: int) -> None:
    await store.submit_scale(SC, ST, seal, ranges, t)
    await store.set_state(SC, ST, StreamState.SCALING)
    await store.start_scale(SC, ST, manual=True)
    await store.scale_create_new_epoch(SC, ST)
    await store.scale_complete(SC, ST, dict.fromkeys(seal, 100))
    await store.set_state(SC, ST, StreamState.ACTIVE)


# ---- scopes ---------------------------------------------------------------------------------------------------
async def test_create_scope_with_existing_scope(store: StreamMetadataStore) -> None:
    assert await store.create_scope(SC) is True
    assert await store.create_scope(SC) is False
    assert await store.scope_exists(SC)
    assert not await store.scope_exists("other")


async def test_list_scopes_with_pagination(store: StreamMetadataStore) -> None:
    for name in ("c", "a", "b"):
        await store.create_scope(name)
    first, token = await store.list_scopes("", 2)
    assert first == ["a", "b"]
    rest, token = await store.list_scopes(token, 2)
    assert rest == ["c"]
    assert await store.list_scopes(token, 2) == ([], token)


async def test_delete_scope_with_content_remaining(store: StreamMetadataStore) -> None:
    await active_stream(store, tags=("t",))
    with pytest.raises(ScopeNotEmptyError, match="streams"):
        await store.delete_scope(SC)
    await store.delete_stream(SC, ST)
    await store.create_reader_group(SC, "rg", ReaderGroupConfigRecord())
    with pytest.raises(ScopeNotEmptyError, match="reader groups"):
        await store.delete_scope(SC)
    await store.delete_reader_group(SC, "rg")
    await store.delete_scope(SC)
    assert not await store.scope_exists(SC)
    with pytest.raises(ScopeNotFoundError):
        await store.delete_scope(SC)


async def test_create_stream_with_missing_scope(store: StreamMetadataStore) -> None:
    with pytest.raises(ScopeNotFoundError):
        await store.create_stream("nope", ST, config(), 1)
    with pytest.raises(ScopeNotFoundError):
        await store.list_streams("nope")


# ---- streams --------------------------------------------------------------------------------------------------
async def test_create_stream_writes_epoch_zero(store: StreamMetadataStore) -> None:
    await store.create_scope(SC)
    result = await store.create_stream(SC, ST, config(3), 1000)
    assert result.status == CreateStreamStatus.NEW and result.creation_time_ms == 1000
    assert await store.get_state(SC, ST) == StreamState.CREATING
    assert await store.get_configuration(SC, ST) == config(3)
    epoch = await store.get_active_epoch(SC, ST)
    assert (epoch.epoch, epoch.reference_epoch, epoch.creation_time_ms) == (0, 0, 1000)
    expected = [SegmentRange(segment_id(i, 0), s, e) for i, (s, e) in enumerate(even_ranges(3))]
    assert await store.get_current_segments(SC, ST) == expected
    assert (await store.get_epoch_transition(SC, ST))[0].is_empty
    assert (await store.get_truncation_record(SC, ST))[0].is_empty
    assert (await store.get_commit_batch(SC, ST))[0].is_empty
    head = await store.get_segments_at_head(SC, ST)
    assert head.positions == {segment_id(i, 0): 0 for i in range(3)}
    segment = await store.get_segment(SC, ST, segment_id(2, 0))
    assert (segment.key_start, segment.key_end, segment.creation_time_ms) == (2 / 3, 1.0, 1000)
    with pytest.raises(DataNotFoundError):
        await store.get_segment(SC, ST, segment_id(9, 0))
    with pytest.raises(StreamNotFoundError):
        await store.get_state(SC, "missing")


async def test_create_stream_with_existing_stream(store: StreamMetadataStore) -> None:
    await store.create_scope(SC)
    await store.create_stream(SC, ST, config(2), 1000)
    again = await store.create_stream(SC, ST, config(2), 1000)
    assert again.status == CreateStreamStatus.NEW
    other = await store.create_stream(SC, ST, config(5), 2000)
    assert other.status == CreateStreamStatus.EXISTS_CREATING
    assert other.config == config(2) and other.creation_time_ms == 1000
    await store.set_state(SC, ST, StreamState.ACTIVE)
    done = await store.create_stream(SC, ST, config(5), 2000)
    assert done.status == CreateStreamStatus.EXISTS_ACTIVE and done.config == config(2)
    assert len(await store.get_current_segments(SC, ST)) == 2


async def test_set_state_with_legal_and_illegal_transitions(store: StreamMetadataStore) -> None:
    await store.create_scope(SC)
    await store.create_stream(SC, ST, config(), 1)
    with pytest.raises(IllegalStateTransitionError):
        await store.set_state(SC, ST, StreamState.SCALING)
    state, version = await store.get_state_versioned(SC, ST)
    assert state == StreamState.CREATING
    v1 = await store.set_state(SC, ST, StreamState.ACTIVE, expected_version=version)
    assert await store.set_state(SC, ST, StreamState.ACTIVE) == v1  # same state: no-op
    with pytest.raises(WriteConflictError):
        await store.set_state(SC, ST, StreamState.SCALING, expected_version=version)
    await store.set_state(SC, ST, StreamState.SEALING)
    with pytest.raises(IllegalStateTransitionError):
        await store.set_state(SC, ST, StreamState.ACTIVE)
    await store.set_state(SC, ST, StreamState.SEALED)
    assert await store.get_state(SC, ST) == StreamState.SEALED


async def test_list_streams_with_pagination_and_tags(store: StreamMetadataStore) -> None:
    await store.create_scope(SC)
    for i, tags in enumerate([("red",), ("red", "blue"), ()]):
        await store.create_stream(SC, f"s{i}", config(1, tags), 1)
    names, token = await store.list_streams(SC, "", 2)
    assert names == ["s0", "s1"]
    assert (await store.list_streams(SC, token, 2))[0] == ["s2"]
    assert (await store.list_streams_by_tag(SC, "red"))[0] == ["s0", "s1"]
    assert (await store.list_streams_by_tag(SC, "blue"))[0] == ["s1"]
    assert (await store.list_streams_by_tag(SC, "green"))[0] == []


async def test_update_configuration_with_tags_and_pending_update(store: StreamMetadataStore) -> None:
    await active_stream(store, tags=("a", "b"))
    new = StreamConfiguration(ScalingPolicy.fixed(2), tags=("b", "c"))
    record, _ = await store.start_update_configuration(SC, ST, new)
    assert record.updating and record.removed_tags == ("a",) and record.tag_only
    assert await store.get_configuration(SC, ST) == new
    assert (await store.start_update_configuration(SC, ST, new))[0] == record  # idempotent
    with pytest.raises(OperationConflictError):
        await store.start_update_configuration(SC, ST, config(3))
    done = await store.complete_update_configuration(SC, ST)
    assert not done.updating and done.config == new
    assert await store.complete_update_configuration(SC, ST) == done
    assert (await store.list_streams_by_tag(SC, "a"))[0] == []
    assert (await store.list_streams_by_tag(SC, "c"))[0] == [ST]


async def test_delete_stream_then_recreate_with_same_name(store: StreamMetadataStore) -> None:
    await active_stream(store, 2, tags=("t",))
    await do_scale(store, [S1], [(0.5, 0.75), (0.75, 1.0)], 2000)
    await store.delete_stream(SC, ST)
    assert not await store.stream_exists(SC, ST)
    assert (await store.list_streams(SC))[0] == []
    assert (await store.list_streams_by_tag(SC, "t"))[0] == []
    with pytest.raises(StreamNotFoundError):
        await store.delete_stream(SC, ST)
    with pytest.raises(StreamNotFoundError):
        await store.get_epoch(SC, ST, 0)
    await store.create_stream(SC, ST, config(4), 5000)
    assert len((await store.get_epoch(SC, ST, 0)).segments) == 4  # no stale cached epoch
    with pytest.raises(DataNotFoundError):
        await store.get_epoch(SC, ST, 1)


# ---- epochs and scale -----------------------------------------------------------------------------------------
async def test_scale_with_split_then_merge(store: StreamMetadataStore) -> None:
    await active_stream(store)
    s2, s3 = segment_id(2, 1), segment_id(3, 1)
    record, _ = await store.submit_scale(SC, ST, [S1], [(0.5, 0.75), (0.75, 1.0)], 2000)
    assert record.active_epoch == 0 and [s for s, _, _ in record.new_segments] == [s2, s3]
    assert await store.check_scale(SC, ST, 0) == ScaleStatus.IN_PROGRESS
    await store.set_state(SC, ST, StreamState.SCALING)
    await store.start_scale(SC, ST, manual=False)
    new_epoch = await store.scale_create_new_epoch(SC, ST)
    assert new_epoch.epoch == 1 and (await store.get_active_epoch(SC, ST)).epoch == 0
    # successors are visible once the new epoch is written, before it is active
    assert {r.segment_id: p for r, p in (await store.get_successors(SC, ST, S1)).items()} == {s2: [S1], s3: [S1]}
    await store.scale_complete(SC, ST, {S1: 70})
    await store.set_state(SC, ST, StreamState.ACTIVE)
    assert await store.check_scale(SC, ST, 0) == ScaleStatus.SUCCESS
    assert await store.check_scale(SC, ST, 7) == ScaleStatus.INVALID_INPUT
    assert [r.segment_id for r in await store.get_current_segments(SC, ST)] == [S0, s2, s3]
    assert (await store.get_epoch_transition(SC, ST))[0].is_empty
    await do_scale(store, [S0, s2], [(0.0, 0.75)], 3000)
    s4 = segment_id(4, 2)
    assert [r.segment_id for r in await store.get_current_segments(SC, ST)] == [s4, s3]
    assert [r.segment_id for r in await store.get_predecessors(SC, ST, s4)] == [S0, s2]
    assert {r.segment_id: p for r, p in (await store.get_successors(SC, ST, s2)).items()} == {s4: [S0, s2]}
    assert await store.get_successors(SC, ST, s3) == {}
    assert await store.get_predecessors(SC, ST, S0) == []
    history = await store.get_epoch_history(SC, ST)
    assert [(h.epoch, h.creation_time_ms) for h in history] == [(0, 1000), (1, 2000), (2, 3000)]
    assert [{s.segment_id for s in h.segments_sealed} for h in history] == [set(), {S1}, {S0, s2}]
    assert await store.get_sealed_sizes(SC, ST, [S0, S1, s2, s3]) == {S0: 100, S1: 70, s2: 100}
    assert await store.is_segment_valid(SC, ST, s4)
    assert not await store.is_segment_valid(SC, ST, S0)


async def test_submit_scale_with_identical_and_conflicting_requests(store: StreamMetadataStore) -> None:
    await active_stream(store)
    first = await store.submit_scale(SC, ST, [S1], [(0.5, 1.0)], 2000)
    assert await store.submit_scale(SC, ST, [S1], [(0.5, 1.0)], 2500) == first
    with pytest.raises(ScaleConflictError):
        await store.submit_scale(SC, ST, [S0], [(0.0, 0.5)], 2000)
    assert await store.get_epoch_transition(SC, ST) == first
    await store.reset_epoch_transition(SC, ST)
    assert (await store.get_epoch_transition(SC, ST))[0].is_empty


async def test_submit_scale_with_invalid_input(store: StreamMetadataStore) -> None:
    await active_stream(store)
    with pytest.raises(ScaleInputError):
        await store.submit_scale(SC, ST, [S1], [(0.5, 0.9)], 1)
    with pytest.raises(ScalePreconditionError):
        await store.submit_scale(SC, ST, [segment_id(5, 0)], [(0.5, 1.0)], 1)
    with pytest.raises(ScalePreconditionError):
        await store.submit_scale(SC, ST, [S0, S1], [(0.0, 1.0)], 1)  # min 2 segments
    assert (await store.get_epoch_transition(SC, ST))[0].is_empty
    await store.set_state(SC, ST, StreamState.SEALED)
    with pytest.raises(IllegalStreamStateError):
        await store.submit_scale(SC, ST, [S1], [(0.5, 1.0)], 1)


async def test_scale_complete_before_new_epoch(store: StreamMetadataStore) -> None:
    await active_stream(store)
    await store.submit_scale(SC, ST, [S1], [(0.5, 1.0)], 2000)
    with pytest.raises(IllegalStreamStateError):
        await store.scale_complete(SC, ST)
    await store.scale_create_new_epoch(SC, ST)
    with pytest.raises(IllegalStreamStateError):
        await store.reset_epoch_transition(SC, ST)
    assert (await store.scale_complete(SC, ST)).epoch == 1
    assert (await store.scale_complete(SC, ST)).epoch == 1  # nothing in progress: the active epoch


async def test_segments_at_time_and_between(store: StreamMetadataStore) -> None:
    await active_stream(store)
    await do_scale(store, [S1], [(0.5, 0.75), (0.75, 1.0)], 2000)
    s2, s3 = segment_id(2, 1), segment_id(3, 1)
    assert (await store.get_segments_at_time(SC, ST, 10)).positions == {S0: 0, S1: 0}
    assert (await store.get_segments_at_time(SC, ST, 1999)).positions == {S0: 0, S1: 0}
    assert (await store.get_segments_at_time(SC, ST, 2000)).positions == {S0: 0, s2: 0, s3: 0}
    everything = {r.segment_id for r in await store.get_segments_between(SC, ST, None, None)}
    assert everything == {S0, S1, s2, s3}
    cut = StreamCut(SC, ST, {S0: 5, s2: 1, s3: 2})
    assert {r.segment_id for r in await store.get_segments_between(SC, ST, cut, None)} == {S0, s2, s3}
    assert {r.segment_id for r in await store.get_segments_between(SC, ST, {S0: 0, S1: 3}, {S0: 9, S1: 4})} == {S0, S1}
    with pytest.raises(InvalidStreamCutError):
        await store.get_segments_between(SC, ST, cut, {S0: 0, S1: 0})
    assert await store.is_stream_cut_valid(SC, ST, cut)
    assert not await store.is_stream_cut_valid(SC, ST, {S0: 5, s2: 1})
    assert not await store.is_stream_cut_valid(SC, ST, {S0: 5, segment_id(3, 9): 1})
    assert await store.compare_stream_cuts(SC, ST, cut, {S0: 1, S1: 1}) == StreamCutComparison.EQUAL_OR_AFTER
    assert await store.compare_stream_cuts(SC, ST, {S0: 1, S1: 1}, cut) == StreamCutComparison.BEFORE


# ---- truncation and retention ---------------------------------------------------------------------------------
async def test_truncation_flow(store: StreamMetadataStore) -> None:
    await active_stream(store)
    await do_scale(store, [S1], [(0.5, 0.75), (0.75, 1.0)], 2000)
    s2, s3 = segment_id(2, 1), segment_id(3, 1)
    cut = {S0: 10, s2: 5, s3: 7}
    record, _ = await store.start_truncation(SC, ST, cut)
    assert record.updating and record.to_delete == {S1} and record.size_till == 100 + 10 + 5 + 7
    assert await store.start_truncation(SC, ST, cut) == (record, 1)
    with pytest.raises(OperationConflictError):
        await store.start_truncation(SC, ST, {S0: 11, s2: 5, s3: 7})
    done = await store.complete_truncation(SC, ST)
    assert not done.updating and done.deleted_segments == {S1} and done.to_delete == set()
    assert await store.complete_truncation(SC, ST) == done
    assert (await store.get_segments_at_head(SC, ST)).positions == cut
    assert (await store.get_segments_at_time(SC, ST, 1500)).positions == cut  # truncated away: the head
    with pytest.raises(InvalidStreamCutError):
        await store.start_truncation(SC, ST, {S0: 9, s2: 5, s3: 7})  # behind the head
    with pytest.raises(InvalidStreamCutError):
        await store.start_truncation(SC, ST, {S0: 20})  # not a valid cut
    await do_scale(store, [S0, s2], [(0.0, 0.75)], 3000)
    s4 = segment_id(4, 2)
    second, _ = await store.start_truncation(SC, ST, {s4: 3, s3: 8})
    assert second.to_delete == {S0, s2} and second.size_till == 122 + (100 - 10) + (100 - 5) + 3 + 1
    assert (await store.complete_truncation(SC, ST)).deleted_segments == {S1, S0, s2}


async def test_size_till_stream_cut_with_reference(store: StreamMetadataStore) -> None:
    await active_stream(store)
    await do_scale(store, [S1], [(0.5, 1.0)], 2000)
    s2 = segment_id(2, 1)
    assert await store.get_size_till_stream_cut(SC, ST, {S0: 10, s2: 20}) == 10 + 100 + 20
    reference = await store.add_stream_cut_reference(SC, ST, {S0: 5, S1: 50}, 1500, 55)
    assert await store.get_size_till_stream_cut(SC, ST, {S0: 10, s2: 20}, reference) == 55 + 5 + 50 + 20


async def test_retention_set_add_and_delete(store: StreamMetadataStore) -> None:
    await active_stream(store)
    for t, size in ((100, 1), (200, 2), (300, 3)):
        await store.add_stream_cut_reference(SC, ST, {S0: size, S1: size}, t, size * 2)
    await store.add_stream_cut_reference(SC, ST, {S0: 9, S1: 9}, 250, 9)  # not the latest: ignored
    refs = (await store.get_retention_set(SC, ST)).references
    assert [(r.recording_time_ms, r.recording_size_bytes) for r in refs] == [(100, 2), (200, 4), (300, 6)]
    assert (await store.get_stream_cut_record(SC, ST, refs[1])).stream_cut == {S0: 2, S1: 2}
    remaining = await store.delete_references_before(SC, ST, refs[1])
    assert [r.recording_time_ms for r in remaining.references] == [300]
    with pytest.raises(DataNotFoundError):
        await store.get_stream_cut_record(SC, ST, refs[0])
    assert (await store.get_stream_cut_record(SC, ST, refs[2])).recording_size_bytes == 6


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
