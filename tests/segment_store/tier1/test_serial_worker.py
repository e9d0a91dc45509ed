"""SerialWorker: calls run one at a time in call order on one thread; outcomes reach the caller's loop;
a cancelled caller's call still runs; shutdown lets queued calls finish."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from segment_store.tier1.file.serial_worker import SerialWorker

pytestmark = pytest.mark.unit


async def test_calls_run_in_call_order_on_one_thread_one_at_a_time() -> None:
    worker = SerialWorker("test-worker")
    ran: list[tuple[int, str]] = []
    busy = threading.Lock()

    def call(index: int) -> int:
        assert busy.acquire(blocking=False), "two calls overlapped"
        try:
            time.sleep(0.001 if index % 3 == 0 else 0)
            ran.append((index, threading.current_thread().name))
        finally:
            busy.release()
        return index * 10

    try:
        results = await asyncio.gather(*(worker.run(call, i) for i in range(50)))
    finally:
        worker.shutdown()
    assert results == [i * 10 for i in range(50)]
    assert [index for index, _ in ran] == list(range(50))
    assert {name for _, name in ran} == {"test-worker"}


async def test_an_exception_reaches_the_caller_and_the_worker_goes_on() -> None:
    worker = SerialWorker("test-worker")

    def fail() -> None:
        raise OSError("disk gone")

    try:
        with pytest.raises(OSError, match="disk gone"):
            await worker.run(fail)
        assert await worker.run(lambda: "still here") == "still here"
    finally:
        worker.shutdown()


async def test_a_cancelled_caller_s_call_still_runs_and_its_outcome_is_dropped() -> None:
    worker = SerialWorker("test-worker")
    started, release = threading.Event(), threading.Event()
    done: list[str] = []

    def slow() -> str:
        started.set()
        release.wait(5)
        done.append("slow")
        return "slow"

    try:
        waiting = asyncio.ensure_future(worker.run(slow))
        await asyncio.to_thread(started.wait, 5)
        waiting.cancel()
        release.set()
        assert await worker.run(lambda: "next") == "next"  # after slow, which ran to its end
        assert done == ["slow"] and waiting.cancelled()
    finally:
        worker.shutdown()


async def test_shutdown_lets_queued_calls_finish_then_refuses_new_ones() -> None:
    worker = SerialWorker("test-worker")
    finished: list[int] = []

    def call(index: int) -> None:
        time.sleep(0.002)
        finished.append(index)

    futures = [worker.run(call, i) for i in range(5)]
    await asyncio.to_thread(worker.shutdown)
    assert finished == [0, 1, 2, 3, 4]
    await asyncio.gather(*futures)
    with pytest.raises(RuntimeError, match="shut down"):
        worker.run(call, 5)
    worker.shutdown()  # idempotent


def test_shutdown_of_a_worker_never_used_starts_no_thread() -> None:
    before = threading.active_count()
    worker = SerialWorker("test-worker")
    worker.shutdown()
    assert threading.active_count() == before
