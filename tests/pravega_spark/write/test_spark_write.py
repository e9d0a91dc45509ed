"""The ``segstore`` sink through real Spark sessions against a standalone: batch and streaming writes.

Every check reads the stream back with the client library (not with Spark), so a sink bug cannot hide
behind a matching reader bug.
"""

from __future__ import annotations

import asyncio
import itertools
import re
import time
from pathlib import Path

import pytest
from standalone_process import StandaloneProcess

from controller_client import BlockingStreamManager, ControllerClient, StreamManager, TxnState
from pravega_spark.errors import SegstoreOptionError
from pravega_spark.write.commit_log import DONE, BatchRecord, CommitLog
from pravega_spark.write.sink import SegstoreBatchWriter

pytestmark = pytest.mark.spark

SCOPE = "sparkwrite"
_names = itertools.count()


def _stream() -> str:
    return f"w{next(_names)}"


def _options(standalone: StandaloneProcess, stream: str, **extra: str) -> dict[str, str]:
    return {"controller": standalone.controller_uri, "scope": SCOPE, "stream": stream, **extra}


def _read_back(standalone: StandaloneProcess, stream: str) -> list[tuple[int, bytes]]:
    """Every event of the stream as (segment id, payload), each segment in order."""
    with BlockingStreamManager.connect(standalone.controller_uri) as manager:
        end = manager.tail_cut(SCOPE, stream)
        return [(e.segment_id, e.data) for e in manager.create_reader(SCOPE, stream, end=end)]


def _records(standalone: StandaloneProcess, stream: str, query: str, batches: range) -> list[BatchRecord | None]:
    async def read() -> list[BatchRecord | None]:
        controller = await ControllerClient.connect(standalone.controller_uri)
        manager = StreamManager(controller)
        try:
            log = CommitLog(manager.client, SCOPE, stream)
            return [found[0] if (found := await log.get(query, b)) else None for b in batches]
        finally:
            await manager.close()
            await controller.close()

    return asyncio.run(read())


def test_batch_write_commits_every_row_once_in_key_order(spark, standalone: StandaloneProcess) -> None:  # type: ignore[no-untyped-def]
    stream = _stream()
    df = (
        spark.range(0, 6_000, numPartitions=3)
        .selectExpr("id", "CAST(id AS STRING) AS event", "CAST(id % 40 AS STRING) AS routing_key")
        .repartition(3, "routing_key")
        .sortWithinPartitions("id")
    )
    df.write.format("segstore").mode("append").options(**_options(standalone, stream, defaultNumSegments="3")).save()

    events = _read_back(standalone, stream)
    assert sorted(int(e) for _, e in events) == list(range(6_000))
    assert len({segment for segment, _ in events}) == 3  # created with defaultNumSegments
    by_key: dict[int, list[int]] = {}
    for _, event in events:
        by_key.setdefault(int(event) % 40, []).append(int(event))
    assert all(ids == sorted(ids) for ids in by_key.values())  # per routing key, in write order


def test_batch_write_at_least_once_with_binary_events(spark, standalone: StandaloneProcess) -> None:  # type: ignore[no-untyped-def]
    stream = _stream()
    df = spark.range(0, 500, numPartitions=2).selectExpr("CAST(CONCAT('b', id) AS BINARY) AS event", "id AS ignored")
    df.write.format("segstore").mode("append").options(**_options(standalone, stream, exactly_once="false")).save()

    assert sorted(e for _, e in _read_back(standalone, stream)) == sorted(b"b%d" % i for i in range(500))


def _await_job_group_end(spark, group: str) -> None:  # type: ignore[no-untyped-def]
    """Wait until every job of ``group`` has ended and none of their tasks runs any more: Spark fails a job at
    its first failed task and only then kills the other running tasks, which end later."""
    tracker = spark.sparkContext.statusTracker()
    deadline = time.monotonic() + 60
    while True:
        jobs = [tracker.getJobInfo(j) for j in tracker.getJobIdsForGroup(group)]
        if jobs and all(j is not None and j.status in ("SUCCEEDED", "FAILED") for j in jobs):
            stages = [tracker.getStageInfo(s) for j in jobs for s in j.stageIds]
            if all(s is not None and s.numActiveTasks == 0 for s in stages):
                return
        assert time.monotonic() < deadline, f"jobs of {group!r} still running: {jobs}"
        time.sleep(0.05)


def _commit_one_event(standalone: StandaloneProcess, stream: str, event: bytes) -> None:
    """Commit a transaction of ``event`` and wait until it is merged into the stream: the controller merges
    committing transactions in commit order, so any commit begun before this one has been merged by then."""

    async def commit() -> None:
        controller = await ControllerClient.connect(standalone.controller_uri)
        manager = StreamManager(controller)
        try:
            writer = manager.create_txn_writer(SCOPE, stream)
            txn = await writer.begin()
            await (await txn.write_event(event))
            await txn.commit()
            assert await txn.wait_for_state(timeout_s=60) == TxnState.COMMITTED
            await writer.close()
        finally:
            await manager.close()
            await controller.close()

    asyncio.run(commit())


def test_batch_write_with_a_failing_task_leaves_nothing_visible(spark, standalone: StandaloneProcess) -> None:  # type: ignore[no-untyped-def]
    stream = _stream()
    df = spark.range(0, 4_000, numPartitions=4).selectExpr(
        "CAST(id AS STRING) AS event", "CASE WHEN id = 3999 THEN CAST(raise_error('boom') AS STRING) END AS other"
    )
    group = f"failing-write-{stream}"
    context = spark.sparkContext
    context.setJobGroup(group, "a batch write with a failing task")
    try:
        with pytest.raises(Exception, match="boom"):
            df.write.format("segstore").mode("append").options(**_options(standalone, stream)).save()
    finally:
        for key in ("spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel"):
            context.setLocalProperty(key, None)  # the session is shared: later jobs are in no group
    _await_job_group_end(spark, group)  # the driver's abort returned before save() raised; no task runs now
    _commit_one_event(standalone, stream, b"after the failed write")  # after any commit the write began
    assert [e for _, e in _read_back(standalone, stream)] == [b"after the failed write"]


def test_stream_write_exactly_once_across_a_restart(spark, standalone: StandaloneProcess, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    stream = _stream()
    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    source.mkdir()

    def add_file(n: int) -> None:
        (source / f"part-{n}.txt").write_text("".join(f"line-{n}-{i}\n" for i in range(100)))

    def run() -> str:
        query = (
            spark.readStream.format("text")
            .option("maxFilesPerTrigger", 1)
            .load(str(source))
            .withColumnRenamed("value", "event")
            .writeStream.format("segstore")
            .options(**_options(standalone, stream))
            .option("checkpointLocation", str(checkpoint))
            .start()
        )
        try:
            query.processAllAvailable()
        finally:
            query.stop()
        return str(query.id)

    for n in range(3):
        add_file(n)
    first_id = run()
    add_file(3)
    assert run() == first_id  # restarted from the checkpoint: same query, batches 3.. follow

    expected = sorted(f"line-{n}-{i}".encode() for n in range(4) for i in range(100))
    assert sorted(e for _, e in _read_back(standalone, stream)) == expected
    records = _records(standalone, stream, first_id, range(5))
    assert [r.state if r else None for r in records] == [DONE] * 4 + [None]  # one per file, each committed


def _error_of(spark, standalone: StandaloneProcess, df, mode: str = "append", **options: str) -> str:  # type: ignore[no-untyped-def]
    with pytest.raises(Exception) as caught:
        df.write.format("segstore").mode(mode).options(**_options(standalone, _stream(), **options)).save()
    return str(caught.value)


def test_write_errors_name_the_column_or_the_option(spark, standalone: StandaloneProcess) -> None:  # type: ignore[no-untyped-def]
    rows = spark.range(3)
    assert "column 'event': must be binary or string, not bigint" in _error_of(
        spark, standalone, rows.selectExpr("id AS event")
    )
    assert "column 'event': is required" in _error_of(spark, standalone, rows.selectExpr("id AS value"))
    assert "column 'routing_key': must be string, not int" in _error_of(
        spark, standalone, rows.selectExpr("CAST(id AS STRING) AS event", "CAST(id AS INT) AS routing_key")
    )
    events = rows.selectExpr("CAST(id AS STRING) AS event")
    assert "option 'exactlyOnce': must be true or false" in _error_of(spark, standalone, events, exactlyOnce="maybe")
    assert "option 'transactionTimeoutMs'" in _error_of(spark, standalone, events, transactionTimeoutMs="600001")
    assert "append-only" in _error_of(spark, standalone, events, mode="overwrite")


def test_unreachable_controller_is_named() -> None:
    from pyspark.sql.types import BinaryType, StructField, StructType

    schema = StructType([StructField("event", BinaryType())])
    options = {"controller": "tcp://127.0.0.1:1", "scope": "s", "stream": "x", "controllerTimeoutMs": "1000"}
    expected = "option 'controller': controller tcp://127.0.0.1:1 unreachable after 1.0 s: connection refused"
    with pytest.raises(SegstoreOptionError, match=re.escape(expected)):
        SegstoreBatchWriter(options, schema, False)
