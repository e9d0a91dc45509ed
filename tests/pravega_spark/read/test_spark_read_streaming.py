"""Streaming reads of ``format("segstore")`` against a real standalone: micro-batches follow scaling while
the stream is written (nothing lost, nothing twice), maxBytesPerTrigger bounds batches, Trigger.AvailableNow
stops at what was there, a restart from the checkpoint goes on where it stopped, data loss."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from spark_fixtures import Streams

import pravega_spark

pytestmark = [pytest.mark.spark, pytest.mark.slow]

HEADER = 8


def _events(prefix: str, count: int, keys: int = 16) -> list[tuple[bytes, str | None]]:
    return [(f"{prefix}-{i:05d}".encode() + b"." * (i % 53), f"key-{i % keys}") for i in range(count)]


class Collector:
    """A foreachBatch sink that keeps every row and the bytes of each micro-batch (driver side)."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, int, bytes]] = []
        self.batch_bytes: list[int] = []
        self.batch_sizes: list[int] = []
        self.lock = threading.Lock()

    def __call__(self, batch: Any, batch_id: int) -> None:
        rows = [(r.segment_id, r.offset, bytes(r.event)) for r in batch.collect()]
        with self.lock:
            self.rows += rows
            self.batch_bytes.append(sum(HEADER + len(e) for _, _, e in rows))
            self.batch_sizes.append(len(rows))

    def events(self) -> list[bytes]:
        return sorted(e for _, _, e in self.rows)


def _stream(spark: Any, streams: Streams, scope: str, stream: str, **options: str) -> Any:
    return spark.readStream.format("segstore").options(**streams.options(scope, stream), **options).load()


def test_micro_batches_follow_scaling_while_written_nothing_lost_nothing_twice(
    spark: Any, streams: Streams, tmp_path: Path
) -> None:
    streams.create("live", "scaling", segments=2)
    limit = 40_000
    collector = Collector()
    query = (
        _stream(spark, streams, "live", "scaling", startingOffsets="earliest", maxBytesPerTrigger=str(limit))
        .writeStream.foreachBatch(collector)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    written = _events("live", 6000)
    writing_done = threading.Event()

    def write() -> None:  # one writer keeps writing through every scale
        try:
            with streams.manager.create_writer("live", "scaling") as writer:
                for i in range(0, len(written), 50):
                    writer.write_events(written[i : i + 50]).result(60)
                    time.sleep(0.01)
        finally:
            writing_done.set()

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    try:
        for change in ["split", "split", "merge", "split", "merge", "merge"]:
            time.sleep(0.3)
            if change == "split":
                streams.split_first("live", "scaling")
            else:
                streams.merge_first_two("live", "scaling")
        assert writing_done.wait(120)
        writer.join()
        query.processAllAvailable()
    finally:
        query.stop()
    assert query.exception() is None
    assert collector.events() == sorted(e for e, _ in written)  # nothing lost, nothing twice
    assert len({(s, o) for s, o, _ in collector.rows}) == len(collector.rows)
    assert sorted(collector.rows) == sorted(streams.events("live", "scaling"))  # right segments and offsets
    assert len({s for s, _, _ in collector.rows}) >= 6  # segments of four epochs and more were read
    assert max(collector.batch_bytes) <= limit
    assert len(collector.batch_bytes) >= sum(HEADER + len(e) for e, _ in written) // limit


def test_available_now_reads_what_is_there_in_bounded_batches_and_resumes_from_the_checkpoint(
    spark: Any, streams: Streams, tmp_path: Path
) -> None:
    streams.create("live", "now", segments=3)
    first = _events("first", 1500)
    streams.write("live", "now", first)
    checkpoint = str(tmp_path / "checkpoint")

    def run() -> Collector:
        collector = Collector()
        query = (
            _stream(spark, streams, "live", "now", startingOffsets="earliest", maxBytesPerTrigger="20000")
            .writeStream.foreachBatch(collector)
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(120), "Trigger.AvailableNow did not stop"
        assert query.exception() is None
        return collector

    one = run()
    assert one.events() == sorted(e for e, _ in first)
    assert len(one.batch_bytes) > 1 and max(one.batch_bytes) <= 20_000
    second = _events("second", 700)
    streams.write("live", "now", second)
    streams.split_first("live", "now")
    third = _events("third", 700)
    streams.write("live", "now", third)
    two = run()  # the restarted query goes on from its checkpointed offset
    assert two.events() == sorted(e for e, _ in second + third)


def test_streaming_from_truncated_offsets_fails_or_skips_with_fail_on_data_loss_false(
    spark: Any, streams: Streams, tmp_path: Path
) -> None:
    streams.create("live", "truncated", segments=2)
    streams.write("live", "truncated", _events("gone", 300))
    old_head = json.dumps(pravega_spark.stream_cut_to_offset(streams.manager.head_cut("live", "truncated")))
    streams.manager.truncate(streams.tail("live", "truncated"))
    kept = _events("kept", 300)
    streams.write("live", "truncated", kept)

    def start(name: str, collector: Collector, **options: str) -> Any:
        return (
            _stream(spark, streams, "live", "truncated", startingOffsets=old_head, **options)
            .writeStream.foreachBatch(collector)
            .option("checkpointLocation", str(tmp_path / name))
            .trigger(availableNow=True)
            .start()
        )

    failed = start("fails", Collector())
    with pytest.raises(Exception, match=r"segment \d+ of live/truncated: offsets \[0, \d+\) are truncated"):
        failed.awaitTermination(120)
    assert "failOnDataLoss=false" in str(failed.exception())
    collector = Collector()
    skipped = start("skips", collector, failOnDataLoss="false")
    assert skipped.awaitTermination(120)
    assert skipped.exception() is None
    assert collector.events() == sorted(e for e, _ in kept)


def test_ending_offsets_are_refused_for_streaming(spark: Any, streams: Streams, tmp_path: Path) -> None:
    streams.create("live", "ending", segments=1)
    with pytest.raises(Exception, match="option 'endingOffsets': is for batch queries only"):
        query = (
            _stream(spark, streams, "live", "ending", endingOffsets="latest")
            .writeStream.format("noop")
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .start()
        )
        try:
            query.awaitTermination(60)
            raise AssertionError(str(query.exception()))
        finally:
            query.stop()
