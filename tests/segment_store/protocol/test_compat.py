"""Frames from older peers (fields Java reads conditionally) and string encodings of other writers."""

from __future__ import annotations

import uuid

import pytest
from protocol_wire import blob, boolean, event, frame, i8, i32, i64, uid, utf

from segment_store.protocol import (
    AppendBlockEnd,
    AuthTokenCheckFailed,
    AuthTokenErrorCode,
    ConditionalAppend,
    ConditionalCheckFailed,
    CreateSegment,
    CreateTableSegment,
    DataAppended,
    ErrorMessage,
    ErrorMessageCode,
    Event,
    InvalidEventNumber,
    MergeSegments,
    NoSuchSegment,
    OperationUnsupported,
    ProtocolError,
    ReadSegment,
    ReadTableEntries,
    ReadTableKeys,
    RemoveTableKeys,
    SegmentAlreadyExists,
    SegmentCreated,
    SegmentIsSealed,
    SegmentIsTruncated,
    SegmentRead,
    SegmentsMerged,
    StreamSegmentInfo,
    TableEntry,
    TableIteratorArgs,
    TableKey,
    TableKeysRead,
    TableValue,
    UpdateTableEntries,
    WireCommand,
    WrongHost,
    decode_all,
    encode,
)
from segment_store.protocol.types import decode_utf, encode_utf

pytestmark = pytest.mark.unit

W = uuid.UUID("ffffffff-0000-0000-8000-000000000001")

OLDER_FRAMES: list[tuple[str, bytes, WireCommand]] = [
    ("wrong_host_v5", frame(50, i64(1), utf(b"s"), utf(b"h")), WrongHost(1, "s", "h", "")),
    ("segment_is_sealed_v5", frame(51, i64(1), utf(b"s")), SegmentIsSealed(1, "s", "", -1)),
    ("segment_is_sealed_v14", frame(51, i64(1), utf(b"s"), utf(b"st")), SegmentIsSealed(1, "s", "st", -1)),
    (
        "segment_is_truncated_v5",
        frame(56, i64(1), utf(b"s"), i64(4)),
        SegmentIsTruncated(1, "s", 4, "", -1),
    ),
    ("segment_already_exists_v5", frame(52, i64(1), utf(b"s")), SegmentAlreadyExists(1, "s", "")),
    ("no_such_segment_v5", frame(53, i64(1), utf(b"s")), NoSuchSegment(1, "s", "", -1)),
    ("invalid_event_number_v5", frame(55, uid(W), i64(7)), InvalidEventNumber(W, 7, "", -1)),
    (
        "invalid_event_number_v15",
        frame(55, uid(W), i64(7), utf(b"trace")),
        InvalidEventNumber(W, 7, "trace", -1),
    ),
    ("operation_unsupported_v5", frame(57, i64(1), utf(b"op")), OperationUnsupported(1, "op", "")),
    (
        "auth_token_check_failed_v5",
        frame(60, i64(3)),
        AuthTokenCheckFailed(3, "", AuthTokenErrorCode.UNSPECIFIED),
    ),
    (
        "auth_token_check_failed_no_code",
        frame(60, i64(3), utf(b"x")),
        AuthTokenCheckFailed(3, "x", AuthTokenErrorCode.UNSPECIFIED),
    ),
    (
        "auth_token_check_failed_unknown_code",
        frame(60, i64(3), utf(b"x"), i32(42)),
        AuthTokenCheckFailed(3, "x", AuthTokenErrorCode.TOKEN_CHECK_FAILED),
    ),
    (
        "error_message_unknown_code",
        frame(61, i64(3), utf(b"s"), utf(b"m"), i32(99)),
        ErrorMessage(3, "s", "m", ErrorMessageCode.UNSPECIFIED),
    ),
    ("data_appended_v2", frame(7, uid(W), i64(5)), DataAppended(W, 5, -1, -1, -1)),
    ("data_appended_v3", frame(7, uid(W), i64(5), i64(4)), DataAppended(W, 5, 4, -1, -1)),
    ("data_appended_v4", frame(7, uid(W), i64(5), i64(4), i64(9)), DataAppended(W, 5, 4, 9, -1)),
    ("conditional_check_failed_old", frame(8, uid(W), i64(5)), ConditionalCheckFailed(W, 5, -1)),
    (
        "conditional_append_v7",
        frame(5, uid(W), i64(1), i64(2), event(b"e")),
        ConditionalAppend(W, 1, 2, Event(b"e"), -1),
    ),
    (
        "append_block_end_no_request_id",
        frame(4, uid(W), i32(0), blob(b"d"), i32(1), i64(2)),
        AppendBlockEnd(W, 0, b"d", 1, 2, -1),
    ),
    (
        "read_segment_no_request_id",
        frame(9, utf(b"s"), i64(1), i32(2), utf(b"")),
        ReadSegment("s", 1, 2, "", -1),
    ),
    (
        "segment_read_no_request_id",
        frame(10, utf(b"s"), i64(1), boolean(False), boolean(True), blob(b"xy")),
        SegmentRead("s", 1, False, True, b"xy", -1),
    ),
    (
        "stream_segment_info_no_start_offset",
        frame(12, i64(1), utf(b"s"), boolean(True), boolean(False), boolean(False), i64(2), i64(3)),
        StreamSegmentInfo(1, "s", True, False, False, 2, 3, 0),
    ),
    (
        "create_segment_no_rollover",
        frame(20, i64(1), utf(b"s"), i32(10), i8(1), utf(b"t")),
        CreateSegment(1, "s", 10, 1, "t", 0),
    ),
    (
        "create_table_segment_rust",
        frame(70, i64(1), utf(b"s"), utf(b"t")),
        CreateTableSegment(1, "s", "t", False, 0, 0),
    ),
    (
        "create_table_segment_sorted_only",
        frame(70, i64(1), utf(b"s"), utf(b"t"), boolean(True)),
        CreateTableSegment(1, "s", "t", True, 0, 0),
    ),
    (
        "create_table_segment_no_rollover",
        frame(70, i64(1), utf(b"s"), utf(b"t"), boolean(False), i32(8)),
        CreateTableSegment(1, "s", "t", False, 8, 0),
    ),
    (
        "merge_segments_pre_v5",
        frame(58, i64(1), utf(b"t"), utf(b"s"), utf(b"")),
        MergeSegments(1, "t", "s", "", ()),
    ),
    (
        "segments_merged_no_offset",
        frame(59, i64(1), utf(b"t"), utf(b"s")),
        SegmentsMerged(1, "t", "s", -1),
    ),
    (
        "update_table_entries_no_offset",
        frame(74, i64(1), utf(b"s"), utf(b""), i32(1), i32(13), i32(1), b"k", i64(2), i32(5), i32(1), b"v"),
        UpdateTableEntries(1, "s", "", (TableEntry(TableKey(b"k", 2), TableValue(b"v")),), -1),
    ),
    (
        "remove_table_keys_no_offset",
        frame(76, i64(1), utf(b"s"), utf(b""), i32(0)),
        RemoveTableKeys(1, "s", "", (), -1),
    ),
    (
        "read_table_keys_rust_token_only",
        frame(83, i64(1), utf(b"s"), utf(b""), i32(10), blob(b"tok")),
        ReadTableKeys(1, "s", "", 10, TableIteratorArgs(b"tok", b"", b"")),
    ),
    (
        "read_table_entries_pre_0_10",
        frame(85, i64(1), utf(b"s"), utf(b""), i32(10), blob(b"tok"), blob(b"prefix")),
        ReadTableEntries(1, "s", "", 10, TableIteratorArgs(b"tok", b"", b"")),
    ),
    (
        "table_key_empty_has_no_version",
        frame(84, i64(1), utf(b"s"), i32(1), i32(12), i32(0), blob(b"")),
        TableKeysRead(1, "s", (TableKey(b"", TableKey.NO_VERSION),), b""),
    ),
]


@pytest.mark.parametrize(("name", "golden", "expected"), OLDER_FRAMES, ids=[c[0] for c in OLDER_FRAMES])
def test_decode_with_older_peer_frame(name: str, golden: bytes, expected: WireCommand) -> None:
    assert decode_all(golden) == [expected]


def test_decode_with_optional_field_partially_present() -> None:
    # Java skips an optional long when fewer than 8 bytes are left, then ignores them; we reject them.
    with pytest.raises(ProtocolError, match="SegmentIsSealed"):
        decode_all(frame(51, i64(1), utf(b"s"), utf(b""), b"\x00\x00\x00"))


def test_decode_with_table_key_payload_larger_than_frame() -> None:
    bad = frame(84, i64(1), utf(b"s"), i32(1), i32(1000), i32(1), b"k", i64(0), blob(b""))
    with pytest.raises(ProtocolError, match="table key declares 1000 bytes"):
        decode_all(bad)


def test_decode_with_conditional_append_wrong_event_type() -> None:
    bad = frame(5, uid(W), i64(1), i64(2), i32(3), i32(1), b"e", i64(0))
    with pytest.raises(ProtocolError, match="expected an Event"):
        decode_all(bad)


def test_decode_with_java_modified_utf8() -> None:
    # NUL as C0 80 and U+1F600 as the CESU-8 surrogate pair ED A0 BD ED B8 80.
    assert decode_utf(b"a\xc0\x80b") == "a\x00b"
    assert decode_utf(b"\xed\xa0\xbd\xed\xb8\x80!") == "\U0001f600!"
    assert decode_all(frame(21, i64(1), utf(b"x\xc0\x80\xed\xa0\xbd\xed\xb8\x80"))) == [
        decode_all(frame(21, i64(1), utf(b"x\x00\xf0\x9f\x98\x80")))[0]
    ]


def test_decode_with_rust_standard_utf8() -> None:
    assert decode_utf(b"a\x00b") == "a\x00b"
    assert decode_utf(b"\xf0\x9f\x98\x80") == "\U0001f600"


@pytest.mark.parametrize("raw", [b"\xed\xa0\xbd", b"\xc1\x81", b"\xff", b"\xe6\xb5", b"\x80"])
def test_decode_utf_with_invalid_bytes(raw: bytes) -> None:
    with pytest.raises(ProtocolError):
        decode_utf(raw)
    with pytest.raises(ProtocolError, match="SegmentCreated"):
        decode_all(frame(21, i64(1), utf(raw)))


def test_encode_utf_with_nul_and_supplementary_chars() -> None:
    assert encode_utf("a\x00\U0001f600") == b"\x00\x06a\x00\xf0\x9f\x98\x80"


def test_encode_with_unencodable_strings() -> None:
    with pytest.raises(ProtocolError, match=r"SegmentCreated.*65535"):
        encode(SegmentCreated(1, "x" * 65536))
    with pytest.raises(ProtocolError, match="UTF-8"):
        encode(SegmentCreated(1, "\ud800"))
    assert len(encode(SegmentCreated(1, "é" * 32767))) == 8 + 8 + 2 + 65534


def test_encode_with_out_of_range_integers() -> None:
    with pytest.raises(ProtocolError, match="SegmentCreated"):
        encode(SegmentCreated(2**63, "s"))
    with pytest.raises(ProtocolError, match="CreateSegment"):
        encode(CreateSegment(1, "s", 1, 128, "", 0))
