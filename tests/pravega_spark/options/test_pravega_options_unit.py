"""The Pravega Spark connector's options, parsed without Spark: each is taken under its name with its meaning,
combinations the connector silently ignores are refused, and Base64 cuts go where JSON cuts go."""

from __future__ import annotations

import pytest

from controller_client.model import RetentionPolicy, ScalingPolicy, StreamConfiguration
from pravega_spark.errors import SegstoreOptionError
from pravega_spark.options.read import ReadOptions
from pravega_spark.options.stream_cut_text import encode_text
from pravega_spark.options.write import WriteOptions

pytestmark = pytest.mark.unit

STREAM = {"scope": "shop", "stream": "orders"}
EPOCH = 1 << 32


def test_stream_configuration_options_make_the_policies_pravega_makes() -> None:
    by_bytes = WriteOptions.parse(
        {
            **STREAM,
            "default_num_segments": "2",
            "default_scale_factor": "3",
            "default_segment_target_rate_bytes_per_sec": "10240",
            "default_retention_duration_milliseconds": "3600000",
        }
    ).creation.config
    assert by_bytes == StreamConfiguration(ScalingPolicy.by_data_rate(10, 3, 2), RetentionPolicy.by_time_ms(3_600_000))
    by_events = ReadOptions.parse(
        {
            **STREAM,
            "defaultScaleFactor": "2",
            "defaultSegmentTargetRateEventsPerSec": "500",
            "defaultRetentionSizeBytes": "1000000",
        }
    ).creation.config
    assert by_events == StreamConfiguration(
        ScalingPolicy.by_event_rate(500, 2, 1), RetentionPolicy.by_size_bytes(10**6)
    )
    assert WriteOptions.parse(STREAM).creation.config == StreamConfiguration(ScalingPolicy.fixed(1))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"default_scale_factor": "2"}, r"^option 'default_scale_factor': needs a target rate"),
        ({"defaultSegmentTargetRateEventsPerSec": "9"}, r"^option 'defaultSegmentTargetRateEventsPerSec': needs "),
        (
            {"default_scale_factor": "2", "default_segment_target_rate_bytes_per_sec": "2048",
             "default_segment_target_rate_events_per_sec": "5"},
            r"^option 'default_segment_target_rate_events_per_sec': give one target rate",
        ),
        (
            {"default_retention_duration_milliseconds": "1", "default_retention_size_bytes": "1"},
            r"^option 'default_retention_size_bytes': give one retention",
        ),
        ({"default_scale_factor": "1"}, r"^option 'default_scale_factor': must be an integer >= 2"),
        ({"default_segment_target_rate_bytes_per_sec": "1000"}, r"must be an integer >= 1024"),
        ({"default_retention_size_bytes": "-1"}, r"^option 'default_retention_size_bytes': must be an integer >= 0"),
        ({"allow_create_stream": "maybe"}, r"^option 'allow_create_stream': must be true or false"),
        ({"transaction_status_poll_interval_ms": "0"}, r"^option 'transaction_status_poll_interval_ms': must be"),
        ({"encoding": "chunked_v1"}, r"^option 'encoding': not supported: .*chunked_v1"),
    ],
)  # fmt: skip
def test_what_the_connector_would_ignore_or_refuse_fails_naming_the_option(
    options: dict[str, str], message: str
) -> None:
    with pytest.raises(SegstoreOptionError, match=message):
        WriteOptions.parse({**STREAM, **options})


def test_reads_create_nothing_unless_told_and_writes_create_unless_told_not_to() -> None:
    read = ReadOptions.parse(STREAM).creation
    assert (read.allow_create_scope, read.allow_create_stream) == (False, False)
    write = WriteOptions.parse(STREAM).creation
    assert (write.allow_create_scope, write.allow_create_stream) == (True, True)
    told = ReadOptions.parse({**STREAM, "allow_create_scope": "true", "allow_create_stream": "true"}).creation
    assert (told.allow_create_scope, told.allow_create_stream) == (True, True)
    told_not = WriteOptions.parse({**STREAM, "allowCreateStream": "false"}).creation
    assert (told_not.allow_create_scope, told_not.allow_create_stream) == (True, False)


def test_write_options_of_the_connector() -> None:
    options = WriteOptions.parse(
        {
            **STREAM,
            "exactly_once": "false",
            "transaction_timeout_ms": "30000",
            "read_after_write_consistency": "false",
            "transaction_status_poll_interval_ms": "50",
        }
    )
    assert not options.exactly_once and not options.read_after_write_consistency
    assert (options.transaction_timeout_ms, options.transaction_status_poll_interval_ms) == (30_000, 50)


def test_unbounded_is_the_head_as_a_start_and_no_end_as_an_end() -> None:
    options = ReadOptions.parse({**STREAM, "start_stream_cut": "unbounded", "end_stream_cut": "UNBOUNDED"})
    assert options.starting is not None and options.starting.kind == "earliest"
    assert options.starting.option == "start_stream_cut"
    assert options.ending is None


def test_base64_cuts_are_taken_where_json_cuts_are() -> None:
    text = encode_text("shop", "orders", {0: 10, EPOCH | 1: 20})
    for start, end in (("start_stream_cut", "end_stream_cut"), ("startingOffsets", "endingOffsets")):
        options = ReadOptions.parse({**STREAM, start: text, end: text})
        assert options.starting is not None and options.starting.cut is not None
        assert dict(options.starting.cut.positions) == {0: 10, EPOCH | 1: 20}
        assert options.ending is not None and options.ending.cut == options.starting.cut
        assert options.starting.is_fixed


def test_a_base64_cut_of_another_stream_or_garbage_fails_naming_the_option() -> None:
    other = encode_text("shop", "returns", {0: 10})
    with pytest.raises(SegstoreOptionError, match=r"^option 'start_stream_cut': .* shop/returns, not in shop/orders"):
        ReadOptions.parse({**STREAM, "start_stream_cut": other})
    with pytest.raises(SegstoreOptionError, match=r"^option 'endingOffsets': not a stream cut .*not a Pravega Base64"):
        ReadOptions.parse({**STREAM, "endingOffsets": "H4sIbroken"})


def test_metadata_modes() -> None:
    assert ReadOptions.parse({**STREAM, "metadata": "StreamInfo"}).metadata == "StreamInfo"
    streams = ReadOptions.parse({"scope": "shop", "metadata": "streams"})
    assert (streams.metadata, streams.target.stream) == ("Streams", "")
    with pytest.raises(SegstoreOptionError, match=r"^option 'stream': is required"):
        ReadOptions.parse({"scope": "shop", "metadata": "StreamInfo"})
    with pytest.raises(SegstoreOptionError, match=r"^option 'metadata': must be 'Streams' .* or 'StreamInfo'"):
        ReadOptions.parse({**STREAM, "metadata": "Segments"})
    with pytest.raises(SegstoreOptionError, match=r"^option 'start_stream_cut': means nothing with option 'metadata'"):
        ReadOptions.parse({**STREAM, "metadata": "StreamInfo", "start_stream_cut": "earliest"})
    with pytest.raises(SegstoreOptionError, match=r"^option 'metadata': is an option of reads; writes do not"):
        WriteOptions.parse({**STREAM, "metadata": "Streams"})
