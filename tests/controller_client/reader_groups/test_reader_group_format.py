"""The official Rust client's reader group state format (``controller_client.reader_groups.format``): golden bytes
worked out from serde_cbor's rules, round trips, and refusal of what the client never writes."""

from __future__ import annotations

import pytest

from controller_client.reader_groups.format import (
    ASSIGNED,
    DISTANCE,
    TYPE_ASSIGNED,
    TYPE_BLOB,
    TYPE_DISTANCE,
    TYPE_OFFSET,
    TYPE_TOMBSTONE,
    U64_MAX,
    UNASSIGNED,
    BoundaryCut,
    CborMap,
    ReaderGroupConfig,
    ReaderGroupFormatError,
    ReaderGroupState,
    ScopedSegment,
    ScopedStream,
    Segment,
    StreamCutV1,
    TableValue,
    cbor_decode,
    cbor_encode,
    decode_data,
    decode_key,
    decode_value,
    encode_data,
    encode_entry,
    encode_key,
    encode_value,
    state_from_entries,
    state_to_entries,
    table_segment_name,
)

pytestmark = pytest.mark.unit

OFFSET_0 = bytes.fromhex("a1") + b"\x64read" + b"\x00"  # {"read": 0}
SEG = ScopedSegment.of("sc", "st", 1)


def _segment_cbor(scope: str, stream: str, number: int) -> bytes:
    return (
        b"\xa3\x65scope\xa1\x64name"
        + bytes([0x60 | len(scope)])
        + scope.encode()
        + b"\x66stream\xa1\x64name"
        + bytes([0x60 | len(stream)])
        + stream.encode()
        + b"\x67segment\xa2\x66number"
        + bytes([number])
        + b"\x65tx_id\xf6"
    )


def test_table_segment_name_with_group_is_kvtable_segment_zero() -> None:
    assert table_segment_name("sc", "rg") == "sc/rg_kvtable/0.#epoch.0"


def test_encode_key_with_inner_key_is_cbor_text_of_length_prefixed_composite() -> None:
    key = encode_key(ASSIGNED, "reader-1")
    assert key == b"\x78\x1c" + b"17assigned_segments/reader-1"  # 28 bytes: one-byte length after 0x78
    assert decode_key(key) == (ASSIGNED, "reader-1")


def test_encode_key_without_inner_key_is_the_outer_version_key() -> None:
    assert encode_key(UNASSIGNED) == bytes([0x75]) + b"19unassigned_segments"
    assert decode_key(encode_key(UNASSIGNED)) == (UNASSIGNED, None)


def test_decode_key_with_slashes_in_inner_key_keeps_them() -> None:
    name = SEG.qualified_name
    assert name == "sc/st/1.#epoch.0"
    assert decode_key(encode_key(UNASSIGNED, name)) == (UNASSIGNED, name)


def test_encode_value_with_offset_gives_data_as_array_of_byte_integers() -> None:
    data = encode_data(TYPE_OFFSET, 0)
    assert data == OFFSET_0
    value = encode_value(TableValue(TYPE_OFFSET, data))
    expected_data = b"\x87" + b"".join(b if b[0] < 24 else b"\x18" + b for b in (bytes([x]) for x in OFFSET_0))
    assert value == b"\xa2\x67type_id\x66Offset\x64data" + expected_data
    assert decode_value(value) == TableValue(TYPE_OFFSET, OFFSET_0)


def test_encode_data_with_tombstone_and_blob_gives_empty_map_and_zero() -> None:
    assert encode_data(TYPE_TOMBSTONE, None) == b"\xa0"
    assert encode_data(TYPE_BLOB, None) == b"\x00"
    assert encode_value(TableValue(TYPE_BLOB, b"\x00")) == b"\xa2\x67type_id\x64blob\x64data\x81\x00"


def test_encode_data_with_distance_u64_max_uses_eight_byte_head() -> None:
    assert encode_data(TYPE_DISTANCE, U64_MAX) == b"\x1b" + b"\xff" * 8
    assert decode_data(TYPE_DISTANCE, b"\x1b" + b"\xff" * 8) == U64_MAX


def test_encode_data_with_assigned_segments_is_map_of_segment_structs_to_offsets() -> None:
    data = encode_data(TYPE_ASSIGNED, {SEG: 0})
    assert data == b"\xa1" + _segment_cbor("sc", "st", 1) + OFFSET_0
    assert decode_data(TYPE_ASSIGNED, data) == {SEG: 0}
    assert encode_data(TYPE_ASSIGNED, {}) == b"\xa0"


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, "00"),
        (23, "17"),
        (24, "1818"),
        (255, "18ff"),
        (256, "190100"),
        (65536, "1a00010000"),
        (2**32, "1b0000000100000000"),
        (-1, "20"),
        (-25, "3818"),
        (-(2**63), "3b7fffffffffffffff"),
    ],
)
def test_cbor_encode_with_integer_uses_shortest_head(value: int, encoded: str) -> None:
    assert cbor_encode(value) == bytes.fromhex(encoded)
    assert cbor_decode(bytes.fromhex(encoded)) == value


def test_scoped_segment_with_epoch_prints_and_parses_like_the_client() -> None:
    segment = ScopedSegment.of("sc", "st", (3 << 32) | 5)
    assert segment.qualified_name == "sc/st/5.#epoch.3"
    assert ScopedSegment.parse("sc/st/5.#epoch.3") == segment
    assert ScopedSegment.parse("sc/st/5") == ScopedSegment.of("sc", "st", 5)
    assert ScopedSegment.parse("st/5") == ScopedSegment.of("", "st", 5)


def test_scoped_segment_parse_with_transaction_name_raises() -> None:
    with pytest.raises(ReaderGroupFormatError, match="transaction"):
        ScopedSegment.parse("sc/st/0.#epoch.0#transaction." + "0" * 32)


def test_config_round_trip_with_every_kind_of_cut_keeps_bytes() -> None:
    stream = ScopedStream("sc", "st")
    cut = StreamCutV1(stream, {SEG: 42, ScopedSegment.of("sc", "st", 2 << 32): -1})
    config = ReaderGroupConfig(
        {stream: cut, ScopedStream("sc", "b"): BoundaryCut.TAIL},
        {stream: BoundaryCut.UNBOUNDED},
        group_refresh_time_millis=3000,
    )
    data = encode_data("ReaderGroupConfigVersioned", config)
    assert data.startswith(b"\xa1\x62V1\xa3\x78\x19group_refresh_time_millis\x19\x0b\xb8")
    assert decode_data("ReaderGroupConfigVersioned", data) == config
    assert encode_data("ReaderGroupConfigVersioned", decode_data("ReaderGroupConfigVersioned", data)) == data


def test_state_round_trip_with_every_outer_key_keeps_entries() -> None:
    stream = ScopedStream("sc", "st")
    state = ReaderGroupState(
        config=ReaderGroupConfig({stream: BoundaryCut.UNBOUNDED}),
        assigned_segments={"r1": {SEG: 10}, "r2": {}},
        unassigned_segments={ScopedSegment.of("sc", "st", 0): 0},
        future_segments={ScopedSegment.of("sc", "st", 1 << 32 | 3): (Segment(0), Segment(1))},
        distance_to_tail={"r1": U64_MAX, "r2": U64_MAX},
    )
    entries = state_to_entries(state)
    assert state_from_entries(entries) == state
    assert state_to_entries(state_from_entries(entries)) == entries
    assert state.online_readers == ["r1", "r2"]


def test_state_from_entries_with_tombstones_leaves_the_reader_out() -> None:
    entries = [
        encode_entry(ASSIGNED, "gone", TYPE_TOMBSTONE, None),
        encode_entry(DISTANCE, "gone", TYPE_TOMBSTONE, None),
        encode_entry(ASSIGNED, "here", TYPE_ASSIGNED, {SEG: 5}),
        encode_entry(ASSIGNED, None, TYPE_BLOB, None),
    ]
    state = state_from_entries(entries)
    assert state.online_readers == ["here"]
    assert state.distance_to_tail == {}


def test_state_from_entries_with_wrong_type_for_key_raises() -> None:
    with pytest.raises(ReaderGroupFormatError, match="expected HashMap"):
        state_from_entries([encode_entry(ASSIGNED, "r", TYPE_OFFSET, 3)])
    with pytest.raises(ReaderGroupFormatError, match="expected a blob"):
        state_from_entries([encode_entry("elsewhere", None, TYPE_BLOB, None)])


def test_decode_value_with_data_as_byte_string_raises() -> None:
    with pytest.raises(ReaderGroupFormatError, match="major type 2"):
        decode_value(b"\xa2\x67type_id\x64blob\x64data\x41\x00")


def test_cbor_decode_with_each_truncation_raises() -> None:
    data = encode_value(TableValue(TYPE_ASSIGNED, encode_data(TYPE_ASSIGNED, {SEG: 300})))
    for end in range(len(data)):
        with pytest.raises(ReaderGroupFormatError):
            decode_value(data[:end])


def test_cbor_decode_with_trailing_bytes_raises() -> None:
    with pytest.raises(ReaderGroupFormatError, match="after the CBOR item"):
        cbor_decode(b"\x00\x00")


def test_cbor_encode_with_u128_above_u64_refuses_like_serde_cbor() -> None:
    with pytest.raises(ReaderGroupFormatError, match="can't be stored"):
        encode_data(TYPE_ASSIGNED, {ScopedSegment("sc", "st", Segment(0, 2**64)): 0})
    assert cbor_decode(cbor_encode(CborMap(((None, [1, "x"]),)))) == CborMap(((None, [1, "x"]),))
