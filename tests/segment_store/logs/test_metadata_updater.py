"""Pending validation, committed application and rollback of operations on container metadata."""

from __future__ import annotations

import pytest

from segment_store.logs.metadata_updater import MetadataUpdater
from segment_store.logs.operations import (
    AppendOperation,
    DeleteOperation,
    MapSegmentOperation,
    MergeOperation,
    MetadataCheckpointOperation,
    Operation,
    SealOperation,
    TruncateOperation,
    UpdateAttributesOperation,
)
from segment_store.metadata import ContainerMetadata, MetadataCorruptedError
from segstore_shared.contracts import (
    NULL_ATTRIBUTE_VALUE,
    AttributeUpdate,
    AttributeUpdateType,
    BadAttributeUpdateError,
    BadOffsetError,
    InvalidOffsetError,
    SegmentExistsError,
    SegmentNotExistsError,
    SegmentSealedError,
    SegmentType,
)

pytestmark = pytest.mark.unit


class Harness:
    def __init__(self) -> None:
        self.meta = ContainerMetadata(container_id=3)
        self.updater = MetadataUpdater(self.meta, clock_ms=lambda: 1000)
        self.seq = 0

    def pre(self, op: Operation) -> Operation:
        self.updater.pre_process(op)
        self.seq += 1
        op.sequence_number = self.seq
        return op

    def run(self, op: Operation) -> Operation:
        self.pre(op)
        self.updater.committed(op)
        return op

    def create(self, name: str, segment_type: SegmentType = SegmentType.STREAM) -> int:
        return self.run(MapSegmentOperation(name=name, segment_type=segment_type)).segment_id  # type: ignore[attr-defined]


def test_append_with_pending_state_assigns_consecutive_offsets() -> None:
    h = Harness()
    sid = h.create("s")
    a = h.pre(AppendOperation(segment_id=sid, data=b"abc"))
    b = h.pre(AppendOperation(segment_id=sid, data=b"de"))
    assert (a.offset, b.offset) == (0, 3)  # type: ignore[attr-defined]
    assert h.meta.get(sid).length == 0  # nothing committed yet
    h.updater.committed(a)
    h.updater.committed(b)
    assert h.meta.get(sid).length == 5


def test_append_with_wrong_expected_offset_raises_bad_offset() -> None:
    h = Harness()
    sid = h.create("s")
    h.run(AppendOperation(segment_id=sid, data=b"abc"))
    with pytest.raises(BadOffsetError) as info:
        h.pre(AppendOperation(segment_id=sid, data=b"x", expected_offset=2))
    assert info.value.actual_length == 3
    assert h.pre(AppendOperation(segment_id=sid, data=b"x", expected_offset=3)).offset == 3  # type: ignore[attr-defined]


def test_map_with_existing_name_raises_and_after_delete_succeeds() -> None:
    h = Harness()
    first = h.create("s")
    with pytest.raises(SegmentExistsError):
        h.pre(MapSegmentOperation(name="s"))
    h.run(DeleteOperation(segment_id=first))
    second = h.create("s")
    assert second != first
    assert h.meta.get_by_name("s").segment_id == second


def test_seal_with_sealed_segment_rejects_appends_and_second_seal() -> None:
    h = Harness()
    sid = h.create("s")
    h.run(AppendOperation(segment_id=sid, data=b"abc"))
    seal = h.run(SealOperation(segment_id=sid))
    assert seal.length == 3  # type: ignore[attr-defined]
    with pytest.raises(SegmentSealedError):
        h.pre(AppendOperation(segment_id=sid, data=b"x"))
    with pytest.raises(SegmentSealedError):
        h.pre(SealOperation(segment_id=sid))


def test_truncate_with_offsets_moves_start_and_rejects_beyond_length() -> None:
    h = Harness()
    sid = h.create("s")
    h.run(AppendOperation(segment_id=sid, data=b"abcdef"))
    h.run(TruncateOperation(segment_id=sid, offset=4))
    h.run(TruncateOperation(segment_id=sid, offset=2))  # lower: no change
    assert h.meta.get(sid).start_offset == 4
    with pytest.raises(InvalidOffsetError):
        h.pre(TruncateOperation(segment_id=sid, offset=7))


def test_merge_with_sealed_source_appends_length_and_hides_source() -> None:
    h = Harness()
    target = h.create("t")
    source = h.create("t#txn", SegmentType.STREAM)
    h.run(AppendOperation(segment_id=target, data=b"12"))
    h.run(AppendOperation(segment_id=source, data=b"345"))
    with pytest.raises(InvalidOffsetError, match="sealed"):
        h.pre(MergeOperation(segment_id=target, source_id=source))
    h.run(SealOperation(segment_id=source))
    merge = h.run(MergeOperation(segment_id=target, source_id=source))
    assert (merge.target_offset, merge.length) == (2, 3)  # type: ignore[attr-defined]
    assert h.meta.get(target).length == 5
    assert h.meta.get_by_name("t#txn") is None
    with pytest.raises(SegmentNotExistsError):
        h.pre(AppendOperation(segment_id=source, data=b"x"))


@pytest.mark.parametrize(
    ("kind", "current", "value", "comparison", "ok", "expected"),
    [
        (AttributeUpdateType.NONE, NULL_ATTRIBUTE_VALUE, 5, 0, True, 5),
        (AttributeUpdateType.NONE, 1, 5, 0, False, 1),
        (AttributeUpdateType.REPLACE, 1, 5, 0, True, 5),
        (AttributeUpdateType.REPLACE_IF_GREATER, 7, 5, 0, False, 7),
        (AttributeUpdateType.REPLACE_IF_GREATER, 4, 5, 0, True, 5),
        (AttributeUpdateType.ACCUMULATE, 4, 5, 0, True, 9),
        (AttributeUpdateType.ACCUMULATE, NULL_ATTRIBUTE_VALUE, 5, 0, True, 5),
        (AttributeUpdateType.REPLACE_IF_EQUALS, 4, 5, 4, True, 5),
        (AttributeUpdateType.REPLACE_IF_EQUALS, 4, 5, 3, False, 4),
        (AttributeUpdateType.REPLACE_IF_EQUALS, NULL_ATTRIBUTE_VALUE, 5, NULL_ATTRIBUTE_VALUE, True, 5),
    ],
)
def test_attribute_update_with_each_type(kind, current, value, comparison, ok, expected) -> None:  # type: ignore[no-untyped-def]
    h = Harness()
    sid = h.create("s")
    if current != NULL_ATTRIBUTE_VALUE:
        h.run(
            UpdateAttributesOperation(
                segment_id=sid, attribute_updates=(AttributeUpdate(9, AttributeUpdateType.REPLACE, current),)
            )
        )
    op = UpdateAttributesOperation(segment_id=sid, attribute_updates=(AttributeUpdate(9, kind, value, comparison),))
    if ok:
        h.run(op)
    else:
        with pytest.raises(BadAttributeUpdateError):
            h.pre(op)
    assert h.meta.get(sid).attributes.get(9, NULL_ATTRIBUTE_VALUE) == expected


def test_append_with_failing_attribute_update_changes_nothing() -> None:
    h = Harness()
    sid = h.create("s")
    updates = (
        AttributeUpdate(1, AttributeUpdateType.REPLACE, 10),
        AttributeUpdate(2, AttributeUpdateType.REPLACE_IF_EQUALS, 5, 99),
    )
    with pytest.raises(BadAttributeUpdateError):
        h.pre(AppendOperation(segment_id=sid, data=b"abc", attribute_updates=updates))
    assert h.updater.segment_by_id(sid).length == 0
    assert 1 not in h.updater.segment_by_id(sid).attributes


def test_rollback_with_in_flight_operations_restores_committed_view() -> None:
    h = Harness()
    sid = h.create("s")
    h.run(AppendOperation(segment_id=sid, data=b"abc"))
    h.pre(AppendOperation(segment_id=sid, data=b"defg"))
    h.pre(MapSegmentOperation(name="new"))
    h.pre(SealOperation(segment_id=sid))
    assert h.updater.segment_by_id(sid).length == 7
    h.updater.rollback()
    assert h.updater.segment_by_id(sid).length == 3
    assert not h.updater.segment_by_id(sid).sealed
    assert h.updater.segment_by_name("new") is None
    assert h.pre(AppendOperation(segment_id=sid, data=b"x")).offset == 3  # type: ignore[attr-defined]


def test_checkpoint_with_snapshot_restores_equal_metadata() -> None:
    h = Harness()
    sid = h.create("s")
    h.run(
        AppendOperation(
            segment_id=sid,
            data=b"abc",
            attribute_updates=(AttributeUpdate(2**127 + 3, AttributeUpdateType.REPLACE, -4),),
        )
    )
    h.create("gone")
    h.run(DeleteOperation(segment_id=h.meta.get_by_name("gone").segment_id))
    cp = h.run(MetadataCheckpointOperation())
    restored = ContainerMetadata.from_snapshot(cp.snapshot, 3)  # type: ignore[attr-defined]
    assert [s.to_json() for s in restored.segments()] == [s.to_json() for s in h.meta.segments()]
    assert restored.next_segment_id == h.meta.next_segment_id
    with pytest.raises(MetadataCorruptedError):
        ContainerMetadata.from_snapshot(cp.snapshot, 4)  # type: ignore[attr-defined]
    with pytest.raises(MetadataCorruptedError):
        ContainerMetadata.from_snapshot(b"{not json", 3)


def test_segment_metadata_copy_has_every_field_and_its_own_attributes() -> None:
    """The updater's pending copies come from ``SegmentMetadata.copy``: a field it forgot would be lost
    from the pending view (every field gets a value unlike its default, so a forgotten one shows)."""
    import dataclasses

    from segment_store.metadata import SegmentMetadata

    values: dict[str, object] = {}
    for number, f in enumerate(dataclasses.fields(SegmentMetadata)):
        if f.type in ("int", int):
            values[f.name] = 100 + number
        elif f.type in ("bool", bool):
            values[f.name] = True
        elif f.name == "name":
            values[f.name] = "scope/stream/0.#epoch.0"
        elif f.name == "segment_type":
            values[f.name] = SegmentType.TABLE
        elif f.name == "attributes":
            values[f.name] = {7: 8}
        else:
            raise AssertionError(f"new field {f.name}: give it a value here")
    original = SegmentMetadata(**values)  # type: ignore[arg-type]
    copy = original.copy()
    assert copy == original and copy is not original
    copy.attributes[9] = 10
    copy.length += 1
    assert original.attributes == {7: 8} and original.length == values["length"]
