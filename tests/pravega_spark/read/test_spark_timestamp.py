"""The ``timestamp`` column (issue 27 part 4): each event's ingestion time, in batch and streaming reads, for history
in Tier-2 read straight from the chunks and through the segment store (segstore's ``ReadIngestTimes``), for data
only in memory, and for a merged transaction's events.

Bounds: the wall clock (ms) taken before the first write of a group and after it was acknowledged; the segment
store stamps appends with the same machine's clock, so every event of the group has a time within them.
"""

from __future__ import annotations

import itertools
import time
from pathlib import Path
from typing import Any

import pytest
from spark_fixtures import Streams
from standalone_process import StandaloneProcess

from controller_client.model import TxnState
from segment_store.client import BlockingClient

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SCOPE = "ingesttime"
Row = tuple[int, int, bytes, int | None]  # segment_id, offset, event, timestamp (epoch ms)


def _now_ms() -> int:
    return int(time.time() * 1000)


def _write(streams: Streams, stream: str, prefix: str, count: int) -> tuple[int, int, set[bytes]]:
    events = [(f"{prefix}-{i:04d}".encode() + b"." * (i % 29), f"key-{i % 7}") for i in range(count)]
    before = _now_ms()
    streams.write(SCOPE, stream, events)
    return before, _now_ms(), {e for e, _ in events}


def _flush(standalone: StandaloneProcess) -> None:
    with BlockingClient(standalone.segmentstore_endpoint) as client:
        for container in range(standalone.container_count):
            client.flush_to_storage(container)


def _rows(frame: Any) -> list[Row]:
    picked = frame.selectExpr("segment_id", "offset", "event", "unix_millis(timestamp) AS ms")
    return sorted((r.segment_id, r.offset, bytes(r.event), r.ms) for r in picked.collect())


def _batch(spark: Any, streams: Streams, stream: str, **options: str) -> list[Row]:
    frame = spark.read.format("segstore").options(**streams.options(SCOPE, stream), **options).load()
    assert frame.columns == ["event", "scope", "stream", "segment_id", "offset", "timestamp"]
    assert frame.schema["timestamp"].dataType.simpleString() == "timestamp"
    return _rows(frame)


def _check(rows: list[Row], groups: list[tuple[int, int, set[bytes]]]) -> None:
    """Every row has a time within its group's bounds; times never decrease along a segment (offset order)."""
    assert len(rows) == sum(len(events) for _, _, events in groups)
    for _, _, event, ms in rows:
        lo, hi = next((lo, hi) for lo, hi, events in groups if event in events)
        assert ms is not None and lo <= ms <= hi, (event, ms, lo, hi)
    for before, after in itertools.pairwise(rows):
        if before[0] == after[0]:
            assert before[3] is not None and after[3] is not None and before[3] <= after[3]


def test_batch_read_gives_ingestion_times_from_tier2_directly_through_the_segment_store_and_from_memory(
    spark: Any, streams: Streams, standalone: StandaloneProcess
) -> None:
    streams.create(SCOPE, "batch", segments=2)
    old = _write(streams, "batch", "old", 1500)
    _flush(standalone)
    new = _write(streams, "batch", "new", 700)

    direct = _batch(spark, streams, "batch")  # history from the chunks, the rest through the segment store
    _check(direct, [old, new])
    elsewhere = standalone.data_dir / "no-tier2-here"
    elsewhere.mkdir(exist_ok=True)
    through = _batch(spark, streams, "batch", tier2Location=str(elsewhere))  # everything through the segment store
    assert through == direct


def test_streaming_read_gives_ingestion_times(spark: Any, streams: Streams, standalone: StandaloneProcess) -> None:
    streams.create(SCOPE, "live", segments=2)
    old = _write(streams, "live", "old", 800)
    _flush(standalone)
    new = _write(streams, "live", "new", 600)
    rows: list[Row] = []

    def collect(batch: Any, batch_id: int) -> None:
        assert batch.columns[-1] == "timestamp"
        rows.extend(_rows(batch))

    query = (
        spark.readStream.format("segstore")
        .options(**streams.options(SCOPE, "live"), startingOffsets="earliest", maxBytesPerTrigger="20000")
        .load()
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(standalone.data_dir / "timestamp-checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120), "Trigger.AvailableNow did not stop"
    assert query.exception() is None
    _check(sorted(rows), [old, new])


def test_a_merged_transactions_events_get_its_commit_time_in_memory_and_in_tier2(
    spark: Any, streams: Streams, standalone: StandaloneProcess, tmp_path: Path
) -> None:
    streams.create(SCOPE, "txn", segments=1)
    before = _write(streams, "txn", "before", 50)
    events = {f"txn-{i}".encode() for i in range(40)}
    with streams.manager.create_txn_writer(SCOPE, "txn") as writer:
        started = _now_ms()
        txn = writer.begin()
        for event in sorted(events):
            txn.write_event(event, "key").result(60)
        txn.flush()
        txn.commit()
        deadline = time.monotonic() + 60
        while txn.check_status() != TxnState.COMMITTED:  # the controller merges it asynchronously
            assert time.monotonic() < deadline, "transaction not committed"
            time.sleep(0.02)
        committed = _now_ms()
    after = _write(streams, "txn", "after", 30)
    groups = [before, (started, committed, events), after]

    in_memory = _batch(spark, streams, "txn")
    _check(in_memory, groups)  # the merge's time, never earlier than the events before it
    assert len({ms for _, _, event, ms in in_memory if event in events}) == 1  # one time: the commit's
    _flush(standalone)
    stored = _batch(spark, streams, "txn")
    assert stored == in_memory  # in Tier-2 too (the transaction's chunks were rewritten with the merge time)
