"""Password checks, limited per user and per peer address, so that guessing passwords, or a flood of wrong ones,
costs the controller little (a token bucket per key).

Every key (``user:<name>``, ``peer:<address>``) has a bucket of ``burst`` tokens that refills at ``per_s`` a
second. A password check takes one token from each of its keys before it runs, or is refused at once (no PBKDF2)
while one of them is empty: :meth:`LoginLimits.take` says how long to wait. A check that succeeds gives its
tokens back, so only failures (and checks still running) count: many concurrent wrong passwords from one address
are refused after the first ``burst``, whatever their user names. A full bucket is forgotten, and at most
``max_keys`` are kept (the least recently used dropped first), so made-up user names cannot grow memory.

The cost: while a user's bucket is empty, new logins of that user (not the sessions the controller already
remembers) are refused for up to ``1 / per_s`` seconds, whoever makes them; the same for one address (clients
behind one NAT share it).

Below :mod:`controller.rpc.authentication`: imports only the standard library.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Sequence

MAX_KEYS = 10_000


def peer_address(peer: str) -> str:
    """The address of a gRPC peer string, without its port: ``ipv4:1.2.3.4:5`` -> ``ipv4:1.2.3.4``,
    ``ipv6:[::1]:5`` -> ``ipv6:[::1]``; anything else (``unix:...``) as it is."""
    if peer.startswith("ipv6:[") and "]" in peer:
        return peer[: peer.index("]") + 1]
    if peer.startswith("ipv4:") and peer.count(":") == 2:
        return peer.rsplit(":", 1)[0]
    return peer


class LoginLimits:
    def __init__(
        self, burst: int, per_s: float, clock: Callable[[], float] = time.monotonic, max_keys: int = MAX_KEYS
    ) -> None:
        if burst < 1:
            raise ValueError(f"burst: must be at least 1, not {burst}")
        if per_s <= 0:
            raise ValueError(f"per_s: must be positive, not {per_s}")
        self.burst = burst
        self.per_s = per_s
        self._clock = clock
        self._max_keys = max_keys
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # key -> (tokens, at)

    def _level(self, key: str, now: float) -> float:
        held = self._buckets.get(key)
        if held is None:
            return float(self.burst)
        tokens, at = held
        return min(float(self.burst), tokens + (now - at) * self.per_s)

    def take(self, keys: Sequence[str]) -> float:
        """Take one token from each key and return 0, or take none and return the seconds until all have one."""
        now = self._clock()
        levels = [self._level(key, now) for key in keys]
        short = max((1.0 - level for level in levels), default=0.0)
        if short > 0:
            return short / self.per_s
        for key, level in zip(keys, levels, strict=True):
            self._set(key, level - 1.0, now)
        return 0.0

    def give_back(self, keys: Sequence[str]) -> None:
        """Return the tokens a successful check took."""
        now = self._clock()
        for key in keys:
            self._set(key, self._level(key, now) + 1.0, now)

    def _set(self, key: str, tokens: float, now: float) -> None:
        if tokens >= self.burst:
            self._buckets.pop(key, None)
            return
        self._buckets[key] = (tokens, now)
        self._buckets.move_to_end(key)
        while len(self._buckets) > self._max_keys:
            self._buckets.popitem(last=False)
