"""One budget per call (segstore_shared.deadline): nesting takes the earlier deadline, tasks do not inherit it."""

from __future__ import annotations

import asyncio

import pytest

from segstore_shared import deadline
from segstore_shared.deadline import DEFAULT_UNREACHABLE_TIMEOUT_S

pytestmark = pytest.mark.unit


def test_the_default_budget_is_30_seconds() -> None:
    assert DEFAULT_UNREACHABLE_TIMEOUT_S == 30.0


async def test_a_budget_inside_a_budget_never_extends_it() -> None:
    assert deadline.remaining_s() is None
    with deadline.budget(1.0) as outer:
        with deadline.budget(60.0) as inner:
            assert inner is outer
        with deadline.budget(0.2) as shorter:
            assert shorter.at < outer.at
            assert 0 < deadline.clip(5.0) <= 0.2
        assert deadline.current() is outer
    assert deadline.remaining_s() is None
    assert deadline.clip(5.0) == 5.0


async def test_tasks_started_inside_a_budget_do_not_inherit_it() -> None:
    with deadline.budget(0.5):
        seen = await asyncio.create_task(_remaining())
        assert deadline.remaining_s() is not None
    assert seen is None


async def _remaining() -> float | None:
    return deadline.remaining_s()
