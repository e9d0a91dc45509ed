"""Parallel reads (options minPartitions, maxBytesPerPartition) against a real standalone: a 1-segment stream, part
of it in Tier-2 and part only in memory, read by 8 input partitions in batch and streaming queries: every event once,
in offset order within each partition, the partitions in offset order, and as many as the options ask for."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from spark_fixtures import Streams
from standalone_process import StandaloneProcess

import pravega_spark
from segment_store.client import BlockingClient

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SCOPE = "split"


def _events(prefix: str, count: int) -> list[tuple[bytes, str | None]]:
    return [(f"{prefix}-{i:05d}".encode() + b"." * (i * 7 % 61), f"key-{i % 13}") for i in range(count)]


def _one_segment_stream(streams: Streams, standalone: StandaloneProcess, stream: str) -> tuple[int, int]:
    """A 1-segment stream whose first half is in Tier-2 and second half only in memory: (segment id, length)."""
    streams.create(SCOPE, stream, segments=1)
    streams.write(SCOPE, stream, _events("tier2", 6000))
    with BlockingClient(standalone.segmentstore_endpoint) as client:
        for container in range(standalone.container_count):
            client.flush_to_storage(container)
    streams.write(SCOPE, stream, _events("memory", 6000))
    ((segment, length),) = streams.tail(SCOPE, stream).positions.items()
    return segment, length


def _check_partitions(partitions: list[list[tuple[int, int, bytes]]], expected: list[tuple[int, int, bytes]]) -> None:
    """Every event once; offsets increase within each partition and from one partition to the next."""
    assert all(partitions), "an empty partition"
    flat = [row for rows in partitions for row in rows]
    assert flat == expected  # in offset order overall: each partition in order, partition i before i + 1
    offsets = [[offset for _, offset, _ in rows] for rows in partitions]
    assert all(o == sorted(o) for o in offsets)


def _by_partition(frame: Any) -> list[list[tuple[int, int, bytes]]]:
    rows = frame.rdd.mapPartitions(lambda it: [[(r.segment_id, r.offset, bytes(r.event)) for r in it]]).collect()
    return list(rows)


def test_batch_read_of_one_segment_by_8_partitions_gives_every_event_once_in_order(
    spark: Any, streams: Streams, standalone: StandaloneProcess
) -> None:
    segment, length = _one_segment_stream(streams, standalone, "batch")
    expected = streams.events(SCOPE, "batch")
    assert len(expected) == 12_000 and {s for s, _, _ in expected} == {segment}
    options = streams.options(SCOPE, "batch")
    location = str(standalone.data_dir / "tier2")
    asks: list[dict[str, str]] = [
        {"minPartitions": "8"},
        {"maxBytesPerPartition": str(math.ceil(length / 8))},
        {"minPartitions": "8", "tier2Location": location},  # executors read the Tier-2 part from Parquet
    ]
    for ask in asks:
        frame = spark.read.format("segstore").options(**options, **ask).load()
        assert frame.rdd.getNumPartitions() == 8, ask
        _check_partitions(_by_partition(frame), expected)
    whole = spark.read.format("segstore").options(**options).load()
    assert whole.rdd.getNumPartitions() == 1  # without the options: one task for the segment


def test_streaming_read_of_one_segment_by_8_partitions_gives_every_event_once_in_order(
    spark: Any, streams: Streams, standalone: StandaloneProcess, tmp_path: Path
) -> None:
    _one_segment_stream(streams, standalone, "streaming")
    expected = streams.events(SCOPE, "streaming")
    batches: list[tuple[int, list[list[tuple[int, int, bytes]]]]] = []

    def collect(batch: Any, batch_id: int) -> None:
        partitions = _by_partition(batch)
        if any(partitions):
            batches.append((batch.rdd.getNumPartitions(), partitions))

    query = (
        spark.readStream.format("segstore")
        .options(**streams.options(SCOPE, "streaming"), startingOffsets="earliest", minPartitions="8")
        .load()
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert not query.isActive
    assert [count for count, _ in batches] == [8]  # one micro-batch with everything, read by 8 tasks
    _check_partitions(batches[0][1], expected)


def test_split_read_after_truncation_skips_the_lost_part_and_a_missing_segment_is_read_whole(
    spark: Any, streams: Streams
) -> None:
    streams.create(SCOPE, "truncated", segments=1)
    streams.write(SCOPE, "truncated", _events("gone", 3000))
    head = streams.manager.head_cut(SCOPE, "truncated")
    cut = streams.tail(SCOPE, "truncated")
    streams.write(SCOPE, "truncated", _events("kept", 3000))
    streams.manager.truncate(cut)
    old_head = json.dumps(pravega_spark.stream_cut_to_offset(head))
    frame = (
        spark.read.format("segstore")
        .options(**streams.options(SCOPE, "truncated"), startingOffsets=old_head, failOnDataLoss="false")
        .options(minPartitions="4")
        .load()
    )
    assert frame.rdd.getNumPartitions() == 4
    _check_partitions(_by_partition(frame), streams.events(SCOPE, "truncated"))
    (segment,) = cut.positions
    assert streams.connection.event_starts(SCOPE, "truncated", segment, [0, 5]) == [cut.positions[segment]] * 2
    assert streams.connection.event_starts(SCOPE, "truncated", segment + 12345, [0]) is None  # no such segment
