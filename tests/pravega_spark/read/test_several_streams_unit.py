"""Several streams per query without Spark or a network: the offset of several streams (and today's single-stream
offset still accepted), the byte budget shared over streams, and the options ``streams`` / ``streamPattern``."""

from __future__ import annotations

import json

import pytest

from pravega_spark.errors import OffsetFormatError, SegstoreOptionError
from pravega_spark.offsets import ReadState, StreamsState
from pravega_spark.options.read import ReadOptions, StreamSelection
from pravega_spark.read.several_streams import share_budget

pytestmark = pytest.mark.unit


def test_streams_state_round_trips_with_sorted_keys_and_empty_positions() -> None:
    state = StreamsState(
        {
            ("shop", "orders"): ReadState("shop", "orders", {1: 10, 0: 5}, {2: {1: 7}}),
            ("shop", "clicks"): ReadState("shop", "clicks", {}),
        }
    )
    text = state.to_json()
    assert text == (
        '{"streams":{"shop/clicks":{"positions":{}},'
        '"shop/orders":{"positions":{"0":5,"1":10},"pending":{"2":{"1":7}}}}}'
    )
    assert StreamsState.from_offset(json.loads(text)) == state
    assert StreamsState.from_offset(json.loads(text)).to_json() == text


def test_streams_state_from_a_single_stream_offset_of_today() -> None:
    single = {"scope": "shop", "stream": "orders", "positions": {"0": 120}, "pending": {"1": {"0": 120}}}
    state = StreamsState.from_offset(single)
    assert state.states == {("shop", "orders"): ReadState("shop", "orders", {0: 120}, {1: {0: 120}})}
    assert state.to_offset() == {"streams": {"shop/orders": {"positions": {"0": 120}, "pending": {"1": {"0": 120}}}}}


@pytest.mark.parametrize(
    ("offset", "message"),
    [
        ([], "expected a JSON object"),
        ({"streams": {"no-scope": {"positions": {}}}}, "is not 'scope/stream'"),
        ({"streams": {"a/b": {"positions": {}}}, "x": 1}, 'expected {"streams"'),
        ({"streams": {"a/b": {"scope": "a", "positions": {}}}}, "stream a/b"),
        ({"streams": {"a/b": {"positions": {"x": 1}}}}, "is not an integer"),
        ({"scope": "a", "stream": "b", "positions": {}}, "non-empty"),
    ],
)
def test_streams_state_refuses_what_is_not_one(offset: object, message: str) -> None:
    with pytest.raises(OffsetFormatError, match=message):
        StreamsState.from_offset(offset)


def test_share_budget_evenly_with_what_one_stream_leaves_to_the_others() -> None:
    a, b, c = ("s", "a"), ("s", "b"), ("s", "c")
    assert share_budget({a: 100, b: 100, c: 100}, 90) == {a: 30, b: 30, c: 30}
    assert share_budget({a: 10, b: 100, c: 100}, 90) == {a: 10, b: 40, c: 40}
    assert share_budget({a: 0, b: 100, c: 5}, 1000) == {a: 0, b: 100, c: 5}
    assert share_budget({a: 100, b: 100}, 1) == {a: 0, b: 1}  # the remainder goes to the last
    assert share_budget({a: 0}, 10) == {a: 0}
    for limit in range(1, 400, 7):
        shares = share_budget({a: 50, b: 120, c: 300}, limit)
        assert sum(shares.values()) == min(max(limit, 1), 470)


def test_streams_and_scope_slash_stream_entries() -> None:
    options = ReadOptions.parse({"scope": "shop", "streams": " orders, audit/log ,orders"})
    assert options.selection == StreamSelection("streams", names=(("shop", "orders"), ("audit", "log")))
    assert options.target.stream == ""
    no_scope = ReadOptions.parse({"streams": "audit/log,shop/orders"})
    assert no_scope.target.scope == "audit"


def test_stream_pattern_never_matches_internal_streams() -> None:
    selection = ReadOptions.parse({"scope": "shop", "streamPattern": "orders.*|_MARK.*"}).selection
    assert selection is not None
    assert selection.matches("orders-eu") and not selection.matches("_MARKorders") and not selection.matches("xorders")


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"streams": "a", "streamPattern": "a.*"}, "option 'streamPattern': give either option 'streams' or"),
        ({"stream": "a", "streams": "b"}, "option 'streams': give either option 'stream' or option 'streams'"),
        ({"stream": "a", "streamPattern": "b"}, "option 'streamPattern': give either option 'stream' or"),
        ({"streamPattern": "orders("}, "option 'streamPattern': not a regular expression"),
        ({"streams": "a//b"}, "option 'streams': each entry must be"),
        ({"streams": "a,b c"}, "option 'streams': s/b c:"),
        ({"streams": "a", "subscriber": "g"}, "option 'subscriber': cannot be combined with option 'streams'"),
        ({"streamPattern": "a", "watermarkColumn": "w"}, "option 'watermarkColumn': cannot be combined with option"),
        ({"streams": "a", "startingOffsets": '{"positions": {"0": 0}}'}, "option 'startingOffsets': a stream cut"),
        ({"streams": "a", "metadata": "Streams"}, "option 'streams': means nothing with option 'metadata'"),
        ({"streampatern": "a"}, "option 'streampatern': unknown option of reads; did you mean 'streamPattern'?"),
    ],
)
def test_option_errors_are_one_line_naming_the_option(options: dict[str, str], error: str) -> None:
    with pytest.raises(SegstoreOptionError) as raised:
        ReadOptions.parse({"scope": "s", **options})
    assert str(raised.value).startswith(error)
    assert "\n" not in str(raised.value)
