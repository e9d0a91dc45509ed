"""The segment store with authentication on: every command's delegation token is checked before it runs.

A real in-memory segment store on 127.0.0.1 started with the signing key; a raw wire peer sends commands with
tokens a ``TokenSigner`` makes (as the controller does), forged ones, expired ones and none. Refused commands
get ``AuthTokenCheckFailed`` with the wire's error code and change nothing."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from wire_peer import WirePeer

from segment_store.protocol import (
    AppendSetup,
    AuthTokenCheckFailed,
    AuthTokenErrorCode,
    CreateSegment,
    GetStreamSegmentInfo,
    NoSuchSegment,
    ReadSegment,
    SealSegment,
    SegmentCreated,
    SetupAppend,
    StreamSegmentInfo,
)
from segment_store.server.config import ServerConfig
from segment_store.server.service import SegmentStoreService, ServiceConfig
from segstore_shared.auth import acl
from segstore_shared.auth.acl import Permission
from segstore_shared.auth.tokens import TokenSigner

pytestmark = pytest.mark.integration

KEY = "segment-store-test-key"
SEGMENT = "a/s/0.#epoch.0"
OTHER = "a/t/0.#epoch.0"


@pytest.fixture
async def peer() -> AsyncIterator[WirePeer]:
    config = ServiceConfig(server=ServerConfig(port=0, auth_token_signing_key=KEY))
    service = await SegmentStoreService.start_in_memory(container_count=2, config=config)
    peer = await WirePeer.connect(service.endpoint)
    master = TokenSigner(KEY).sign_master()
    for segment in (SEGMENT, OTHER):
        assert isinstance(await peer.request(CreateSegment(1, segment, 0, 0, master, 0)), SegmentCreated)
    try:
        yield peer
    finally:
        await peer.close()
        await service.stop()


def token(resource: str, permission: Permission, ttl_s: int = 600, key: str = KEY, now: float | None = None) -> str:
    clock = (lambda: now) if now is not None else time.time
    return TokenSigner(key, ttl_s, clock=clock).sign(resource, permission)


def refused(reply: object, code: AuthTokenErrorCode = AuthTokenErrorCode.TOKEN_CHECK_FAILED) -> bool:
    return isinstance(reply, AuthTokenCheckFailed) and reply.error_code == code


async def test_reads_need_a_token_of_the_stream(peer: WirePeer) -> None:
    assert refused(await peer.request(GetStreamSegmentInfo(2, SEGMENT, "")))
    read = token(acl.raw_stream("a", "s"), Permission.READ)
    assert isinstance(await peer.request(GetStreamSegmentInfo(3, SEGMENT, read)), StreamSegmentInfo)
    assert refused(await peer.request(ReadSegment(OTHER, 0, 100, read, 4)))
    assert refused(await peer.request(GetStreamSegmentInfo(5, OTHER, read)))
    reply = await peer.request(GetStreamSegmentInfo(6, SEGMENT, read))
    assert isinstance(reply, StreamSegmentInfo) and reply.request_id == 6


async def test_writes_need_read_update(peer: WirePeer) -> None:
    read = token(acl.raw_stream("a", "s"), Permission.READ)
    writer = uuid.uuid4()
    reply = await peer.request(SetupAppend(7, writer, SEGMENT, read))
    assert refused(reply) and reply.request_id == 7  # type: ignore[union-attr]
    assert refused(await peer.request(SealSegment(8, SEGMENT, read)))
    write = token(acl.raw_stream("a", "s"), Permission.READ_UPDATE)
    assert isinstance(await peer.request(SetupAppend(9, writer, SEGMENT, write)), AppendSetup)
    info = await peer.request(GetStreamSegmentInfo(10, SEGMENT, write))
    assert isinstance(info, StreamSegmentInfo) and not info.is_sealed


async def test_an_expired_token_says_expired(peer: WirePeer) -> None:
    old = token(acl.raw_stream("a", "s"), Permission.READ_UPDATE, ttl_s=60, now=time.time() - 120)
    assert refused(await peer.request(GetStreamSegmentInfo(11, SEGMENT, old)), AuthTokenErrorCode.TOKEN_EXPIRED)
    assert refused(await peer.request(SetupAppend(12, uuid.uuid4(), SEGMENT, old)), AuthTokenErrorCode.TOKEN_EXPIRED)


async def test_a_token_signed_with_another_key_is_refused(peer: WirePeer) -> None:
    forged = token(acl.raw_stream("a", "s"), Permission.READ_UPDATE, key="not-the-key")
    assert refused(await peer.request(GetStreamSegmentInfo(13, SEGMENT, forged)))
    assert refused(await peer.request(CreateSegment(14, "a/s/9.#epoch.1", 0, 0, forged, 0)))
    reply = await peer.request(GetStreamSegmentInfo(15, "a/s/9.#epoch.1", TokenSigner(KEY).sign_master()))
    assert isinstance(reply, NoSuchSegment)  # the forged create did nothing


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(max_size=300) | st.sampled_from(["", "a.b.c", "e30.e30.", "Bearer x"]))
async def test_fuzzed_tokens_never_pass(peer: WirePeer, garbage: str) -> None:
    reply = await peer.request(GetStreamSegmentInfo(16, SEGMENT, garbage))
    assert isinstance(reply, AuthTokenCheckFailed), reply
