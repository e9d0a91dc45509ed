"""Delegation tokens for the requests of a segment client (Pravega's ``DelegationTokenProvider``).

Every command a segment store checks carries a token (``segment_store.server.token_gate``). A
:class:`TokenSource` hands out the token for a segment: ``write`` says whether the request changes the segment
(its token must grant ``READ_UPDATE``) or only reads it. When a segment store answers ``TOKEN_EXPIRED`` the
client calls :meth:`TokenSource.expired` and asks again; a source that fetches tokens (the controller client's)
then gets a fresh one. :class:`StaticTokens` always answers the same token (``""`` with authentication off).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from segstore_shared.auth.tokens import TokenSigner

RENEW_BEFORE_S = 60.0


class TokenSource(Protocol):
    async def token(self, segment: str, write: bool) -> str:
        """The token to send with a request on ``segment`` (a qualified segment name; "" for container-wide
        admin commands). May raise the source's errors (e.g. the controller refusing the caller)."""
        ...

    def expired(self, segment: str) -> None:
        """A segment store said the token it got for ``segment`` has expired."""
        ...


class StaticTokens:
    """One token for every request."""

    def __init__(self, token: str = "") -> None:
        self._token = token

    async def token(self, segment: str, write: bool) -> str:
        return self._token

    def expired(self, segment: str) -> None:
        """Nothing to renew: the next request carries the same token (and is refused again)."""


class SignedTokens:
    """The master token (``*``, READ_UPDATE), signed here with the shared key: what a controller sends to the
    segment stores. Signed again ``RENEW_BEFORE_S`` before it expires, or when a segment store says it has."""

    def __init__(self, signer: TokenSigner, clock: Callable[[], float] = time.time) -> None:
        self._signer = signer
        self._clock = clock
        self._token = ""
        self._renew_at = 0.0

    async def token(self, segment: str, write: bool) -> str:
        now = self._clock()
        if now >= self._renew_at:
            self._token = self._signer.sign_master()
            self._renew_at = now + max(self._signer.ttl_s - RENEW_BEFORE_S, self._signer.ttl_s / 2)
        return self._token

    def expired(self, segment: str) -> None:
        self._renew_at = 0.0
