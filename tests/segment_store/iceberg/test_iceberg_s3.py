"""Streams as Iceberg tables on S3 Tier-2 (SeaweedFS, which checks credentials), end to end: a real ``segstore
standalone`` with ``--tier2 s3`` and ``--iceberg-tables``; the table's data files are the chunk objects, named by
their ``s3://`` URI, and pyiceberg (FileIO configured with the same endpoint and credentials) and DuckDB (httpfs
with an S3 secret) read exactly the stream's events, each once, also after a truncation inside a chunk."""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from iceberg_readers import catalog, duckdb_connection, rows_by_position
from seaweedfs_fixtures import SeaweedServer, seaweed_server_fixture  # noqa: F401 (a fixture)
from spark_fixtures import Streams
from standalone_process import StandaloneProcess

from controller_client.model import StreamCut

pytestmark = [pytest.mark.integration, pytest.mark.slow]
BUCKET = "tables"


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory, seaweed_server: SeaweedServer) -> Iterator[StandaloneProcess]:
    data = tmp_path_factory.mktemp("iceberg-s3") / "data"
    credentials = seaweed_server.credentials
    tier2 = ("--tier2", "s3", "--s3-endpoint", seaweed_server.endpoint, "--s3-bucket", BUCKET, "--s3-create-bucket",
             "--s3-region", credentials["region"])  # fmt: skip
    flags = (*tier2, "--iceberg-tables", "lake/*", "--iceberg-commit-interval-ms", "200")
    env = {"AWS_ACCESS_KEY_ID": credentials["access_key_id"], "AWS_SECRET_ACCESS_KEY": credentials["secret_access_key"]}
    with StandaloneProcess(data, extra_args=flags, env=env) as process:
        yield process


def s3_catalog(data_dir: Path, server: SeaweedServer) -> Any:
    """The default catalog, its FileIO given the endpoint and credentials of Tier-2, as a user would."""
    credentials = server.credentials
    return catalog(data_dir, **{"s3.endpoint": server.endpoint, "s3.region": credentials["region"],
                                "s3.access-key-id": credentials["access_key_id"],
                                "s3.secret-access-key": credentials["secret_access_key"]})  # fmt: skip


def table_rows(standalone: StandaloneProcess, server: SeaweedServer) -> list[tuple[int, int, bytes]]:
    from pyiceberg.exceptions import NoSuchTableError

    if not (standalone.data_dir / "iceberg" / "catalog.db").exists():
        return []
    try:
        table = s3_catalog(standalone.data_dir, server).load_table(("lake", "s3"))
    except NoSuchTableError:
        return []
    return rows_by_position(table.scan().to_arrow())


def duckdb_rows(standalone: StandaloneProcess, server: SeaweedServer) -> list[tuple[int, int, bytes]]:
    credentials = server.credentials
    duck = duckdb_connection(
        {"endpoint": urllib.parse.urlsplit(server.endpoint).netloc, "key_id": credentials["access_key_id"],
         "secret": credentials["secret_access_key"], "region": credentials["region"]}
    )  # fmt: skip
    location = s3_catalog(standalone.data_dir, server).load_table(("lake", "s3")).location()
    got = duck.execute(
        f"""SELECT segment_id, chunk_start + chunk_offset AS "offset", event FROM iceberg_scan('{location}')
            WHERE framed ORDER BY segment_id, "offset" """
    ).fetchall()
    return [(s, o, bytes(e)) for s, o, e in got]


def poll_equal(
    read: Callable[[], list[tuple[int, int, bytes]]],
    expected: list[tuple[int, int, bytes]],
    what: str,
    timeout_s: float = 60.0,
) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        got = read()
        if got == expected:
            return
        assert time.monotonic() < deadline, (
            f"{what}: not within {timeout_s} s ({len(got)} rows, {len(expected)} wanted)"
        )
        time.sleep(0.1)


def test_table_on_s3_tier2_reads_exactly_the_events_with_pyiceberg_and_duckdb(
    standalone: StandaloneProcess, streams: Streams, seaweed_server: SeaweedServer
) -> None:
    streams.create("lake", "s3", segments=2)
    streams.write("lake", "s3", [(f"e-{i}".encode(), f"key-{i % 5}") for i in range(200)])
    expected = sorted(streams.events("lake", "s3"))
    assert len(expected) == 200
    poll_equal(lambda: table_rows(standalone, seaweed_server), expected, "pyiceberg over S3")
    table = s3_catalog(standalone.data_dir, seaweed_server).load_table(("lake", "s3"))
    paths = [t.file.file_path for t in table.scan().plan_files()]
    assert paths and all(p.startswith(f"s3://{BUCKET}/") and "?" not in p for p in paths)  # the chunk objects
    assert duckdb_rows(standalone, seaweed_server) == expected

    segment_0 = [e for e in expected if e[0] == 0]
    at = segment_0[len(segment_0) // 2][1]
    streams.manager.truncate(StreamCut("lake", "s3", {0: at, 1: 0}))
    before, expected = expected, sorted(streams.events("lake", "s3"))
    assert expected == [e for e in before if e[0] != 0 or e[1] >= at] and len(expected) < 200
    poll_equal(lambda: table_rows(standalone, seaweed_server), expected, "pyiceberg after the truncation")
    assert duckdb_rows(standalone, seaweed_server) == expected
    table = s3_catalog(standalone.data_dir, seaweed_server).load_table(("lake", "s3"))
    assert any("/data/truncated/" in t.file.file_path for t in table.scan().plan_files())  # the boundary chunk's copy
