"""Whether this process's ZooKeeper session may still be alive, judged by the process itself, per request.

A process that owns things only while its session lives (a segment store its containers) must not act for them once
ZooKeeper may have expired the session: their next owner may be running them. The session-state events of the
client cover a link that breaks while the process runs (:func:`~segstore_shared.coordination.store.suspended_limit_s`),
not a process that was frozen (SIGSTOP, a VM paused, a long swap-in): its client thread notices the expiry only
after the process runs again, and by then the process may have answered a request queued while it was frozen, from
its stale state (a segment's length without the appends the new owner took meanwhile).

:class:`SessionLease` closes that: a heartbeat asks ZooKeeper something cheap (``exists`` of the root) every
``session_timeout_s / 6``; ZooKeeper expires a session only ``session_timeout_s`` after it last heard from the
client, and it heard from us after we sent a request it answered, so the session lives at least until the send
time of the last answered heartbeat plus the session timeout. :meth:`SessionLease.refusal` is None until then
(minus ``margin_s``), a reason afterwards, until a heartbeat is answered again. The check is a clock read: it
costs nothing per request. The clock is ``time.monotonic`` (it runs while a process is stopped).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from segstore_shared.coordination.store import CoordinationError, CoordinationStore

log = logging.getLogger(__name__)


class SessionLease:
    """See the module docstring. ``clock``: seconds, monotonic (tests give their own)."""

    def __init__(
        self,
        store: CoordinationStore,
        session_timeout_s: float,
        *,
        margin_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if session_timeout_s <= 0:
            raise ValueError(f"session_timeout_s: must be positive, not {session_timeout_s}")
        self._store = store
        self.session_timeout_s = session_timeout_s
        self.margin_s = session_timeout_s / 10 if margin_s is None else margin_s
        self._clock = clock
        self._answered_sent_at: float | None = None
        self._task: asyncio.Task[None] | None = None
        self._lapsed = False  # refused last time it was asked (its changes are logged, once each)

    async def start(self) -> None:
        """One heartbeat now (the lease starts valid only once ZooKeeper answered), then one every sixth of the
        session timeout in the background."""
        await self.beat()
        self._task = asyncio.create_task(self._run(), name="zookeeper-session-lease")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def beat(self) -> bool:
        """Ask ZooKeeper once; True (and the lease renewed from this request's send time) if it answered."""
        sent = self._clock()
        try:
            await self._store.exists("/")
        except CoordinationError:
            return False
        if self._answered_sent_at is None or sent > self._answered_sent_at:
            self._answered_sent_at = sent
        return True

    async def _run(self) -> None:
        interval = self.session_timeout_s / 6
        while True:
            await asyncio.sleep(interval)
            await self.beat()

    def refusal(self) -> str | None:
        """None while the session surely lives; else why this process must not act for what the session holds."""
        sent = self._answered_sent_at
        if sent is None:
            return "no answer from ZooKeeper yet"
        silent = self._clock() - sent
        if silent < self.session_timeout_s - self.margin_s:
            if self._lapsed:
                self._lapsed = False
                log.info("ZooKeeper answers again: the session lives")
            return None
        reason = f"no answer from ZooKeeper for {silent:.1f} s: the session may have expired"
        if not self._lapsed:
            self._lapsed = True
            log.warning("%s; not answering for anything it holds until ZooKeeper answers", reason)
        return reason
