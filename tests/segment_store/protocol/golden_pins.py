"""Golden bytes of segstore's chunk pin extension (``segment_store/protocol/commands/pins.py``), in the order their
fields are written; part of the cases of tests/segment_store/protocol/test_golden.py."""

from __future__ import annotations

from golden_values import MAX_LONG, MIN_LONG, REQ, SEG, SEG_RAW, TOKEN, TOKEN_RAW
from protocol_wire import boolean, frame, i32, i64, utf

from segment_store.protocol import (
    ChunkPinsListed,
    ChunksPinned,
    ChunksUnpinned,
    ListChunkPins,
    PinChunks,
    PinInfo,
    UnpinChunks,
    WireCommand,
)

PIN_CASES: list[tuple[str, WireCommand, bytes]] = [
    (
        "pin_chunks",
        PinChunks(REQ, SEG, "p-1", 120_000, ("c/a.parquet", "€"), TOKEN),
        frame(
            -26,
            i64(REQ),
            utf(SEG_RAW),
            utf(b"p-1"),
            i64(120_000),
            i32(2),
            utf(b"c/a.parquet") + utf(b"\xe2\x82\xac"),
            utf(TOKEN_RAW),
        ),
    ),
    (
        "pin_chunks_none",
        PinChunks(1, "", "", 0, (), ""),
        frame(-26, i64(1), utf(b""), utf(b""), i64(0), i32(0), utf(b"")),
    ),
    ("chunks_pinned", ChunksPinned(REQ, "p-1", MAX_LONG), frame(-27, i64(REQ), utf(b"p-1"), i64(MAX_LONG))),
    (
        "unpin_chunks",
        UnpinChunks(REQ, SEG, "p-1", TOKEN),
        frame(-28, i64(REQ), utf(SEG_RAW), utf(b"p-1"), utf(TOKEN_RAW)),
    ),
    ("chunks_unpinned", ChunksUnpinned(REQ, "p-1", True), frame(-29, i64(REQ), utf(b"p-1"), boolean(True))),
    ("list_chunk_pins", ListChunkPins(REQ, 7, TOKEN), frame(-30, i64(REQ), i32(7), utf(TOKEN_RAW))),
    (
        "chunk_pins_listed",
        ChunkPinsListed(REQ, (PinInfo("p-1", SEG, MIN_LONG, 3),)),
        frame(-31, i64(REQ), i32(1), utf(b"p-1") + utf(SEG_RAW) + i64(MIN_LONG) + i64(3)),
    ),
    ("chunk_pins_listed_empty", ChunkPinsListed(-1, ()), frame(-31, i64(-1), i32(0))),
]
