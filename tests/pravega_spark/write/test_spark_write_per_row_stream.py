"""Per-row target streams through real Spark sessions against a standalone: a ``stream`` column (and a ``scope``
column) routes each row, in batch and streaming writes, exactly once included.

Every check reads the streams back with the client library (not with Spark), so a sink bug cannot hide behind a
matching reader bug.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
from pathlib import Path

import pytest
from standalone_process import StandaloneProcess

from controller_client import BlockingStreamManager, ControllerClient, StreamManager
from pravega_spark.write.commit_log import DONE, BatchRecord, CommitLog

pytestmark = pytest.mark.spark

SCOPE = "sparkrows"
OTHER_SCOPE = "sparkrows-other"
_names = itertools.count()


def _prefix() -> str:
    return f"r{next(_names)}"


def _events(standalone: StandaloneProcess, scope: str, stream: str) -> list[tuple[int, bytes]]:
    """Every event of the stream as (segment id, payload), each segment in order."""
    with BlockingStreamManager.connect(standalone.controller_uri) as manager:
        end = manager.tail_cut(scope, stream)
        return [(e.segment_id, e.data) for e in manager.create_reader(scope, stream, end=end)]


def _exists(standalone: StandaloneProcess, scope: str, stream: str) -> bool:
    async def check() -> bool:
        controller = await ControllerClient.connect(standalone.controller_uri)
        try:
            return await controller.stream_exists(scope, stream)
        finally:
            await controller.close()

    return asyncio.run(check())


def _by_key(events: list[tuple[int, bytes]], keys: int) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for _, event in events:
        out.setdefault(int(event) % keys, []).append(int(event))
    return out


@pytest.mark.parametrize("exactly_once", ["true", "false"])
def test_batch_write_routes_rows_to_three_streams_in_key_order(  # type: ignore[no-untyped-def]
    spark, standalone: StandaloneProcess, exactly_once: str
) -> None:
    prefix = _prefix()
    df = (
        spark.range(0, 6_000, numPartitions=3)
        .selectExpr(
            "id",
            "CAST(id AS STRING) AS event",
            "CAST(id % 40 AS STRING) AS routing_key",
            f"concat('{prefix}-', id % 3) AS stream",
            f"CASE WHEN id % 3 = 2 THEN '{OTHER_SCOPE}' END AS scope",
        )
        .repartition(3, "routing_key")
        .sortWithinPartitions("id")
    )
    options = {"controller": standalone.controller_uri, "scope": SCOPE, "exactlyOnce": exactly_once}
    df.write.format("segstore").mode("append").options(**options, defaultNumSegments="2").save()

    targets = [(SCOPE, f"{prefix}-0"), (SCOPE, f"{prefix}-1"), (OTHER_SCOPE, f"{prefix}-2")]
    for n, (scope, stream) in enumerate(targets):
        events = _events(standalone, scope, stream)
        assert sorted(int(e) for _, e in events) == list(range(n, 6_000, 3))  # the event only: no stream, no scope
        assert len({segment for segment, _ in events}) == 2  # created with defaultNumSegments
        by_key = _by_key(events, 40)
        assert all(ids == sorted(ids) for ids in by_key.values())  # per routing key, in write order


def test_the_stream_option_wins_over_a_stream_column(spark, standalone: StandaloneProcess) -> None:  # type: ignore[no-untyped-def]
    """As the Kafka sink's ``topic`` option: with option ``stream`` every row goes there, whatever its ``stream``
    column says (a DataFrame read from a stream and written to another does not go back where it came from)."""
    prefix = _prefix()
    df = spark.range(0, 1_000, numPartitions=2).selectExpr(
        "CAST(id AS STRING) AS event", f"CASE WHEN id % 4 = 0 THEN '{prefix}-named' END AS stream"
    )
    options = {"controller": standalone.controller_uri, "scope": SCOPE, "stream": f"{prefix}-default"}
    df.write.format("segstore").mode("append").options(**options).save()

    assert sorted(int(e) for _, e in _events(standalone, SCOPE, f"{prefix}-default")) == list(range(1_000))
    assert not _exists(standalone, SCOPE, f"{prefix}-named")


def test_null_stream_without_the_option_fails_naming_the_column(spark, standalone: StandaloneProcess) -> None:  # type: ignore[no-untyped-def]
    prefix = _prefix()
    df = spark.range(0, 10, numPartitions=1).selectExpr(
        "CAST(id AS STRING) AS event", f"CASE WHEN id < 5 THEN '{prefix}-named' END AS stream"
    )
    with pytest.raises(Exception) as caught:
        df.write.format("segstore").mode("append").options(controller=standalone.controller_uri, scope=SCOPE).save()
    assert "column 'stream': row 5 of a batch names no stream (null) and there is no default" in str(caught.value)
    named = f"{prefix}-named"  # failed before a row was written, or its transaction was aborted
    assert not _exists(standalone, SCOPE, named) or _events(standalone, SCOPE, named) == []


def test_without_a_stream_column_or_option_the_write_fails_naming_it(spark, standalone: StandaloneProcess) -> None:  # type: ignore[no-untyped-def]
    df = spark.range(3).selectExpr("CAST(id AS STRING) AS event", "'x' AS scope")  # a scope column alone is ignored
    with pytest.raises(Exception, match="option 'stream': is required"):
        df.write.format("segstore").mode("append").options(controller=standalone.controller_uri, scope=SCOPE).save()


def test_a_row_naming_a_missing_stream_fails_the_write_naming_it(spark, standalone: StandaloneProcess) -> None:  # type: ignore[no-untyped-def]
    prefix = _prefix()
    options = {"controller": standalone.controller_uri, "scope": SCOPE}
    first = spark.range(1).selectExpr("'first' AS event").write.format("segstore").mode("append")
    first.options(**options, stream=f"{prefix}-default").save()
    target = f"CASE WHEN id = 77 THEN '{prefix}-missing' ELSE '{prefix}-default' END AS stream"
    df = spark.range(0, 100, numPartitions=2).selectExpr("CAST(id AS STRING) AS event", target)  # no stream option
    with pytest.raises(Exception) as caught:
        df.write.format("segstore").mode("append").options(**options, allowCreateStream="false").save()
    expected = (
        f"column 'stream': stream {SCOPE}/{prefix}-missing named by a row does not exist, "
        "and option 'allowCreateStream' is false"
    )
    assert expected in str(caught.value)
    assert not _exists(standalone, SCOPE, f"{prefix}-missing")
    assert [e for _, e in _events(standalone, SCOPE, f"{prefix}-default")] == [b"first"]  # nothing of the failed write


def test_stream_column_of_the_wrong_type_is_named(spark, standalone: StandaloneProcess) -> None:  # type: ignore[no-untyped-def]
    df = spark.range(3).selectExpr("CAST(id AS STRING) AS event", "id AS stream")
    with pytest.raises(Exception, match="column 'stream': must be string, not bigint"):
        df.write.format("segstore").mode("append").options(controller=standalone.controller_uri, scope=SCOPE).save()


def _records(standalone: StandaloneProcess, query: str, batches: range) -> list[BatchRecord | None]:
    async def read() -> list[BatchRecord | None]:
        controller = await ControllerClient.connect(standalone.controller_uri)
        manager = StreamManager(controller)
        try:
            log = CommitLog(manager.client, SCOPE, "")  # no stream option: the scope's table of no stream
            return [found[0] if (found := await log.get(query, b)) else None for b in batches]
        finally:
            await manager.close()
            await controller.close()

    return asyncio.run(read())


def test_stream_write_exactly_once_per_stream_across_a_restart(  # type: ignore[no-untyped-def]
    spark, standalone: StandaloneProcess, tmp_path: Path
) -> None:
    prefix = _prefix()
    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    source.mkdir()

    def add_file(n: int) -> None:
        (source / f"part-{n}.txt").write_text("".join(f"{n}-{i}\n" for i in range(90)))

    def run() -> str:
        query = (
            spark.readStream.format("text")
            .option("maxFilesPerTrigger", 1)
            .load(str(source))
            .selectExpr(
                "value AS event",
                "substring_index(value, '-', 1) AS routing_key",
                f"concat('{prefix}-', CAST(substring_index(value, '-', -1) AS INT) % 3) AS stream",
            )
            .writeStream.format("segstore")
            .options(controller=standalone.controller_uri, scope=SCOPE, defaultNumSegments="2")
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
    add_file(4)
    assert run() == first_id  # restarted from the checkpoint: same query, batches 3.. follow

    for k in range(3):
        lines = collections.Counter(e.decode() for _, e in _events(standalone, SCOPE, f"{prefix}-{k}"))
        assert lines == collections.Counter(f"{n}-{i}" for n in range(5) for i in range(90) if i % 3 == k)
        assert set(lines.values()) == {1}  # nothing lost, nothing repeated
    records = _records(standalone, first_id, range(6))
    assert [r.state if r else None for r in records] == [DONE] * 5 + [None]  # one per file, each committed
    for record in records[:5]:
        assert record is not None
        assert sorted(record.streams.values()) == sorted((SCOPE, f"{prefix}-{k}") for k in range(3))
