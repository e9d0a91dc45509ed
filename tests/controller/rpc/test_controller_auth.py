"""The controller with authentication on, over a real grpc.aio server: Pravega's answers to missing and wrong
credentials, ACLs per RPC, filtered listings, delegation tokens that the segment stores' verifier accepts, and
Bearer tokens that grant exactly their claims."""

from __future__ import annotations

import base64
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from auth_fixtures import write_password_file
from controller_env import ControllerEnv

from controller.config import AuthConfig
from controller.rpc.authentication import ControllerAuth
from controller.rpc.servicer import ControllerServicer
from controller_client.controller.api import ControllerClient, ControllerClientConfig
from controller_client.errors import ControllerAuthenticationError
from controller_client.model import ScalingPolicy, StreamConfiguration
from controller_client.proto import Controller_pb2 as pb
from controller_client.proto import Controller_pb2_grpc as pb_grpc
from segstore_shared.auth.acl import Permission
from segstore_shared.auth.passwords import PasswordFile, basic_header
from segstore_shared.auth.tokens import (
    RENEW_UNTIL_CLAIM,
    TokenExpiredError,
    TokenInvalidError,
    TokenVerifier,
    unverified_claims,
)

pytestmark = pytest.mark.integration

KEY = "test-signing-key"
USERS = {
    "admin": ("admin-pass", "prn::*,READ_UPDATE"),
    "reader": ("reader:pass", "prn::/,READ;prn::/scope:a,READ;prn::/scope:a/*,READ"),
    "nobody": ("nobody-pass", ""),
}
ACCESS = pb.StreamInfo.AccessOperation
WEEK = 7 * 24 * 3600


class Caller:
    def __init__(self, channel: grpc.aio.Channel, port: int) -> None:
        self.stub = pb_grpc.ControllerServiceStub(channel)
        self.port = port

    async def __call__(self, rpc: str, request: Any, header: str | None = None) -> Any:
        metadata = (("authorization", header),) if header is not None else None
        return await getattr(self.stub, rpc)(request, metadata=metadata, timeout=20)

    async def code(self, rpc: str, request: Any, header: str | None = None) -> tuple[grpc.StatusCode, str]:
        try:
            await self(rpc, request, header)
        except grpc.aio.AioRpcError as error:
            return error.code(), error.details() or ""
        return grpc.StatusCode.OK, ""


def login(user: str) -> str:
    return basic_header(user, USERS[user][0])


@pytest.fixture
def clock() -> list[float]:
    return [1_800_000_000.0]


@pytest.fixture
async def call(env: ControllerEnv, tmp_path: Path, clock: list[float]) -> AsyncIterator[Caller]:
    path = write_password_file(tmp_path / "passwd", USERS)
    core = env.core()
    await core.create_scope("a")
    await core.create_scope("b")
    for scope in ("a", "b"):
        await core.create_stream(scope, "s", StreamConfiguration(ScalingPolicy.fixed(1)))
    servicer = ControllerServicer(core)
    servicer._auth = ControllerAuth(AuthConfig(path, KEY, token_ttl_s=600), clock=lambda: clock[0])
    server = grpc.aio.server()
    pb_grpc.add_ControllerServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield Caller(channel, port)
    finally:
        await channel.close()
        await server.stop(None)


def info(scope: str = "a", stream: str = "s", access: int = ACCESS.UNSPECIFIED) -> pb.StreamInfo:
    return pb.StreamInfo(scope=scope, stream=stream, accessOperation=access)


async def test_no_credentials_are_refused_except_for_the_server_list(call: Caller) -> None:
    assert await call.code("createScope", pb.ScopeInfo(scope="c")) == (
        grpc.StatusCode.UNAUTHENTICATED,
        "createScope: Authentication failed: no credentials (authorization metadata)",
    )
    assert (await call.code("getControllerServerList", pb.ServerRequest()))[0] == grpc.StatusCode.OK


async def test_a_wrong_password_is_unauthenticated_and_the_message_keeps_the_secret(call: Caller) -> None:
    code, message = await call.code("checkScopeExists", pb.ScopeInfo(scope="a"), basic_header("reader", "guess"))
    assert code == grpc.StatusCode.UNAUTHENTICATED
    assert "reader" in message and "guess" not in message
    garbage = "Basic " + base64.b64encode(b"no-colon-here").decode()
    code, message = await call.code("checkScopeExists", pb.ScopeInfo(scope="a"), garbage)
    assert code == grpc.StatusCode.UNAUTHENTICATED and "no-colon-here" not in message
    assert (await call.code("checkScopeExists", pb.ScopeInfo(scope="a"), "Digest abc"))[0] == (
        grpc.StatusCode.UNAUTHENTICATED
    )


async def test_a_reader_of_scope_a_cannot_write_to_a_nor_read_b(call: Caller) -> None:
    reader = login("reader")
    assert (await call("checkScopeExists", pb.ScopeInfo(scope="a"), reader)).exists
    assert (await call("getURI", pb.SegmentId(streamInfo=info()), reader)).port > 0
    code, message = await call.code("createTransaction", pb.CreateTxnRequest(streamInfo=info(), lease=10_000), reader)
    assert code == grpc.StatusCode.PERMISSION_DENIED
    assert "READ_UPDATE on prn::/scope:a/stream:s" in message
    assert (await call.code("getURI", pb.SegmentId(streamInfo=info("b")), reader))[0] == (
        grpc.StatusCode.PERMISSION_DENIED
    )
    assert (await call.code("createScope", pb.ScopeInfo(scope="c"), reader))[0] == grpc.StatusCode.PERMISSION_DENIED
    assert (await call.code("createScope", pb.ScopeInfo(scope="c"), login("nobody")))[0] == (
        grpc.StatusCode.PERMISSION_DENIED
    )
    assert (await call("createScope", pb.ScopeInfo(scope="c"), login("admin"))).status == pb.CreateScopeStatus.SUCCESS


async def test_listings_show_only_what_the_caller_may_read(call: Caller) -> None:
    assert list((await call("listScopes", pb.ScopesRequest(), login("reader"))).scopes) == ["a"]
    assert sorted((await call("listScopes", pb.ScopesRequest(), login("admin"))).scopes) == ["a", "b"]
    listed = await call("listStreamsInScope", pb.StreamsInScopeRequest(scope=pb.ScopeInfo(scope="a")), login("reader"))
    assert [s.stream for s in listed.streams] == ["s"]


async def test_a_delegation_token_grants_what_was_asked_on_that_stream_only(call: Caller, clock: list[float]) -> None:
    verifier = TokenVerifier(KEY, clock=lambda: clock[0])
    read = (await call("getDelegationToken", info(access=ACCESS.READ), login("reader"))).delegationToken
    verifier.check(read, "a/s/0.#epoch.0", Permission.READ)
    with pytest.raises(TokenInvalidError, match="does not grant READ_UPDATE"):
        verifier.check(read, "a/s/0.#epoch.0", Permission.READ_UPDATE)
    assert (await call.code("getDelegationToken", info(), login("reader")))[0] == grpc.StatusCode.PERMISSION_DENIED
    write = (await call("getDelegationToken", info("b"), login("admin"))).delegationToken
    verifier.check(write, "b/s/0.#epoch.0", Permission.READ_UPDATE)
    with pytest.raises(TokenInvalidError, match="no claim for segment a/s"):
        verifier.check(write, "a/s/0.#epoch.0", Permission.READ)
    clock[0] += 601
    with pytest.raises(TokenExpiredError):
        verifier.check(write, "b/s/0.#epoch.0", Permission.READ)
    code, _ = await call.code("getDelegationToken", info(access=ACCESS.ANY), login("admin"))
    assert code == grpc.StatusCode.INVALID_ARGUMENT


async def test_a_bearer_token_grants_exactly_its_stream_until_it_expires(call: Caller, clock: list[float]) -> None:
    token = (await call("getDelegationToken", info("b"), login("admin"))).delegationToken
    bearer = f"Bearer {token}"
    assert (await call("getURI", pb.SegmentId(streamInfo=info("b")), bearer)).port > 0
    assert (await call("createTransaction", pb.CreateTxnRequest(streamInfo=info("b"), lease=10_000), bearer)).txnId
    assert (await call.code("getURI", pb.SegmentId(streamInfo=info("a")), bearer))[0] == (
        grpc.StatusCode.PERMISSION_DENIED
    )
    assert (await call.code("createScope", pb.ScopeInfo(scope="d"), bearer))[0] == grpc.StatusCode.PERMISSION_DENIED
    assert (await call.code("getURI", pb.SegmentId(streamInfo=info("b")), bearer[:-3] + "abc"))[0] == (
        grpc.StatusCode.UNAUTHENTICATED
    )
    clock[0] += 601
    code, message = await call.code("getURI", pb.SegmentId(streamInfo=info("b")), bearer)
    assert code == grpc.StatusCode.UNAUTHENTICATED and "expired" in message and token not in message


async def test_a_changed_password_file_is_read_again(call: Caller, tmp_path: Path, clock: list[float]) -> None:
    path = tmp_path / "passwd"
    assert (await call.code("createScope", pb.ScopeInfo(scope="e"), basic_header("late", "pw")))[0] == (
        grpc.StatusCode.UNAUTHENTICATED
    )
    path.write_text(PasswordFile.load(path).with_user("late", "pw", "prn::/,READ_UPDATE").dump())
    os.utime(path, (clock[0] + 5, clock[0] + 5))
    clock[0] += 2
    assert (await call("createScope", pb.ScopeInfo(scope="e"), basic_header("late", "pw"))).status == (
        pb.CreateScopeStatus.SUCCESS
    )


async def test_an_expired_token_buys_a_fresh_one_for_its_own_stream_until_its_bound(
    call: Caller, clock: list[float]
) -> None:
    first = (await call("getDelegationToken", info("b"), login("admin"))).delegationToken
    bound = unverified_claims(first)[RENEW_UNTIL_CLAIM]
    assert bound == int(clock[0]) + WEEK
    clock[0] += 601
    code, message = await call.code("getURI", pb.SegmentId(streamInfo=info("b")), f"Bearer {first}")
    assert code == grpc.StatusCode.UNAUTHENTICATED and "expired" in message
    fresh = (await call("getDelegationToken", info("b"), f"Bearer {first}")).delegationToken
    assert unverified_claims(fresh)[RENEW_UNTIL_CLAIM] == bound  # renewing never extends the bound
    TokenVerifier(KEY, clock=lambda: clock[0]).check(fresh, "b/s/0.#epoch.0", Permission.READ_UPDATE)
    assert (await call("getURI", pb.SegmentId(streamInfo=info("b")), f"Bearer {fresh}")).port > 0
    assert (await call.code("getDelegationToken", info("a"), f"Bearer {first}"))[0] == grpc.StatusCode.PERMISSION_DENIED
    read = (await call("getDelegationToken", info("b", access=ACCESS.READ), f"Bearer {first}")).delegationToken
    assert (await call.code("getDelegationToken", info("b"), f"Bearer {read}"))[0] == grpc.StatusCode.PERMISSION_DENIED
    clock[0] = bound - 10
    last = (await call("getDelegationToken", info("b"), f"Bearer {fresh}")).delegationToken
    assert unverified_claims(last)["exp"] == bound
    clock[0] = bound + 1
    code, message = await call.code("getDelegationToken", info("b"), f"Bearer {last}")
    assert code == grpc.StatusCode.UNAUTHENTICATED and "may not be renewed" in message and last not in message


async def test_renewals_stop_when_the_user_or_their_permission_is_gone(
    call: Caller, tmp_path: Path, clock: list[float]
) -> None:
    token = (await call("getDelegationToken", info(access=ACCESS.READ), login("reader"))).delegationToken
    path = tmp_path / "passwd"
    passwords = PasswordFile.load(path)
    path.write_text(passwords.with_user("reader", "reader:pass", "prn::/,READ").dump())
    os.utime(path, (clock[0] + 5, clock[0] + 5))
    clock[0] += 2
    code, message = await call.code("getDelegationToken", info(access=ACCESS.READ), f"Bearer {token}")
    assert code == grpc.StatusCode.PERMISSION_DENIED and "no longer granted to 'reader'" in message
    write_password_file(path, {"admin": USERS["admin"]})
    os.utime(path, (clock[0] + 10, clock[0] + 10))
    clock[0] += 2
    code, message = await call.code("getDelegationToken", info(access=ACCESS.READ), f"Bearer {token}")
    assert code == grpc.StatusCode.UNAUTHENTICATED and "user 'reader' of the token is gone" in message


async def test_a_client_with_a_token_renews_it_and_goes_on_working(call: Caller, clock: list[float]) -> None:
    token = (await call("getDelegationToken", info("b"), login("admin"))).delegationToken
    config = ControllerClientConfig(token=token, retry_timeout_s=5)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{call.port}")
    async with ControllerClient(channel, config, wall_clock=lambda: clock[0]) as client:
        assert await client.get_current_segments("b", "s")
        clock[0] += 3_600  # six lifetimes later
        assert await client.get_current_segments("b", "s")
        txn, _ = await client.create_transaction("b", "s", 10_000)
        await client.abort_transaction("b", "s", txn)
        assert client._bearer is not None and client._bearer.renewals == 1
        clock[0] += WEEK
        with pytest.raises(
            ControllerAuthenticationError, match=r"the token could not be renewed: .*may not be renewed"
        ):
            await client.get_current_segments("b", "s")
