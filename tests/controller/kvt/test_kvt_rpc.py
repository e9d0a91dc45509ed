"""The five key-value table RPCs over a real grpc.aio server: Pravega's statuses, INVALID_ARGUMENT for a bad
configuration with nothing written, NOT_FOUND for the segments of a missing table, segment ranges naming the
table; and with authentication on, Pravega's resources and permissions and a token the segment stores accept."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from auth_fixtures import write_password_file
from controller_env import ControllerEnv

from controller.config import AuthConfig
from controller.rpc.authentication import ControllerAuth
from controller.rpc.servicer import ControllerServicer, start_grpc_server
from controller_client.kvt.model import table_segment_name
from controller_client.proto import Controller_pb2 as pb
from controller_client.proto import Controller_pb2_grpc as pb_grpc
from segstore_shared.auth.acl import Permission
from segstore_shared.auth.passwords import basic_header
from segstore_shared.auth.tokens import TokenInvalidError, TokenVerifier

pytestmark = pytest.mark.integration

KEY = "kvt-signing-key"
USERS = {
    "admin": ("admin-pw", "prn::*,READ_UPDATE"),
    "maker": ("maker-pw", "prn::/scope:s,READ_UPDATE"),
    "writer": ("writer-pw", "prn::/scope:s,READ;prn::/scope:s/key-value-table:t,READ_UPDATE"),
    "reader": ("reader-pw", "prn::/scope:s,READ;prn::/scope:s/key-value-table:t,READ"),
}
Created = pb.CreateKeyValueTableStatus


def kvt_config(
    scope: str = "s", name: str = "t", partitions: int = 2, primary: int = 4, secondary: int = 0
) -> pb.KeyValueTableConfig:
    return pb.KeyValueTableConfig(
        scope=scope, kvtName=name, partitionCount=partitions, primaryKeyLength=primary, secondaryKeyLength=secondary
    )


def kvt(scope: str = "s", name: str = "t") -> pb.KeyValueTableInfo:
    return pb.KeyValueTableInfo(scope=scope, kvtName=name)


@pytest.fixture
async def stub(env: ControllerEnv) -> AsyncIterator[pb_grpc.ControllerServiceStub]:
    core = env.core()
    await core.create_scope("s")
    server, port = await start_grpc_server(core, "127.0.0.1", 0, 16)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield pb_grpc.ControllerServiceStub(channel)
    finally:
        await channel.close()
        await server.stop(None)


async def test_create_answers_pravegas_statuses(stub: pb_grpc.ControllerServiceStub) -> None:
    assert (await stub.createKeyValueTable(kvt_config())).status == Created.SUCCESS
    assert (await stub.createKeyValueTable(kvt_config())).status == Created.TABLE_EXISTS
    assert (await stub.createKeyValueTable(kvt_config(scope="nope"))).status == Created.SCOPE_NOT_FOUND
    assert (await stub.createKeyValueTable(kvt_config(scope="bad/scope"))).status == Created.SCOPE_NOT_FOUND
    assert (await stub.createKeyValueTable(kvt_config(name="under_score"))).status == Created.INVALID_TABLE_NAME
    assert (await stub.createKeyValueTable(kvt_config(name=""))).status == Created.INVALID_TABLE_NAME


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        (kvt_config(partitions=0), "partitionCount"),
        (kvt_config(partitions=1025), "partitionCount"),
        (kvt_config(primary=0), "primaryKeyLength"),
        (kvt_config(secondary=-1), "secondaryKeyLength"),
        (kvt_config(primary=200, secondary=57), "primaryKeyLength/secondaryKeyLength"),
        (
            pb.KeyValueTableConfig(scope="s", kvtName="t", partitionCount=1, primaryKeyLength=1, rolloverSizeBytes=-1),
            "rolloverSizeBytes",
        ),
    ],
)
async def test_a_bad_configuration_is_an_invalid_argument_naming_the_field_and_writes_nothing(
    env: ControllerEnv, stub: pb_grpc.ControllerServiceStub, request_: pb.KeyValueTableConfig, field: str
) -> None:
    before = env.coordination.snapshot()
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.createKeyValueTable(request_)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert f"KeyValueTableConfig.{field}" in (caught.value.details() or "")
    assert env.coordination.snapshot() == before


async def test_segments_configuration_list_and_delete(stub: pb_grpc.ControllerServiceStub) -> None:
    await stub.createKeyValueTable(kvt_config(partitions=3, primary=8, secondary=2))
    await stub.createKeyValueTable(kvt_config(name="u", partitions=1))
    ranges = await stub.getCurrentSegmentsKeyValueTable(kvt())
    assert [(r.segmentId.segmentId, r.minKey, r.maxKey) for r in ranges.segmentRanges] == [
        (0, 0.0, 1 / 3),
        (1, 1 / 3, 2 / 3),
        (2, 2 / 3, 1.0),
    ]
    assert {(r.segmentId.streamInfo.scope, r.segmentId.streamInfo.stream) for r in ranges.segmentRanges} == {("s", "t")}
    assert ranges.delegationToken == ""  # authentication off
    config = await stub.getKeyValueTableConfiguration(kvt())
    assert config.status == pb.KeyValueTableConfigResponse.SUCCESS
    assert (config.config.partitionCount, config.config.primaryKeyLength, config.config.secondaryKeyLength) == (3, 8, 2)
    assert config.config.scope == "s" and config.config.kvtName == "t"
    listed = await stub.listKeyValueTablesInScope(pb.KVTablesInScopeRequest(scope=pb.ScopeInfo(scope="s")))
    assert [i.kvtName for i in listed.kvtables] == ["t", "u"] and listed.continuationToken.token == "u"
    assert listed.status == pb.KVTablesInScopeResponse.SUCCESS
    after = await stub.listKeyValueTablesInScope(
        pb.KVTablesInScopeRequest(scope=pb.ScopeInfo(scope="s"), continuationToken=pb.ContinuationToken(token="u"))
    )
    assert not after.kvtables and after.continuationToken.token == "u"
    nowhere = await stub.listKeyValueTablesInScope(pb.KVTablesInScopeRequest(scope=pb.ScopeInfo(scope="nope")))
    assert nowhere.status == pb.KVTablesInScopeResponse.SCOPE_NOT_FOUND
    assert (await stub.deleteKeyValueTable(kvt())).status == pb.DeleteKVTableStatus.SUCCESS
    assert (await stub.deleteKeyValueTable(kvt())).status == pb.DeleteKVTableStatus.TABLE_NOT_FOUND
    assert (await stub.deleteKeyValueTable(kvt(name="bad_name"))).status == pb.DeleteKVTableStatus.TABLE_NOT_FOUND
    missing = await stub.getKeyValueTableConfiguration(kvt())
    assert missing.status == pb.KeyValueTableConfigResponse.TABLE_NOT_FOUND
    for name in ("t", "bad_name"):
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.getCurrentSegmentsKeyValueTable(kvt(name=name))
        assert caught.value.code() == grpc.StatusCode.NOT_FOUND
        assert f"s/{name}" in (caught.value.details() or "")


# ---- with authentication --------------------------------------------------------------------------------------------


@pytest.fixture
async def secured(env: ControllerEnv, tmp_path: Path) -> AsyncIterator[pb_grpc.ControllerServiceStub]:
    core = env.core()
    await core.create_scope("s")
    servicer = ControllerServicer(core, ControllerAuth(AuthConfig(write_password_file(tmp_path / "pw", USERS), KEY)))
    server = grpc.aio.server()
    pb_grpc.add_ControllerServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield pb_grpc.ControllerServiceStub(channel)
    finally:
        await channel.close()
        await server.stop(None)


def as_user(user: str) -> tuple[tuple[str, str]]:
    return (("authorization", basic_header(user, USERS[user][0])),)


async def code(call: object) -> grpc.StatusCode:
    try:
        await call  # type: ignore[misc]
    except grpc.aio.AioRpcError as error:
        return error.code()
    return grpc.StatusCode.OK


async def test_rpcs_need_pravegas_resources_and_permissions(secured: pb_grpc.ControllerServiceStub) -> None:
    denied = grpc.StatusCode.PERMISSION_DENIED
    for user in ("writer", "reader"):  # creating needs READ_UPDATE on the scope
        assert await code(secured.createKeyValueTable(kvt_config(), metadata=as_user(user))) == denied
    created = await secured.createKeyValueTable(kvt_config(), metadata=as_user("maker"))
    assert created.status == Created.SUCCESS
    await secured.createKeyValueTable(kvt_config(name="other"), metadata=as_user("admin"))
    listed = await secured.listKeyValueTablesInScope(
        pb.KVTablesInScopeRequest(scope=pb.ScopeInfo(scope="s")), metadata=as_user("reader")
    )
    assert [i.kvtName for i in listed.kvtables] == ["t"]  # "other" is not the reader's to see
    config = await secured.getKeyValueTableConfiguration(kvt(), metadata=as_user("reader"))
    assert config.status == pb.KeyValueTableConfigResponse.SUCCESS
    assert await code(secured.getKeyValueTableConfiguration(kvt(name="other"), metadata=as_user("reader"))) == denied
    read_ranges = await secured.getCurrentSegmentsKeyValueTable(kvt(), metadata=as_user("reader"))
    assert TokenVerifier(KEY).grants(read_ranges.delegationToken) == {"prn::/scope:s/stream:t_kvtable": Permission.READ}
    assert await code(secured.deleteKeyValueTable(kvt(), metadata=as_user("reader"))) == denied
    assert await code(secured.deleteKeyValueTable(kvt(), metadata=as_user("maker"))) == denied  # on the table
    info = pb.StreamInfo(scope="s", stream="t_kvtable", accessOperation=pb.StreamInfo.READ)
    read_token = await secured.getDelegationToken(info, metadata=as_user("reader"))
    segment = table_segment_name("s", "t", 1)
    TokenVerifier(KEY).check(read_token.delegationToken, segment, Permission.READ)
    with pytest.raises(TokenInvalidError):
        TokenVerifier(KEY).check(read_token.delegationToken, segment, Permission.READ_UPDATE)
    info.accessOperation = pb.StreamInfo.READ_WRITE
    assert await code(secured.getDelegationToken(info, metadata=as_user("reader"))) == denied
    uri = pb.SegmentId(streamInfo=pb.StreamInfo(scope="s", stream="t_kvtable"), segmentId=1)
    assert (await secured.getURI(uri, metadata=as_user("reader"))).port > 0
    other = pb.SegmentId(streamInfo=pb.StreamInfo(scope="s", stream="other_kvtable"), segmentId=0)
    assert await code(secured.getURI(other, metadata=as_user("reader"))) == denied
    deleted = await secured.deleteKeyValueTable(kvt(), metadata=as_user("writer"))
    assert deleted.status == pb.DeleteKVTableStatus.SUCCESS


async def test_current_segments_carry_a_token_the_segment_stores_accept(secured: pb_grpc.ControllerServiceStub) -> None:
    await secured.createKeyValueTable(kvt_config(partitions=2), metadata=as_user("maker"))
    ranges = await secured.getCurrentSegmentsKeyValueTable(kvt(), metadata=as_user("writer"))
    verifier = TokenVerifier(KEY)
    for r in ranges.segmentRanges:
        verifier.check(
            ranges.delegationToken, table_segment_name("s", "t", r.segmentId.segmentId), Permission.READ_UPDATE
        )
    with pytest.raises(TokenInvalidError):
        verifier.check(ranges.delegationToken, table_segment_name("s", "other", 0), Permission.READ)
    assert verifier.grants(ranges.delegationToken) == {"prn::/scope:s/stream:t_kvtable": Permission.READ_UPDATE}
