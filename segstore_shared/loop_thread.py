"""The bridge from blocking callers to asyncio: an event loop in a daemon thread of its own.

Every blocking wrapper (the segment client's :class:`~segment_store.client.sync.BlockingClient`, the client
library's ``Blocking*`` classes, the Spark connector's cluster connection) runs one :class:`LoopThread` and submits
coroutines to it with :meth:`LoopThread.run`, which blocks the calling thread until the coroutine ends and re-raises
its error. Any number of threads may share one. A call made from the loop's own thread would deadlock and is refused
(``RuntimeError``); a call after :meth:`LoopThread.stop` raises the ``closed_error`` the owner chose.

The wrappers share their plumbing through three bases, so it is written once:

* :class:`BlockingFacade` - the loop thread and ``_run`` (plus ``_call`` for a plain function that must run on
  the loop, and ``_acknowledged`` for a write whose loop future becomes a ``concurrent.futures.Future``);
* :class:`ClosableFacade` - ``with`` closes it;
* :class:`LoopOwningFacade` - starts a loop thread of its own; ``close()`` closes what runs on it, then stops it.
"""

from __future__ import annotations

import abc
import asyncio
import concurrent.futures
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Self, TypeVar

from segstore_shared.errors import SegstoreError

T = TypeVar("T")


class LoopClosedError(SegstoreError):
    """The loop thread was stopped: nothing more can run on it."""


class LoopThread:
    """An event loop running in its own daemon thread until :meth:`stop`."""

    def __init__(self, name: str, closed_error: type[Exception] = LoopClosedError) -> None:
        self.loop = asyncio.new_event_loop()
        self._closed_error = closed_error
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, coroutine: Coroutine[Any, Any, T], timeout_s: float | None = None) -> T:
        """Run ``coroutine`` on the loop and wait for it (at most ``timeout_s``, then ``TimeoutError``)."""
        if threading.current_thread() is self._thread:
            coroutine.close()
            raise RuntimeError("a blocking client call cannot be made from its own event loop thread")
        if self.loop.is_closed():
            coroutine.close()
            raise self._closed_error("the blocking client is closed")
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout_s)

    def stop(self) -> None:
        """Stop the loop and join its thread (idempotent); what still runs on it is abandoned."""
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


def relay_result(source: asyncio.Future[None], target: concurrent.futures.Future[None]) -> None:
    """Complete ``target`` (a thread future) as ``source`` (a loop future) completed; no-op if already done."""
    if target.done():
        return
    if source.cancelled():
        target.cancel()
    elif (error := source.exception()) is not None:
        target.set_exception(error)
    else:
        target.set_result(None)


class BlockingFacade:
    """Base of a blocking wrapper: the :class:`LoopThread` its coroutines run on (shared with the wrapper that
    made it) and the calls that run them there."""

    def __init__(self, runner: LoopThread) -> None:
        self._runner = runner

    def _run(self, coroutine: Coroutine[Any, Any, T], timeout_s: float | None = None) -> T:
        """Run ``coroutine`` on the loop and wait for it (see :meth:`LoopThread.run`)."""
        return self._runner.run(coroutine, timeout_s)

    def _call(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Call a plain function on the loop thread (objects that make futures or tasks must be made there)."""
        return self._run(_called(function, *args, **kwargs))

    def _acknowledged(self, write: Callable[[], Awaitable[asyncio.Future[None]]]) -> concurrent.futures.Future[None]:
        """Run ``write()`` on the loop (it queues data, blocking while a window is full, and returns the loop future
        of its acknowledgement); the thread future returned completes as that one does."""
        ack: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._run(_relayed(write, ack))
        return ack


async def _called(function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    return function(*args, **kwargs)


async def _relayed(write: Callable[[], Awaitable[asyncio.Future[None]]], ack: concurrent.futures.Future[None]) -> None:
    future = await write()
    future.add_done_callback(lambda f: relay_result(f, ack))


class ClosableFacade(BlockingFacade, abc.ABC):
    """A blocking wrapper that ``with`` closes."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @abc.abstractmethod
    def close(self) -> None:
        """Close what this wraps."""


class LoopOwningFacade(ClosableFacade):
    """A blocking wrapper with a loop thread of its own, started here and stopped by :meth:`close`."""

    def __init__(self, name: str, closed_error: type[Exception] = LoopClosedError) -> None:
        super().__init__(LoopThread(name, closed_error))

    def close(self) -> None:
        """Close what runs on the loop (:meth:`_close_on_loop`), then stop the loop thread (even if that failed).
        Idempotent."""
        if self._runner.loop.is_closed():
            return
        try:
            self._close_on_loop()
        finally:
            self._runner.stop()

    @abc.abstractmethod
    def _close_on_loop(self) -> None:
        """Close what runs on the loop (called once, from :meth:`close`, while the loop still runs)."""
