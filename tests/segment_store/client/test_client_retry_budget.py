"""The retry policy within one budget per call (segstore_shared.deadline): retries never nest, no attempt starts
after the deadline, an error that ended a spent budget is not repeated."""

from __future__ import annotations

import time

import pytest

from segment_store.client import ConnectionLostError, RetryPolicy
from segstore_shared import deadline

pytestmark = pytest.mark.unit


def _policy(sleeps: list[float], attempts: int = 10) -> RetryPolicy:
    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    return RetryPolicy(max_attempts=attempts, initial_delay_ms=100, max_delay_ms=100, jitter_fraction=0, sleep=sleep)


async def test_a_retry_loop_inside_another_makes_one_attempt() -> None:
    sleeps: list[float] = []
    inner_calls = 0

    async def inner() -> None:
        nonlocal inner_calls
        inner_calls += 1
        raise ConnectionLostError("lost")

    async def outer() -> None:
        await _policy(sleeps, attempts=4).call(inner)

    with pytest.raises(ConnectionLostError):
        await _policy(sleeps, attempts=3).call(outer)
    assert inner_calls == 3  # not 3 x 4
    assert len(sleeps) == 2


async def test_an_error_that_spent_the_budget_below_is_not_retried() -> None:
    sleeps: list[float] = []
    calls = 0

    async def spent() -> None:
        nonlocal calls
        calls += 1
        raise deadline.mark_final(ConnectionLostError("unreachable after 30.0 s"))

    with pytest.raises(ConnectionLostError):
        await _policy(sleeps).call(spent)
    assert (calls, sleeps) == (1, [])


async def test_no_attempt_starts_after_the_deadline() -> None:
    calls = 0

    async def fails() -> None:
        nonlocal calls
        calls += 1
        raise ConnectionLostError("lost")

    policy = RetryPolicy(max_attempts=1_000, initial_delay_ms=20, max_delay_ms=20, jitter_fraction=0)
    started = time.monotonic()
    with deadline.budget(0.3), pytest.raises(ConnectionLostError):
        await policy.call(fails)
    assert time.monotonic() - started < 0.6
    assert 3 <= calls < 20


async def test_without_a_budget_a_policy_retries_as_before() -> None:
    sleeps: list[float] = []
    calls = 0

    async def fails() -> None:
        nonlocal calls
        calls += 1
        raise ConnectionLostError("lost")

    with pytest.raises(ConnectionLostError):
        await _policy(sleeps, attempts=5).call(fails)
    assert (calls, len(sleeps)) == (5, 4)
