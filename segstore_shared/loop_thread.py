"""The bridge from blocking callers to asyncio: an event loop in a daemon thread of its own.

Every blocking wrapper (the segment client's :class:`~segment_store.client.sync.BlockingClient`, the client
library's ``Blocking*`` classes, the Spark connector's cluster connection) runs one :class:`LoopThread` and submits
coroutines to it with :meth:`LoopThread.run`, which blocks the calling thread until the coroutine ends and re-raises
its error. Any number of threads may share one. A call made from the loop's own thread would deadlock and is refused
(``RuntimeError``); a call after :meth:`LoopThread.stop` raises the ``closed_error`` the owner chose.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

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
