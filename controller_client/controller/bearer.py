"""The token a controller client authenticates with (``Bearer``), renewed before it expires.

A client given a delegation token instead of a password (a Spark executor: its driver got the token) sends it
on every call. A token from ``getDelegationToken`` grants one stream; shown to ``getDelegationToken`` for that
stream it buys a fresh one, even after its ``exp``, until its renewal bound (see
``controller.rpc.authentication``). :class:`BearerToken` keeps the current token and says when to renew it:
``renew_before_s`` before its ``exp``, or a quarter of its lifetime before if that is shorter (read without
verifying: only the servers can). A token that grants
anything else (several resources, a scope) is never renewed: it is sent as given until it is refused.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable

from controller_client.errors import ControllerAuthenticationError
from controller_client.proto import Controller_pb2 as pb
from segstore_shared.auth.acl import Permission
from segstore_shared.auth.tokens import TokenError, renew_at, stream_grant

RENEW_BEFORE_S = 30.0

Exchange = Callable[[pb.StreamInfo, Iterable[tuple[str, str]]], Awaitable[str]]
"""``(request, metadata) -> token``: ``getDelegationToken`` with that metadata."""


class BearerToken:
    def __init__(
        self, token: str, renew_before_s: float = RENEW_BEFORE_S, clock: Callable[[], float] = time.time
    ) -> None:
        self._renew_before_s = renew_before_s
        self._clock = clock
        self.renewals = 0
        self._lock: asyncio.Lock | None = None
        self._set(token)
        try:
            self._grant = stream_grant(token)
        except TokenError:
            self._grant = None  # not a JWT we can read: sent as given, the controller judges it

    def _set(self, token: str) -> None:
        self.token = token
        try:
            self._renew_at = renew_at(token, self._renew_before_s)
        except TokenError:
            self._renew_at = None

    @property
    def renewable(self) -> bool:
        return self._grant is not None

    def due(self) -> bool:
        """Whether the token should be renewed before the next call."""
        return self._grant is not None and self._renew_at is not None and self._clock() >= self._renew_at

    def metadata(self) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {self.token}"),)

    def renewal_request(self) -> pb.StreamInfo:
        """The ``getDelegationToken`` request that renews the token (only when :attr:`renewable`)."""
        if self._grant is None:
            raise ValueError("this token does not grant one stream: it cannot be renewed")
        scope, stream, permission = self._grant
        access = pb.StreamInfo.READ_WRITE if permission >= Permission.READ_UPDATE else pb.StreamInfo.READ
        return pb.StreamInfo(scope=scope, stream=stream, accessOperation=access)

    async def renew_if_due(self, exchange: Exchange) -> None:
        if self.due():
            await self.renew(exchange, self.token)

    async def renew(self, exchange: Exchange, shown: str) -> None:
        """Exchange ``shown`` for a fresh token, once for all the tasks that found it due (one event loop).
        Raises ControllerAuthenticationError when the controller refuses (past the renewal bound, user gone)."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self.token != shown:
                return  # another task renewed it meanwhile
            try:
                token = await exchange(self.renewal_request(), self.metadata())
            except ControllerAuthenticationError as error:
                raise ControllerAuthenticationError(f"the token could not be renewed: {error}") from error
            self._set(token)
            self.renewals += 1
