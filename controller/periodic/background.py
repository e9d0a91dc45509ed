"""One controller's periodic background work over the streams of the buckets it owns
(:mod:`controller.cluster.buckets`).

Loops, each on its own period, each skipping a round's stream unless this controller owns the stream's bucket
at that moment:

- **sweep** (every ``txn_timeout_check_s``): the streams of buckets gained since the last round — and all
  owned streams after another controller left the cluster, and all of them every ``txn_scan_period_s`` —
  have their workflows resumed (a scale, truncation, seal, delete or transaction commit a dead controller
  left midway finishes) and their open transactions tracked (on a full scan, outcomes of transactions
  completed more than ``completed_txn_ttl_s`` ago are forgotten); then every tracked transaction of an owned
  stream whose lease has expired is aborted (Pravega's timeout service and failover sweepers);
- **retention** (``retention_period_s``), **auto-scaling** (``auto_scale_period_s``), **watermarks**
  (``watermark_period_s``): per stream, see :class:`~controller.core.ControllerCore` (which the loops see as
  :class:`~controller.periodic.PeriodicCore`).

``runs`` counts what ran per (kind, scope, stream), and each run is logged at DEBUG on this module's logger:
that is how a test sees which controller did a stream's work. A failure of one stream's work is logged and
does not stop the loop (the next round tries again); a round still running after ``SLOW_WARNING_S`` logs where
it waits.

Part of :mod:`controller.periodic`: imports the bucket scope (:mod:`controller.cluster.buckets`) and the package's
:class:`~controller.periodic.PeriodicCore`, never :mod:`controller.core` nor the rounds it runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable

from controller.cluster.buckets import WorkScope
from controller.periodic import PeriodicCore, PerStream
from segstore_shared.stuck import warn_if_slow

log = logging.getLogger(__name__)

SLOW_WARNING_S = 30.0
"""A round running this long logs where it waits (again each as long): a hang names its line."""


class BackgroundWork:
    def __init__(self, core: PeriodicCore, scope: WorkScope, clock: Callable[[], float] = time.monotonic) -> None:
        self._core = core
        self._scope = scope
        self._clock = clock
        self._tasks: list[asyncio.Task[None]] = []
        self._swept: frozenset[int] = frozenset()
        self._departures = scope.departures
        self._next_scan = 0.0
        self.runs: Counter[tuple[str, str, str]] = Counter()

    def start(self) -> None:
        config = self._core.config
        loops: list[tuple[str, float, Callable[[], Awaitable[object]]]] = [
            ("sweep", config.txn_timeout_check_s, self.sweep),
            ("retention", config.retention_period_s, lambda: self.for_owned("retention", self._core.retain)),
            ("auto-scale", config.auto_scale_period_s, lambda: self.for_owned("auto-scale", self._core.auto_scale)),
            ("watermark", config.watermark_period_s, lambda: self.for_owned("watermark", self._core.watermark)),
        ]
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._every(name, period, work), name=name) for name, period, work in loops]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()

    async def _every(self, name: str, period_s: float, work: Callable[[], Awaitable[object]]) -> None:
        while True:
            await asyncio.sleep(period_s)
            try:
                async with warn_if_slow(f"background work {name}", SLOW_WARNING_S, log):
                    await work()
            except Exception:
                log.exception("background work %s failed", name)

    async def for_owned(self, kind: str, work: PerStream, only: frozenset[int] | None = None) -> None:
        """Run ``work`` on every stream this controller owns now (of the buckets ``only``, if given)."""
        async for scope, stream in self._core.all_streams():
            if not self._scope.owns(scope, stream):
                continue
            if only is not None and self._scope.bucket_of(scope, stream) not in only:
                continue
            if await self._core.guarded(kind, scope, stream, work):
                self.runs[(kind, scope, stream)] += 1
                log.debug("periodic %s of %s/%s", kind, scope, stream)

    async def sweep(self) -> None:
        """Resume what needs it (see the module docstring), then abort expired transactions of owned streams."""
        owned = self._scope.owned_buckets()
        now = self._clock()
        departures = self._scope.departures
        if departures != self._departures or now >= self._next_scan:
            to_resume = owned
            self._next_scan = now + self._core.config.txn_scan_period_s
        else:
            to_resume = owned - self._swept
        self._swept, self._departures = owned, departures
        if to_resume:
            await self.for_owned("resume", self._core.resume, only=to_resume)
            if to_resume == owned:  # a full scan: forget old transaction outcomes too
                await self.for_owned("forget-completed", self._core.forget_completed_transactions)
        await self._core.txns.abort_expired(self._scope.owns)
