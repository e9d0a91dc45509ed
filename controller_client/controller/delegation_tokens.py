"""Delegation tokens from the controller for the segment client (Pravega's ``DelegationTokenProviderImpl``).

:class:`ControllerTokens` is the :class:`~segment_store.client.tokens.TokenSource` of a ``StreamManager``: for a
segment it asks the controller (``getDelegationToken``) for a token on the segment's stream — ``READ_UPDATE``
for a request that changes the segment, ``READ`` for a read — and keeps it until ``refresh_before_s`` (or a
quarter of its lifetime, if shorter) before its ``exp`` (read without verifying: only the segment stores can),
or until a segment store says it expired.
A READ_UPDATE token also serves reads. With authentication off the controller answers an empty token, which
is kept for ever (one call per stream).

Segment names map to streams as the segment stores check them: ``scope/stream/...`` for stream and
transaction segments and for the tables of a key-value table or a reader group (``scope/name_kvtable/...``);
a name without a scope (container-wide admin commands) gets the empty token.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from segstore_shared.auth.tokens import renew_at

REFRESH_BEFORE_S = 5.0

Fetch = Callable[[str, str, bool], Awaitable[str]]
"""``(scope, stream, write) -> token``: the controller call (``write`` False asks for READ only)."""


@dataclass(slots=True)
class _Held:
    token: str
    write: bool
    renew_at: float | None


class ControllerTokens:
    def __init__(
        self, fetch: Fetch, refresh_before_s: float = REFRESH_BEFORE_S, clock: Callable[[], float] = time.time
    ) -> None:
        self._fetch = fetch
        self._refresh_before_s = refresh_before_s
        self._clock = clock
        self._held: dict[tuple[str, str], _Held] = {}
        self.fetches = 0

    @staticmethod
    def stream_of(segment: str) -> tuple[str, str] | None:
        parts = segment.split("/")
        return (parts[0], parts[1]) if len(parts) >= 3 and parts[0] and parts[1] else None

    async def token(self, segment: str, write: bool) -> str:
        stream = self.stream_of(segment)
        if stream is None:
            return ""
        held = self._held.get(stream)
        if held is not None and (held.write or not write) and not self._due(held):
            return held.token
        token = await self._fetch(stream[0], stream[1], write)
        self.fetches += 1
        self._held[stream] = _Held(token, write, renew_at(token, self._refresh_before_s))
        return token

    def _due(self, held: _Held) -> bool:
        return held.renew_at is not None and self._clock() >= held.renew_at

    def expired(self, segment: str) -> None:
        stream = self.stream_of(segment)
        if stream is not None:
            self._held.pop(stream, None)
