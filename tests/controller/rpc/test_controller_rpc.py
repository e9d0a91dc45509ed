"""The gRPC face: Controller.proto requests over a real grpc.aio server, answered with the protocol's
status values, INVALID_ARGUMENT for malformed input (with nothing written), UNIMPLEMENTED with a message."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import grpc
import pytest
from controller_env import ControllerEnv

from controller.rpc.servicer import start_grpc_server
from controller_client.controller.api import ControllerClient
from controller_client.errors import StreamNotFoundError
from controller_client.model import ScalingPolicy, StreamConfiguration, TxnState
from controller_client.proto import Controller_pb2 as pb
from controller_client.proto import Controller_pb2_grpc as pb_grpc

pytestmark = pytest.mark.integration


@pytest.fixture
async def stub(env: ControllerEnv) -> AsyncIterator[pb_grpc.ControllerServiceStub]:
    core = env.core()
    server, port = await start_grpc_server(core, "127.0.0.1", 0, 16)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield pb_grpc.ControllerServiceStub(channel)
    finally:
        await channel.close()
        await server.stop(None)


def stream_config(scope: str, stream: str, segments: int = 2) -> pb.StreamConfig:
    return pb.StreamConfig(
        streamInfo=pb.StreamInfo(scope=scope, stream=stream),
        scalingPolicy=pb.ScalingPolicy(scaleType=pb.ScalingPolicy.FIXED_NUM_SEGMENTS, minNumSegments=segments),
    )


async def test_scope_and_stream_lifecycle_answers_protocol_statuses(stub: pb_grpc.ControllerServiceStub) -> None:
    assert (await stub.createScope(pb.ScopeInfo(scope="sc"))).status == pb.CreateScopeStatus.SUCCESS
    assert (await stub.createScope(pb.ScopeInfo(scope="sc"))).status == pb.CreateScopeStatus.SCOPE_EXISTS
    assert (await stub.createScope(pb.ScopeInfo(scope="bad/name"))).status == pb.CreateScopeStatus.INVALID_SCOPE_NAME
    assert (await stub.createStream(stream_config("sc", "st"))).status == pb.CreateStreamStatus.SUCCESS
    assert (await stub.createStream(stream_config("sc", "t_kvtable"))).status == (
        pb.CreateStreamStatus.INVALID_STREAM_NAME  # the segment names of key-value table t
    )
    assert (await stub.createStream(stream_config("sc", "st"))).status == pb.CreateStreamStatus.STREAM_EXISTS
    assert (await stub.createStream(stream_config("nope", "st"))).status == pb.CreateStreamStatus.SCOPE_NOT_FOUND
    segments = await stub.getCurrentSegments(pb.StreamInfo(scope="sc", stream="st"))
    assert [(r.minKey, r.maxKey) for r in segments.segmentRanges] == [(0.0, 0.5), (0.5, 1.0)]
    uri = await stub.getURI(pb.SegmentId(streamInfo=pb.StreamInfo(scope="sc", stream="st"), segmentId=0))
    assert uri.endpoint == "127.0.0.1" and uri.port > 0
    info = pb.StreamInfo(scope="sc", stream="st")
    assert (await stub.deleteStream(info)).status == pb.DeleteStreamStatus.STREAM_NOT_SEALED
    assert (await stub.deleteScope(pb.ScopeInfo(scope="sc"))).status == pb.DeleteScopeStatus.SCOPE_NOT_EMPTY
    assert (await stub.sealStream(info)).status == pb.UpdateStreamStatus.SUCCESS
    assert (await stub.deleteStream(info)).status == pb.DeleteStreamStatus.SUCCESS
    assert (await stub.deleteScope(pb.ScopeInfo(scope="sc"))).status == pb.DeleteScopeStatus.SUCCESS
    assert not (await stub.checkScopeExists(pb.ScopeInfo(scope="sc"))).exists


@pytest.mark.parametrize(
    "request_message",
    [
        pb.StreamConfig(streamInfo=pb.StreamInfo(scope="", stream="st")),
        pb.StreamConfig(
            streamInfo=pb.StreamInfo(scope="sc", stream="st"),
            scalingPolicy=pb.ScalingPolicy(minNumSegments=0),
        ),
        pb.StreamConfig(
            streamInfo=pb.StreamInfo(scope="sc", stream="st"),
            scalingPolicy=pb.ScalingPolicy(minNumSegments=1, scaleType=7),
        ),
    ],
    ids=["empty-scope", "zero-segments", "unknown-scale-type"],
)
async def test_malformed_create_stream_is_invalid_argument_and_writes_nothing(
    stub: pb_grpc.ControllerServiceStub, request_message: pb.StreamConfig
) -> None:
    await stub.createScope(pb.ScopeInfo(scope="sc"))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.createStream(request_message)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "createStream" in (caught.value.details() or "")
    assert not (await stub.checkStreamExists(pb.StreamInfo(scope="sc", stream="st"))).exists


async def test_scale_with_bad_ranges_is_precondition_failed(stub: pb_grpc.ControllerServiceStub) -> None:
    await stub.createScope(pb.ScopeInfo(scope="sc"))
    await stub.createStream(stream_config("sc", "st"))
    request = pb.ScaleRequest(
        streamInfo=pb.StreamInfo(scope="sc", stream="st"),
        sealedSegments=[0],
        newKeyRanges=[pb.ScaleRequest.KeyRangeEntry(start=0.0, end=0.3)],
    )
    assert (await stub.scale(request)).status == pb.ScaleResponse.PRECONDITION_FAILED
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.scale(
            pb.ScaleRequest(
                streamInfo=pb.StreamInfo(scope="sc", stream="st"),
                sealedSegments=[0],
                newKeyRanges=[pb.ScaleRequest.KeyRangeEntry(start=0.4, end=0.2)],
            )
        )
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_transaction_rpcs(stub: pb_grpc.ControllerServiceStub) -> None:
    await stub.createScope(pb.ScopeInfo(scope="sc"))
    await stub.createStream(stream_config("sc", "st"))
    info = pb.StreamInfo(scope="sc", stream="st")
    created = await stub.createTransaction(pb.CreateTxnRequest(streamInfo=info, lease=10_000))
    assert len(created.activeSegments) == 2
    state = await stub.checkTransactionState(pb.TxnRequest(streamInfo=info, txnId=created.txnId))
    assert state.state == pb.TxnState.OPEN
    ping = await stub.pingTransaction(pb.PingTxnRequest(streamInfo=info, txnId=created.txnId, lease=10**9))
    assert ping.status == pb.PingTxnStatus.LEASE_TOO_LARGE
    missing = pb.TxnId(highBits=1, lowBits=2)
    assert (await stub.commitTransaction(pb.TxnRequest(streamInfo=info, txnId=missing))).status == (
        pb.TxnStatus.TRANSACTION_NOT_FOUND
    )
    assert (await stub.abortTransaction(pb.TxnRequest(streamInfo=info, txnId=created.txnId))).status == (
        pb.TxnStatus.SUCCESS
    )
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.commitTransaction(pb.TxnRequest(streamInfo=info))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_completed_transactions_are_listed_until_their_outcome_is_forgotten(env: ControllerEnv) -> None:
    core = env.core()
    server, port = await start_grpc_server(core, "127.0.0.1", 0, 16)
    client = ControllerClient(grpc.aio.insecure_channel(f"127.0.0.1:{port}"))
    try:
        await client.create_scope("sc")
        await client.create_stream("sc", "st", StreamConfiguration(ScalingPolicy.fixed(1)))
        committed, _ = await client.create_transaction("sc", "st", 10_000)
        aborted, _ = await client.create_transaction("sc", "st", 10_000)
        still_open, _ = await client.create_transaction("sc", "st", 10_000)
        await client.commit_transaction("sc", "st", committed)
        await core.txns.wait_committed("sc", "st")
        env.clock[0] += 1
        await client.abort_transaction("sc", "st", aborted)
        await wait_aborted(client, aborted)
        assert await client.list_completed_transactions("sc", "st") == [
            (committed, TxnState.COMMITTED),
            (aborted, TxnState.ABORTED),
        ]
        assert still_open not in dict(await client.list_completed_transactions("sc", "st"))
        with pytest.raises(StreamNotFoundError):
            await client.list_completed_transactions("sc", "missing")
        env.clock[0] += int(env.config.completed_txn_ttl_s * 1000) + 1
        await core.forget_completed_transactions("sc", "st")
        assert await client.list_completed_transactions("sc", "st") == []
        assert await client.check_transaction_state("sc", "st", committed) == TxnState.UNKNOWN
    finally:
        await client.close()
        await server.stop(None)


async def wait_aborted(client: ControllerClient, txn: uuid.UUID) -> None:
    """The abort completes in the background (its segments are deleted first)."""
    async with asyncio.timeout(20):
        while await client.check_transaction_state("sc", "st", txn) != TxnState.ABORTED:
            await asyncio.sleep(0.02)


async def test_reader_group_rpcs(stub: pb_grpc.ControllerServiceStub) -> None:
    await stub.createScope(pb.ScopeInfo(scope="sc"))
    await stub.createStream(stream_config("sc", "st"))
    config = pb.ReaderGroupConfiguration(
        scope="sc",
        readerGroupName="rg",
        groupRefreshTimeMillis=1000,
        automaticCheckpointIntervalMillis=1000,
        maxOutstandingCheckpointRequest=3,
        readerGroupId="00000000-0000-0000-0000-000000000000",
        startingStreamCuts=[pb.StreamCut(streamInfo=pb.StreamInfo(scope="sc", stream="st"))],
    )
    created = await stub.createReaderGroup(config)
    assert created.status == pb.CreateReaderGroupResponse.SUCCESS and created.config.generation == 0
    fetched = await stub.getReaderGroupConfig(pb.ReaderGroupInfo(scope="sc", readerGroup="rg"))
    assert fetched.config.readerGroupId == created.config.readerGroupId
    config.generation = 0
    config.readerGroupId = created.config.readerGroupId
    config.groupRefreshTimeMillis = 2000
    assert (await stub.updateReaderGroup(config)).generation == 1
    assert (await stub.updateReaderGroup(config)).status == pb.UpdateReaderGroupResponse.INVALID_CONFIG
    missing = pb.ReaderGroupInfo(scope="sc", readerGroup="nope")
    assert (await stub.getReaderGroupConfig(missing)).status == pb.ReaderGroupConfigResponse.RG_NOT_FOUND
    deleted = await stub.deleteReaderGroup(pb.ReaderGroupInfo(scope="sc", readerGroup="rg"))
    assert deleted.status == pb.DeleteReaderGroupStatus.SUCCESS


async def test_delegation_token_is_empty_while_auth_is_off(stub: pb_grpc.ControllerServiceStub) -> None:
    token = await stub.getDelegationToken(pb.StreamInfo(scope="sc", stream="st"))
    assert token.delegationToken == ""
