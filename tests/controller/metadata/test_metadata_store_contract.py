"""Contract of the stream metadata store, run over the in-memory and the ZooKeeper coordination
stores: both must behave identically (the store is one class over the coordination port)."""

from __future__ import annotations

import pytest
from metadata_contract_env import S0, S1, SC, ST, active_stream, config, do_scale

from controller.metadata import (
    CreateStreamStatus,
    ReaderGroupConfigRecord,
    ScaleStatus,
    StreamCutComparison,
    StreamMetadataStore,
    StreamState,
)
from controller.metadata.errors import (
    DataNotFoundError,
    IllegalStateTransitionError,
    IllegalStreamStateError,
    InvalidStreamCutError,
    OperationConflictError,
    ScaleConflictError,
    ScaleInputError,
    ScalePreconditionError,
    ScopeNotEmptyError,
    ScopeNotFoundError,
    StreamNotFoundError,
    WriteConflictError,
)
from controller_client.model import (
    ScalingPolicy,
    SegmentRange,
    StreamConfiguration,
    StreamCut,
    even_ranges,
    segment_id,
)

pytestmark = [pytest.mark.contract, pytest.mark.timeout(120)]


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
