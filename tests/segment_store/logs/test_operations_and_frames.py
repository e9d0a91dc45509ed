"""Log operations serialize losslessly; data frames pack, span and verify them."""

from __future__ import annotations

import dataclasses
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from segment_store.logs.data_frame import (
    FRAME_HEADER_SIZE,
    DataFrameBuilder,
    DataFrameCorruptedError,
    OperationAssembler,
    read_frame,
)
from segment_store.logs.operations import (
    AppendOperation,
    DeleteOperation,
    MapSegmentOperation,
    MergeOperation,
    MetadataCheckpointOperation,
    Operation,
    OperationSerializationError,
    SealOperation,
    TruncateOperation,
    UpdateAttributesOperation,
    deserialize,
    serialize,
)
from segstore_shared.contracts import AttributeUpdate, AttributeUpdateType, SegmentType

pytestmark = pytest.mark.unit

i64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
u128 = st.integers(min_value=0, max_value=2**128 - 1)
updates = st.lists(
    st.builds(AttributeUpdate, u128, st.sampled_from(list(AttributeUpdateType)), i64, i64), max_size=4
).map(tuple)
seq = st.integers(min_value=0, max_value=2**62)

operations = st.one_of(
    st.builds(
        MapSegmentOperation,
        segment_id=i64,
        name=st.text(max_size=40),
        segment_type=st.sampled_from(list(SegmentType)),
        start_offset=i64,
        length=i64,
        storage_length=i64,
        created_ms=i64,
        sealed=st.booleans(),
        attributes=st.dictionaries(u128, i64, max_size=4),
        sequence_number=seq,
    ),
    st.builds(
        AppendOperation,
        segment_id=i64,
        data=st.binary(max_size=3000),
        offset=i64,
        expected_offset=i64,
        ingest_time_ms=i64,
        attribute_updates=updates,
        sequence_number=seq,
    ),
    st.builds(SealOperation, segment_id=i64, length=i64, sequence_number=seq),
    st.builds(TruncateOperation, segment_id=i64, offset=i64, sequence_number=seq),
    st.builds(
        MergeOperation,
        segment_id=i64,
        source_id=i64,
        target_offset=i64,
        length=i64,
        merge_time_ms=i64,
        sequence_number=seq,
    ),
    st.builds(DeleteOperation, segment_id=i64, sequence_number=seq),
    st.builds(UpdateAttributesOperation, segment_id=i64, attribute_updates=updates, sequence_number=seq),
    st.builds(MetadataCheckpointOperation, snapshot=st.binary(max_size=500), sequence_number=seq),
)


@given(operations)
def test_serialize_with_any_operation_round_trips(op: Operation) -> None:
    assert deserialize(b"".join(serialize(op))) == op


def test_deserialize_with_a_merge_logged_without_its_time_gives_time_zero() -> None:
    op = MergeOperation(segment_id=1, source_id=2, target_offset=3, length=4, merge_time_ms=77, sequence_number=5)
    header, *body = serialize(op)
    untimed = struct.pack(">Bq", MergeOperation.UNTIMED_TYPE, 5) + b"".join(body)[:-8]  # as logged before the time
    assert header[:1] == bytes([MergeOperation.TYPE])
    assert deserialize(untimed) == dataclasses.replace(op, merge_time_ms=0)


def test_serialize_with_unassigned_sequence_number_raises() -> None:
    with pytest.raises(ValueError):
        serialize(SealOperation(segment_id=1))


@given(operations, st.data())
def test_deserialize_with_truncated_or_extended_bytes_raises(op: Operation, data: st.DataObject) -> None:
    raw = b"".join(serialize(op))
    cut = data.draw(st.integers(min_value=0, max_value=len(raw) - 1))
    with pytest.raises(OperationSerializationError):
        deserialize(raw[:cut])
    with pytest.raises(OperationSerializationError):
        deserialize(raw + b"\x00")


def test_deserialize_with_unknown_type_raises() -> None:
    with pytest.raises(OperationSerializationError, match="unknown operation type 99"):
        deserialize(struct.pack(">Bq", 99, 1))


def _frames(ops: list[Operation], max_frame: int) -> list[bytearray]:
    out: list[bytearray] = []
    builder = DataFrameBuilder(max_frame, lambda f: out.append(f.data))
    for op in ops:
        builder.append(op)
    builder.flush()
    return out


@settings(max_examples=50)
@given(st.lists(operations, min_size=1, max_size=20), st.integers(min_value=200, max_value=5000))
def test_frames_with_operations_spanning_frames_reassemble_in_order(ops: list[Operation], max_frame: int) -> None:
    frames = _frames(ops, max_frame)
    assert all(len(f) <= max_frame for f in frames)
    assembler = OperationAssembler()
    out = [op for f in frames for op, _ in assembler.add_frame(f)]
    assert out == ops


def test_frame_builder_with_completed_list_marks_last_frame_of_each_operation() -> None:
    done: list[list[int]] = []
    builder = DataFrameBuilder(4096, lambda f: done.append([op.sequence_number for op in f.completed]))
    builder.append(AppendOperation(segment_id=1, data=b"x" * 10_000, offset=0, sequence_number=1))
    builder.append(AppendOperation(segment_id=1, data=b"y" * 10, offset=0, sequence_number=2))
    builder.flush()
    assert done[-1] == [1, 2]
    assert all(d == [] for d in done[:-1])


def test_read_frame_with_flipped_bit_raises_corrupted() -> None:
    frame = bytearray(_frames([SealOperation(segment_id=1, length=5, sequence_number=1)], 4096)[0])
    frame[FRAME_HEADER_SIZE + 2] ^= 0x10
    with pytest.raises(DataFrameCorruptedError, match="CRC"):
        list(read_frame(frame))


def test_read_frame_with_short_or_foreign_entry_raises_corrupted() -> None:
    with pytest.raises(DataFrameCorruptedError):
        list(read_frame(b"abc"))
    with pytest.raises(DataFrameCorruptedError, match="magic"):
        list(read_frame(b"\x00" * 64))


def test_assembler_with_abandoned_operation_drops_it() -> None:
    big = AppendOperation(segment_id=1, data=b"z" * 9000, offset=0, sequence_number=1)
    frames_big = _frames([big], 4096)
    small = SealOperation(segment_id=1, length=5, sequence_number=2)
    frames_small = _frames([small], 4096)
    assembler = OperationAssembler()
    out = [op for op, _ in assembler.add_frame(frames_big[0])]  # only the first part was durable
    out += [op for op, _ in assembler.add_frame(frames_small[0])]
    assert out == [small]
    assert assembler.dropped == 1


def test_assembler_with_orphan_continuation_raises() -> None:
    frames = _frames([AppendOperation(segment_id=1, data=b"z" * 9000, offset=0, sequence_number=1)], 4096)
    with pytest.raises(DataFrameCorruptedError, match="continuation"):
        OperationAssembler().add_frame(frames[1])


@given(st.lists(operations, min_size=1, max_size=8))
def test_frame_with_whole_operations_is_record_header_then_operation_bytes(ops: list[Operation]) -> None:
    """The layout recovery reads, byte for byte: ``flags u8 | length u32 | operation`` per record (first and
    last flags set when the operation fits), whichever way the builder gathered the parts."""
    from segment_store.logs.data_frame import FLAG_FIRST, FLAG_LAST, RECORD_HEADER_SIZE

    frames = _frames(ops, 1 << 20)
    assert len(frames) == 1
    body = b"".join(
        struct.pack(">BI", FLAG_FIRST | FLAG_LAST, len(raw)) + raw for raw in (b"".join(serialize(op)) for op in ops)
    )
    assert RECORD_HEADER_SIZE == 5
    assert bytes(frames[0][FRAME_HEADER_SIZE:]) == body
    assert [record for _, record in read_frame(frames[0])]
