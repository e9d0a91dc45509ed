"""A sink's pending events against a plain list model: numbers, bytes released, batches completed, moves."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller_client.writers.pending_events import Batch, PendingEvents

pytestmark = pytest.mark.unit

_step = st.one_of(
    st.tuples(st.just("add"), st.integers(0, 40), st.booleans()),  # payload size, new batch
    st.tuples(st.just("ack"), st.integers(-3, 12), st.booleans()),  # level ahead of the first, -
    st.tuples(st.just("take"), st.just(0), st.booleans()),
    st.tuples(st.just("fail"), st.just(0), st.booleans()),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_step, max_size=150))
def test_pending_events_match_a_list_model(steps: list[tuple[str, int, bool]]) -> None:
    loop = asyncio.new_event_loop()
    try:
        pending = PendingEvents(compact_at=4)  # compact often, so the cut is exercised
        model: list[tuple[int, bytes, str, Batch]] = []  # (number, data, key, batch)
        next_number = 1
        batch: Batch | None = None
        for op, value, flag in steps:
            if op == "add":
                if batch is None or flag or batch.settled:
                    batch = Batch(loop.create_future())
                data = bytes([next_number % 251]) * value
                key = f"k{next_number % 7}"
                batch.remaining += 1
                pending.add(next_number, data, key, batch)
                model.append((next_number, data, key, batch))
                next_number += 1
            elif op == "ack":
                level = (model[0][0] if model else next_number) + value
                released = [m for m in model if m[0] <= level]
                model = [m for m in model if m[0] > level]
                before = {id(m[3]): m[3] for m in released}
                assert pending.release_through(level) == sum(len(m[1]) for m in released)
                still = {id(m[3]) for m in model}
                for key_, b in before.items():  # a batch completes once all its events are released
                    assert b.settled == (key_ not in still)
            elif op == "take":  # a scale: the events move, in order, keeping their batches (new numbers)
                moved = pending.take_all()
                assert moved == [(m[1], m[2], m[3]) for m in model] and len(pending) == 0
                next_number += 5
                model = []
                for data, key, owner in moved:
                    pending.add(next_number, data, key, owner)
                    model.append((next_number, data, key, owner))
                    next_number += 1
            elif op == "fail":
                error = RuntimeError("session failed")
                assert pending.fail_all(error) == sum(len(m[1]) for m in model)
                assert all(m[3].error is error for m in model)
                model = []
            assert len(pending) == len(model)
            if model:
                assert pending.first_number == model[0][0]
            assert pending.batches() == list({id(m[3]): m[3] for m in model}.values())
    finally:
        loop.close()
