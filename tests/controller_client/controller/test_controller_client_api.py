"""ControllerClient against a scripted in-test gRPC controller (``scripted_controller``): every call's request
and the mapping of its answers, statuses and errors."""

from __future__ import annotations

import uuid

import grpc
import grpc.aio
import pytest
from scripted_controller import INFO, ScriptedController

from controller_client.controller import proto_convert as conv
from controller_client.controller.api import (
    ControllerClient,
    ControllerClientConfig,
    ReaderGroupConfig,
    ScaleStarted,
    parse_controller_uri,
)
from controller_client.controller.channel import ControllerAddress, parse_controller_address
from controller_client.errors import (
    ControllerFailureError,
    GenerationMismatchError,
    InvalidArgumentError,
    ReaderGroupNotFoundError,
    ScalePreconditionFailedError,
    ScopeNotEmptyError,
    ScopeNotFoundError,
    StreamNotFoundError,
    StreamNotSealedError,
    StreamSealedError,
    SubscriberNotFoundError,
    TxnFailedError,
    TxnNotFoundError,
)
from controller_client.model import (
    RetentionPolicy,
    ScalingPolicy,
    SegmentRange,
    StreamConfiguration,
    StreamCut,
    TxnState,
)
from controller_client.proto import Controller_pb2 as pb

pytestmark = pytest.mark.integration

# ---- uri and config --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("tcp://127.0.0.1:9090", ("127.0.0.1", 9090)),
        ("localhost:1234", ("localhost", 1234)),
        ("tcp://[::1]:9090", ("::1", 9090)),
        ("pravega://ctl.example:9090/", ("ctl.example", 9090)),
        ("tls://localhost:9090", ("localhost", 9090)),
    ],
)
def test_parse_controller_uri_accepts(uri: str, expected: tuple[str, int]) -> None:
    assert parse_controller_uri(uri) == expected


@pytest.mark.parametrize(
    ("uri", "tls"),
    [("tcp://h:1", False), ("pravega://h:1", False), ("h:1", False)]
    + [(f"{scheme}://h:1", True) for scheme in ("tls", "ssl", "tcps", "pravegas", "TLS")],
)
def test_parse_controller_address_with_pravega_schemes_tells_tls(uri: str, tls: bool) -> None:
    assert parse_controller_address(uri) == ControllerAddress("h", 1, tls)


@pytest.mark.parametrize("uri", ["http://h:9090", "tcp://h", "h", "tcp://h:1,g:2", "tcp://h:99999", "tcp://:9090"])
def test_parse_controller_uri_rejects(uri: str) -> None:
    with pytest.raises(InvalidArgumentError, match="controller uri"):
        parse_controller_uri(uri)


def test_config_rejects_bad_values_naming_the_key() -> None:
    with pytest.raises(ValueError, match="rpc_timeout_s"):
        ControllerClientConfig(rpc_timeout_s=0)
    with pytest.raises(ValueError, match="max_backoff_s"):
        ControllerClientConfig(initial_backoff_s=1.0, max_backoff_s=0.5)


# ---- request encoding and response decoding --------------------------------------------------------------------


async def test_create_stream_sends_the_config_and_maps_statuses(
    controller: ControllerClient, servicer: ScriptedController
) -> None:
    config = StreamConfiguration(
        ScalingPolicy.by_event_rate(100, 2, 3), RetentionPolicy.by_time_ms(60_000), 500, ("a", "b"), 1 << 20
    )
    s = pb.CreateStreamStatus
    servicer.on(
        "createStream",
        pb.CreateStreamStatus(status=s.SUCCESS),
        pb.CreateStreamStatus(status=s.STREAM_EXISTS),
        pb.CreateStreamStatus(status=s.SCOPE_NOT_FOUND),
        pb.CreateStreamStatus(status=s.INVALID_STREAM_NAME),
        pb.CreateStreamStatus(status=s.FAILURE),
    )
    assert await controller.create_stream("sc", "st", config) is True
    assert conv.stream_config_from_proto(servicer.requests["createStream"][0]) == ("sc", "st", config)
    assert await controller.create_stream("sc", "st", config) is False
    with pytest.raises(ScopeNotFoundError, match="'sc'"):
        await controller.create_stream("sc", "st", config)
    with pytest.raises(InvalidArgumentError, match="'st'"):
        await controller.create_stream("sc", "st", config)
    with pytest.raises(ControllerFailureError, match="FAILURE"):
        await controller.create_stream("sc", "st", config)


async def test_scope_calls(controller: ControllerClient, servicer: ScriptedController) -> None:
    c, d = pb.CreateScopeStatus, pb.DeleteScopeStatus
    servicer.on("createScope", pb.CreateScopeStatus(status=c.SUCCESS), pb.CreateScopeStatus(status=c.SCOPE_EXISTS))
    servicer.on("createScope", pb.CreateScopeStatus(status=c.INVALID_SCOPE_NAME))
    servicer.on("deleteScope", pb.DeleteScopeStatus(status=d.SUCCESS), pb.DeleteScopeStatus(status=d.SCOPE_NOT_FOUND))
    servicer.on("deleteScope", pb.DeleteScopeStatus(status=d.SCOPE_NOT_EMPTY))
    servicer.on("checkScopeExists", pb.ExistsResponse(exists=True))
    assert await controller.create_scope("sc") is True
    assert servicer.requests["createScope"][0].scope == "sc"
    assert await controller.create_scope("sc") is False
    with pytest.raises(InvalidArgumentError):
        await controller.create_scope("sc")
    assert await controller.delete_scope("sc") is True
    assert await controller.delete_scope("sc") is False
    with pytest.raises(ScopeNotEmptyError, match="'sc'"):
        await controller.delete_scope("sc")
    assert await controller.scope_exists("sc") is True


async def test_list_scopes_follows_continuation_tokens(
    controller: ControllerClient, servicer: ScriptedController
) -> None:
    servicer.on(
        "listScopes",
        pb.ScopesResponse(scopes=["a", "b"], continuationToken=pb.ContinuationToken(token="t1")),
        pb.ScopesResponse(scopes=["c"], continuationToken=pb.ContinuationToken(token="t2")),
        pb.ScopesResponse(continuationToken=pb.ContinuationToken(token="t2")),
    )
    assert [s async for s in controller.list_scopes()] == ["a", "b", "c"]
    assert [r.continuationToken.token for r in servicer.requests["listScopes"]] == ["", "t1", "t2"]


async def test_list_streams_by_tag_and_unknown_scope(
    controller: ControllerClient, servicer: ScriptedController
) -> None:
    s = pb.StreamsInScopeResponse
    servicer.on(
        "listStreamsInScopeForTag",
        s(streams=[INFO], continuationToken=pb.ContinuationToken(token="x"), status=s.SUCCESS),
        s(status=s.SUCCESS),
    )
    servicer.on("listStreamsInScope", s(status=s.SCOPE_NOT_FOUND))
    assert [name async for name in controller.list_streams("sc", tag="hot")] == ["st"]
    first = servicer.requests["listStreamsInScopeForTag"][0]
    assert (first.scope.scope, first.tag) == ("sc", "hot")
    with pytest.raises(ScopeNotFoundError):
        _ = [name async for name in controller.list_streams("sc")]


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (pb.UpdateStreamStatus.STREAM_NOT_FOUND, StreamNotFoundError),
        (pb.UpdateStreamStatus.SCOPE_NOT_FOUND, ScopeNotFoundError),
        (pb.UpdateStreamStatus.STREAM_SEALED, StreamSealedError),
        (pb.UpdateStreamStatus.FAILURE, ControllerFailureError),
        (99, ControllerFailureError),
    ],
)
async def test_update_seal_truncate_map_update_status(
    controller: ControllerClient, servicer: ScriptedController, status: int, error: type[Exception]
) -> None:
    for rpc in ("updateStream", "sealStream", "truncateStream"):
        servicer.on(rpc, pb.UpdateStreamStatus(status=status))  # type: ignore[arg-type]
    with pytest.raises(error):
        await controller.update_stream("sc", "st", StreamConfiguration())
    with pytest.raises(error):
        await controller.seal_stream("sc", "st")
    with pytest.raises(error):
        await controller.truncate_stream(StreamCut("sc", "st", {1: 10}))
    assert dict(servicer.requests["truncateStream"][0].cut) == {1: 10}


async def test_delete_stream(controller: ControllerClient, servicer: ScriptedController) -> None:
    d = pb.DeleteStreamStatus
    servicer.on("deleteStream", d(status=d.SUCCESS), d(status=d.STREAM_NOT_FOUND), d(status=d.STREAM_NOT_SEALED))
    assert await controller.delete_stream("sc", "st") is True
    assert await controller.delete_stream("sc", "st") is False
    with pytest.raises(StreamNotSealedError, match="sc/st"):
        await controller.delete_stream("sc", "st")


async def test_get_stream_configuration_and_grpc_not_found(
    controller: ControllerClient, servicer: ScriptedController
) -> None:
    config = StreamConfiguration(ScalingPolicy.fixed(4), tags=("t",))
    servicer.on("getStreamConfiguration", conv.stream_config_to_proto("sc", "st", config), grpc.StatusCode.NOT_FOUND)
    assert await controller.get_stream_configuration("sc", "st") == config
    with pytest.raises(StreamNotFoundError, match="sc/st"):
        await controller.get_stream_configuration("sc", "st")


async def test_segment_queries(controller: ControllerClient, servicer: ScriptedController) -> None:
    ranges = [SegmentRange(1, 0.5, 1.0), SegmentRange(0, 0.0, 0.5)]
    servicer.on(
        "getCurrentSegments",
        pb.SegmentRanges(segmentRanges=[conv.segment_range_to_proto("sc", "st", r) for r in ranges]),
    )
    servicer.on(
        "getSegments",
        pb.SegmentsAtTime(
            segments=[pb.SegmentsAtTime.SegmentLocation(segmentId=conv.segment_id_to_proto("sc", "st", 4), offset=77)]
        ),
    )
    successor = SegmentRange(3 << 32 | 5, 0.0, 1.0)
    servicer.on(
        "getSegmentsImmediatelyFollowing",
        pb.SuccessorResponse(
            segments=[
                pb.SuccessorResponse.SegmentEntry(
                    segment=conv.segment_range_to_proto("sc", "st", successor), value=[0, 1]
                )
            ]
        ),
    )
    servicer.on("getURI", pb.NodeUri(endpoint="10.0.0.7", port=12345))
    servicer.on(
        "getSegmentsBetween",
        pb.StreamCutRangeResponse(segments=[conv.segment_id_to_proto("sc", "st", i) for i in (5, 2)]),
    )
    assert await controller.get_current_segments("sc", "st") == sorted(ranges)
    assert await controller.get_segments_at_time("sc", "st", 1234) == StreamCut("sc", "st", {4: 77})
    assert servicer.requests["getSegments"][0].timestamp == 1234
    assert await controller.get_successors("sc", "st", 0) == {successor: [0, 1]}
    assert await controller.get_uri("sc", "st", 9) == ("10.0.0.7", 12345)
    assert servicer.requests["getURI"][0].segmentId == 9
    between = await controller.get_segments_between(StreamCut("sc", "st", {0: 5}), StreamCut("sc", "st", {}))
    assert between == [2, 5]
    request = servicer.requests["getSegmentsBetween"][0]
    assert (dict(getattr(request, "from")), dict(request.to)) == ({0: 5}, {})


async def test_invalid_response_is_a_controller_failure(
    controller: ControllerClient, servicer: ScriptedController
) -> None:
    bad = pb.SegmentRange(segmentId=conv.segment_id_to_proto("sc", "st", 0), minKey=0.9, maxKey=0.1)
    servicer.on("getCurrentSegments", pb.SegmentRanges(segmentRanges=[bad]))
    with pytest.raises(ControllerFailureError, match="minKey/maxKey"):
        await controller.get_current_segments("sc", "st")


async def test_scale_and_check_scale(controller: ControllerClient, servicer: ScriptedController) -> None:
    new = [SegmentRange(1 << 32 | 2, 0.0, 0.5), SegmentRange(1 << 32 | 3, 0.5, 1.0)]
    r = pb.ScaleResponse
    servicer.on(
        "scale",
        r(status=r.STARTED, epoch=1, segments=[conv.segment_range_to_proto("sc", "st", x) for x in reversed(new)]),
        r(status=r.PRECONDITION_FAILED),
    )
    c = pb.ScaleStatusResponse
    servicer.on("checkScale", c(status=c.IN_PROGRESS), c(status=c.SUCCESS), c(status=c.INVALID_INPUT))
    assert await controller.scale("sc", "st", [0], [(0.0, 0.5), (0.5, 1.0)], 99) == ScaleStarted(1, tuple(new))
    sent = conv.scale_request_from_proto(servicer.requests["scale"][0])
    assert (sent.sealed_segments, sent.new_ranges, sent.scale_timestamp_ms) == ((0,), ((0.0, 0.5), (0.5, 1.0)), 99)
    with pytest.raises(ScalePreconditionFailedError, match="sc/st"):
        await controller.scale("sc", "st", [0], [(0.0, 1.0)], 100)
    assert await controller.check_scale("sc", "st", 1) is False
    assert await controller.check_scale("sc", "st", 1) is True
    with pytest.raises(InvalidArgumentError):
        await controller.check_scale("sc", "st", 7)


async def test_transactions(controller: ControllerClient, servicer: ScriptedController) -> None:
    txn = uuid.UUID("f0000000-0000-0001-8000-000000000002")  # top bit of both halves set
    servicer.on(
        "createTransaction",
        pb.CreateTxnResponse(
            txnId=conv.txn_id_to_proto(txn),
            activeSegments=[conv.segment_range_to_proto("sc", "st", SegmentRange(0, 0.0, 1.0))],
        ),
    )
    p = pb.PingTxnStatus
    servicer.on(
        "pingTransaction", p(status=p.OK), p(status=p.COMMITTED), p(status=p.UNKNOWN), p(status=p.LEASE_TOO_LARGE)
    )
    t = pb.TxnStatus
    servicer.on("commitTransaction", t(status=t.SUCCESS), t(status=t.TRANSACTION_NOT_FOUND), t(status=t.FAILURE))
    servicer.on("abortTransaction", t(status=t.STREAM_NOT_FOUND))
    servicer.on("checkTransactionState", pb.TxnState(state=pb.TxnState.COMMITTING))

    created, segments = await controller.create_transaction("sc", "st", 10_000)
    assert created == txn and segments == [SegmentRange(0, 0.0, 1.0)]
    assert servicer.requests["createTransaction"][0].lease == 10_000
    assert await controller.ping_transaction("sc", "st", txn, 5000) is TxnState.OPEN
    assert conv.txn_id_from_proto(servicer.requests["pingTransaction"][0].txnId) == txn
    assert await controller.ping_transaction("sc", "st", txn, 5000) is TxnState.COMMITTED
    with pytest.raises(TxnNotFoundError, match=str(txn)):
        await controller.ping_transaction("sc", "st", txn, 5000)
    with pytest.raises(TxnFailedError, match="LEASE_TOO_LARGE"):
        await controller.ping_transaction("sc", "st", txn, 5000)
    await controller.commit_transaction("sc", "st", txn, "writer-1", 42)
    sent = servicer.requests["commitTransaction"][0]
    assert (sent.writerId, sent.timestamp, conv.txn_id_from_proto(sent.txnId)) == ("writer-1", 42, txn)
    with pytest.raises(TxnNotFoundError):
        await controller.commit_transaction("sc", "st", txn)
    with pytest.raises(TxnFailedError, match="FAILURE"):
        await controller.commit_transaction("sc", "st", txn)
    with pytest.raises(StreamNotFoundError):
        await controller.abort_transaction("sc", "st", txn)
    assert await controller.check_transaction_state("sc", "st", txn) is TxnState.COMMITTING


async def test_reader_groups_and_subscribers(controller: ControllerClient, servicer: ScriptedController) -> None:
    config = ReaderGroupConfig("sc", "rg", (StreamCut("sc", "st", {}),), automatic_checkpoint_interval_ms=-1)

    async def echo(request: pb.ReaderGroupConfiguration) -> pb.CreateReaderGroupResponse:
        return pb.CreateReaderGroupResponse(status=pb.CreateReaderGroupResponse.SUCCESS, config=request)

    servicer.on(
        "createReaderGroup", echo, pb.CreateReaderGroupResponse(status=pb.CreateReaderGroupResponse.SCOPE_NOT_FOUND)
    )
    g = pb.ReaderGroupConfigResponse
    servicer.on(
        "getReaderGroupConfig",
        g(status=g.SUCCESS, config=conv.reader_group_config_to_proto(config)),
        g(status=g.RG_NOT_FOUND),
    )
    u = pb.UpdateReaderGroupResponse
    servicer.on("updateReaderGroup", u(status=u.SUCCESS, generation=1), u(status=u.INVALID_CONFIG))
    d = pb.DeleteReaderGroupStatus
    servicer.on("deleteReaderGroup", d(status=d.SUCCESS), d(status=d.RG_NOT_FOUND))
    servicer.on("listSubscribers", pb.SubscribersResponse(subscribers=["sc/rg"]))
    us = pb.UpdateSubscriberStatus
    servicer.on(
        "updateSubscriberStreamCut",
        us(status=us.SUCCESS),
        us(status=us.GENERATION_MISMATCH),
        us(status=us.SUBSCRIBER_NOT_FOUND),
    )

    assert await controller.create_reader_group(config) == config
    with pytest.raises(ScopeNotFoundError):
        await controller.create_reader_group(config)
    assert await controller.get_reader_group_config("sc", "rg") == config
    with pytest.raises(ReaderGroupNotFoundError, match="sc/rg"):
        await controller.get_reader_group_config("sc", "rg")
    assert await controller.update_reader_group(config) == 1
    with pytest.raises(InvalidArgumentError, match="generation 0"):
        await controller.update_reader_group(config)
    assert await controller.delete_reader_group("sc", "rg", config.reader_group_id) is True
    assert servicer.requests["deleteReaderGroup"][0].readerGroupId == str(config.reader_group_id)
    assert await controller.delete_reader_group("sc", "rg", config.reader_group_id) is False
    assert await controller.list_subscribers("sc", "st") == ["sc/rg"]
    cut = StreamCut("sc", "st", {0: 10})
    await controller.update_subscriber_stream_cut("sc/rg", config.reader_group_id, 3, cut)
    sent = servicer.requests["updateSubscriberStreamCut"][0]
    assert (sent.subscriber, sent.generation, conv.stream_cut_from_proto(sent.streamCut)) == ("sc/rg", 3, cut)
    with pytest.raises(GenerationMismatchError):
        await controller.update_subscriber_stream_cut("sc/rg", config.reader_group_id, 3, cut)
    with pytest.raises(SubscriberNotFoundError, match="sc/st"):
        await controller.update_subscriber_stream_cut("sc/rg", config.reader_group_id, 3, cut)


async def test_misc_calls(controller: ControllerClient, servicer: ScriptedController) -> None:
    servicer.on("getDelegationToken", pb.DelegationToken(delegationToken="tok"))
    servicer.on("getControllerServerList", pb.ServerResponse(nodeURI=[pb.NodeUri(endpoint="a", port=9090)]))
    servicer.on("isSegmentValid", pb.SegmentValidityResponse(response=True))
    servicer.on("isStreamCutValid", pb.StreamCutValidityResponse(response=False))
    servicer.on("checkStreamExists", pb.ExistsResponse(exists=False))
    assert await controller.get_delegation_token("sc", "st") == "tok"
    assert await controller.get_controller_server_list() == [("a", 9090)]
    assert await controller.is_segment_valid("sc", "st", 1) is True
    assert await controller.is_stream_cut_valid(StreamCut("sc", "st", {})) is False
    assert await controller.stream_exists("sc", "st") is False
