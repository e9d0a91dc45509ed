"""``format("segstore")`` from a Spark Connect client: a ``spark-submit``-started Connect server on 127.0.0.1 (its
own JVM and Python workers, working directory a temporary one) finds the source by pyspark's discovery, with
nothing registered by the client; batch and streaming reads and writes go through it end to end against the
standalone, and an unknown option fails with our error naming it."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from connect_server import SparkConnectServerProcess
from pyspark.errors import AnalysisException, StreamingQueryException
from spark_fixtures import Streams
from standalone_process import StandaloneProcess

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SCOPE = "connect"
WAIT_S = 120.0


@pytest.fixture(scope="module")
def connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkConnectServerProcess]:
    with SparkConnectServerProcess(tmp_path_factory.mktemp("spark-connect")) as server:
        yield server


@pytest.fixture(scope="module")
def remote(connect_server: SparkConnectServerProcess) -> Iterator[Any]:
    """A Connect client session on the server (``pyspark.sql.connect.session.SparkSession``).

    ``create`` rather than ``getOrCreate``: the latter refuses a remote session in a process that has a classic one
    (pytest-spark's, when the other Spark tests run first). Making a client session marks the whole process as
    Connect (``SPARK_CONNECT_MODE_ENABLED``, which pyspark's functions dispatch on) and ``stop`` leaves the mark:
    the fixture takes it back so a classic session made later stays classic."""
    from pyspark.sql import SparkSession

    marked = os.environ.get("SPARK_CONNECT_MODE_ENABLED")
    session = SparkSession.builder.remote(connect_server.url).create()
    try:
        yield session
    finally:
        session.stop()
        if marked is None:
            os.environ.pop("SPARK_CONNECT_MODE_ENABLED", None)


@pytest.fixture(scope="module")
def streams(standalone: StandaloneProcess, connect_server: SparkConnectServerProcess) -> Iterator[Streams]:
    """Test-side access to the standalone; made after the server's process is forked (see conftest's ``streams``)."""
    helper = Streams(standalone)
    try:
        yield helper
    finally:
        helper.close()


def wait_for(condition: Any, query: Any, what: str) -> None:
    """Poll ``condition()`` until it holds; fail at the deadline or as soon as the query has stopped."""
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert query.isActive, f"the query stopped while waiting for {what}: {query.exception()}"
        assert time.monotonic() < deadline, f"no {what} after {WAIT_S} s; last progress {query.lastProgress}"
        time.sleep(0.25)


def test_batch_write_then_batch_read_round_trip(remote: Any, streams: Streams) -> None:
    options = streams.options(SCOPE, "round-trip")
    rows = remote.range(300).selectExpr("concat('order-', id) AS event", "concat('customer-', id % 7) AS routing_key")
    rows.write.format("segstore").options(**options, defaultNumSegments="2").mode("append").save()

    read = remote.read.format("segstore").options(**options).load()
    got = read.selectExpr("CAST(event AS STRING) AS event", "scope", "stream", "segment_id", "offset").collect()

    assert sorted(row.event for row in got) == sorted(f"order-{i}" for i in range(300))
    assert {(row.scope, row.stream) for row in got} == {(SCOPE, "round-trip")}
    ours = streams.events(SCOPE, "round-trip")
    assert sorted((row.segment_id, row.offset, row.event.encode()) for row in got) == sorted(ours)
    assert len({segment for segment, _, _ in ours}) == 2


def test_streaming_read_picks_up_events_written_while_it_runs(remote: Any, streams: Streams, tmp_path: Path) -> None:
    streams.create(SCOPE, "live", segments=2)
    streams.write(SCOPE, "live", [(b"before-%d" % i, f"user-{i % 5}") for i in range(50)])
    frame = remote.readStream.format("segstore").options(**streams.options(SCOPE, "live"), startingOffsets="earliest")
    query = (
        frame.load()
        .selectExpr("CAST(event AS STRING) AS event", "segment_id", "offset")
        .writeStream.format("memory")
        .queryName("connect_live")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    try:
        seen = remote.table("connect_live")
        wait_for(lambda: seen.count() >= 50, query, "50 events written before the query")
        streams.write(SCOPE, "live", [(b"after-%d" % i, f"user-{i % 5}") for i in range(70)])
        wait_for(lambda: seen.count() >= 120, query, "the 70 events written while it runs")
        rows = seen.collect()
    finally:
        query.stop()

    expected = [f"before-{i}" for i in range(50)] + [f"after-{i}" for i in range(70)]
    assert sorted(row.event for row in rows) == sorted(expected)  # each once
    ours = streams.events(SCOPE, "live")
    assert sorted((row.segment_id, row.offset, row.event.encode()) for row in rows) == sorted(ours)


def test_foreach_batch_runs_on_the_server_with_available_now(remote: Any, streams: Streams, tmp_path: Path) -> None:
    streams.create(SCOPE, "batches")
    streams.write(SCOPE, "batches", [(b"click-%d" % i, None) for i in range(40)])
    on_the_client: list[int] = []

    def record(batch: Any, batch_id: int) -> None:  # pickled to the server, run by a Python process of its own
        on_the_client.append(batch_id)
        batch.selectExpr("CAST(event AS STRING) AS event", f"{batch_id} AS batch_id").write.mode("append").saveAsTable(
            "connect_batches"
        )

    options = {**streams.options(SCOPE, "batches"), "startingOffsets": "earliest", "maxBytesPerTrigger": "200"}
    frame = remote.readStream.format("segstore").options(**options)
    query = (
        frame.load()
        .writeStream.foreachBatch(record)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(WAIT_S), "the availableNow query did not finish"
    finally:
        query.stop()
    assert query.exception() is None

    rows = remote.table("connect_batches").collect()
    assert sorted(row.event for row in rows) == sorted(f"click-{i}" for i in range(40))
    assert len({row.batch_id for row in rows}) > 1  # maxBytesPerTrigger: several micro-batches
    assert on_the_client == []  # the function ran on the server: the client's list is not the one it appended to


def test_streaming_write_from_the_rate_source_lands_events(remote: Any, streams: Streams, tmp_path: Path) -> None:
    streams.create(SCOPE, "from-rate", segments=2)  # (the sink would create it; made here, polling needs it whole)
    rows = (
        remote.readStream.format("rate")
        .option("rowsPerSecond", "20")
        .load()
        .selectExpr("CAST(value AS STRING) AS event", "CAST(value % 4 AS STRING) AS routing_key")
    )
    query = (
        rows.writeStream.format("segstore")
        .options(**streams.options(SCOPE, "from-rate"))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    try:
        wait_for(lambda: len(streams.events(SCOPE, "from-rate")) >= 40, query, "40 events in the stream")
    finally:
        query.stop()

    # exactly-once (the default): the stream holds the committed micro-batches, a prefix of the rate's values
    values = sorted(int(data) for _, _, data in streams.events(SCOPE, "from-rate"))
    assert values == list(range(len(values)))


def test_unknown_option_of_a_batch_read_fails_naming_it(remote: Any, streams: Streams) -> None:
    streams.create(SCOPE, "typo-read")
    options = {**streams.options(SCOPE, "typo-read"), "startingOffset": "earliest"}
    with pytest.raises(AnalysisException, match=r"option '(?i:startingOffset)': unknown option of reads; did you "
                       r"mean 'startingOffsets'\?"):  # fmt: skip
        remote.read.format("segstore").options(**options).load().collect()


def test_unknown_option_of_a_batch_write_fails_naming_it(remote: Any, streams: Streams) -> None:
    options = {**streams.options(SCOPE, "typo-write"), "exactlyOnc": "false"}
    with pytest.raises(AnalysisException, match=r"option '(?i:exactlyOnc)': unknown option of writes; did you mean "
                       r"'exactlyOnce'\?"):  # fmt: skip
        remote.range(3).selectExpr("CAST(id AS STRING) AS event").write.format("segstore").options(**options).mode(
            "append"
        ).save()
    assert not streams.manager.stream_exists(SCOPE, "typo-write")  # refused before anything was created


def test_unknown_option_of_a_streaming_read_fails_naming_it(remote: Any, streams: Streams, tmp_path: Path) -> None:
    streams.create(SCOPE, "typo-stream")
    options = {**streams.options(SCOPE, "typo-stream"), "maxBytesPerTriger": "100"}
    frame = remote.readStream.format("segstore").options(**options).load()
    query = frame.writeStream.format("noop").option("checkpointLocation", str(tmp_path)).start()
    try:
        with pytest.raises(StreamingQueryException, match=r"option '(?i:maxBytesPerTriger)': unknown option of "
                           r"reads; did you mean 'maxBytesPerTrigger'\?"):  # fmt: skip
            query.awaitTermination(WAIT_S)
    finally:
        query.stop()


def test_unknown_option_of_a_streaming_write_fails_naming_it(remote: Any, streams: Streams, tmp_path: Path) -> None:
    rows = remote.readStream.format("rate").load().selectExpr("CAST(value AS STRING) AS event")
    options = {**streams.options(SCOPE, "typo-write-stream"), "transactionTimeout": "60000"}
    query = rows.writeStream.format("segstore").options(**options).option("checkpointLocation", str(tmp_path)).start()
    try:
        with pytest.raises(StreamingQueryException, match=r"option '(?i:transactionTimeout)': unknown option of "
                           r"writes; did you mean 'transactionTimeoutMs'\?"):  # fmt: skip
            query.awaitTermination(WAIT_S)
    finally:
        query.stop()
