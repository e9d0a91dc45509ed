"""Strict options as a user meets them: a misspelled option fails a batch read, a streaming read, a batch write
and a streaming write with an error naming it and the closest option; Spark's own options are taken."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from spark_fixtures import Streams

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SCOPE = "strict"


def first_line_names(raised: pytest.ExceptionInfo[Exception], pattern: str) -> None:
    """The first line the user reads names the option (the connector hides the Python worker's traceback)."""
    first = str(raised.value).strip().splitlines()[0]
    assert re.search(pattern, first), f"first line: {first}\n{raised.value}"


def test_batch_read_with_a_typo_fails_naming_it_and_the_suggestion(spark: Any, streams: Streams) -> None:
    streams.create(SCOPE, "typo-read")
    options = {**streams.options(SCOPE, "typo-read"), "startingOffset": "earliest"}
    with pytest.raises(Exception, match=r"option '(?i:startingOffset)': unknown option of reads; did you mean "
                       r"'startingOffsets'\?") as raised:  # fmt: skip
        spark.read.format("segstore").options(**options).load().collect()
    first_line_names(
        raised,
        r"option '(?i:startingOffset)': unknown option of reads; did you mean "
        r"'startingOffsets'\?",
    )


def test_batch_read_with_an_option_of_micro_batches_fails_naming_it(spark: Any, streams: Streams) -> None:
    streams.create(SCOPE, "per-trigger-read")
    options = {**streams.options(SCOPE, "per-trigger-read"), "maxEventsPerTrigger": "100"}
    refused = r"option 'maxEventsPerTrigger': is for streaming queries \(spark.readStream\)"
    with pytest.raises(Exception, match=refused) as raised:
        spark.read.format("segstore").options(**options).load().collect()
    first_line_names(raised, refused)


def test_streaming_read_with_a_typo_fails_naming_it_and_the_suggestion(
    spark: Any, streams: Streams, tmp_path: Path
) -> None:
    streams.create(SCOPE, "typo-stream")
    options = {**streams.options(SCOPE, "typo-stream"), "maxBytesPerTriger": "100"}
    with pytest.raises(Exception, match=r"option '(?i:maxBytesPerTriger)': unknown option of reads; did you mean "
                       r"'maxBytesPerTrigger'\?"):  # fmt: skip
        frame = spark.readStream.format("segstore").options(**options).load()
        query = frame.writeStream.format("noop").option("checkpointLocation", str(tmp_path)).start()
        try:
            query.awaitTermination(120)
        finally:
            query.stop()


def test_batch_write_with_a_typo_fails_naming_it_and_the_suggestion(spark: Any, streams: Streams) -> None:
    rows = spark.range(3).selectExpr("CAST(id AS STRING) AS event")
    options = {**streams.options(SCOPE, "typo-write"), "exactlyOnc": "false"}
    with pytest.raises(Exception, match=r"option '(?i:exactlyOnc)': unknown option of writes; did you mean "
                       r"'exactlyOnce'\?") as raised:  # fmt: skip
        rows.write.format("segstore").options(**options).mode("append").save()
    first_line_names(
        raised,
        r"option '(?i:exactlyOnc)': unknown option of writes; did you mean "
        r"'exactlyOnce'\?",
    )
    assert not streams.manager.stream_exists(SCOPE, "typo-write")  # refused before anything was created


def test_streaming_write_with_a_typo_fails_naming_it_and_the_suggestion(
    spark: Any, streams: Streams, tmp_path: Path
) -> None:
    rows = (
        spark.readStream.format("rate")
        .option("rowsPerSecond", "10")
        .load()
        .selectExpr("CAST(value AS STRING) AS event")
    )
    options = {**streams.options(SCOPE, "typo-write-stream"), "transactionTimeout": "60000"}
    with pytest.raises(Exception, match=r"option '(?i:transactionTimeout)': unknown option of writes; did you mean "
                       r"'transactionTimeoutMs'\?") as raised:  # fmt: skip
        query = (
            rows.writeStream.format("segstore").options(**options).option("checkpointLocation", str(tmp_path)).start()
        )
        try:
            query.awaitTermination(120)
        finally:
            query.stop()
    first_line_names(
        raised,
        r"option '(?i:transactionTimeout)': unknown option of writes; did you mean "
        r"'transactionTimeoutMs'\?",
    )


def test_a_write_option_on_a_read_fails_saying_so(spark: Any, streams: Streams) -> None:
    streams.create(SCOPE, "kinds")
    options = {**streams.options(SCOPE, "kinds"), "exactlyOnce": "true"}
    with pytest.raises(Exception, match=r"option 'exactlyOnce': is an option of writes; reads do not take it"):
        spark.read.format("segstore").options(**options).load().collect()


def test_spark_own_options_path_checkpoint_location_and_query_name_are_taken(
    spark: Any, streams: Streams, tmp_path: Path
) -> None:
    controller = {"controller": streams.controller_uri}
    rows = spark.range(5).selectExpr("CAST(id AS STRING) AS event")
    rows.write.format("segstore").options(**controller).mode("append").save(f"{SCOPE}/by-path")
    read = spark.read.format("segstore").options(**controller).load(f"{SCOPE}/by-path")
    assert sorted(bytes(r.event) for r in read.collect()) == [b"0", b"1", b"2", b"3", b"4"]

    query = (
        spark.readStream.format("segstore")
        .options(**controller, startingOffsets="earliest")
        .load(f"{SCOPE}/by-path")
        .selectExpr("event")
        .writeStream.format("segstore")
        .queryName("copy_by_path")
        .options(**controller)
        .option("checkpointLocation", str(tmp_path))
        .trigger(availableNow=True)
        .start(f"{SCOPE}/by-path-copy")
    )
    query.awaitTermination(120)
    assert query.exception() is None
    copied = spark.read.format("segstore").options(**controller).load(f"{SCOPE}/by-path-copy")
    assert sorted(bytes(r.event) for r in copied.collect()) == [b"0", b"1", b"2", b"3", b"4"]
