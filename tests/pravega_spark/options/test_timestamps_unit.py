"""Options ``startingTimestamp`` / ``endingTimestamp`` as a time per stream and ``startingTimestampStrategy``, parsed
without Spark: keys resolve to the streams the query reads, the streams left out take ``startingOffsets`` /
``endingOffsets`` or the query's default, and a streaming query's initial offset carries all of it unchanged."""

from __future__ import annotations

import pytest

from pravega_spark.errors import SegstoreOptionError
from pravega_spark.options.read import Position, ReadOptions
from pravega_spark.options.timestamps import StreamTimestamps

pytestmark = pytest.mark.unit

STREAMS = {"scope": "s", "streams": "a,other/b"}


def test_keys_resolve_to_the_streams_read_and_the_rest_take_the_default_of_the_query_kind() -> None:
    options = ReadOptions.parse({**STREAMS, "startingTimestamp": '{"a": 5, "b": 7}', "endingTimestamp": '{"a": 9}'})
    assert options.starting is not None and options.starting.by_stream == StreamTimestamps(
        (("other", "b", 7), ("s", "a", 5))
    )
    batch = options.starting_or("earliest").by_stream
    streaming = options.starting_or("latest").by_stream
    assert batch is not None and batch.otherwise == "earliest"
    assert streaming is not None and streaming.otherwise == "latest"
    assert options.ending is not None and options.ending.by_stream is not None
    assert (options.ending.by_stream.otherwise, options.ending.by_stream.otherwise_option) == (
        "latest",
        "endingOffsets",
    )


def test_starting_offsets_start_the_streams_left_out() -> None:
    given = {**STREAMS, "startingTimestamp": '{"s/a": 5}', "startingOffsets": "latest"}
    position = ReadOptions.parse(given).starting_or("earliest")
    assert position.by_stream is not None
    assert (position.by_stream.otherwise, position.by_stream.otherwise_option) == ("latest", "startingOffsets")
    assert position.by_stream.time_of("s", "a") == 5 and position.by_stream.time_of("other", "b") is None


@pytest.mark.parametrize("strategy", ["latest", "error"])
def test_the_initial_offset_carries_the_times_the_default_and_the_strategy(strategy: str) -> None:
    given = {**STREAMS, "startingTimestamp": '{"a": 5}', "startingTimestampStrategy": strategy.upper()}
    position = ReadOptions.parse(given).starting_or("latest")
    assert Position.from_initial_offset(position.to_initial_offset("s", "")) == position
    assert position.beyond_tail == strategy


def test_one_time_keeps_its_meaning_and_takes_the_strategy() -> None:
    position = ReadOptions.parse({"scope": "s", "stream": "x", "startingTimestamp": "42"}).starting_or("latest")
    assert (position.timestamp_ms, position.by_stream, position.beyond_tail) == (42, None, "latest")
    strict = {"scope": "s", "stream": "x", "startingTimestamp": "42", "startingTimestampStrategy": "error"}
    position = ReadOptions.parse(strict).starting_or("latest")
    assert Position.from_initial_offset(position.to_initial_offset("s", "x")) == position


@pytest.mark.parametrize(
    ("given", "error"),
    [
        (
            {**STREAMS, "startingTimestamp": '{"a": 5, "s/a": 6}'},
            r"^option 'startingTimestamp': stream s/a is named twi",
        ),
        (
            {**STREAMS, "startingTimestamp": '{"x/y/z": 5}'},
            r"^option 'startingTimestamp': each key must be 'stream' or",
        ),
        ({**STREAMS, "startingTimestamp": '{"a": -1}'}, r"^option 'startingTimestamp': stream 'a': the time must be"),
        ({**STREAMS, "startingTimestamp": '{"a": true}'}, r"^option 'startingTimestamp': stream 'a': the time must be"),
        ({**STREAMS, "endingTimestamp": '{"a": 1', "endingOffsets": "latest"}, r"^option 'endingTimestamp': not epoch"),
        ({**STREAMS, "endingTimestamp": "12", "endingOffsets": "latest"}, r"^option 'endingTimestamp': cannot be comb"),
        ({"scope": "s", "stream": "x", "startingTimestamp": '{"y": 1}'}, r"^option 'startingTimestamp': stream 'y': "),
        (
            {"scope": "s", "streamPattern": "a.*", "startingTimestamp": '{"b": 1}'},
            r"'streamPattern' \('a\.\*'\) matche",
        ),
    ],
)
def test_bad_values_fail_naming_the_option(given: dict[str, str], error: str) -> None:
    with pytest.raises(SegstoreOptionError, match=error):
        ReadOptions.parse(given)
