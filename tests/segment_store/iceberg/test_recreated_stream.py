"""A stream deleted and created again under the same name gets a table of its own, end to end: a real
``segstore standalone`` with ``--iceberg-tables shop/*``; the deleted stream's table is renamed aside
(``orders__deleted_<incarnation>``) and still holds exactly the deleted stream's events, the stream's table holds
exactly the new stream's events (pyiceberg through the catalog and DuckDB's ``iceberg_scan`` of the table dir).

The first stream has two segments, the second one: without the incarnation check the new stream's chunks of
segment 0 replaced the old ones in the old table and segment 1's old rows stayed next to them (a mix of two
streams).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from iceberg_readers import catalog, duckdb_events, poll, rows_by_position
from spark_fixtures import Streams
from standalone_process import StandaloneProcess

from segment_store.iceberg.incarnation import PROPERTY

pytestmark = [pytest.mark.integration, pytest.mark.slow]

Rows = list[tuple[int, int, bytes]]


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    data = tmp_path_factory.mktemp("recreated") / "data"
    flags = ("--iceberg-tables", "shop/*", "--iceberg-commit-interval-ms", "200")
    with StandaloneProcess(data, extra_args=flags) as process:
        yield process


def pyiceberg_rows(data_dir: Path, name: str) -> Rows:
    return rows_by_position(catalog(data_dir).load_table(("shop", name)).scan().to_arrow())


def duckdb_rows(data_dir: Path, name: str) -> Rows:
    return duckdb_events(catalog(data_dir).load_table(("shop", name)).location())


def holds(data_dir: Path, name: str, expected: Rows) -> bool:
    from pyiceberg.exceptions import NoSuchTableError

    if not (data_dir / "iceberg" / "catalog.db").exists():  # the worker's first pass has not made the catalog yet
        return False  # (opening it here would fail: its directory is not there either)
    try:
        return pyiceberg_rows(data_dir, name) == expected
    except NoSuchTableError:  # not created yet (the first pass), or renamed aside and not created again yet
        return False


def write(streams: Streams, count: int, tag: str) -> Rows:
    streams.write("shop", "orders", [(f"{tag}-{i}".encode(), f"key-{i % 7}") for i in range(count)])
    return sorted(streams.events("shop", "orders"))


def test_stream_created_again_gets_a_new_table_and_the_old_one_is_renamed_aside(
    standalone: StandaloneProcess, streams: Streams
) -> None:
    data_dir = standalone.data_dir
    streams.create("shop", "orders", segments=2)
    first = write(streams, 60, "A")
    assert {segment for segment, _, _ in first} == {0, 1}
    poll(lambda: holds(data_dir, "orders", first), "the table holds the first stream's events")

    streams.manager.seal_stream("shop", "orders")
    streams.manager.delete_stream("shop", "orders")
    streams.create("shop", "orders", segments=1)
    second = write(streams, 40, "B")
    assert {segment for segment, _, _ in second} == {0}  # segment ids restart: the first stream's segment 0 too

    def aside_name() -> str | None:
        names = [name for _, name in catalog(data_dir).list_tables("shop")]
        return next((n for n in names if n.startswith("orders__deleted_")), None)

    poll(lambda: holds(data_dir, "orders", second), "the stream's table holds exactly the new stream's events")
    aside = aside_name()
    assert aside is not None, "the deleted stream's table is renamed aside"
    assert pyiceberg_rows(data_dir, "orders") == second
    assert duckdb_rows(data_dir, "orders") == second
    assert pyiceberg_rows(data_dir, aside) == first
    assert duckdb_rows(data_dir, aside) == first

    tables = catalog(data_dir)
    old, new = tables.load_table(("shop", aside)), tables.load_table(("shop", "orders"))
    assert aside == f"orders__deleted_{old.properties[PROPERTY]}"
    assert int(new.properties[PROPERTY]) > int(old.properties[PROPERTY])
    assert old.location() != new.location()
    log = (data_dir / "segmentstore.log").read_text().splitlines()
    assert any(f"renamed to shop.{aside}" in line and "WARNING" in line for line in log)
    assert sorted(name for _, name in tables.list_tables("shop")) == sorted(["orders", aside])
