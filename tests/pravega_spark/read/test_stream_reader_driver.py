"""The streaming reader's driver calls in the order Spark makes them, against a real standalone while the
stream is written: Spark asks ``initialOffset`` before it plans the first micro-batch and again when it runs
it (and once more after a restart before that batch committed); every answer must plan the same batch."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows
from spark_fixtures import Streams

from pravega_spark.errors import SegstoreOptionError
from pravega_spark.options.read import ReadOptions
from pravega_spark.read.partition_reader import PackedPartition, SegmentRangePartition
from pravega_spark.read.source import SCHEMA, SegstoreStreamReader

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _reader(streams: Streams, scope: str, stream: str, **options: str) -> SegstoreStreamReader:
    return SegstoreStreamReader(ReadOptions.parse({**streams.options(scope, stream), **options}), SCHEMA)


def _events(prefix: str, count: int) -> list[tuple[bytes, str | None]]:
    return [(f"{prefix}-{i:04d}".encode(), f"key-{i % 5}") for i in range(count)]


def _read(reader: SegstoreStreamReader, start: dict[str, Any], end: dict[str, Any]) -> list[bytes]:
    partitions = reader.partitions(json.loads(json.dumps(start)), json.loads(json.dumps(end)))
    assert all(isinstance(p, SegmentRangePartition | PackedPartition) for p in partitions)
    return sorted(e.as_py() for p in partitions for batch in reader.read(p) for e in batch.column("event"))


@pytest.mark.parametrize("options", [{}, {"startingOffsets": "earliest"}, {"startingTimestamp": "0"}])
def test_first_micro_batch_plans_the_same_range_however_often_spark_asks_for_the_initial_offset(
    streams: Streams, options: dict[str, str]
) -> None:
    stream = "first-" + "-".join(options) if options else "first-default"
    streams.create("driver", stream, segments=2)
    before = _events("before", 40)
    streams.write("driver", stream, before)
    reader = _reader(streams, "driver", stream, **options)
    try:
        initial = reader.initialOffset()
        streams.write("driver", stream, _events("between", 30))  # a live writer between Spark's two calls
        end = reader.latestOffset(initial, ReadAllAvailable())
        streams.write("driver", stream, _events("after", 20))
        again = reader.initialOffset()  # runBatch asks again
        assert again == initial
        assert _read(reader, again, end) == []  # the first batch only fixes the start
        restarted = _reader(streams, "driver", stream, **options)  # a restart before batch 0 committed
        try:
            assert restarted.initialOffset() == initial
            assert restarted.partitions(restarted.initialOffset(), end) == []
        finally:
            restarted.stop()
        reader.commit(end)
        later = reader.latestOffset(end, ReadAllAvailable())
        read = _read(reader, end, later)
        if options:  # earliest and a time before everything: every event
            assert read == sorted(e for e, _ in before + _events("between", 30) + _events("after", 20))
        else:  # latest: what came after the first micro-batch looked the tail up
            assert read == sorted(e for e, _ in _events("after", 20))
    finally:
        reader.stop()


def test_a_cut_naming_every_offset_is_read_from_the_first_micro_batch(streams: Streams) -> None:
    streams.create("driver", "fixed-cut", segments=1)
    streams.write("driver", "fixed-cut", _events("old", 10))
    cut = json.dumps({"positions": {str(s): o for s, o in streams.tail("driver", "fixed-cut").positions.items()}})
    streams.write("driver", "fixed-cut", _events("new", 10))
    reader = _reader(streams, "driver", "fixed-cut", startingOffsets=cut)
    try:
        initial = reader.initialOffset()
        assert "initial" not in initial
        end = reader.latestOffset(initial, ReadAllAvailable())
        assert _read(reader, reader.initialOffset(), end) == sorted(e for e, _ in _events("new", 10))
    finally:
        reader.stop()


def test_a_missing_stream_fails_at_the_initial_offset_naming_the_option(streams: Streams) -> None:
    reader = _reader(streams, "driver", "never-created")
    try:
        with pytest.raises(SegstoreOptionError, match="option 'stream': stream driver/never-created does not exist"):
            reader.initialOffset()
    finally:
        reader.stop()


def test_a_micro_batch_reports_the_tail_its_latest_offset_saw_and_plans_with_the_same_statuses(
    streams: Streams,
) -> None:
    # Spark's order per micro-batch: latestOffset, reportLatestOffset (the progress's "latestOffset"), then
    # partitions; a writer goes on meanwhile, and the stream scales between two batches
    streams.create("driver", "report", segments=2)
    reader = _reader(streams, "driver", "report", startingOffsets="earliest")
    try:
        start = reader.latestOffset(reader.initialOffset(), ReadAllAvailable())
        for batch in range(2):
            streams.write("driver", "report", _events(f"in-{batch}", 30))
            end = reader.latestOffset(start, ReadAllAvailable())
            tail = streams.tail("driver", "report").positions
            streams.write("driver", "report", _events(f"after-{batch}", 10))  # not in this batch
            reported = reader.reportLatestOffset()
            assert {int(s): o for s, o in reported["positions"].items()} == tail, "everything read: the end is the tail"
            assert reported == end
            read = _read(reader, start, end)
            expected = _events(f"in-{batch}", 30) + (_events("after-0", 10) if batch else [])
            assert read == sorted(e for e, _ in expected)
            start = end
            streams.split_first("driver", "report")  # the next batch crosses a scale
        limited = reader.latestOffset(start, ReadMaxRows(5))  # a limit: the tail is looked up, beyond the end
        tail = streams.tail("driver", "report").positions
        assert {int(s): o for s, o in reader.reportLatestOffset()["positions"].items()} == tail
        assert limited != reader.reportLatestOffset()
    finally:
        reader.stop()
