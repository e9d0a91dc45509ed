"""How a server command (``segstore controller``, ``segstore segmentstore``) ends on SIGINT or SIGTERM.

- **While it starts**, a signal cancels the start and the process exits 0: a controller waiting for a ZooKeeper
  that does not answer ends at once, not after its connect timeout.
- **Once it serves**, the first signal stops the service cleanly. If that takes longer than ``bound_s``
  (something the stop waits for does not answer, e.g. ZooKeeper gone), the process says so in one line and exits 1
  without waiting further: a stop request is never ignored (two controllers whose ZooKeeper was gone once outlived
  their SIGTERM by hours).
- **A second signal** exits at once (1).

The process ends through ``os._exit`` in all but a clean stop: threads blocked on an unreachable server (kazoo's)
would otherwise keep the interpreter from exiting. What the command started itself (its ``before_exit``: an
embedded ZooKeeper) is stopped and the logs are flushed first.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import NoReturn, TypeVar

T = TypeVar("T")

STOP_BOUND_S = 25.0
"""How long a clean stop may take (the standalone and the self-test send SIGKILL after 30 s and 20 s)."""

log = logging.getLogger(__name__)


class Stopping:
    """The stop signals of one server command; create and use on its event loop (see the module docstring)."""

    def __init__(
        self, command: str, bound_s: float = STOP_BOUND_S, before_exit: Callable[[], object] | None = None
    ) -> None:
        """``before_exit``: run before an exit that skips the clean stop (it stops the command's own children, e.g. an
        embedded ZooKeeper, which would otherwise outlive the process)."""
        self.command = command
        self.bound_s = bound_s
        self._before_exit = before_exit
        self.requested = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._signalled, sig)

    def _signalled(self, sig: signal.Signals) -> None:
        if self.requested.is_set():
            self._exit_now(f"{sig.name} again")
        log.info("%s received: stopping", sig.name)
        self.requested.set()

    async def started(self, start: Awaitable[T]) -> T:
        """``start``'s result; when a signal comes first the start is cancelled and the process exits 0 (a thread
        still waiting for a server the start called would keep a normal exit waiting)."""
        task = asyncio.ensure_future(start)
        signalled = asyncio.ensure_future(self.requested.wait())
        try:
            await asyncio.wait({task, signalled}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            signalled.cancel()
        if task.done():
            return task.result()
        task.cancel()
        try:
            async with asyncio.timeout(self.bound_s):
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        except TimeoutError:
            self._exit_now(f"the start did not end within {self.bound_s:.0f} s of the stop request")
        self._exit_now("stopped before it was ready", 0)

    async def stop(self, stop: Awaitable[None]) -> None:
        """Wait for a signal, then run ``stop`` within the bound (exit 1 past it)."""
        await self.requested.wait()
        try:
            async with asyncio.timeout(self.bound_s):
                await stop
        except TimeoutError:
            self._exit_now(f"the clean stop did not end within {self.bound_s:.0f} s")

    def _exit_now(self, why: str, code: int = 1) -> NoReturn:
        if code:
            why = f"{why}: exiting without waiting further"
        log.log(logging.ERROR if code else logging.INFO, "%s", why)
        print(f"segstore {self.command}: {why}", file=sys.stderr, flush=True)
        if self._before_exit is not None:
            try:
                self._before_exit()
            except Exception:  # logged: the exit goes on (its children may outlive it, as before this existed)
                log.exception("stopping what this process started")
        logging.shutdown()
        os._exit(code)
