"""Retry policy: exponential backoff with jitter, an attempt limit, and an injectable sleep (kazoo ``retry``).

A policy is a value; :meth:`RetryPolicy.call` runs a coroutine function until it succeeds, raises an
error that is not retriable, or runs out of attempts (then the last error is raised). Tests inject
``sleep`` (and ``random``) to run without waiting.

Retries never nest and never outlast the call's budget (:mod:`segstore_shared.deadline`): a policy's call inside
another one's (in one task) makes one attempt and leaves the retrying to the outer one; the last attempt starts at
the budget's deadline, none after it; an error that ended a spent budget below (``deadline.final``: the controller
client retried an unreachable controller for its whole ``retry_timeout_s``) is not repeated.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import TypeVar

from segstore_shared import deadline

_log = logging.getLogger(__name__)
_T = TypeVar("_T")

Sleep = Callable[[float], Awaitable[None]]


def is_retriable(error: BaseException) -> bool:
    """The default test: the error's ``retriable`` flag (SegstoreError), or a builtin connection error."""
    flag = getattr(error, "retriable", None)
    if flag is not None:
        return bool(flag)
    return isinstance(error, ConnectionError | TimeoutError)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Backoff ``initial_delay_ms * multiplier**n`` capped at ``max_delay_ms``, +/- ``jitter_fraction``.

    ``max_attempts`` counts calls, the first included (1 = no retry).
    """

    max_attempts: int = 10
    initial_delay_ms: float = 10.0
    max_delay_ms: float = 2_000.0
    multiplier: float = 2.0
    jitter_fraction: float = 0.2
    sleep: Sleep = field(default=asyncio.sleep, compare=False, repr=False)
    random: Callable[[], float] = field(default=random.random, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts: must be at least 1")
        if self.initial_delay_ms < 0 or self.max_delay_ms < self.initial_delay_ms:
            raise ValueError("initial_delay_ms/max_delay_ms: need 0 <= initial_delay_ms <= max_delay_ms")
        if self.multiplier < 1:
            raise ValueError("multiplier: must be at least 1")
        if not 0 <= self.jitter_fraction < 1:
            raise ValueError("jitter_fraction: must be within [0, 1)")

    def delays_s(self) -> Iterator[float]:
        """The pauses (seconds) before the second, third, ... attempt: ``max_attempts - 1`` of them."""
        for attempt in range(2, self.max_attempts + 1):
            yield self.delay_s(attempt)

    def delay_s(self, attempt: int) -> float:
        """The pause (seconds) before attempt number ``attempt`` (1: none; 2: the first retry): ``initial_delay_ms *
        multiplier**(attempt - 2)``, capped at ``max_delay_ms``, with jitter."""
        if attempt <= 1:
            return 0.0
        delay = min(self.initial_delay_ms * self.multiplier ** min(attempt - 2, 64), self.max_delay_ms)
        jitter = 1.0 + self.jitter_fraction * (2.0 * self.random() - 1.0)
        return delay * jitter / 1000.0

    async def call(
        self,
        fn: Callable[[], Awaitable[_T]],
        retriable: Callable[[BaseException], bool] = is_retriable,
    ) -> _T:
        """Run ``fn`` until it returns; re-raise a non-retriable error at once, the last one when exhausted (attempts
        or the call's budget), or the first one when a retry loop around this one retries (module docstring)."""
        delays = self.delays_s()
        with deadline.retrying() as nested:
            while True:
                try:
                    return await fn()
                except Exception as error:
                    if nested or not retriable(error) or deadline.final(error):
                        raise
                    delay = next(delays, None)
                    left = deadline.remaining_s()
                    if delay is None or (left is not None and left <= 0):
                        raise
                    delay = delay if left is None else min(delay, left)  # the last attempt at the deadline
                    _log.debug("retrying in %.3f s after %r", delay, error)
                    await self.sleep(delay)


class Backoff:
    """The waits of a long-lived reader that its segment store keeps failing (WrongHost while a container moves, a
    lost connection): :meth:`failed` sleeps the policy's next delay, or re-raises the error once the failures in a
    row have lasted ``timeout_s`` (or used up the policy's attempts); :meth:`succeeded` (the reader read something)
    ends the run of failures, so a reader that lives for hours survives any number of moves, each within the
    budget."""

    def __init__(self, policy: RetryPolicy, timeout_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.policy, self.timeout_s, self._clock = policy, timeout_s, clock
        self.failures = 0
        """Failures in a row (0 after a success)."""
        self._first_at = 0.0

    def succeeded(self) -> None:
        self.failures = 0

    async def failed(self, error: BaseException) -> None:
        """Wait before the next attempt, or raise ``error`` if this run of failures has used up the budget."""
        now = self._clock()
        if self.failures == 0:
            self._first_at = now
        self.failures += 1
        left = self.timeout_s - (now - self._first_at)
        if left <= 0 or self.failures >= self.policy.max_attempts:
            raise error
        await self.policy.sleep(min(self.policy.delay_s(self.failures + 1), left))
