"""``spark.read.format("segstore-kvt")`` against a real standalone: a key-value table as a DataFrame (every entry
once, with its version as the client reads it, one partition per table segment), a primary key or a prefix,
``load("scope/table")``, and errors naming the option."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from standalone_process import StandaloneProcess

from controller_client import BlockingStreamManager
from controller_client.kvt.model import Insert, KeyValueTableConfiguration, TableKey
from pravega_spark.kvt_source import SCHEMA

pytestmark = [pytest.mark.spark, pytest.mark.slow]
CONFIG = KeyValueTableConfiguration(partition_count=3, primary_key_length=6, secondary_key_length=2)


@pytest.fixture(scope="module")
def table(spark: Any, standalone: StandaloneProcess) -> Iterator[dict[TableKey, str]]:
    """Table ``kvt/orders``: 40 customers, 3 lines each; key -> version (as text). Made after Spark's JVM is up."""
    with BlockingStreamManager.connect(standalone.controller_uri) as manager:
        manager.create_scope("kvt")
        manager.create_key_value_table("kvt", "orders", CONFIG)
        client = manager.key_value_table("kvt", "orders")
        written: dict[TableKey, str] = {}
        for customer in range(40):
            keys = [TableKey(b"cust%02d" % customer, b"L%d" % line) for line in range(3)]
            versions = client.update([Insert(k, b"%s:%s" % (k.primary, k.secondary)) for k in keys])
            written.update({k: str(v) for k, v in zip(keys, versions, strict=True)})
        yield written


def options(standalone: StandaloneProcess, **more: str) -> dict[str, str]:
    return {"controller": standalone.controller_uri, "scope": "kvt", "table": "orders", **more}


def rows(df: Any) -> list[tuple[bytes, bytes, bytes, str]]:
    return sorted((bytes(r.primary_key), bytes(r.secondary_key), bytes(r.value), r.version) for r in df.collect())


def test_a_table_reads_as_one_row_per_entry_with_its_version(
    spark: Any, standalone: StandaloneProcess, table: dict[TableKey, str]
) -> None:
    df = spark.read.format("segstore-kvt").options(**options(standalone, pageSize="7")).load()
    assert df.schema == SCHEMA
    assert df.rdd.getNumPartitions() == 3  # one per table segment
    expected = sorted((k.primary, k.secondary, b"%s:%s" % (k.primary, k.secondary), v) for k, v in table.items())
    assert rows(df) == expected
    by_path = spark.read.format("segstore-kvt").option("controller", standalone.controller_uri).load("kvt/orders")
    assert by_path.count() == 120


def test_a_primary_key_reads_one_segment_and_a_prefix_some_keys(
    spark: Any, standalone: StandaloneProcess, table: dict[TableKey, str]
) -> None:
    one = spark.read.format("segstore-kvt").options(**options(standalone, primaryKey="cust07")).load()
    assert one.rdd.getNumPartitions() == 1
    assert [(p, s) for p, s, _, _ in rows(one)] == [(b"cust07", b"L0"), (b"cust07", b"L1"), (b"cust07", b"L2")]
    prefix = spark.read.format("segstore-kvt").options(**options(standalone, primaryKeyPrefix="cust1")).load()
    assert {p for p, _, _, _ in rows(prefix)} == {b"cust1%d" % i for i in range(10)}
    hexed = options(standalone, primaryKeyPrefix=b"cust3".hex(), keyEncoding="hex")
    assert spark.read.format("segstore-kvt").options(**hexed).load().count() == 30


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"primaryKeys": "cust01"}, "option 'primarykeys': unknown option of segstore-kvt; did you mean 'primaryKey'?"),
        ({"table": "missing"}, "option 'table': key-value table kvt/missing does not exist"),
        ({"primaryKey": "short"}, "option 'primaryKey': primary key: must be 6 bytes, not 5"),
        ({"primaryKeyPrefix": "zz", "keyEncoding": "hex"}, "option 'primaryKeyPrefix': is not hex"),
        ({"table": "bad_name"}, "option 'table': key-value table: invalid name"),
        ({"startingOffsets": "earliest"}, "option 'startingoffsets': unknown option of segstore-kvt"),
    ],
)
def test_errors_name_the_option(
    spark: Any, standalone: StandaloneProcess, table: dict[TableKey, str], given: dict[str, str], message: str
) -> None:
    with pytest.raises(Exception, match=message.replace("?", r"\?")):
        spark.read.format("segstore-kvt").options(**options(standalone, **given)).load().collect()


def test_a_table_is_not_read_as_a_stream(spark: Any, standalone: StandaloneProcess, table: dict[TableKey, str]) -> None:
    stream = spark.readStream.format("segstore-kvt").options(**options(standalone)).load()
    query = stream.writeStream.format("noop").start()
    try:
        with pytest.raises(Exception, match="in batch"):
            query.processAllAvailable()
    finally:
        query.stop()


def test_pyspark_finds_the_source_by_its_module() -> None:
    import pyspark_segstore_kvt

    assert pyspark_segstore_kvt.DefaultSource.name() == "segstore-kvt"
