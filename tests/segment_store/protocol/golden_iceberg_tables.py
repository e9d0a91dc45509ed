"""Golden bytes of segstore's Iceberg tables extension (``segment_store/protocol/commands/iceberg_tables.py``), in
the order their fields are written; part of the cases of tests/segment_store/protocol/test_golden.py."""

from __future__ import annotations

from golden_values import MAX_LONG, MIN_LONG, REQ, TOKEN, TOKEN_RAW
from protocol_wire import boolean, frame, i32, i64, utf

from segment_store.protocol import IcebergTableInfo, IcebergTablesListed, ListIcebergTables, WireCommand

ICEBERG_TABLE_CASES: list[tuple[str, WireCommand, bytes]] = [
    ("list_iceberg_tables", ListIcebergTables(REQ, TOKEN), frame(-34, i64(REQ), utf(TOKEN_RAW))),
    (
        "iceberg_tables_listed",
        IcebergTablesListed(REQ, True, (IcebergTableInfo("lake/€", MIN_LONG, 17, 3, MAX_LONG, 2, 150, 18, 4, 9, "x"),)),
        frame(
            -35,
            i64(REQ),
            boolean(True),
            i32(1),
            utf(b"lake/\xe2\x82\xac")
            + i64(MIN_LONG)
            + i64(17)
            + i64(3)
            + i64(MAX_LONG)
            + i64(2)
            + i64(150)
            + i64(18)
            + i32(4)
            + i64(9)
            + utf(b"x"),
        ),
    ),
    ("iceberg_tables_listed_off", IcebergTablesListed(-1, False, ()), frame(-35, i64(-1), boolean(False), i32(0))),
]
