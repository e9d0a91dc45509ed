"""Operating stream tables, end to end: a real ``segstore standalone`` with ``--iceberg-tables`` and its metrics
port; ``segstore admin tables`` (a subprocess, as an operator runs it) and the segment store's ``/metrics`` show a
table's snapshot, files and lag; with the catalog locked (SQLite ``BEGIN EXCLUSIVE`` by another process'
connection: the catalog is down for the maintainer) appends are still acknowledged, admin shows the error and
a growing lag, the metrics count failed passes; once unlocked the table catches up with every event once (read
with pyiceberg)."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from iceberg_readers import catalog, poll, rows_by_position
from prometheus_client.parser import text_string_to_metric_families
from spark_fixtures import Streams
from standalone_process import StandaloneProcess

from segment_store.client import BlockingClient

pytestmark = [pytest.mark.integration, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    data = tmp_path_factory.mktemp("table-ops") / "data"
    flags = ("--iceberg-tables", "ops/*", "--iceberg-commit-interval-ms", "200", "--metrics-port", "0")
    with StandaloneProcess(data, extra_args=flags) as process:
        yield process


def admin(standalone: StandaloneProcess, *args: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(REPO), "SEGSTORE_CONTROLLER": standalone.controller_uri}
    argv = [sys.executable, "-m", "segstore_cli", "admin", "tables", *args]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def table_row(standalone: StandaloneProcess, name: str) -> dict[str, Any] | None:
    listed = json.loads(admin(standalone, "--json"))
    assert listed["enabled"] is True
    return next((t for t in listed["tables"] if t["table"] == name), None)


def metrics(standalone: StandaloneProcess, table: str) -> dict[str, float]:
    """The segment store's ``segstore_iceberg_table_*`` samples of ``table``, by metric name."""
    (port,) = {m.group(1) for line in standalone.output if (m := re.search(r"and :(\d+) \(segment store\)", line))}
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name.startswith("segstore_iceberg_table_") and sample.labels.get("table") == table
    }


def table_rows(standalone: StandaloneProcess, stream: str) -> list[tuple[int, int, bytes]]:
    return rows_by_position(catalog(standalone.data_dir).load_table(("ops", stream)).scan().to_arrow())


def write(streams: Streams, stream: str, count: int, tag: str) -> None:
    streams.write("ops", stream, [(f"{tag}-{i}".encode(), f"key-{i % 5}") for i in range(count)])


def test_admin_and_metrics_show_lag_through_a_catalog_outage_and_the_catch_up(
    standalone: StandaloneProcess, streams: Streams
) -> None:
    streams.create("ops", "live", segments=2)
    write(streams, "live", 200, "before")
    caught_up = poll(
        lambda: (row := table_row(standalone, "ops/live")) and row["lag_bytes"] == 0 and row["data_files"] and row,
        "admin tables shows the table with no lag",
    )
    assert caught_up["state"] == "ok" and caught_up["snapshot_id"] is not None and caught_up["failures"] == 0
    assert abs(caught_up["committed_at_ms"] - time.time() * 1000) < 120_000
    human = admin(standalone)
    assert "ops/live" in human and "ok" in human and "LAG AGE" in human
    seen = metrics(standalone, "ops/live")
    assert seen["segstore_iceberg_table_lag_bytes"] == 0 and seen["segstore_iceberg_table_data_files"] >= 1
    assert seen["segstore_iceberg_table_failed_passes_total"] == 0

    database = sqlite3.connect(standalone.data_dir / "iceberg" / "catalog.db", isolation_level=None)
    database.execute("BEGIN EXCLUSIVE")  # the catalog is down for the maintainer meanwhile
    try:
        started = time.monotonic()
        write(streams, "live", 100, "during")
        assert time.monotonic() - started < 10  # appends go on, acknowledged
        with BlockingClient(standalone.segmentstore_endpoint) as client:
            for container in range(standalone.container_count):
                client.flush_to_storage(container)  # final in Tier-2: lag, not writer backlog
        failing = poll(
            lambda: (row := table_row(standalone, "ops/live")) and row["failures"] and row["lag_bytes"] > 0 and row,
            "admin tables shows the failing passes and the lag",
        )
        assert failing["state"] == "failing" and "locked" in failing["last_error"], failing
        later = poll(
            lambda: (row := table_row(standalone, "ops/live")) and row["lag_age_ms"] > failing["lag_age_ms"] and row,
            "the lag grows older",
        )
        assert later["lag_bytes"] >= failing["lag_bytes"]
        assert "failing" in admin(standalone)
        seen = poll(
            lambda: m if (m := metrics(standalone, "ops/live"))["segstore_iceberg_table_failed_passes_total"] else None,
            "the metrics count the failed passes",
        )
        assert seen["segstore_iceberg_table_lag_bytes"] > 0 and seen["segstore_iceberg_table_lag_age_seconds"] > 0
        print(f"lag while locked: {later['lag_bytes']} bytes, {later['lag_age_ms'] / 1000:.1f} s")
    finally:
        database.execute("ROLLBACK")
        database.close()
    unlocked = time.monotonic()
    expected = sorted(streams.events("ops", "live"))
    assert len(expected) == 300
    poll(lambda: table_rows(standalone, "live") == expected, "the table caught up, every event once")
    caught_up = poll(
        lambda: (row := table_row(standalone, "ops/live")) and row["lag_bytes"] == 0 and not row["failures"] and row,
        "admin tables shows the table caught up",
    )
    print(f"caught up {time.monotonic() - unlocked:.1f} s after the catalog was unlocked")
    assert caught_up["state"] == "ok" and caught_up["lag_age_ms"] == 0 and caught_up["last_error"] == ""
    assert caught_up["failed_passes"] > 0  # counted since start
    seen = metrics(standalone, "ops/live")
    assert seen["segstore_iceberg_table_lag_bytes"] == 0 and seen["segstore_iceberg_table_lag_age_seconds"] == 0


def test_deleted_stream_keeps_its_table_as_of_its_last_snapshot(
    standalone: StandaloneProcess, streams: Streams
) -> None:
    """The decided behaviour (docs/iceberg.md, "Operating tables"): deleting a stream leaves its table in the
    catalog as of its last snapshot, readable while the table's pins hold its chunk files; admin stops listing
    it; dropping it is the operator's call (pyiceberg ``drop_table``)."""
    streams.create("ops", "gone")
    write(streams, "gone", 50, "kept")
    poll(lambda: (row := table_row(standalone, "ops/gone")) and row["lag_bytes"] == 0 and row["data_files"], "listed")
    expected = sorted(streams.events("ops", "gone"))
    poll(lambda: table_rows(standalone, "gone") == expected, "the table holds the events")
    streams.manager.seal_stream("ops", "gone")
    streams.manager.delete_stream("ops", "gone")
    poll(lambda: table_row(standalone, "ops/gone") is None, "admin no longer lists the deleted stream's table")
    assert table_rows(standalone, "gone") == expected  # its files are still there (pinned)
    catalog(standalone.data_dir).drop_table(("ops", "gone"))
    assert not catalog(standalone.data_dir).table_exists(("ops", "gone"))


def table_workers(standalone: StandaloneProcess) -> list[psutil.Process]:
    """The standalone's table worker processes (spawned: ``spawn_main`` on their command line)."""
    assert standalone.process is not None
    children = psutil.Process(standalone.process.pid).children(recursive=True)
    return [p for p in children if "spawn_main" in " ".join(p.cmdline()) and p.status() != psutil.STATUS_ZOMBIE]


def test_a_killed_table_worker_process_is_started_again_and_the_table_catches_up(
    standalone: StandaloneProcess, streams: Streams
) -> None:
    """pyiceberg runs in a worker process of the segment store (its appends never wait for its interpreter lock);
    killed (-9) while the stream is written, appends go on, a new worker is started and the table holds every
    event once."""
    streams.create("ops", "worker")
    write(streams, "worker", 100, "before")
    poll(lambda: (row := table_row(standalone, "ops/worker")) and row["data_files"], "the table is listed")
    poll(lambda: table_rows(standalone, "worker") == sorted(streams.events("ops", "worker")), "the table holds them")
    (worker,) = table_workers(standalone)
    worker.kill()
    worker.wait(30)
    write(streams, "worker", 100, "after")  # acknowledged: nothing of the append path waits on the tables
    expected = sorted(streams.events("ops", "worker"))
    assert len(expected) == 200
    poll(lambda: table_rows(standalone, "worker") == expected, "the table caught up with every event once")
    (again,) = table_workers(standalone)
    assert again.pid != worker.pid
