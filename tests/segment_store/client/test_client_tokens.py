"""The segment client against a segment store that checks tokens: tokens come from a ``TokenSource`` per
segment, an expired one is replaced and the request repeated (requests, append sessions, readers), and a
token that does not grant the request fails it with the non-retriable ``AuthTokenCheckFailedError``."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest

from segment_store.client import AuthTokenCheckFailedError, SegmentClient
from segment_store.protocol import AuthTokenErrorCode
from segment_store.server.config import ServerConfig
from segment_store.server.service import SegmentStoreService, ServiceConfig
from segstore_shared.auth import acl
from segstore_shared.auth.acl import Permission
from segstore_shared.auth.tokens import TokenSigner

pytestmark = pytest.mark.integration

KEY = "client-token-test-key"
SEGMENT = "a/s/0.#epoch.0"


class CountingTokens:
    """Hands out tokens for stream a/s: expired ones first (``stale`` of them), then fresh ones."""

    def __init__(self, stale: int, permission: Permission = Permission.READ_UPDATE) -> None:
        self.stale = stale
        self.permission = permission
        self.fetched = 0
        self.expired_calls: list[str] = []
        self._current: str | None = None

    async def token(self, segment: str, write: bool) -> str:
        if segment == "" or not segment.startswith("a/s/"):
            return TokenSigner(KEY).sign_master()
        if self._current is None:
            self.fetched += 1
            now = time.time() - 3600 if self.fetched <= self.stale else time.time()
            self._current = TokenSigner(KEY, 600, clock=lambda: now).sign(acl.raw_stream("a", "s"), self.permission)
        return self._current

    def expired(self, segment: str) -> None:
        self.expired_calls.append(segment)
        self._current = None


@pytest.fixture
async def service() -> AsyncIterator[SegmentStoreService]:
    config = ServiceConfig(server=ServerConfig(port=0, auth_token_signing_key=KEY))
    service = await SegmentStoreService.start_in_memory(container_count=2, config=config)
    try:
        yield service
    finally:
        await service.stop()


async def test_requests_sessions_and_readers_renew_an_expired_token(service: SegmentStoreService) -> None:
    tokens = CountingTokens(stale=1)
    async with SegmentClient(service.endpoint, tokens=tokens) as client:
        await client.create_segment(SEGMENT)  # refused as expired once, then done with a fresh token
        assert tokens.fetched == 2 and tokens.expired_calls == [SEGMENT]
        tokens.stale, tokens._current = tokens.fetched + 1, None  # the next token handed out is expired again
        async with client.writer(SEGMENT) as writer:
            for i in range(10):
                await writer.write(b"event %d" % i)
            await writer.flush()
        assert tokens.expired_calls.count(SEGMENT) == 2
        info = await client.get_segment_info(SEGMENT)
        tokens.stale, tokens._current = tokens.fetched + 1, None
        data = b""
        async for event in client.reader(SEGMENT, 0, info.write_offset):
            data += event.data + b"|"
        assert data == b"".join(b"event %d|" % i for i in range(10))
        assert tokens.expired_calls.count(SEGMENT) == 3


async def test_a_read_token_cannot_write(service: SegmentStoreService) -> None:
    async with SegmentClient(service.endpoint, tokens=CountingTokens(0)) as admin:
        await admin.create_segment(SEGMENT)
    reader = CountingTokens(stale=0, permission=Permission.READ)
    async with SegmentClient(service.endpoint, tokens=reader) as client:
        assert (await client.get_segment_info(SEGMENT)).write_offset == 0
        with pytest.raises(AuthTokenCheckFailedError) as refused:
            await client.seal_segment(SEGMENT)
        assert refused.value.code is AuthTokenErrorCode.TOKEN_CHECK_FAILED and not refused.value.retriable
        writer = client.writer(SEGMENT)
        with pytest.raises(AuthTokenCheckFailedError):
            await writer.open()
        assert reader.expired_calls == []
