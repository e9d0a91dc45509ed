"""The Pravega Spark connector's options through real Spark queries: stream creation and its configuration (checked
at the controller), Base64 stream cuts out of ``metadata=StreamInfo`` and back into a read, ``metadata=Streams``,
``unbounded``, and the options that cannot mean anything failing with the reason."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from spark_fixtures import Streams

from controller_client import RetentionPolicy, ScalingPolicy, StreamConfiguration
from pravega_spark.offsets import stream_cut_to_offset
from pravega_spark.options.stream_cut_text import stream_cut_from_base64

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SCOPE = "dropin"


def _events(prefix: str, count: int) -> list[tuple[bytes, str | None]]:
    return [(f"{prefix}-{i}".encode(), f"key-{i % 7}") for i in range(count)]


def _rows(spark: Any, streams: Streams, stream: str, **options: str) -> list[tuple[int, int, bytes]]:
    df = spark.read.format("segstore").options(**streams.options(SCOPE, stream), **options).load()
    return sorted((r.segment_id, r.offset, bytes(r.event)) for r in df.collect())


def test_allow_create_stream_false_on_a_missing_stream_fails_a_write_and_creates_nothing(
    spark: Any, streams: Streams
) -> None:
    rows = spark.range(3).selectExpr("CAST(id AS STRING) AS event")
    options = {**streams.options(SCOPE, "not-made"), "allow_create_stream": "false"}
    with pytest.raises(Exception, match=r"option 'stream': stream dropin/not-made does not exist, and option "
                       r"'allowCreateStream' is false"):  # fmt: skip
        rows.write.format("segstore").options(**options).mode("append").save()
    assert not streams.manager.stream_exists(SCOPE, "not-made")
    options = {**streams.options("dropin-no-scope", "x"), "allow_create_scope": "false"}
    with pytest.raises(Exception, match=r"option 'scope': scope dropin-no-scope does not exist, and option "
                       r"'allowCreateScope' is false"):  # fmt: skip
        rows.write.format("segstore").options(**options).mode("append").save()


def test_a_write_creates_the_stream_with_the_configuration_the_options_give(spark: Any, streams: Streams) -> None:
    rows = spark.range(10).selectExpr("CAST(id AS STRING) AS event")
    scaling = {
        "default_num_segments": "2",
        "default_scale_factor": "3",
        "default_segment_target_rate_bytes_per_sec": "102400",
        "default_retention_size_bytes": "1048576",
    }
    rows.write.format("segstore").options(**streams.options(SCOPE, "by-rate"), **scaling).mode("append").save()
    assert streams.manager.get_stream_configuration(SCOPE, "by-rate") == StreamConfiguration(
        ScalingPolicy.by_data_rate(100, 3, 2), RetentionPolicy.by_size_bytes(1048576)
    )
    assert len(streams.manager.current_segments(SCOPE, "by-rate")) == 2
    events = {
        "defaultScaleFactor": "2",
        "defaultSegmentTargetRateEventsPerSec": "1000",
        "defaultRetentionDurationMs": "86400000",
    }
    rows.write.format("segstore").options(**streams.options(SCOPE, "by-events"), **events).mode("append").save()
    assert streams.manager.get_stream_configuration(SCOPE, "by-events") == StreamConfiguration(
        ScalingPolicy.by_event_rate(1000, 2, 1), RetentionPolicy.by_time_ms(86_400_000)
    )
    assert len(_rows(spark, streams, "by-events")) == 10


def test_a_read_creates_a_missing_stream_only_when_told(spark: Any, streams: Streams) -> None:
    with pytest.raises(Exception, match=r"option 'stream': stream dropin/made-by-read does not exist"):
        _rows(spark, streams, "made-by-read")
    told = {"allow_create_scope": "true", "allow_create_stream": "true", "default_num_segments": "3"}
    assert _rows(spark, streams, "made-by-read", **told) == []
    assert len(streams.manager.current_segments(SCOPE, "made-by-read")) == 3


def test_stream_info_gives_base64_cuts_that_reads_take_back(spark: Any, streams: Streams) -> None:
    streams.create(SCOPE, "cuts", segments=2)
    streams.write(SCOPE, "cuts", _events("first", 300))
    info = spark.read.format("segstore").options(**streams.options(SCOPE, "cuts"), metadata="StreamInfo").load()
    assert info.columns == ["head_stream_cut", "tail_stream_cut"]
    ((head, tail),) = [(r.head_stream_cut, r.tail_stream_cut) for r in info.collect()]
    assert stream_cut_from_base64(tail) == streams.tail(SCOPE, "cuts")
    assert set(stream_cut_from_base64(head).positions.values()) == {0}
    streams.write(SCOPE, "cuts", _events("second", 300))
    streams.split_first(SCOPE, "cuts")
    streams.write(SCOPE, "cuts", _events("third", 300))

    everything = _rows(spark, streams, "cuts")
    first = _rows(spark, streams, "cuts", start_stream_cut=head, end_stream_cut=tail)
    assert sorted(e for _, _, e in first) == sorted(e for e, _ in _events("first", 300))
    rest = _rows(spark, streams, "cuts", startingOffsets=tail)
    assert sorted(first + rest) == everything
    as_json = str(stream_cut_to_offset(stream_cut_from_base64(tail))).replace("'", '"')
    assert _rows(spark, streams, "cuts", startingOffsets=as_json) == rest
    assert _rows(spark, streams, "cuts", start_stream_cut="unbounded", end_stream_cut="unbounded") == everything


def test_streams_lists_the_streams_of_the_scope(spark: Any, streams: Streams) -> None:
    for name in ("listed-a", "listed-b"):
        streams.create("dropin-list", name)
    listed = (
        spark.read.format("segstore")
        .options(controller=streams.controller_uri, scope="dropin-list", metadata="Streams")
        .load()
    )
    assert listed.columns == ["scope_name", "stream_name"]
    assert sorted((r.scope_name, r.stream_name) for r in listed.collect()) == [
        ("dropin-list", "listed-a"),
        ("dropin-list", "listed-b"),
    ]


def test_streaming_reads_refuse_metadata_and_an_end_but_take_unbounded(
    spark: Any, streams: Streams, tmp_path: Path
) -> None:
    streams.create(SCOPE, "streaming")
    streams.write(SCOPE, "streaming", _events("e", 50))

    def run(name: str, **options: str) -> int:
        frame = spark.readStream.format("segstore").options(**streams.options(SCOPE, "streaming"), **options).load()
        query = (
            frame.writeStream.format("memory")
            .queryName(name)
            .option("checkpointLocation", str(tmp_path / name))
            .trigger(availableNow=True)
            .start()
        )
        try:
            query.awaitTermination(120)
        finally:
            query.stop()
        return int(spark.table(name).count())

    assert run("unbounded_end", start_stream_cut="earliest", end_stream_cut="unbounded") == 50
    with pytest.raises(Exception, match=r"option 'metadata': is for batch reads"):
        run("with_metadata", metadata="StreamInfo")
    with pytest.raises(Exception, match=r"option 'end_stream_cut': is for batch queries only"):
        run("with_end", end_stream_cut="latest")


def test_commits_poll_at_the_interval_given_and_rows_are_readable_when_the_write_returns(
    spark: Any, streams: Streams
) -> None:
    rows = spark.range(100, numPartitions=2).selectExpr("CAST(id AS STRING) AS event")
    options = {"read_after_write_consistency": "true", "transaction_status_poll_interval_ms": "20"}
    rows.write.format("segstore").options(**streams.options(SCOPE, "polled"), **options).mode("append").save()
    assert len(streams.events(SCOPE, "polled")) == 100


def test_the_removed_encoding_option_fails_saying_why(spark: Any, streams: Streams) -> None:
    streams.create(SCOPE, "encoded")
    with pytest.raises(Exception, match=r"option 'encoding': not supported: .*chunked_v1"):
        _rows(spark, streams, "encoded", encoding="chunked_v1")
