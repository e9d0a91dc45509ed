"""The bases of the blocking wrappers (segstore_shared.loop_thread): what every Blocking* class inherits."""

from __future__ import annotations

import asyncio
import threading

import pytest

from segstore_shared.loop_thread import BlockingFacade, ClosableFacade, LoopClosedError, LoopOwningFacade, LoopThread

pytestmark = pytest.mark.unit


class _Owner(LoopOwningFacade):
    def __init__(self, fail_closing: bool = False) -> None:
        super().__init__("test-loop")
        self.fail_closing = fail_closing
        self.closed_on: list[threading.Thread] = []

    def _close_on_loop(self) -> None:
        self.closed_on.append(self._call(threading.current_thread))
        if self.fail_closing:
            raise RuntimeError("closing failed")


class _Closable(ClosableFacade):
    def __init__(self, runner: LoopThread) -> None:
        super().__init__(runner)
        self.closes = 0

    def close(self) -> None:
        self.closes += 1


def test_run_call_and_acknowledged_run_on_the_loop_thread() -> None:
    owner = _Owner()
    try:
        facade = BlockingFacade(owner._runner)
        loop_thread = facade._call(threading.current_thread)
        assert loop_thread is not threading.current_thread()
        assert facade._call(lambda a, b=0: a + b, 1, b=2) == 3

        release = threading.Event()

        async def slow() -> None:
            while not release.is_set():
                await asyncio.sleep(0.005)

        with pytest.raises(TimeoutError):
            facade._run(slow(), 0.02)
        release.set()
        facade._run(asyncio.sleep(0.05))  # the abandoned call ends before the loop stops

        pending: list[asyncio.Future[None]] = []

        async def write() -> asyncio.Future[None]:
            pending.append(asyncio.get_running_loop().create_future())
            return pending[0]

        ack = facade._acknowledged(write)
        assert not ack.done()
        owner._runner.loop.call_soon_threadsafe(pending[0].set_result, None)
        assert ack.result(5) is None

        async def write_failing() -> asyncio.Future[None]:
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            future.set_exception(ValueError("lost"))
            return future

        failed = facade._acknowledged(write_failing)
        with pytest.raises(ValueError, match="lost"):
            failed.result(5)
    finally:
        owner.close()


def test_with_closes_and_returns_the_wrapper() -> None:
    owner = _Owner()
    try:
        closable = _Closable(owner._runner)
        with closable as entered:
            assert entered is closable
        assert closable.closes == 1
    finally:
        owner.close()


def test_a_loop_owner_closes_on_its_loop_once_then_stops_it() -> None:
    with _Owner() as owner:
        pass
    assert len(owner.closed_on) == 1 and owner.closed_on[0] is not threading.current_thread()
    assert owner._runner.loop.is_closed()
    owner.close()  # idempotent
    assert len(owner.closed_on) == 1
    with pytest.raises(LoopClosedError):
        owner._call(int)


def test_a_loop_owner_stops_its_loop_even_if_closing_fails() -> None:
    owner = _Owner(fail_closing=True)
    with pytest.raises(RuntimeError, match="closing failed"):
        owner.close()
    assert owner._runner.loop.is_closed()
