"""Streams as Iceberg tables, end to end: a real ``segstore standalone`` with ``--iceberg-tables``, events written
with the client library (scaled, compacted, with the catalog locked for a while), the table read back with
pyiceberg and with DuckDB's ``iceberg_scan`` (extensions loaded by path): exactly the stream's events, each once,
at ``offset = chunk_start + chunk_offset``, with their ingestion time."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from iceberg_readers import catalog, duckdb_connection, duckdb_events, poll, rows_by_position
from spark_fixtures import Streams
from standalone_process import StandaloneProcess

from controller_client.model import StreamCut, qualified_segment_name
from segment_store.client import BlockingClient

pytestmark = [pytest.mark.integration, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    data = tmp_path_factory.mktemp("iceberg") / "data"
    flags = ("--iceberg-tables", "lake/*,audit/kept", "--iceberg-commit-interval-ms", "200")
    env = {"SEGSTORE_SLTS_COMPACTION_INTERVAL_S": "1"}  # compaction soon enough to be seen by a test
    with StandaloneProcess(data, extra_args=flags, env=env) as process:
        yield process


def scan(standalone: StandaloneProcess, scope: str, stream: str) -> pa.Table | None:
    """The table's rows (pyiceberg), or None while it does not exist."""
    from pyiceberg.exceptions import NoSuchTableError

    if not (standalone.data_dir / "iceberg" / "catalog.db").exists():
        return None  # no table made yet
    try:
        return catalog(standalone.data_dir).load_table((scope, stream)).scan().to_arrow()
    except NoSuchTableError:
        return None


def table_rows(standalone: StandaloneProcess, scope: str, stream: str) -> list[tuple[int, int, bytes]]:
    table = scan(standalone, scope, stream)
    return [] if table is None else rows_by_position(table)


def table_rows_unlocked(database: sqlite3.Connection, standalone: StandaloneProcess) -> list[tuple[int, int, bytes]]:
    """The rows of lake.locked as of the metadata the (locked) catalog names, read by the lock holder."""
    from pyiceberg.table import StaticTable

    (location,) = database.execute(
        "SELECT metadata_location FROM iceberg_tables WHERE table_namespace = 'lake' AND table_name = 'locked'"
    ).fetchone()
    return rows_by_position(StaticTable.from_metadata(location).scan().to_arrow())


def duckdb_rows(standalone: StandaloneProcess, scope: str, stream: str) -> list[tuple[int, int, bytes]]:
    """``(segment_id, offset, event)`` of the table's events as DuckDB's ``iceberg_scan`` of the table dir gives."""
    return duckdb_events(catalog(standalone.data_dir).load_table((scope, stream)).location())


def write(streams: Streams, scope: str, stream: str, count: int, tag: str) -> None:
    streams.write(scope, stream, [(f"{tag}-{i}".encode(), f"key-{i % 5}") for i in range(count)])


def test_stream_table_holds_every_event_once_after_a_scale(standalone: StandaloneProcess, streams: Streams) -> None:
    before_ms = int(time.time() * 1000)
    streams.create("lake", "clicks", segments=2)
    streams.create("other", "ignored")
    write(streams, "lake", "clicks", 300, "first")
    write(streams, "other", "ignored", 10, "x")
    streams.split_first("lake", "clicks")
    write(streams, "lake", "clicks", 300, "second")
    after_ms = int(time.time() * 1000)
    expected = sorted(streams.events("lake", "clicks"))
    assert len(expected) == 600 and any(s >> 32 == 1 for s, _, _ in expected)  # segments of the split too

    poll(lambda: table_rows(standalone, "lake", "clicks") == expected, "every event in the pyiceberg scan")
    table = scan(standalone, "lake", "clicks")
    assert table is not None
    assert set(table.column("scope").to_pylist()) == {"lake"}
    assert set(table.column("stream").to_pylist()) == {"clicks"}
    assert table.schema.field("timestamp").type == pa.timestamp("us", tz="UTC")
    times = [t.timestamp() * 1000 for t in table.column("timestamp").to_pylist()]
    assert before_ms - 1000 <= min(times) and max(times) <= after_ms + 1000

    duck = duckdb_connection()
    location = catalog(standalone.data_dir).load_table(("lake", "clicks")).location()
    for source in (location, catalog(standalone.data_dir).load_table(("lake", "clicks")).metadata_location):
        got = duck.execute(
            f"""SELECT segment_id, chunk_start + chunk_offset AS "offset", event FROM iceberg_scan('{source}')
                WHERE framed ORDER BY segment_id, "offset" """
        ).fetchall()
        assert [(s, o, bytes(e)) for s, o, e in got] == expected  # the table dir: through version-hint.text
    (earliest,) = duck.execute(f"SELECT min(epoch_ms(timestamp)) FROM iceberg_scan('{location}')").fetchone()
    assert earliest == min(times)

    tables = {ident for ns in catalog(standalone.data_dir).list_namespaces() for ident in
              catalog(standalone.data_dir).list_tables(ns)}  # fmt: skip
    assert ("lake", "clicks") in tables and not any(ns == "other" for ns, _ in tables)


def test_acknowledged_event_is_in_the_table_within_seconds(standalone: StandaloneProcess, streams: Streams) -> None:
    streams.create("lake", "fresh")
    write(streams, "lake", "fresh", 1, "warm-up")
    poll(lambda: len(table_rows(standalone, "lake", "fresh")) == 1, "the table exists")
    acknowledged = time.monotonic()
    write(streams, "lake", "fresh", 1, "now")
    poll(lambda: any(e == b"now-0" for _, _, e in table_rows(standalone, "lake", "fresh")), "fresh event", 15)
    # (15 s: room for a loaded machine; bench/iceberg_freshness.py measures how soon)
    print(
        f"visible {time.monotonic() - acknowledged:.2f} s after acknowledgement"
    )  # measured: bench/iceberg_freshness.py


def test_compacted_chunks_are_swapped_in_the_table_without_duplicates(
    standalone: StandaloneProcess, streams: Streams
) -> None:
    streams.create("lake", "small")
    segment = qualified_segment_name("lake", "small", 0)
    with BlockingClient(standalone.segmentstore_endpoint) as client:
        for round_ in range(10):  # ten small chunks: compaction merges runs of eight
            write(streams, "lake", "small", 20, f"r{round_}")
            for container in range(standalone.container_count):
                client.flush_to_storage(container)
        poll(lambda: len(client.list_storage_chunks(segment)) < 10, "compaction merged the small chunks")
        starts = sorted(c.start_offset for c in client.list_storage_chunks(segment))

    def files_are_the_chunks() -> bool:
        table = catalog(standalone.data_dir).load_table(("lake", "small"))
        return sorted(t.file.partition[3] for t in table.scan().plan_files()) == starts

    poll(files_are_the_chunks, "the table's files are the segment's chunks, the merged one among them")
    expected = sorted(streams.events("lake", "small"))
    assert len(expected) == 200
    assert table_rows(standalone, "lake", "small") == expected
    table = catalog(standalone.data_dir).load_table(("lake", "small"))
    operations = {table.snapshot_by_id(h.snapshot_id).summary.operation.value for h in table.history()}
    assert "overwrite" in operations  # one snapshot: the merged files out, the merged chunk in


def test_chunks_of_the_table_are_pinned(standalone: StandaloneProcess, streams: Streams) -> None:
    streams.create("audit", "kept")
    write(streams, "audit", "kept", 50, "a")
    poll(lambda: len(table_rows(standalone, "audit", "kept")) == 50, "the table holds the events")
    files = {t.file.file_path for t in catalog(standalone.data_dir).load_table(("audit", "kept")).scan().plan_files()}
    env = {**os.environ, "PYTHONPATH": str(REPO), "SEGSTORE_CONTROLLER": standalone.controller_uri}
    argv = [sys.executable, "-m", "segstore_cli", "admin", "pins", "--json"]

    def pinned() -> list[dict[str, Any]] | None:
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=True)
        pins = [p for p in json.loads(done.stdout) if p["pin_id"] == "iceberg" and "audit/kept/" in p["segment"]]
        return pins if sum(p["chunks"] for p in pins) >= len(files) else None

    pins = poll(pinned, "the table's chunks pinned")
    assert {p["segment"] for p in pins} == {qualified_segment_name("audit", "kept", 0)}


def test_locked_catalog_blocks_no_append_and_the_table_catches_up(
    standalone: StandaloneProcess, streams: Streams
) -> None:
    streams.create("lake", "locked")
    write(streams, "lake", "locked", 10, "before")
    poll(lambda: len(table_rows(standalone, "lake", "locked")) == 10, "the table exists")
    database = sqlite3.connect(standalone.data_dir / "iceberg" / "catalog.db", isolation_level=None)
    database.execute("BEGIN EXCLUSIVE")  # the catalog is down for writers (and readers) meanwhile
    log = standalone.data_dir / "segmentstore.log"
    try:
        started = time.monotonic()
        write(streams, "lake", "locked", 100, "during")
        assert time.monotonic() - started < 10  # appends go on
        assert len([e for e in streams.events("lake", "locked") if e[2].startswith(b"during")]) == 100
        poll(lambda: "iceberg lake.locked: pass failed" in log.read_text(), "a pass failed on the locked catalog")
        assert len(table_rows_unlocked(database, standalone)) == 10  # the table has not moved
    finally:
        database.execute("ROLLBACK")
        database.close()
    expected = sorted(streams.events("lake", "locked"))
    poll(lambda: table_rows(standalone, "lake", "locked") == expected, "the table caught up")


def test_committed_transaction_events_join_their_segment_in_the_table(
    standalone: StandaloneProcess, streams: Streams
) -> None:
    streams.create("lake", "orders")
    write(streams, "lake", "orders", 50, "plain")
    writer = streams.manager.create_txn_writer("lake", "orders")
    try:
        txn = writer.begin()
        for i in range(40):
            txn.write_event(f"txn-{i}".encode(), f"key-{i % 5}")
        txn.flush()
        txn.commit()
    finally:
        writer.close()
    poll(lambda: len(streams.events("lake", "orders")) == 90, "the transaction is merged")
    write(streams, "lake", "orders", 10, "after")
    expected = sorted(streams.events("lake", "orders"))
    poll(lambda: table_rows(standalone, "lake", "orders") == expected, "the table holds the transaction's events")
    segments = {s for s, _, e in expected if e.startswith(b"txn-")}
    assert segments == {0}  # at the parent segment's offsets, not as a segment of their own


def test_truncation_inside_a_chunk_leaves_exactly_the_live_events_in_the_table(
    standalone: StandaloneProcess, streams: Streams
) -> None:
    streams.create("lake", "cut")
    write(streams, "lake", "cut", 100, "old")
    segment = qualified_segment_name("lake", "cut", 0)
    events = sorted(streams.events("lake", "cut"))
    poll(lambda: table_rows(standalone, "lake", "cut") == events, "the table holds the events")
    with BlockingClient(standalone.segmentstore_endpoint) as client:
        starts = {c.start_offset for c in client.list_storage_chunks(segment)}
        at = next(o for _, o, _ in events[40:] if o not in starts)
        streams.manager.truncate(StreamCut("lake", "cut", {0: at}))  # inside a chunk: not at a chunk's start
        assert any(c.start_offset < at for c in client.list_storage_chunks(segment))  # the chunk is kept
        expected = [e for e in events if e[1] >= at]
        assert sorted(streams.events("lake", "cut")) == expected and len(expected) < len(events)
        poll(lambda: table_rows(standalone, "lake", "cut") == expected, "pyiceberg: exactly the live events")
        assert duckdb_rows(standalone, "lake", "cut") == expected
        table = catalog(standalone.data_dir).load_table(("lake", "cut"))
        assert any("/data/truncated/" in t.file.file_path for t in table.scan().plan_files())  # the trimmed copy

        for round_ in range(10):  # more writes, in small chunks that compaction merges
            write(streams, "lake", "cut", 20, f"r{round_}")
            for container in range(standalone.container_count):
                client.flush_to_storage(container)
        poll(lambda: len(client.list_storage_chunks(segment)) < 10, "compaction merged the small chunks")
    live = len(expected)
    expected = sorted(streams.events("lake", "cut"))
    assert len(expected) == live + 200
    poll(lambda: table_rows(standalone, "lake", "cut") == expected, "pyiceberg: exact after writes and compaction")
    assert duckdb_rows(standalone, "lake", "cut") == expected
