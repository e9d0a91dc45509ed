"""Per-row target streams without a cluster: splitting Arrow batches by target, the sink's columns, the options."""

from __future__ import annotations

import uuid

import pyarrow as pa
import pytest
from pyspark.sql.types import BinaryType, LongType, StringType, StructField, StructType

from pravega_spark.errors import CommitLogError, SegstoreOptionError, SegstoreSchemaError
from pravega_spark.options.common import StreamTarget
from pravega_spark.options.write import WriteOptions
from pravega_spark.write.commit_log import DONE, BatchRecord
from pravega_spark.write.sink import SinkColumns
from pravega_spark.write.targets import split_by_target

DEFAULT = StreamTarget("tcp://127.0.0.1:9090", "home", "fallback")


def _batch(streams: list[str | None], scopes: list[str | None] | None = None) -> pa.RecordBatch:
    columns = {"event": pa.array([str(i) for i in range(len(streams))]), "stream": pa.array(streams, pa.string())}
    if scopes is not None:
        columns["scope"] = pa.array(scopes, pa.string())
    return pa.RecordBatch.from_pydict(columns)


def _rows(parts: list[tuple[tuple[str, str], pa.Array | None]], size: int) -> dict[tuple[str, str], list[int]]:
    return {target: list(range(size)) if rows is None else rows.to_pylist() for target, rows in parts}


def test_split_with_several_streams_keeps_row_order_per_target() -> None:
    batch = _batch(["a", "b", "a", None, "c", "b", "a"])

    parts = split_by_target(batch, "stream", None, DEFAULT)

    assert _rows(parts, 7) == {
        ("home", "a"): [0, 2, 6],
        ("home", "b"): [1, 5],
        ("home", "fallback"): [3],
        ("home", "c"): [4],
    }
    assert [target for target, _ in parts][:2] == [("home", "a"), ("home", "b")]  # in order of first row


def test_split_with_one_target_takes_the_whole_batch() -> None:
    assert split_by_target(_batch(["a", "a"]), "stream", None, DEFAULT) == [(("home", "a"), None)]


def test_split_with_a_scope_column_uses_the_scope_option_for_nulls() -> None:
    batch = _batch(["a", "a", "b"], ["other", None, "other"])

    parts = split_by_target(batch, "stream", "scope", DEFAULT)

    assert _rows(parts, 3) == {("other", "a"): [0], ("home", "a"): [1], ("other", "b"): [2]}


def test_split_with_a_null_stream_and_no_default_names_the_column_and_row() -> None:
    no_default = StreamTarget("tcp://127.0.0.1:9090", "home", "")
    with pytest.raises(SegstoreSchemaError, match=r"column 'stream': row 1 of a batch names no stream \(null\)"):
        split_by_target(_batch(["a", None]), "stream", None, no_default)


def test_split_with_an_invalid_stream_name_names_the_column() -> None:
    with pytest.raises(SegstoreSchemaError, match="column 'stream': stream: invalid name 'a/b'"):
        split_by_target(_batch(["ok", "a/b"]), "stream", None, DEFAULT)


def _schema(**columns: object) -> StructType:
    return StructType([StructField(name, kind) for name, kind in columns.items()])  # type: ignore[arg-type]


def test_columns_with_a_stream_column_route_per_row() -> None:
    schema = _schema(event=BinaryType(), stream=StringType(), scope=StringType())
    assert SinkColumns.of(schema) == SinkColumns("event", None, "stream", "scope")
    assert not SinkColumns.of(_schema(event=BinaryType(), scope=LongType())).per_row  # a scope column alone: ignored
    with pytest.raises(SegstoreSchemaError, match="column 'scope': must be string, not bigint"):
        SinkColumns.of(_schema(event=BinaryType(), stream=StringType(), scope=LongType()))


def test_options_per_row_need_no_stream_option_and_it_wins_when_given() -> None:
    assert WriteOptions.parse({"scope": "s"}, per_row=True).target.stream == ""
    assert WriteOptions.parse({"scope": "s", "stream": "d"}, per_row=True).target.stream == "d"
    given = {"scope": "s", "stream": "d", "username": "u", "password": "p"}  # one stream: a token for it will do
    assert WriteOptions.parse(given, per_row=True).target.logs_in
    with pytest.raises(SegstoreOptionError, match="option 'stream': is required"):
        WriteOptions.parse({"scope": "s"})
    with pytest.raises(SegstoreOptionError, match="option 'username': rows that name their stream"):
        WriteOptions.parse({"scope": "s", "username": "u", "password": "p"}, per_row=True)


def test_record_with_streams_round_trips_and_an_old_record_reads() -> None:
    a, b = uuid.uuid4(), uuid.uuid4()
    record = BatchRecord(DONE, (a, b), {b: ("other", "x")})
    assert BatchRecord.decode(record.encode()) == record
    old = f'{{"state": "done", "txns": ["{a}"]}}'.encode()
    assert BatchRecord.decode(old) == BatchRecord(DONE, (a,))
    with pytest.raises(CommitLogError, match="unreadable record"):
        BatchRecord.decode(f'{{"state": "done", "txns": ["{a}"], "streams": {{"{a}": "noslash"}}}}'.encode())
