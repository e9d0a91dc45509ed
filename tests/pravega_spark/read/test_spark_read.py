"""Batch reads of ``format("segstore")`` against a real standalone: schema, every event once with its
segment and offset, stream-cut bounds, timestamps, Tier-2 history, data loss, errors naming the option."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from spark_fixtures import Streams
from standalone_process import StandaloneProcess

import pravega_spark
from pravega_spark.read.partition_reader import SegmentRangePartition, _from_tier2
from pravega_spark.read.source import SCHEMA
from segment_store.client import BlockingClient
from segstore_shared.coordination.zookeeper_server import free_port

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _events(prefix: str, count: int, keys: int = 20) -> list[tuple[bytes, str | None]]:
    return [(f"{prefix}-{i:05d}".encode() + b"." * (i % 37), f"key-{i % keys}") for i in range(count)]


def _read(spark: Any, streams: Streams, scope: str, stream: str, **options: str) -> list[tuple[int, int, bytes]]:
    df = spark.read.format("segstore").options(**streams.options(scope, stream), **options).load()
    return sorted((r.segment_id, r.offset, bytes(r.event)) for r in df.collect())


def test_batch_read_gives_every_event_once_with_its_segment_and_offset_across_scaling(
    spark: Any, streams: Streams
) -> None:
    streams.create("batch", "scaled", segments=2)
    streams.write("batch", "scaled", _events("a", 1500))
    streams.split_first("batch", "scaled")
    streams.write("batch", "scaled", _events("b", 1500))
    streams.merge_first_two("batch", "scaled")
    streams.write("batch", "scaled", _events("c", 1500))

    df = spark.read.format("segstore").options(**streams.options("batch", "scaled")).load()
    assert df.schema == SCHEMA
    rows = df.collect()
    assert {(r.scope, r.stream) for r in rows} == {("batch", "scaled")}
    got = sorted((r.segment_id, r.offset, bytes(r.event)) for r in rows)
    assert got == sorted(streams.events("batch", "scaled"))  # same events, segments and offsets as our reader
    assert sorted(e for _, _, e in got) == sorted(
        e for e, _ in _events("a", 1500) + _events("b", 1500) + _events("c", 1500)
    )
    assert len({segment for segment, _, _ in got}) == 5  # 2 + split into 2 + merge of two into 1
    assert df.rdd.getNumPartitions() == 1  # small segment ranges are read by one task (pack_ranges)


def test_batch_read_between_stream_cuts(spark: Any, streams: Streams) -> None:
    streams.create("batch", "cuts", segments=3)
    streams.write("batch", "cuts", _events("first", 600))
    middle = streams.tail("batch", "cuts")
    streams.write("batch", "cuts", _events("second", 600))
    streams.split_first("batch", "cuts")
    streams.write("batch", "cuts", _events("third", 600))
    end = streams.tail("batch", "cuts")
    streams.write("batch", "cuts", _events("fourth", 600))

    start_json = json.dumps(pravega_spark.stream_cut_to_offset(middle))
    end_json = json.dumps({"positions": {str(s): o for s, o in end.positions.items()}})  # scope/stream left out
    rows = _read(spark, streams, "batch", "cuts", startingOffsets=start_json, endingOffsets=end_json)
    events = sorted(e for _, _, e in rows)
    assert events == sorted(e for e, _ in _events("second", 600) + _events("third", 600))

    latest_first = _read(spark, streams, "batch", "cuts", endingOffsets=start_json)  # earliest .. middle
    assert sorted(e for _, _, e in latest_first) == sorted(e for e, _ in _events("first", 600))
    assert _read(spark, streams, "batch", "cuts", startingOffsets="latest") == []


def test_starting_timestamp_starts_at_the_epoch_live_then(spark: Any, streams: Streams) -> None:
    streams.create("batch", "time", segments=2)
    streams.write("batch", "time", _events("before", 400))
    first, second = streams.manager.current_segments("batch", "time")
    new_ranges = [(first.key_start, 0.3), (0.3, second.key_end)]  # every segment written before is now sealed
    streams.scale("batch", "time", [first.segment_id, second.segment_id], new_ranges)
    time.sleep(0.05)
    timestamp = int(time.time() * 1000)
    time.sleep(0.05)
    streams.write("batch", "time", _events("after", 400))
    rows = _read(spark, streams, "batch", "time", startingTimestamp=str(timestamp))
    assert sorted(e for _, _, e in rows) == sorted(e for e, _ in _events("after", 400))


def test_starting_timestamp_is_exact_within_a_segment_without_tier2_location(spark: Any, streams: Streams) -> None:
    streams.create("batch", "exact", segments=1)
    streams.write("batch", "exact", _events("older", 700, keys=3))
    time.sleep(0.05)
    timestamp = int(time.time() * 1000)
    time.sleep(0.05)
    streams.write("batch", "exact", _events("newer", 700, keys=3))
    rows = _read(spark, streams, "batch", "exact", startingTimestamp=str(timestamp))
    assert sorted(e for _, _, e in rows) == sorted(e for e, _ in _events("newer", 700, keys=3))
    assert _read(spark, streams, "batch", "exact", startingTimestamp=str(int(time.time() * 1000) + 60_000)) == []


def test_history_in_tier2_is_read_from_parquet_and_timestamps_are_exact_there(
    spark: Any, streams: Streams, standalone: StandaloneProcess
) -> None:
    streams.create("batch", "tier2", segments=1)
    streams.write("batch", "tier2", _events("old", 2000, keys=1))
    time.sleep(0.05)
    timestamp = int(time.time() * 1000)
    time.sleep(0.05)
    streams.write("batch", "tier2", _events("new", 2000, keys=1))
    with BlockingClient(standalone.segmentstore_endpoint) as client:
        for container in range(standalone.container_count):
            client.flush_to_storage(container)
    location = str(standalone.data_dir / "tier2")
    (segment,) = streams.manager.current_segments("batch", "tier2")
    length = streams.tail("batch", "tier2").positions[segment.segment_id]
    partition = SegmentRangePartition(
        streams.controller_uri, "batch", "tier2", segment.segment_id, 0, length, tier2_location=location
    )
    served = [0]
    from_parquet = list(_from_tier2(partition, streams.connection, served))  # what an executor reads directly
    assert sum(b.num_rows for b in from_parquet) > 0 and served[0] > 0
    everything = _read(spark, streams, "batch", "tier2", tier2Location=location)
    assert everything == sorted(streams.events("batch", "tier2"))
    for where in ({"tier2Location": location}, {}):
        rows = _read(spark, streams, "batch", "tier2", startingTimestamp=str(timestamp), **where)
        assert sorted(e for _, _, e in rows) == sorted(e for e, _ in _events("new", 2000, keys=1))


def test_truncated_range_fails_or_is_skipped_with_fail_on_data_loss_false(spark: Any, streams: Streams) -> None:
    streams.create("batch", "truncated", segments=2)
    streams.write("batch", "truncated", _events("gone", 500))
    head = streams.manager.head_cut("batch", "truncated")
    cut = streams.tail("batch", "truncated")
    streams.write("batch", "truncated", _events("kept", 500))
    streams.manager.truncate(cut)
    old_head = json.dumps(pravega_spark.stream_cut_to_offset(head))

    with pytest.raises(Exception, match=r"truncated.*failOnDataLoss=false"):
        _read(spark, streams, "batch", "truncated", startingOffsets=old_head)
    rows = _read(spark, streams, "batch", "truncated", startingOffsets=old_head, failOnDataLoss="false")
    assert sorted(e for _, _, e in rows) == sorted(e for e, _ in _events("kept", 500))
    assert sorted(e for _, _, e in _read(spark, streams, "batch", "truncated")) == sorted(
        e for e, _ in _events("kept", 500)
    )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"scope": ""}, "option 'scope': is required"),
        ({"startingOffsets": "{not json"}, "option 'startingOffsets': not a stream cut"),
        ({"endingOffsets": '{"positions": {"12345": 0}}'}, "option 'endingOffsets': .* is not a valid stream cut"),
        ({"stream": "missing"}, "option 'stream': stream batch/missing does not exist"),
    ],
)
def test_errors_name_the_option_or_the_stream(
    spark: Any, streams: Streams, options: dict[str, str], message: str
) -> None:
    streams.create("batch", "errors", segments=1)
    with pytest.raises(Exception, match=message):
        spark.read.format("segstore").options(**{**streams.options("batch", "errors"), **options}).load().collect()


def test_unreachable_controller_is_a_clear_error(spark: Any) -> None:
    uri = f"tcp://127.0.0.1:{free_port()}"  # nothing listens there
    options = {"controller": uri, "scope": "any", "stream": "any", "controllerTimeoutMs": "2000"}
    started = time.monotonic()
    with pytest.raises(Exception) as raised:
        spark.read.format("segstore").options(**options).load().collect()
    assert time.monotonic() - started < 60  # the budget (the message says it held), and a first query's Spark warm-up
    first_line = str(raised.value).splitlines()[0]
    assert (
        f"option 'controller': controller {uri} unreachable after 2.0 s: connection refused "
        "(is the controller running, and is the URI right?)"
    ) in first_line, str(raised.value)
