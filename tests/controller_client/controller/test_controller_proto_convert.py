"""proto_convert: model <-> Controller.proto round trips, wire conventions, and field-naming errors."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller_client.controller import proto_convert as conv
from controller_client.model import (
    InvalidModelError,
    RetentionPolicy,
    RetentionType,
    ScalingPolicy,
    SegmentRange,
    StreamConfiguration,
    StreamCut,
    TxnState,
)
from controller_client.proto import Controller_pb2 as pb

pytestmark = pytest.mark.unit

INT64_MAX = 2**63 - 1

names = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,20}", fullmatch=True)
segment_ids = st.builds(
    lambda epoch, number: epoch << 32 | number, st.integers(0, 2**31 - 1), st.integers(0, 2**31 - 1)
)
scaling_policies = st.one_of(
    st.builds(ScalingPolicy.fixed, st.integers(1, 2**31 - 1)),
    st.builds(ScalingPolicy.by_event_rate, st.integers(1, 2**31 - 1), st.integers(2, 100), st.integers(1, 1000)),
    st.builds(ScalingPolicy.by_data_rate, st.integers(1, 2**31 - 1), st.integers(2, 100), st.integers(1, 1000)),
)


@st.composite
def retention_policies(draw: st.DrawFn) -> RetentionPolicy:
    minimum = draw(st.integers(0, 2**62))
    maximum = draw(st.one_of(st.just(0), st.integers(max(minimum, 1), INT64_MAX - 1)))
    kind = draw(st.sampled_from([RetentionType.TIME, RetentionType.SIZE]))
    return RetentionPolicy(kind, minimum, maximum)


configs = st.builds(
    StreamConfiguration,
    scaling=scaling_policies,
    retention=st.one_of(st.none(), retention_policies()),
    timestamp_aggregation_timeout_ms=st.integers(0, INT64_MAX),
    tags=st.lists(st.text(min_size=1, max_size=20), unique=True, max_size=5).map(tuple),
    rollover_size_bytes=st.integers(0, INT64_MAX),
)


@st.composite
def key_ranges(draw: st.DrawFn) -> tuple[float, float]:
    start = draw(st.floats(0.0, 1.0, exclude_max=True))
    end = draw(st.floats(start, 1.0, exclude_min=True))
    return start, end


@st.composite
def segment_ranges(draw: st.DrawFn) -> SegmentRange:
    start, end = draw(key_ranges())
    return SegmentRange(draw(segment_ids), start, end)


@st.composite
def stream_cuts(draw: st.DrawFn, scope: str | None = None, stream: str | None = None) -> StreamCut:
    positions = draw(st.dictionaries(segment_ids, st.integers(-1, INT64_MAX), max_size=6))
    return StreamCut(scope or draw(names), stream or draw(names), positions)


@st.composite
def reader_group_configs(draw: st.DrawFn) -> conv.ReaderGroupConfig:
    scope = draw(names)
    streams = draw(st.lists(names, min_size=1, max_size=4, unique=True))
    starting = tuple(draw(stream_cuts(scope, s)) for s in streams)
    ending = tuple(draw(stream_cuts(scope, s)) for s in streams if draw(st.booleans()))
    return conv.ReaderGroupConfig(
        scope=scope,
        reader_group=draw(names),
        starting_stream_cuts=starting,
        ending_stream_cuts=ending,
        group_refresh_time_ms=draw(st.integers(0, 10**9)),
        automatic_checkpoint_interval_ms=draw(st.integers(-1, 10**9)),
        max_outstanding_checkpoint_request=draw(st.integers(1, 100)),
        retention_type=draw(st.sampled_from(conv.ReaderGroupRetention)),
        generation=draw(st.integers(0, INT64_MAX)),
        reader_group_id=draw(st.uuids()),
        rollover_size_bytes=draw(st.integers(0, INT64_MAX)),
    )


def over_the_wire(msg: Any) -> Any:
    """Serialize and parse again, so round trips cover the wire encoding too."""
    return type(msg).FromString(msg.SerializeToString())


# ---- round trips -----------------------------------------------------------------------------------------------


@given(names, names, configs)
def test_stream_config_round_trips(scope: str, stream: str, config: StreamConfiguration) -> None:
    assert conv.stream_config_from_proto(over_the_wire(conv.stream_config_to_proto(scope, stream, config))) == (
        scope,
        stream,
        config,
    )


@given(names, names, segment_ids)
def test_segment_id_round_trips(scope: str, stream: str, segment: int) -> None:
    assert conv.segment_id_from_proto(over_the_wire(conv.segment_id_to_proto(scope, stream, segment))) == (
        scope,
        stream,
        segment,
    )


@given(names, names, segment_ranges())
def test_segment_range_round_trips(scope: str, stream: str, segment: SegmentRange) -> None:
    msg = over_the_wire(conv.segment_range_to_proto(scope, stream, segment))
    assert (msg.segmentId.streamInfo.scope, msg.segmentId.streamInfo.stream) == (scope, stream)
    assert conv.segment_range_from_proto(msg) == segment


@given(stream_cuts())
def test_stream_cut_round_trips(cut: StreamCut) -> None:
    assert conv.stream_cut_from_proto(over_the_wire(conv.stream_cut_to_proto(cut))) == cut


@given(names, names, st.data())
def test_stream_cut_range_round_trips(scope: str, stream: str, data: st.DataObject) -> None:
    start, end = data.draw(stream_cuts(scope, stream)), data.draw(stream_cuts(scope, stream))
    assert conv.stream_cut_range_from_proto(over_the_wire(conv.stream_cut_range_to_proto(start, end))) == (start, end)


def test_stream_cut_range_of_two_streams_is_rejected() -> None:
    with pytest.raises(InvalidModelError, match="different streams"):
        conv.stream_cut_range_to_proto(StreamCut("sc", "a", {}), StreamCut("sc", "b", {}))


@given(st.uuids())
def test_txn_id_round_trips(txn_id: uuid.UUID) -> None:
    msg = over_the_wire(conv.txn_id_to_proto(txn_id))
    assert -(2**63) <= msg.highBits <= INT64_MAX and -(2**63) <= msg.lowBits <= INT64_MAX
    assert conv.txn_id_from_proto(msg) == txn_id


@pytest.mark.parametrize(
    ("txn_id", "high", "low"),
    [
        (uuid.UUID(int=0), 0, 0),
        (uuid.UUID("ffffffff-ffff-ffff-ffff-ffffffffffff"), -1, -1),
        (uuid.UUID(int=(1 << 127) | 5), -(2**63), 5),
        (uuid.UUID(int=(7 << 64) | (1 << 63)), 7, -(2**63)),
        (uuid.UUID("7fffffff-ffff-ffff-8000-000000000001"), INT64_MAX, -(2**63) + 1),
    ],
)
def test_txn_id_halves_are_signed_like_java_uuid_bits(txn_id: uuid.UUID, high: int, low: int) -> None:
    msg = conv.txn_id_to_proto(txn_id)
    assert (msg.highBits, msg.lowBits) == (high, low)
    assert conv.txn_id_from_proto(pb.TxnId(highBits=high, lowBits=low)) == txn_id


@pytest.mark.parametrize("state", list(TxnState))
def test_txn_state_round_trips(state: TxnState) -> None:
    assert conv.txn_state_from_proto(over_the_wire(conv.txn_state_to_proto(state))) is state


@given(st.from_regex(r"[a-z0-9.-]{1,30}", fullmatch=True), st.integers(1, 65535))
def test_node_uri_round_trips(host: str, port: int) -> None:
    assert conv.node_uri_from_proto(over_the_wire(conv.node_uri_to_proto(host, port))) == (host, port)


@given(reader_group_configs())
def test_reader_group_config_round_trips(config: conv.ReaderGroupConfig) -> None:
    assert conv.reader_group_config_from_proto(over_the_wire(conv.reader_group_config_to_proto(config))) == config


@given(names, names, st.lists(segment_ids, max_size=5), st.lists(key_ranges(), max_size=5), st.integers(0, 2**62))
def test_scale_request_round_trips(
    scope: str, stream: str, sealed: list[int], ranges: list[tuple[float, float]], ts: int
) -> None:
    decoded = conv.scale_request_from_proto(
        over_the_wire(conv.scale_request_to_proto(scope, stream, sealed, ranges, ts))
    )
    assert decoded == conv.ScaleRequestModel(scope, stream, tuple(sealed), tuple(ranges), ts)


def test_reader_group_info_round_trips_with_and_without_id() -> None:
    group_id = uuid.uuid4()
    assert conv.reader_group_info_from_proto(conv.reader_group_info_to_proto("sc", "rg", group_id, 3)) == (
        "sc",
        "rg",
        group_id,
        3,
    )
    assert conv.reader_group_info_from_proto(conv.reader_group_info_to_proto("sc", "rg")) == ("sc", "rg", None, 0)


# ---- wire conventions -----------------------------------------------------------------------------------------


def _config_msg(**fields: Any) -> pb.StreamConfig:
    msg = pb.StreamConfig(
        streamInfo=pb.StreamInfo(scope="sc", stream="st"), scalingPolicy=pb.ScalingPolicy(minNumSegments=2)
    )
    for name, value in fields.items():
        if hasattr(value, "CopyFrom"):
            getattr(msg, name).CopyFrom(value)
        else:
            setattr(msg, name, value)
    return msg


def test_absent_or_unknown_retention_policy_is_none() -> None:
    assert conv.stream_config_from_proto(_config_msg())[2].retention is None
    unknown = pb.RetentionPolicy(retentionType=pb.RetentionPolicy.UNKNOWN, retentionParam=5)
    assert conv.stream_config_from_proto(_config_msg(retentionPolicy=unknown))[2].retention is None


def test_no_retention_policy_is_encoded_as_an_absent_message() -> None:
    assert not conv.stream_config_to_proto("sc", "st", StreamConfiguration()).HasField("retentionPolicy")


def test_retention_max_none_is_javas_long_max_value_on_the_wire() -> None:
    msg = conv.retention_policy_to_proto(RetentionPolicy.by_time_ms(1000))
    assert msg.retentionMax == INT64_MAX
    from_java = pb.RetentionPolicy(retentionType=pb.RetentionPolicy.SIZE, retentionParam=10, retentionMax=INT64_MAX)
    assert conv.retention_policy_from_proto(from_java) == RetentionPolicy.by_size_bytes(10)
    from_rust_style = pb.RetentionPolicy(retentionType=pb.RetentionPolicy.TIME, retentionParam=10)
    assert conv.retention_policy_from_proto(from_rust_style) == RetentionPolicy.by_time_ms(10)


def test_rust_client_stream_config_decodes() -> None:
    # What pravega_client sends for a fixed stream without retention: retention type 0 with max = i64::MAX, no tags.
    msg = pb.StreamConfig(
        streamInfo=pb.StreamInfo(scope="sc", stream="st"),
        scalingPolicy=pb.ScalingPolicy(scaleType=pb.ScalingPolicy.FIXED_NUM_SEGMENTS, minNumSegments=3),
        retentionPolicy=pb.RetentionPolicy(retentionType=0, retentionParam=0, retentionMax=INT64_MAX),
    )
    assert conv.stream_config_from_proto(msg) == ("sc", "st", StreamConfiguration(ScalingPolicy.fixed(3)))


def test_segment_ranges_are_sorted_by_key_start() -> None:
    ranges = [SegmentRange(2, 0.5, 1.0), SegmentRange(7, 0.0, 0.25), SegmentRange(1, 0.25, 0.5)]
    msgs = [conv.segment_range_to_proto("sc", "st", r) for r in ranges]
    assert conv.segment_ranges_from_proto(msgs, "x") == sorted(ranges, key=lambda r: r.key_start)


def test_empty_stream_cut_is_the_unbounded_cut() -> None:
    assert conv.stream_cut_from_proto(pb.StreamCut(streamInfo=pb.StreamInfo(scope="sc", stream="st"))) == StreamCut(
        "sc", "st", {}
    )


# ---- invalid input names the field ------------------------------------------------------------------------------

INFO = pb.StreamInfo(scope="sc", stream="st")
SEG = pb.SegmentId(streamInfo=INFO, segmentId=1)
GOOD_RG = dict(scope="sc", readerGroupName="rg", maxOutstandingCheckpointRequest=1, readerGroupId=str(uuid.uuid4()))
CUT = pb.StreamCut(streamInfo=INFO)

INVALID: list[tuple[str, Callable[[], object], str]] = [
    ("empty scope", lambda: conv.stream_info_from_proto(pb.StreamInfo(stream="st")), "StreamInfo.scope"),
    ("empty stream", lambda: conv.stream_info_from_proto(pb.StreamInfo(scope="sc")), "StreamInfo.stream"),
    ("empty scope info", lambda: conv.scope_info_from_proto(pb.ScopeInfo()), "ScopeInfo.scope"),
    (
        "config without stream info",
        lambda: conv.stream_config_from_proto(pb.StreamConfig(scalingPolicy=pb.ScalingPolicy(minNumSegments=1))),
        "StreamConfig.streamInfo.scope",
    ),
    (
        "config without scaling policy",
        lambda: conv.stream_config_from_proto(pb.StreamConfig(streamInfo=INFO)),
        "StreamConfig.scalingPolicy",
    ),
    (
        "zero segments",
        lambda: conv.stream_config_from_proto(_config_msg(scalingPolicy=pb.ScalingPolicy(minNumSegments=0))),
        "StreamConfig.scalingPolicy",
    ),
    (
        "unknown scale type",
        lambda: conv.scaling_policy_from_proto(pb.ScalingPolicy(scaleType=9, minNumSegments=1)),  # type: ignore[arg-type]
        "ScalingPolicy.scaleType",
    ),
    (
        "unknown retention type",
        lambda: conv.retention_policy_from_proto(pb.RetentionPolicy(retentionType=7)),  # type: ignore[arg-type]
        "RetentionPolicy.retentionType",
    ),
    (
        "negative retention",
        lambda: conv.stream_config_from_proto(
            _config_msg(retentionPolicy=pb.RetentionPolicy(retentionType=1, retentionParam=-5))  # type: ignore[arg-type]
        ),
        "StreamConfig.retentionPolicy",
    ),
    (
        "negative rollover",
        lambda: conv.stream_config_from_proto(_config_msg(rolloverSizeBytes=-1)),
        "rollover_size_bytes",
    ),
    (
        "negative timestamp aggregation timeout",
        lambda: conv.stream_config_from_proto(_config_msg(timestampAggregationTimeout=-1)),
        "timestamp_aggregation_timeout_ms",
    ),
    (
        "negative segment id",
        lambda: conv.segment_id_from_proto(pb.SegmentId(streamInfo=INFO, segmentId=-1)),
        "SegmentId.segmentId",
    ),
    (
        "segment number over 2^31",
        lambda: conv.segment_id_from_proto(pb.SegmentId(streamInfo=INFO, segmentId=2**31)),
        "SegmentId.segmentId",
    ),
    (
        "inverted key range",
        lambda: conv.segment_range_from_proto(pb.SegmentRange(segmentId=SEG, minKey=0.5, maxKey=0.4)),
        "SegmentRange.minKey/maxKey",
    ),
    (
        "key range above 1",
        lambda: conv.segment_range_from_proto(pb.SegmentRange(segmentId=SEG, minKey=0.5, maxKey=1.5)),
        "SegmentRange.minKey/maxKey",
    ),
    (
        "NaN key",
        lambda: conv.segment_range_from_proto(pb.SegmentRange(segmentId=SEG, minKey=float("nan"), maxKey=1.0)),
        "SegmentRange.minKey/maxKey",
    ),
    (
        "range without stream",
        lambda: conv.segment_range_from_proto(pb.SegmentRange(minKey=0.0, maxKey=1.0)),
        "SegmentRange.segmentId.streamInfo.scope",
    ),
    (
        "offset below -1",
        lambda: conv.stream_cut_from_proto(pb.StreamCut(streamInfo=INFO, cut={1: -2})),
        "StreamCut.cut",
    ),
    (
        "bad segment in cut",
        lambda: conv.stream_cut_from_proto(pb.StreamCut(streamInfo=INFO, cut={-3: 0})),
        "StreamCut.cut",
    ),
    (
        "bad segment in cut range",
        lambda: conv.stream_cut_range_from_proto(pb.StreamCutRange(streamInfo=INFO, to={-1: 0})),
        "StreamCutRange.to",
    ),
    ("unknown txn state", lambda: conv.txn_state_from_proto(pb.TxnState(state=42)), "TxnState.state"),  # type: ignore[arg-type]
    ("missing txn id", lambda: conv.required_txn_id(pb.TxnRequest(streamInfo=INFO), "TxnRequest"), "TxnRequest.txnId"),
    ("empty endpoint", lambda: conv.node_uri_from_proto(pb.NodeUri(port=1)), "NodeUri.endpoint"),
    ("port 0", lambda: conv.node_uri_from_proto(pb.NodeUri(endpoint="h", port=0)), "NodeUri.port"),
    ("port too big", lambda: conv.node_uri_from_proto(pb.NodeUri(endpoint="h", port=70000)), "NodeUri.port"),
    (
        "scale range out of bounds",
        lambda: conv.scale_request_from_proto(
            pb.ScaleRequest(streamInfo=INFO, newKeyRanges=[pb.ScaleRequest.KeyRangeEntry(start=0.2, end=1.2)])
        ),
        "ScaleRequest.newKeyRanges[0].start/end",
    ),
    (
        "scale bad sealed segment",
        lambda: conv.scale_request_from_proto(pb.ScaleRequest(streamInfo=INFO, sealedSegments=[-1])),
        "ScaleRequest.sealedSegments",
    ),
    (
        "reader group without name",
        lambda: conv.reader_group_config_from_proto(pb.ReaderGroupConfiguration(scope="sc")),
        "ReaderGroupConfiguration.readerGroupName",
    ),
    (
        "reader group id not a uuid",
        lambda: conv.reader_group_config_from_proto(
            pb.ReaderGroupConfiguration(**{**GOOD_RG, "readerGroupId": "nope"}, startingStreamCuts=[CUT])
        ),
        "ReaderGroupConfiguration.readerGroupId",
    ),
    (
        "reader group unknown retention type",
        lambda: conv.reader_group_config_from_proto(
            pb.ReaderGroupConfiguration(**GOOD_RG, retentionType=3, startingStreamCuts=[CUT])
        ),
        "ReaderGroupConfiguration.retentionType",
    ),
    (
        "reader group without streams",
        lambda: conv.reader_group_config_from_proto(pb.ReaderGroupConfiguration(**GOOD_RG)),
        "starting_stream_cuts",
    ),
    (
        "reader group ending cut of an unread stream",
        lambda: conv.reader_group_config_from_proto(
            pb.ReaderGroupConfiguration(
                **GOOD_RG,
                startingStreamCuts=[CUT],
                endingStreamCuts=[pb.StreamCut(streamInfo=pb.StreamInfo(scope="sc", stream="other"))],
            )
        ),
        "ending_stream_cuts",
    ),
    (
        "reader group starting cut without stream",
        lambda: conv.reader_group_config_from_proto(
            pb.ReaderGroupConfiguration(**GOOD_RG, startingStreamCuts=[pb.StreamCut()])
        ),
        "ReaderGroupConfiguration.startingStreamCuts[0].streamInfo.scope",
    ),
    (
        "reader group info bad id",
        lambda: conv.reader_group_info_from_proto(pb.ReaderGroupInfo(scope="sc", readerGroup="rg", readerGroupId="x")),
        "ReaderGroupInfo.readerGroupId",
    ),
]


@pytest.mark.parametrize(("decode", "field"), [(d, f) for _, d, f in INVALID], ids=[case for case, _, _ in INVALID])
def test_invalid_message_raises_naming_the_field(decode: Callable[[], object], field: str) -> None:
    with pytest.raises(InvalidModelError) as raised:
        decode()
    assert field in str(raised.value)
