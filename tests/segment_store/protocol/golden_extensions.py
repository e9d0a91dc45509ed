"""Golden bytes of segstore's wire extensions (``segment_store/protocol/commands/extensions.py``), in the order
their fields are written; part of the cases of tests/segment_store/protocol/test_golden.py."""

from __future__ import annotations

from golden_values import MAX_LONG, MIN_LONG, REQ, SEG, SEG2, SEG2_RAW, SEG_RAW, TOKEN, TOKEN_RAW
from protocol_wire import frame, i32, i64, utf

from segment_store.protocol import (
    TIER2_FILE,
    TIER2_NONE,
    TIER2_S3,
    ChunkLocation,
    IngestTimeRun,
    IngestTimesRead,
    ListStorageChunkLocations,
    LocateOffsetAtTime,
    LocateOffsetBeforeTime,
    OffsetAtTimeLocated,
    OffsetBeforeTimeLocated,
    ReadIngestTimes,
    StorageChunkLocationsListed,
    WireCommand,
)

EXTENSION_CASES: list[tuple[str, WireCommand, bytes]] = [
    (
        "locate_offset_at_time",
        LocateOffsetAtTime(REQ, SEG, 1_700_000_000_123, TOKEN),
        frame(-20, i64(REQ), utf(SEG_RAW), i64(1_700_000_000_123), utf(TOKEN_RAW)),
    ),
    ("offset_at_time_located", OffsetAtTimeLocated(REQ, SEG, 4096), frame(-21, i64(REQ), utf(SEG_RAW), i64(4096))),
    (
        "locate_offset_before_time",
        LocateOffsetBeforeTime(REQ, SEG, 1_700_000_000_123, TOKEN),
        frame(-32, i64(REQ), utf(SEG_RAW), i64(1_700_000_000_123), utf(TOKEN_RAW)),
    ),
    ("offset_before_time_located", OffsetBeforeTimeLocated(REQ, SEG, -1), frame(-33, i64(REQ), utf(SEG_RAW), i64(-1))),
    (
        "list_storage_chunk_locations",
        ListStorageChunkLocations(REQ, SEG, -1, MAX_LONG, TOKEN),
        frame(-22, i64(REQ), utf(SEG_RAW), i64(-1), i64(MAX_LONG), utf(TOKEN_RAW)),
    ),
    (
        "storage_chunk_locations_listed_s3",
        StorageChunkLocationsListed(
            REQ,
            SEG,
            MIN_LONG,
            TIER2_S3,
            "http://127.0.0.1:9000",
            "bück€t",
            (ChunkLocation(0, 10, SEG, "pre/" + SEG), ChunkLocation(10, MAX_LONG, "", "")),
        ),
        frame(
            -23,
            i64(REQ),
            utf(SEG_RAW),
            i64(MIN_LONG),
            utf(b"s3"),
            utf(b"http://127.0.0.1:9000"),
            utf(b"b\xc3\xbcck\xe2\x82\xact"),
            i32(2),
            i64(0) + i64(10) + utf(SEG_RAW) + utf(b"pre/" + SEG_RAW),
            i64(10) + i64(MAX_LONG) + utf(b"") + utf(b""),
        ),
    ),
    (
        "storage_chunk_locations_listed_file",
        StorageChunkLocationsListed(1, SEG2, 7, TIER2_FILE, "", "", (ChunkLocation(0, 99, "c", "/t2/c"),)),
        frame(
            -23,
            i64(1),
            utf(SEG2_RAW),
            i64(7),
            utf(b"file"),
            utf(b""),
            utf(b""),
            i32(1),
            i64(0) + i64(99) + utf(b"c") + utf(b"/t2/c"),
        ),
    ),
    (
        "storage_chunk_locations_listed_none",
        StorageChunkLocationsListed(-1, "", 0, TIER2_NONE, "", "", ()),
        frame(-23, i64(-1), utf(b""), i64(0), utf(b""), utf(b""), utf(b""), i32(0)),
    ),
    (
        "read_ingest_times",
        ReadIngestTimes(REQ, SEG, -1, MAX_LONG, TOKEN),
        frame(-24, i64(REQ), utf(SEG_RAW), i64(-1), i64(MAX_LONG), utf(TOKEN_RAW)),
    ),
    (
        "ingest_times_read",
        IngestTimesRead(REQ, SEG, 4096, (IngestTimeRun(0, 1_700_000_000_123), IngestTimeRun(MAX_LONG, MIN_LONG))),
        frame(
            -25,
            i64(REQ),
            utf(SEG_RAW),
            i64(4096),
            i32(2),
            i64(0) + i64(1_700_000_000_123),
            i64(MAX_LONG) + i64(MIN_LONG),
        ),
    ),
    ("ingest_times_read_empty", IngestTimesRead(1, "", 0, ()), frame(-25, i64(1), utf(b""), i64(0), i32(0))),
]
