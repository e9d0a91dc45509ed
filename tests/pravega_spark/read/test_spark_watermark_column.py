"""Option watermarkColumn against a real standalone computing watermarks every 0.5 s: writers note times, then a
batch read and a streaming query carry each event's lower bound (null before the first watermark, the bound noted
before the event was written after), and a streaming aggregation with withWatermark on the column emits windows."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from standalone_process import StandaloneProcess

from controller_client import ScalingPolicy, StreamConfiguration
from pravega_spark.connection import StreamConnection

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SCOPE, STREAM = "wmcol", "readings"
ROUNDS = 3
PER_ROUND = 60
BASE_MS = 1_700_000_000_000
STEP_MS = 60_000  # a minute between the noted times: windows of 10 s fall apart


@pytest.fixture(scope="module")
def controller_uri(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A standalone of its own that computes watermarks every 0.5 s, with the stream written: round 0 before any
    time is noted, round k after the writer noted BASE_MS + k * STEP_MS and a watermark with it exists."""
    with StandaloneProcess(tmp_path_factory.mktemp("wm"), extra_args=("--watermark-period-s", "0.5")) as standalone:
        with StreamConnection(standalone.controller_uri) as connection:
            manager = connection.manager
            config = StreamConfiguration(ScalingPolicy.fixed(2), timestamp_aggregation_timeout_ms=60_000)
            connection.run(manager.create_scope(SCOPE))
            connection.run(manager.create_stream(SCOPE, STREAM, config))
            writer = connection.run(manager.create_writer(SCOPE, STREAM))
            for k in range(ROUNDS + 1):
                if k:
                    connection.run(writer.note_time(BASE_MS + k * STEP_MS))
                    deadline = time.monotonic() + 30
                    while len(connection.run(manager.watermarks(SCOPE, STREAM))) < k:
                        assert time.monotonic() < deadline, f"no watermark {k} within 30 s"
                        time.sleep(0.05)
                for i in range(PER_ROUND):
                    connection.run(writer.write_event(b"r%d-%03d" % (k, i), routing_key=f"key-{i % 16}"))
                connection.run(writer.flush())
            connection.run(writer.close())
        yield standalone.controller_uri


def _options(controller_uri: str) -> dict[str, str]:
    return {"controller": controller_uri, "scope": SCOPE, "stream": STREAM, "watermarkColumn": "lower_bound"}


def _expected(event: bytes) -> datetime | None:
    k = int(event[1:2])
    return None if k == 0 else datetime.fromtimestamp((BASE_MS + k * STEP_MS) / 1000, tz=UTC)


def _check(rows: list[Any]) -> None:
    assert len(rows) == (ROUNDS + 1) * PER_ROUND
    by_segment: dict[int, list[tuple[int, datetime | None]]] = {}
    for row in rows:
        got = row.lower_bound
        got = None if got is None else got.astimezone(UTC)
        assert got == _expected(bytes(row.event)), (bytes(row.event), got)
        by_segment.setdefault(row.segment_id, []).append((row.offset, got))
    assert len(by_segment) == 2
    for values in by_segment.values():
        bounds = [b.timestamp() if b is not None else float("-inf") for _, b in sorted(values)]
        assert bounds == sorted(bounds), "non-decreasing along a segment"


def test_a_batch_read_gives_each_event_its_watermark_bound(spark: Any, controller_uri: str) -> None:
    df = spark.read.format("segstore").options(**_options(controller_uri)).load()
    assert df.columns == ["event", "scope", "stream", "segment_id", "offset", "timestamp", "lower_bound"]
    assert df.schema["lower_bound"].dataType.simpleString() == "timestamp"
    _check(df.collect())


def test_a_streaming_query_gives_the_bounds_and_with_watermark_aggregates_on_them(
    spark: Any, controller_uri: str, tmp_path: Path
) -> None:
    from pyspark.sql import functions as F

    stream = (
        spark.readStream.format("segstore")
        .options(**_options(controller_uri), startingOffsets="earliest", maxBytesPerTrigger="1024")
        .load()
    )
    rows = (
        stream.writeStream.format("memory")
        .queryName("wm_rows")
        .option("checkpointLocation", str(tmp_path / "rows"))
        .trigger(availableNow=True)
        .start()
    )
    windows = (
        stream.where("lower_bound IS NOT NULL")
        .withWatermark("lower_bound", "10 seconds")
        .groupBy(F.window("lower_bound", "10 seconds"))
        .count()
        .writeStream.outputMode("append")
        .format("memory")
        .queryName("wm_windows")
        .option("checkpointLocation", str(tmp_path / "windows"))
        .trigger(availableNow=True)
        .start()
    )
    for query in (rows, windows):
        query.awaitTermination(180)
        assert not query.isActive and query.exception() is None
    _check(spark.table("wm_rows").collect())
    emitted = {r.window.start.astimezone(UTC): r["count"] for r in spark.table("wm_windows").collect()}
    assert emitted, "windows behind the watermark are emitted"
    for start, count in emitted.items():
        k = round((start.timestamp() * 1000 - BASE_MS) / STEP_MS)
        assert 1 <= k < ROUNDS and count == PER_ROUND, emitted


def test_the_streaming_driver_reads_each_watermark_once_and_replans_an_earlier_batch_the_same(
    controller_uri: str,
) -> None:
    """The streaming reader's driver calls as Spark makes them (micro-batches of at most 1 KB): the bounds are those
    of the batch read, the mark segment is read once over all batches, and a batch planned again (a restart) gets
    the same partitions."""
    from pyspark.sql.streaming.datasource import ReadMaxBytes

    from pravega_spark.options.read import ReadOptions
    from pravega_spark.read.source import SegstoreStreamReader, events_schema

    options = ReadOptions.parse({**_options(controller_uri), "startingOffsets": "earliest"})
    reader = SegstoreStreamReader(options, events_schema("lower_bound"))
    try:
        start = reader.initialOffset()
        start = reader.latestOffset(start, ReadMaxBytes(1024))
        batches, rows = [], []
        while (end := reader.latestOffset(start, ReadMaxBytes(1024))) != start:
            partitions = reader.partitions(start, end)
            batches.append((start, end, partitions))
            for partition in partitions:
                for batch in reader.read(partition):
                    rows += batch.to_pylist()
            start = end
        assert len(batches) > ROUNDS
        assert reader._watermarks.watermarks_read == ROUNDS and reader._watermarks.restarts == 0, "each read once"
        _check([_Row(r) for r in rows])
        first, last, partitions = batches[1]
        assert reader.partitions(first, last) == partitions, "an earlier batch planned again: the same thresholds"
        assert reader._watermarks.restarts == 1
    finally:
        reader.stop()


class _Row:
    """An Arrow row as a Spark Row gives it (attributes; the bound as an aware datetime)."""

    def __init__(self, row: dict[str, Any]) -> None:
        self.__dict__.update(row)
