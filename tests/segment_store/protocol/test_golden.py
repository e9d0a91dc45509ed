"""Golden bytes for every wire command, spelled out field by field in Java's ``writeFields`` order.

The expected frames are built only from ``protocol_wire`` (struct.pack of each field); the codec under
test produces nothing here. Each case is checked both ways: encode(cmd) == golden, decode(golden) == cmd.
"""

from __future__ import annotations

import dataclasses

import pytest
from golden_extensions import EXTENSION_CASES
from golden_iceberg_tables import ICEBERG_TABLE_CASES
from golden_pins import PIN_CASES
from golden_values import (
    ATTR,
    DATA,
    MAX_LONG,
    MIN_LONG,
    REQ,
    SEG,
    SEG2,
    SEG2_RAW,
    SEG_RAW,
    STACK,
    STACK_RAW,
    TOKEN,
    TOKEN_RAW,
    WRITER,
)
from protocol_wire import blob, boolean, event, frame, i8, i32, i64, table_key, table_value, uid, utf

from segment_store.protocol import (
    REGISTRY,
    AppendBlock,
    AppendBlockEnd,
    AppendSetup,
    AuthTokenCheckFailed,
    AuthTokenErrorCode,
    ChunkInfo,
    ConditionalAppend,
    ConditionalAttributeUpdate,
    ConditionalBlockEnd,
    ConditionalCheckFailed,
    CreateSegment,
    CreateTableSegment,
    CreateTransientSegment,
    DataAppended,
    DeleteSegment,
    DeleteTableSegment,
    ErrorMessage,
    ErrorMessageCode,
    Event,
    FlushToStorage,
    GetSegmentAttribute,
    GetStreamSegmentInfo,
    GetTableSegmentInfo,
    Hello,
    InvalidEventNumber,
    KeepAlive,
    ListStorageChunks,
    LocateOffset,
    MergeSegments,
    MergeSegmentsBatch,
    NoSuchSegment,
    OffsetLocated,
    OperationUnsupported,
    Padding,
    PartialEvent,
    ReadSegment,
    ReadTable,
    ReadTableEntries,
    ReadTableEntriesDelta,
    ReadTableKeys,
    RemoveTableKeys,
    SealSegment,
    SegmentAlreadyExists,
    SegmentAttribute,
    SegmentAttributeUpdated,
    SegmentCreated,
    SegmentDeleted,
    SegmentIsSealed,
    SegmentIsTruncated,
    SegmentPolicyUpdated,
    SegmentRead,
    SegmentsBatchMerged,
    SegmentSealed,
    SegmentsMerged,
    SegmentTruncated,
    SetupAppend,
    StorageChunksListed,
    StorageFlushed,
    StreamSegmentInfo,
    TableEntriesDeltaRead,
    TableEntriesRead,
    TableEntriesUpdated,
    TableEntry,
    TableIteratorArgs,
    TableKey,
    TableKeyBadVersion,
    TableKeyDoesNotExist,
    TableKeysRead,
    TableKeysRemoved,
    TableRead,
    TableSegmentInfo,
    TableSegmentNotEmpty,
    TableValue,
    TruncateSegment,
    UpdateSegmentAttribute,
    UpdateSegmentPolicy,
    UpdateTableEntries,
    WireCommand,
    WrongHost,
    decode_all,
    encode,
)

pytestmark = pytest.mark.unit

CASES: list[tuple[str, WireCommand, bytes]] = [
    ("hello", Hello(15, 5), frame(-127, i32(15), i32(5))),
    ("padding", Padding(11), frame(-1, bytes(11))),
    ("padding_empty", Padding(0), frame(-1)),
    ("partial_event", PartialEvent(b"\x00\x01\xfe\xff"), frame(-2, b"\x00\x01\xfe\xff")),
    ("flush_to_storage", FlushToStorage(-7, TOKEN, REQ), frame(-3, i32(-7), utf(TOKEN_RAW), i64(REQ))),
    ("storage_flushed", StorageFlushed(REQ), frame(-4, i64(REQ))),
    ("list_storage_chunks", ListStorageChunks(SEG, "", 9), frame(-5, utf(SEG_RAW), utf(b""), i64(9))),
    (
        "storage_chunks_listed",
        StorageChunksListed(REQ, (ChunkInfo(10, 8, -1, SEG, True), ChunkInfo(MAX_LONG, 0, MIN_LONG, "", False))),
        frame(
            -6,
            i64(REQ),
            i32(2),
            i64(10) + i64(8) + i64(-1) + utf(SEG_RAW) + boolean(True),
            i64(MAX_LONG) + i64(0) + i64(MIN_LONG) + utf(b"") + boolean(False),
        ),
    ),
    ("storage_chunks_listed_empty", StorageChunksListed(1, ()), frame(-6, i64(1), i32(0))),
    *EXTENSION_CASES,
    *PIN_CASES,
    *ICEBERG_TABLE_CASES,
    ("event", Event(DATA), frame(0, DATA)),
    (
        "setup_append",
        SetupAppend(REQ, WRITER, SEG, TOKEN),
        frame(1, i64(REQ), uid(WRITER), utf(SEG_RAW), utf(TOKEN_RAW)),
    ),
    ("append_setup", AppendSetup(3, SEG, WRITER, -1), frame(2, i64(3), utf(SEG_RAW), uid(WRITER), i64(-1))),
    (
        "append_block",
        AppendBlock(WRITER, event(b"abc") + event(b"")),
        frame(3, uid(WRITER), event(b"abc"), event(b"")),
    ),
    (
        "append_block_end",
        AppendBlockEnd(WRITER, 17, event(b"xyz"), 3, MAX_LONG, REQ),
        frame(4, uid(WRITER), i32(17), blob(event(b"xyz")), i32(3), i64(MAX_LONG), i64(REQ)),
    ),
    (
        "append_block_end_no_data",
        AppendBlockEnd(WRITER, 0, b"", 1, 0, -1),
        frame(4, uid(WRITER), i32(0), i32(0), i32(1), i64(0), i64(-1)),
    ),
    (
        "conditional_append",
        ConditionalAppend(WRITER, 42, -5, Event(b"payload"), REQ),
        frame(5, uid(WRITER), i64(42), i64(-5), i32(0), i32(7), b"payload", i64(REQ)),
    ),
    (
        "data_appended",
        DataAppended(WRITER, 10, 7, REQ, 2**40),
        frame(7, uid(WRITER), i64(10), i64(7), i64(REQ), i64(2**40)),
    ),
    (
        "conditional_check_failed",
        ConditionalCheckFailed(WRITER, -2, REQ),
        frame(8, uid(WRITER), i64(-2), i64(REQ)),
    ),
    (
        "read_segment",
        ReadSegment(SEG, 2**33, -1, TOKEN, REQ),
        frame(9, utf(SEG_RAW), i64(2**33), i32(-1), utf(TOKEN_RAW), i64(REQ)),
    ),
    (
        "segment_read",
        SegmentRead(SEG, 77, True, False, DATA, REQ),
        frame(10, utf(SEG_RAW), i64(77), boolean(True), boolean(False), blob(DATA), i64(REQ)),
    ),
    (
        "get_stream_segment_info",
        GetStreamSegmentInfo(REQ, SEG, TOKEN),
        frame(11, i64(REQ), utf(SEG_RAW), utf(TOKEN_RAW)),
    ),
    (
        "stream_segment_info",
        StreamSegmentInfo(REQ, SEG, True, False, True, -1, 2**50, 9),
        frame(
            12,
            i64(REQ),
            utf(SEG_RAW),
            boolean(True),
            boolean(False),
            boolean(True),
            i64(-1),
            i64(2**50),
            i64(9),
        ),
    ),
    (
        "create_segment",
        CreateSegment(REQ, SEG, -100, 2, TOKEN, 1 << 30),
        frame(20, i64(REQ), utf(SEG_RAW), i32(-100), i8(2), utf(TOKEN_RAW), i64(1 << 30)),
    ),
    ("segment_created", SegmentCreated(REQ, SEG), frame(21, i64(REQ), utf(SEG_RAW))),
    ("seal_segment", SealSegment(REQ, SEG2, ""), frame(28, i64(REQ), utf(SEG2_RAW), utf(b""))),
    ("segment_sealed", SegmentSealed(0, SEG2), frame(29, i64(0), utf(SEG2_RAW))),
    ("delete_segment", DeleteSegment(-1, SEG, TOKEN), frame(30, i64(-1), utf(SEG_RAW), utf(TOKEN_RAW))),
    ("segment_deleted", SegmentDeleted(-1, SEG), frame(31, i64(-1), utf(SEG_RAW))),
    (
        "update_segment_policy",
        UpdateSegmentPolicy(5, SEG, 2**31 - 1, -128, TOKEN),
        frame(32, i64(5), utf(SEG_RAW), i32(2**31 - 1), i8(-128), utf(TOKEN_RAW)),
    ),
    ("segment_policy_updated", SegmentPolicyUpdated(5, SEG), frame(33, i64(5), utf(SEG_RAW))),
    (
        "get_segment_attribute",
        GetSegmentAttribute(REQ, SEG, ATTR, TOKEN),
        frame(34, i64(REQ), utf(SEG_RAW), uid(ATTR), utf(TOKEN_RAW)),
    ),
    ("segment_attribute", SegmentAttribute(REQ, MIN_LONG), frame(35, i64(REQ), i64(MIN_LONG))),
    (
        "update_segment_attribute",
        UpdateSegmentAttribute(REQ, SEG, ATTR, -3, MIN_LONG, TOKEN),
        frame(36, i64(REQ), utf(SEG_RAW), uid(ATTR), i64(-3), i64(MIN_LONG), utf(TOKEN_RAW)),
    ),
    ("segment_attribute_updated", SegmentAttributeUpdated(REQ, True), frame(37, i64(REQ), boolean(True))),
    (
        "truncate_segment",
        TruncateSegment(REQ, SEG, 2**45, TOKEN),
        frame(38, i64(REQ), utf(SEG_RAW), i64(2**45), utf(TOKEN_RAW)),
    ),
    ("segment_truncated", SegmentTruncated(REQ, SEG), frame(39, i64(REQ), utf(SEG_RAW))),
    (
        "create_transient_segment",
        CreateTransientSegment(REQ, WRITER, SEG, TOKEN),
        frame(40, i64(REQ), uid(WRITER), utf(SEG_RAW), utf(TOKEN_RAW)),
    ),
    (
        "locate_offset",
        LocateOffset(REQ, SEG, -9, TOKEN),
        frame(41, i64(REQ), utf(SEG_RAW), i64(-9), utf(TOKEN_RAW)),
    ),
    ("offset_located", OffsetLocated(REQ, SEG, 123), frame(42, i64(REQ), utf(SEG_RAW), i64(123))),
    (
        "wrong_host",
        WrongHost(REQ, SEG, "host-ü:12345", STACK),
        frame(50, i64(REQ), utf(SEG_RAW), utf(b"host-\xc3\xbc:12345"), utf(STACK_RAW)),
    ),
    (
        "segment_is_sealed",
        SegmentIsSealed(REQ, SEG, STACK, 99),
        frame(51, i64(REQ), utf(SEG_RAW), utf(STACK_RAW), i64(99)),
    ),
    (
        "segment_already_exists",
        SegmentAlreadyExists(REQ, SEG, ""),
        frame(52, i64(REQ), utf(SEG_RAW), utf(b"")),
    ),
    (
        "no_such_segment",
        NoSuchSegment(REQ, SEG, STACK, -1),
        frame(53, i64(REQ), utf(SEG_RAW), utf(STACK_RAW), i64(-1)),
    ),
    (
        "invalid_event_number",
        InvalidEventNumber(WRITER, REQ, STACK, 77),
        frame(55, uid(WRITER), i64(REQ), utf(STACK_RAW), i64(77)),
    ),
    (
        "segment_is_truncated",
        SegmentIsTruncated(REQ, SEG, 500, STACK, 12),
        frame(56, i64(REQ), utf(SEG_RAW), i64(500), utf(STACK_RAW), i64(12)),
    ),
    (
        "operation_unsupported",
        OperationUnsupported(REQ, "flüsh", STACK),
        frame(57, i64(REQ), utf(b"fl\xc3\xbcsh"), utf(STACK_RAW)),
    ),
    (
        "merge_segments",
        MergeSegments(
            REQ,
            SEG,
            SEG2,
            TOKEN,
            (ConditionalAttributeUpdate(ATTR, 4, -1, MIN_LONG), ConditionalAttributeUpdate(WRITER, 1, 5, 6)),
        ),
        frame(
            58,
            i64(REQ),
            utf(SEG_RAW),
            utf(SEG2_RAW),
            utf(TOKEN_RAW),
            i32(2),
            uid(ATTR) + i8(4) + i64(-1) + i64(MIN_LONG),
            uid(WRITER) + i8(1) + i64(5) + i64(6),
        ),
    ),
    (
        "merge_segments_no_updates",
        MergeSegments(1, SEG, SEG2, "", ()),
        frame(58, i64(1), utf(SEG_RAW), utf(SEG2_RAW), utf(b""), i32(0)),
    ),
    (
        "segments_merged",
        SegmentsMerged(REQ, SEG, SEG2, 2**40 + 1),
        frame(59, i64(REQ), utf(SEG_RAW), utf(SEG2_RAW), i64(2**40 + 1)),
    ),
    (
        "auth_token_check_failed",
        AuthTokenCheckFailed(REQ, STACK, AuthTokenErrorCode.TOKEN_EXPIRED),
        frame(60, i64(REQ), utf(STACK_RAW), i32(1)),
    ),
    (
        "auth_token_check_failed_unspecified",
        AuthTokenCheckFailed(REQ, "", AuthTokenErrorCode.UNSPECIFIED),
        frame(60, i64(REQ), utf(b""), i32(-1)),
    ),
    (
        "error_message",
        ErrorMessage(REQ, SEG, "bäd argument", ErrorMessageCode.ILLEGAL_ARGUMENT_EXCEPTION),
        frame(61, i64(REQ), utf(SEG_RAW), utf(b"b\xc3\xa4d argument"), i32(0)),
    ),
    (
        "get_table_segment_info",
        GetTableSegmentInfo(REQ, SEG, TOKEN),
        frame(68, i64(REQ), utf(SEG_RAW), utf(TOKEN_RAW)),
    ),
    (
        "table_segment_info",
        TableSegmentInfo(REQ, SEG, 4, 2**36, 1000, -1),
        frame(69, i64(REQ), utf(SEG_RAW), i64(4), i64(2**36), i64(1000), i32(-1)),
    ),
    (
        "create_table_segment",
        CreateTableSegment(REQ, SEG, TOKEN, True, 16, 1 << 20),
        frame(70, i64(REQ), utf(SEG_RAW), utf(TOKEN_RAW), boolean(True), i32(16), i64(1 << 20)),
    ),
    (
        "delete_table_segment",
        DeleteTableSegment(REQ, SEG, True, TOKEN),
        frame(71, i64(REQ), utf(SEG_RAW), boolean(True), utf(TOKEN_RAW)),
    ),
    (
        "update_table_entries",
        UpdateTableEntries(
            REQ,
            SEG,
            TOKEN,
            (
                TableEntry(TableKey(b"k\xff1", -1), TableValue(b"value-1")),
                TableEntry(TableKey(b"k2", MIN_LONG), TableValue(b"")),
                TableEntry(TableKey.EMPTY, TableValue(b"v")),
            ),
            77,
        ),
        frame(
            74,
            i64(REQ),
            utf(SEG_RAW),
            utf(TOKEN_RAW),
            i32(3),
            i32(15) + i32(3) + b"k\xff1" + i64(-1),
            i32(11) + i32(7) + b"value-1",
            table_key(b"k2", MIN_LONG),
            i32(4) + i32(0),
            i32(12) + i32(0),
            table_value(b"v"),
            i64(77),
        ),
    ),
    (
        "table_entries_updated",
        TableEntriesUpdated(REQ, (1, -1, MAX_LONG)),
        frame(75, i64(REQ), i32(3), i64(1), i64(-1), i64(MAX_LONG)),
    ),
    ("table_entries_updated_empty", TableEntriesUpdated(0, ()), frame(75, i64(0), i32(0))),
    (
        "remove_table_keys",
        RemoveTableKeys(REQ, SEG, TOKEN, (TableKey(b"a", 3), TableKey(b"bc", -1)), -1),
        frame(
            76,
            i64(REQ),
            utf(SEG_RAW),
            utf(TOKEN_RAW),
            i32(2),
            table_key(b"a", 3),
            table_key(b"bc", -1),
            i64(-1),
        ),
    ),
    ("table_keys_removed", TableKeysRemoved(REQ, SEG), frame(77, i64(REQ), utf(SEG_RAW))),
    (
        "read_table",
        ReadTable(REQ, SEG, TOKEN, (TableKey(b"key", MIN_LONG),)),
        frame(78, i64(REQ), utf(SEG_RAW), utf(TOKEN_RAW), i32(1), table_key(b"key", MIN_LONG)),
    ),
    (
        "table_read",
        TableRead(REQ, SEG, (TableEntry(TableKey(b"key", 5), TableValue(DATA)),)),
        frame(79, i64(REQ), utf(SEG_RAW), i32(1), table_key(b"key", 5), table_value(DATA)),
    ),
    ("table_read_empty", TableRead(REQ, SEG, ()), frame(79, i64(REQ), utf(SEG_RAW), i32(0))),
    (
        "table_segment_not_empty",
        TableSegmentNotEmpty(REQ, SEG, STACK),
        frame(80, i64(REQ), utf(SEG_RAW), utf(STACK_RAW)),
    ),
    (
        "table_key_does_not_exist",
        TableKeyDoesNotExist(REQ, SEG, ""),
        frame(81, i64(REQ), utf(SEG_RAW), utf(b"")),
    ),
    (
        "table_key_bad_version",
        TableKeyBadVersion(REQ, SEG, STACK),
        frame(82, i64(REQ), utf(SEG_RAW), utf(STACK_RAW)),
    ),
    (
        "read_table_keys",
        ReadTableKeys(REQ, SEG, TOKEN, 100, TableIteratorArgs(b"\x7f\xff\xff\xff", b"", b"to")),
        frame(
            83,
            i64(REQ),
            utf(SEG_RAW),
            utf(TOKEN_RAW),
            i32(100),
            blob(b"\x7f\xff\xff\xff"),
            i32(0),
            i32(0),
            blob(b"to"),
        ),
    ),
    (
        "table_keys_read",
        TableKeysRead(REQ, SEG, (TableKey(b"a", 1), TableKey(b"b", 2)), b"cont"),
        frame(84, i64(REQ), utf(SEG_RAW), i32(2), table_key(b"a", 1), table_key(b"b", 2), blob(b"cont")),
    ),
    (
        "read_table_entries",
        ReadTableEntries(REQ, SEG, TOKEN, -1, TableIteratorArgs(b"", b"from", b"")),
        frame(85, i64(REQ), utf(SEG_RAW), utf(TOKEN_RAW), i32(-1), i32(0), i32(0), blob(b"from"), i32(0)),
    ),
    (
        "table_entries_read",
        TableEntriesRead(REQ, SEG, (TableEntry(TableKey(b"k", 9), TableValue(b"v")),), b""),
        frame(86, i64(REQ), utf(SEG_RAW), i32(1), table_key(b"k", 9), table_value(b"v"), i32(0)),
    ),
    (
        "table_entries_delta_read",
        TableEntriesDeltaRead(REQ, SEG, (TableEntry(TableKey(b"k", 1), TableValue(b"v")),), True, False, -5),
        frame(
            87,
            i64(REQ),
            utf(SEG_RAW),
            i32(1),
            table_key(b"k", 1),
            table_value(b"v"),
            boolean(True),
            boolean(False),
            i64(-5),
        ),
    ),
    (
        "read_table_entries_delta",
        ReadTableEntriesDelta(REQ, SEG, TOKEN, 2**40, 50),
        frame(88, i64(REQ), utf(SEG_RAW), utf(TOKEN_RAW), i64(2**40), i32(50)),
    ),
    (
        "conditional_block_end",
        ConditionalBlockEnd(WRITER, 8, -1, event(b"a") + event(b"bb"), REQ),
        frame(89, uid(WRITER), i64(8), i64(-1), blob(event(b"a") + event(b"bb")), i64(REQ)),
    ),
    (
        "merge_segments_batch",
        MergeSegmentsBatch(REQ, SEG, (SEG2, "ü"), TOKEN),
        frame(90, i64(REQ), utf(SEG_RAW), i32(2), utf(SEG2_RAW), utf(b"\xc3\xbc"), utf(TOKEN_RAW)),
    ),
    (
        "merge_segments_batch_empty",
        MergeSegmentsBatch(REQ, SEG, (), ""),
        frame(90, i64(REQ), utf(SEG_RAW), i32(0), utf(b"")),
    ),
    (
        "segments_batch_merged",
        SegmentsBatchMerged(REQ, SEG, (SEG2, "x"), (100, -1)),
        frame(91, i64(REQ), utf(SEG_RAW), i32(2), utf(SEG2_RAW), i64(100), utf(b"x"), i64(-1)),
    ),
    ("keep_alive", KeepAlive(), frame(100)),
]


@pytest.mark.parametrize(("name", "command", "golden"), CASES, ids=[c[0] for c in CASES])
def test_encode_with_golden_bytes(name: str, command: WireCommand, golden: bytes) -> None:
    assert encode(command) == golden


@pytest.mark.parametrize(("name", "command", "golden"), CASES, ids=[c[0] for c in CASES])
def test_decode_with_golden_bytes(name: str, command: WireCommand, golden: bytes) -> None:
    assert decode_all(golden) == [command]


def test_golden_with_every_registered_type_code() -> None:
    covered = {type(command).TYPE_CODE for _, command, _ in CASES}
    assert covered == set(REGISTRY)
    assert len(REGISTRY) == 86


def test_type_codes_with_java_values() -> None:
    expected = {
        "Hello": -127, "Padding": -1, "PartialEvent": -2, "FlushToStorage": -3, "StorageFlushed": -4,
        "ListStorageChunks": -5, "StorageChunksListed": -6, "Event": 0, "SetupAppend": 1, "AppendSetup": 2,
        "AppendBlock": 3, "AppendBlockEnd": 4, "ConditionalAppend": 5, "DataAppended": 7,
        "ConditionalCheckFailed": 8, "ReadSegment": 9, "SegmentRead": 10, "GetStreamSegmentInfo": 11,
        "StreamSegmentInfo": 12, "CreateSegment": 20, "SegmentCreated": 21, "SealSegment": 28,
        "SegmentSealed": 29, "DeleteSegment": 30, "SegmentDeleted": 31, "UpdateSegmentPolicy": 32,
        "SegmentPolicyUpdated": 33, "GetSegmentAttribute": 34, "SegmentAttribute": 35,
        "UpdateSegmentAttribute": 36, "SegmentAttributeUpdated": 37, "TruncateSegment": 38,
        "SegmentTruncated": 39, "CreateTransientSegment": 40, "LocateOffset": 41, "OffsetLocated": 42,
        "WrongHost": 50, "SegmentIsSealed": 51, "SegmentAlreadyExists": 52, "NoSuchSegment": 53,
        "InvalidEventNumber": 55, "SegmentIsTruncated": 56, "OperationUnsupported": 57, "MergeSegments": 58,
        "SegmentsMerged": 59, "AuthTokenCheckFailed": 60, "ErrorMessage": 61, "GetTableSegmentInfo": 68,
        "TableSegmentInfo": 69, "CreateTableSegment": 70, "DeleteTableSegment": 71,
        "UpdateTableEntries": 74, "TableEntriesUpdated": 75, "RemoveTableKeys": 76, "TableKeysRemoved": 77,
        "ReadTable": 78, "TableRead": 79, "TableSegmentNotEmpty": 80, "TableKeyDoesNotExist": 81,
        "TableKeyBadVersion": 82, "ReadTableKeys": 83, "TableKeysRead": 84, "ReadTableEntries": 85,
        "TableEntriesRead": 86, "TableEntriesDeltaRead": 87, "ReadTableEntriesDelta": 88,
        "ConditionalBlockEnd": 89, "MergeSegmentsBatch": 90, "SegmentsBatchMerged": 91, "KeepAlive": 100,
    }  # fmt: skip
    extensions = {  # segstore's own (protocol/commands/extensions.py), unused by Java
        "LocateOffsetAtTime": -20, "OffsetAtTimeLocated": -21,
        "ListStorageChunkLocations": -22, "StorageChunkLocationsListed": -23,
        "ReadIngestTimes": -24, "IngestTimesRead": -25,
        "PinChunks": -26, "ChunksPinned": -27, "UnpinChunks": -28, "ChunksUnpinned": -29,  # protocol/commands/pins.py
        "ListChunkPins": -30, "ChunkPinsListed": -31,
        "LocateOffsetBeforeTime": -32, "OffsetBeforeTimeLocated": -33,
        "ListIcebergTables": -34, "IcebergTablesListed": -35,  # protocol/commands/iceberg_tables.py
    }  # fmt: skip
    assert {cls.__name__: code for code, cls in REGISTRY.items()} == expected | extensions


def test_commands_with_frozen_slotted_dataclasses() -> None:
    for _, command, _ in CASES:
        assert dataclasses.is_dataclass(command)
        assert not hasattr(command, "__dict__"), type(command).__name__
        for field in dataclasses.fields(command)[:1]:
            with pytest.raises(dataclasses.FrozenInstanceError):
                setattr(command, field.name, None)
        assert hash(command) == hash(dataclasses.replace(command))
