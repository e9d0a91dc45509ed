"""The reader group state's rules, one operation at a time on a real table segment (issue 25): balance, merges
waiting for every predecessor, and what a pending checkpoint forbids (so that a checkpoint is a consistent cut)."""

from __future__ import annotations

import pytest

from controller_client.model import ScalingPolicy, StreamConfiguration, StreamCut
from controller_client.reader_groups.format import ScopedSegment, Segment, state_from_entries
from controller_client.reader_groups.group import ReaderGroup
from controller_client.reader_groups.state import (
    CheckpointExistsError,
    acquire,
    acquire_or_release,
    add_reader,
    complete_segment,
    create_checkpoint,
    reach_checkpoint,
    release,
    remove_reader,
    view,
)
from controller_client.reader_groups.table import GroupTable, Update
from controller_client.stream_manager import StreamManager

pytestmark = pytest.mark.integration

SCOPE, STREAM = "state", "s"


def seg(number: int) -> ScopedSegment:
    return ScopedSegment.of(SCOPE, STREAM, number)


@pytest.fixture
async def group(manager: StreamManager) -> ReaderGroup:
    await manager.create_scope(SCOPE)
    await manager.create_stream(SCOPE, STREAM, StreamConfiguration(ScalingPolicy.fixed(3)))
    return await manager.create_reader_group(SCOPE, "g", [StreamCut(SCOPE, STREAM, {})])


def table(group: ReaderGroup) -> GroupTable:
    return group._table


async def test_balance_is_the_ceiling_of_segments_per_reader(group: ReaderGroup) -> None:
    t = table(group)
    await t.update(lambda u: add_reader(u, "a"))
    assert await t.update(lambda u: acquire(u, "a", 10)) == [(seg(0), 0), (seg(1), 0), (seg(2), 0)]
    await t.update(lambda u: add_reader(u, "b"))
    state = view(Update(t.entries))
    assert acquire_or_release(state, "a") == -1 and acquire_or_release(state, "b") == 2
    assert await t.update(lambda u: release(u, "a", seg(2), 7))
    assert await t.update(lambda u: acquire(u, "b", 10)) == [(seg(2), 7)]
    assert await t.update(lambda u: acquire(u, "b", 10)) == []  # b holds 1 of its 2, none unassigned


async def test_a_merge_waits_for_every_predecessor(group: ReaderGroup) -> None:
    t = table(group)
    await t.update(lambda u: add_reader(u, "a"))
    await t.update(lambda u: acquire(u, "a", 10))
    merged = seg(1 << 32 | 3)
    successors = {merged: (Segment(0), Segment(1))}
    assert await t.update(lambda u: complete_segment(u, "a", seg(0), successors)) == []
    assert view(Update(t.entries)).future == {merged: (Segment(1),)}
    assert await t.update(lambda u: complete_segment(u, "a", seg(1), successors)) == [merged]
    state = view(Update(t.entries))
    assert state.future == {} and state.unassigned == {merged: 0}


async def test_a_pending_checkpoint_forbids_release_and_for_its_readers_acquire_and_complete(
    group: ReaderGroup,
) -> None:
    t = table(group)
    await t.update(lambda u: add_reader(u, "a"))
    await t.update(lambda u: acquire(u, "a", 2))
    await t.update(lambda u: create_checkpoint(u, "c"))
    with pytest.raises(CheckpointExistsError):
        await t.update(lambda u: create_checkpoint(u, "c"))
    assert not await t.update(lambda u: release(u, "a", seg(0), 5))
    assert await t.update(lambda u: acquire(u, "a", 10)) == []
    assert await t.update(lambda u: complete_segment(u, "a", seg(0), {})) is None
    record = await t.update(lambda u: reach_checkpoint(u, "a", "c", {seg(0): 5, seg(1): 9}))
    assert record is not None and record.complete
    assert dict(record.positions) == {seg(0): 5, seg(1): 9, seg(2): 0}  # the unassigned one at creation
    assert await t.update(lambda u: complete_segment(u, "a", seg(0), {})) == []


async def test_a_reader_going_offline_completes_its_part_of_a_checkpoint(group: ReaderGroup) -> None:
    t = table(group)
    for reader in ("a", "b"):
        await t.update(lambda u, r=reader: add_reader(u, r))
        await t.update(lambda u, r=reader: acquire(u, r, 1))
    await t.update(lambda u: create_checkpoint(u, "c"))
    await t.update(lambda u: reach_checkpoint(u, "a", "c", {seg(0): 3}))
    assert await t.update(lambda u: remove_reader(u, "b", {seg(1): 4}))
    record = view(Update(t.entries)).checkpoints["c"]
    assert record.complete and dict(record.positions) == {seg(0): 3, seg(1): 4, seg(2): 0}


async def test_taking_a_reader_offline_is_conditional_on_the_version_seen(group: ReaderGroup) -> None:
    t = table(group)
    await t.update(lambda u: add_reader(u, "a"))
    stale = t.entries[("assigned_segments", "a")].version
    await t.update(lambda u: acquire(u, "a", 1))  # "a" reported since
    assert not await t.update(lambda u: remove_reader(u, "a", None, if_version=stale))
    assert "a" in view(Update(t.entries)).assigned


async def test_the_official_view_of_a_group_with_checkpoints_leaves_them_out(group: ReaderGroup) -> None:
    t = table(group)
    await t.update(lambda u: add_reader(u, "a"))
    await t.update(lambda u: create_checkpoint(u, "c"))
    assert any(outer == "segstore_checkpoints" for outer, _ in t.entries)
    official = state_from_entries((e.raw_key, e.raw_value) for e in t.entries.values())  # what admin describe reads
    assert official.online_readers == ["a"] and len(official.unassigned_segments) == 3
