"""Reading by ingestion time: ``endingTimestamp`` ends a batch read where ``startingTimestamp`` would start one.

Events go in through the client library's event writer (plain appends, whose ingestion times the segment stores
index exactly). A time ``since`` is taken after every event of the first group was acknowledged and before any of
the second group was handed to the writer; the segment stores stamp appends with the same machine's clock.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from spark_fixtures import Streams

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SCOPE = "eventtime"


def _events(prefix: str, count: int) -> list[tuple[bytes, str | None]]:
    return [(f"{prefix}-{i}".encode(), f"key-{i % 11}") for i in range(count)]


def _payloads(spark: Any, streams: Streams, stream: str, **options: str) -> list[bytes]:
    frame = spark.read.format("segstore").options(**streams.options(SCOPE, stream), **options).load()
    return sorted(bytes(r.event) for r in frame.collect())


def _time_after_now() -> int:
    """An epoch ms later than every append acknowledged so far, and passed once this returns."""
    since = int(time.time() * 1000) + 1
    while time.time() * 1000 <= since:  # the clock passes it within a millisecond
        pass
    return since


def test_ending_timestamp_cuts_a_batch_read_where_starting_timestamp_starts_one(spark: Any, streams: Streams) -> None:
    streams.create(SCOPE, "cut", segments=3)
    streams.write(SCOPE, "cut", _events("before", 400))
    since = _time_after_now()
    streams.write(SCOPE, "cut", _events("after", 300))
    streams.split_first(SCOPE, "cut")
    streams.write(SCOPE, "cut", _events("later", 200))

    before = _payloads(spark, streams, "cut", endingTimestamp=str(since))
    after = _payloads(spark, streams, "cut", startingTimestamp=str(since))
    assert before == sorted(e for e, _ in _events("before", 400))
    assert after == sorted(e for e, _ in _events("after", 300) + _events("later", 200))
    assert sorted(before + after) == _payloads(spark, streams, "cut")  # no gap, no overlap

    until = _time_after_now()
    streams.write(SCOPE, "cut", _events("last", 100))
    window = _payloads(spark, streams, "cut", startingTimestamp=str(since), endingTimestamp=str(until))
    assert window == after
    assert _payloads(spark, streams, "cut", endingTimestamp="0") == []


def test_ending_timestamp_is_for_batch_reads_and_ends_one_way(spark: Any, streams: Streams, tmp_path: Path) -> None:
    streams.create(SCOPE, "refused")
    streams.write(SCOPE, "refused", _events("e", 10))
    with pytest.raises(Exception, match=r"option 'endingTimestamp': cannot be combined with option 'end_stream_cut'"):
        _payloads(spark, streams, "refused", endingTimestamp="5", end_stream_cut="latest")
    with pytest.raises(Exception, match=r"option 'endingTimestamp': is not after option 'startingTimestamp'"):
        _payloads(spark, streams, "refused", startingTimestamp=str(_time_after_now()), endingTimestamp="0")
    frame = spark.readStream.format("segstore").options(**streams.options(SCOPE, "refused"), endingTimestamp="5")
    with pytest.raises(Exception, match=r"option 'endingTimestamp': is for batch queries only"):
        query = frame.load().writeStream.format("noop").option("checkpointLocation", str(tmp_path)).start()
        try:
            query.awaitTermination(120)
        finally:
            query.stop()
