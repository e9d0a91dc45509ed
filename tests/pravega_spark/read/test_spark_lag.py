"""Lag from Spark's progress: the stream reader reports the tail cut as each micro-batch's ``latestOffset``
(``reportLatestOffset``) and ``pravega_spark.lag_bytes`` subtracts the batch's ``endOffset`` from it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from spark_fixtures import Streams

import pravega_spark
from pravega_spark.errors import LagUnknownError
from pravega_spark.read.lag import lag_bytes, total_lag_bytes

pytestmark = pytest.mark.spark

HEADER = 8


def _source(latest: Any, end: Any) -> dict[str, Any]:
    return {"description": "segstore", "latestOffset": latest, "endOffset": end, "metrics": {}}


def test_lag_bytes_with_offsets_as_json_text_or_dicts() -> None:
    end = {"scope": "s", "stream": "t", "positions": {"1": 100, "2": 40}}
    latest = {"scope": "s", "stream": "t", "positions": {"1": 150, "2": 40}}
    assert lag_bytes(_source(json.dumps(latest), json.dumps(end))) == {1: 50, 2: 0}
    assert lag_bytes({"sources": [_source(latest, end)]}) == {1: 50, 2: 0}
    assert total_lag_bytes({"sources": [_source(latest, end)]}) == 50


def test_lag_bytes_with_a_scale_counts_new_successors_whole_and_leaves_sealed_ones_out() -> None:
    end = {"scope": "s", "stream": "t", "positions": {"1": 100, "2": 40}, "pending": {"9": {"1": 120}}}
    latest = {"scope": "s", "stream": "t", "positions": {"8": 30, "9": 70}}  # 1 and 2 sealed, 8 and 9 new
    assert lag_bytes(_source(latest, end)) == {8: 30, 9: 70}


def test_lag_bytes_without_a_latest_offset_says_so() -> None:
    end = {"scope": "s", "stream": "t", "positions": {"1": 100}}
    with pytest.raises(LagUnknownError, match="latestOffset"):
        lag_bytes(_source("null", end))
    with pytest.raises(LagUnknownError, match="no source 1"):
        lag_bytes({"sources": [_source(end, end)]}, source=1)


@pytest.mark.slow
def test_the_spark_progress_carries_the_tail_as_latest_offset_and_the_lag_shrinks_to_zero(
    spark: Any, streams: Streams, tmp_path: Path
) -> None:
    streams.create("lag", "backlog", segments=2)
    events = [(b"reading %05d" % i + b"." * (i % 31), f"key-{i % 8}") for i in range(3000)]
    streams.write("lag", "backlog", events)
    total = sum(HEADER + len(e) for e, _ in events)
    tail = pravega_spark.stream_cut_to_offset(streams.tail("lag", "backlog"))
    query = (
        spark.readStream.format("segstore")
        .options(**streams.options("lag", "backlog"), startingOffsets="earliest", maxBytesPerTrigger="16384")
        .load()
        .writeStream.format("memory")
        .queryName("lag_backlog")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(180)
    assert not query.isActive and query.exception() is None
    progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
    assert len(progress) >= 4, "16 KiB per micro-batch: a backlog of several batches"
    read = 0
    behind = []
    for p in progress:
        source = p["sources"][0]
        assert json.loads(source["latestOffset"]) == tail, "the latest offset is the stream's tail"
        read += p["numInputRows"]
        behind.append(total_lag_bytes(p))
        assert set(lag_bytes(p)) == {int(s) for s in tail["positions"]}
    assert behind == sorted(behind, reverse=True) and behind[0] > 0 and behind[-1] == 0, behind
    assert read == len(events) == spark.table("lag_backlog").count()
    first_end = json.loads(progress[0]["sources"][0]["endOffset"])["positions"]
    assert total_lag_bytes(progress[0]) == total - sum(first_end.values())
