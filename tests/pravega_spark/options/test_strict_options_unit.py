"""Strict options, parsed without Spark: an option a query does not take fails, naming it and the closest known
name; Spark's own options are taken; ``path`` stands for the scope and the stream."""

from __future__ import annotations

import pytest

from pravega_spark.errors import SegstoreOptionError
from pravega_spark.options.read import ReadOptions
from pravega_spark.options.write import WriteOptions

pytestmark = pytest.mark.unit

STREAM = {"scope": "s", "stream": "x"}


@pytest.mark.parametrize(
    ("given", "suggested"),
    [
        ("startingOffset", "startingOffsets"),
        ("STARTINGOFFSET", "startingOffsets"),
        ("endingOffset", "endingOffsets"),
        ("maxBytesPerTriger", "maxBytesPerTrigger"),
        ("start_streamcut", "start_stream_cut"),
        ("failOnDataLos", "failOnDataLoss"),
        ("controler", "controller"),
    ],
)
def test_read_with_a_misspelled_option_fails_naming_it_and_the_closest_option(given: str, suggested: str) -> None:
    with pytest.raises(SegstoreOptionError, match=rf"^option '{given}': unknown option of reads; did you mean "):
        ReadOptions.parse({**STREAM, given: "earliest"})
    with pytest.raises(SegstoreOptionError) as caught:
        ReadOptions.parse({**STREAM, given: "earliest"})
    assert f"did you mean '{suggested}'?" in str(caught.value)
    assert caught.value.option == given


@pytest.mark.parametrize(
    ("given", "suggested"),
    [
        ("exactlyOnc", "exactlyOnce"),
        ("transactionTimeout", "transactionTimeoutMs"),
        ("defaultNumSegment", "defaultNumSegments"),
        ("exactly_onc", "exactly_once"),
    ],
)
def test_write_with_a_misspelled_option_fails_naming_it_and_the_closest_option(given: str, suggested: str) -> None:
    with pytest.raises(SegstoreOptionError, match=rf"^option '{given}': unknown option of writes; did you mean "):
        WriteOptions.parse({**STREAM, given: "1"})
    with pytest.raises(SegstoreOptionError, match=f"did you mean '{suggested}'"):
        WriteOptions.parse({**STREAM, given: "1"})


def test_an_option_far_from_every_known_one_lists_the_options() -> None:
    with pytest.raises(SegstoreOptionError, match=r"^option 'zzqqxx': unknown option of reads; reads take controller"):
        ReadOptions.parse({**STREAM, "zzqqxx": "1"})


def test_an_option_of_the_other_kind_fails_saying_so() -> None:
    with pytest.raises(SegstoreOptionError, match=r"^option 'exactlyOnce': is an option of writes; reads do not"):
        ReadOptions.parse({**STREAM, "exactlyOnce": "true"})
    with pytest.raises(SegstoreOptionError, match=r"^option 'startingOffsets': is an option of reads; writes do not"):
        WriteOptions.parse({**STREAM, "startingOffsets": "earliest"})
    with pytest.raises(SegstoreOptionError, match=r"^option 'maxBytesPerTrigger': is an option of reads"):
        WriteOptions.parse({**STREAM, "maxBytesPerTrigger": "10"})


def test_spark_own_options_are_taken() -> None:
    written = WriteOptions.parse({**STREAM, "checkpointlocation": "ckpt", "queryname": "q", "path": "s/x"})
    assert written.checkpoint_location == "ckpt"
    assert ReadOptions.parse({"path": "s/x"}).target.scope == "s"


def test_path_is_the_scope_and_the_stream() -> None:
    target = ReadOptions.parse({"path": "shop/orders"}).target
    assert (target.scope, target.stream) == ("shop", "orders")
    assert WriteOptions.parse({"path": "shop/orders", "scope": "shop"}).target.stream == "orders"
    with pytest.raises(SegstoreOptionError, match=r"^option 'path': 'shop/orders' names stream 'orders', option"):
        ReadOptions.parse({"path": "shop/orders", "stream": "other"})
    with pytest.raises(SegstoreOptionError, match=r"^option 'path': must be 'scope/stream', got 'a/b/c'"):
        ReadOptions.parse({"path": "a/b/c"})
    with pytest.raises(SegstoreOptionError, match=r"^option 'paths': a segstore query reads one stream"):
        ReadOptions.parse({"paths": '["s/x", "s/y"]'})


def test_errors_of_an_alias_name_the_alias() -> None:
    with pytest.raises(SegstoreOptionError, match=r"^option 'exactly_once': must be true or false"):
        WriteOptions.parse({**STREAM, "exactly_once": "maybe"})
    with pytest.raises(SegstoreOptionError, match=r"^option 'exactlyOnce': must be true or false"):
        WriteOptions.parse({**STREAM, "exactlyonce": "maybe"})
    with pytest.raises(SegstoreOptionError, match=r"^option 'approx_bytes_per_trigger': must be an integer"):
        ReadOptions.parse({**STREAM, "approx_bytes_per_trigger": "x"})


def test_ending_timestamp_is_an_end_and_only_one_end_is_taken() -> None:
    options = ReadOptions.parse({**STREAM, "endingTimestamp": "1700000000000"})
    assert options.ending is not None and (options.ending.kind, options.ending.timestamp_ms) == (
        "timestamp",
        1700000000000,
    )
    with pytest.raises(
        SegstoreOptionError, match=r"^option 'endingTimestamp': cannot be combined with option 'endingOffsets'"
    ):
        ReadOptions.parse({**STREAM, "endingTimestamp": "5", "endingOffsets": "latest"})
    with pytest.raises(SegstoreOptionError, match=r"^option 'endingTimestamp': must be an integer >= 0"):
        ReadOptions.parse({**STREAM, "endingTimestamp": "yesterday"})


@pytest.mark.parametrize(
    "option", ["maxBytesPerTrigger", "approx_bytes_per_trigger", "maxEventsPerTrigger", "minEventsPerTrigger"]
)
def test_a_batch_read_refuses_the_options_of_micro_batches_naming_them(
    option: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pravega_spark.read.source import SCHEMA, SegstoreDataSource

    monkeypatch.setenv("SPARK_HIDE_TRACEBACK", "1")  # what a planning worker's error sets (restored after the test)
    refused = rf"^option '{option}': is for streaming queries \(spark.readStream\)"
    with pytest.raises(SegstoreOptionError, match=refused):
        SegstoreDataSource({**STREAM, option: "10"}).reader(SCHEMA)
    assert ReadOptions.parse({**STREAM, option: "10"}).per_trigger == option  # a streaming query takes it
