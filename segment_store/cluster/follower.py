"""A segment store follows the controller's container assignment (Pravega's ``ZKSegmentContainerMonitor``).

The follower watches ``/cluster/container-assignment`` and makes the containers running here those
assigned to this host: it stops the ones taken away and starts (recovers, fencing the previous
owner through Tier-1) the ones given to it.

Invariants:

- **One change at a time.** One task applies changes; start and stop calls on the registry never
  overlap. Within a change, stops come before starts. Changes that arrive while one is being applied
  are coalesced: the latest assignment is applied next (an intermediate one is never acted on).
- **Failed starts are retried** with backoff (``retry_delay_s`` doubling up to ``max_retry_delay_s``)
  while the container stays assigned here.
- **Session loss.** When the ZooKeeper session expires the process may no longer own anything (the
  balancer may already have moved its containers): every container is stopped, and nothing is started
  until the store is connected again; then the assignment is read afresh and applied. kazoo hears of an
  expiry only once it reaches ZooKeeper again, so a store cut off ZooKeeper for longer than
  ``disconnected_limit_s`` after kazoo reported the link SUSPENDED stops its containers then, instead of
  serving containers moved elsewhere for as long as the cut lasts. The service passes
  :func:`~segstore_shared.coordination.store.suspended_limit_s` (a third of the session timeout: kazoo
  notices a silent link up to two thirds of it late), so a store stops no later than ZooKeeper may expire its
  session: no stale answers (a segment's length without the appends its new owner took since, a tail cut that
  leaves acknowledged events out) overlap the new owner.
- **A move waits for the old owner.** A container is started only while this host holds its owner node
  (:class:`~segment_store.cluster.claims.ContainerClaims`), and the node is released only after the container
  stopped here. A container whose node another host holds is *waiting*: it starts when that node goes (the old
  owner stopped it, or its session ended), and the assignment counts as applied only then.
- **Restarts.** :meth:`ContainerAssignmentFollower.should_run` says whether a container is assigned
  here now; the container registry consults it before restarting a failed container.
- **Container count.** :meth:`start` raises :class:`ContainerCountMismatchError` when the cluster's
  assignment has another count; a mismatching assignment seen later is not applied (logged, and kept
  in :attr:`ContainerAssignmentFollower.failure`).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from typing import Protocol

from segment_store.cluster.claims import ContainerClaims
from segstore_shared.cluster.layout import (
    ASSIGNMENT_PATH,
    AssignmentFormatError,
    ContainerAssignment,
    ContainerCountMismatchError,
)
from segstore_shared.coordination.store import (
    CoordinationError,
    CoordinationStore,
    NodeNotFoundError,
    SessionState,
    Versioned,
    WatchHandle,
)

log = logging.getLogger(__name__)


class _Applied(enum.Enum):
    DONE = "done"
    WAITING = "waiting for another host to release a container"
    FAILED = "failed"


class ContainerRunner(Protocol):
    """What the follower drives (``ContainerRegistry`` is one)."""

    async def start_container(self, container_id: int) -> object:
        """Start (recover) the container here; returns once it serves; raises if it cannot start."""
        ...

    async def stop_container(self, container_id: int) -> None:
        """Stop the container here (no-op if it does not run)."""
        ...

    def holds(self, container_id: int) -> bool:
        """Whether the container is here (running, starting, or failed and being restarted)."""
        ...


class ContainerAssignmentFollower:
    """Drives a :class:`ContainerRunner` from the assignment of ``host_id``; see the module docstring."""

    def __init__(
        self,
        store: CoordinationStore,
        runner: ContainerRunner,
        host_id: str,
        container_count: int,
        *,
        retry_delay_s: float = 0.5,
        max_retry_delay_s: float = 10.0,
        disconnected_limit_s: float | None = None,
        token: str | None = None,
    ) -> None:
        """``disconnected_limit_s``: stop every container after this long without ZooKeeper (module docstring;
        None: only when the session is reported lost). ``token``: unique to this process (its owner nodes')."""
        self.host_id = host_id
        self.container_count = container_count
        self._store = store
        self._runner = runner
        self._claims = ContainerClaims(store, host_id, token)
        self._waiting: dict[int, str] = {}  # assigned here, its owner node held by this other host
        self._retry_delay_s = retry_delay_s
        self._max_retry_delay_s = max_retry_delay_s
        self._target: frozenset[int] = frozenset()  # assigned here by the latest assignment seen
        self._running: set[int] = set()  # started through the runner and not stopped since
        self._mapping_version: int | None = None
        self._session_live = True
        self._losses = 0  # session losses heard
        self._losses_handled = 0  # session losses after which everything was stopped
        self._refresh = False
        self._stopping = False
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._handles: list[WatchHandle] = []
        self._retry: asyncio.TimerHandle | None = None
        self._disconnected_limit_s = disconnected_limit_s
        self._cut_off: asyncio.TimerHandle | None = None
        self._idle = asyncio.Event()
        self.failure: BaseException | None = None
        """The latest assignment this follower refused to apply (count mismatch, unreadable), else None."""
        self.applied_version: int | None = None
        """Version of the assignment node last applied completely (None: none yet); for tests and metrics."""

    # ---- public ---------------------------------------------------------------------------------------------
    @property
    def assigned(self) -> frozenset[int]:
        """Containers the latest assignment gives to this host (running or being started)."""
        return self._target

    @property
    def running(self) -> frozenset[int]:
        """Containers this follower started and has not stopped."""
        return frozenset(self._running)

    @property
    def waiting(self) -> dict[int, str]:
        """Containers assigned here whose owner node another host still holds -> that host (module docstring)."""
        return dict(self._waiting)

    def should_run(self, container_id: int) -> bool:
        """Whether ``container_id`` is assigned here now and the session is sound (for restarts)."""
        return self._session_live and self._losses == self._losses_handled and container_id in self._target

    async def start(self) -> None:
        """Check the cluster's container count, then follow. Raises :class:`ContainerCountMismatchError`."""
        if self._task is not None:
            raise RuntimeError("ContainerAssignmentFollower.start() called twice")
        with contextlib.suppress(NodeNotFoundError):
            current = await self._store.get(ASSIGNMENT_PATH)
            ContainerAssignment.decode(current.data).check_container_count(self.container_count)
        self._handles.append(await self._store.add_session_listener(self._on_session))
        await self._claims.watch(self._on_owners_changed)
        self._handles.append(await self._store.watch_data(ASSIGNMENT_PATH, self._on_assignment))
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"assignment follower {self.host_id}")

    async def stop(self) -> None:
        """Stop following (containers keep running; the registry's owner closes them); idempotent."""
        self._stopping = True
        for handle in self._handles:
            handle.cancel()
        self._handles.clear()
        self._claims.stop_watching()
        if self._retry is not None:
            self._retry.cancel()
        self._stop_cut_off_timer()
        task, self._task = self._task, None
        if task is not None:
            self._wake.set()
            try:
                async with asyncio.timeout(30):
                    await task  # the loop ends at its next check, after the start or stop under way
            except TimeoutError:
                log.error("assignment follower of %s did not stop in time; cancelling it", self.host_id)
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def wait_idle(self) -> None:
        """Wait until the latest assignment seen is applied (for tests)."""
        await self._idle.wait()

    # ---- events ---------------------------------------------------------------------------------------------
    def _on_assignment(self, node: Versioned | None) -> None:
        if node is None:
            assignment = None
        else:
            try:
                assignment = ContainerAssignment.decode(node.data)
                assignment.check_container_count(self.container_count)
            except (AssignmentFormatError, ContainerCountMismatchError) as exc:
                log.error("%s: not applying container assignment version %d: %s", self.host_id, node.version, exc)
                self.failure = exc
                return
        self.failure = None
        self._target = frozenset() if assignment is None else assignment.containers_of(self.host_id)
        self._mapping_version = None if node is None else node.version
        self._kick()

    def _on_session(self, state: SessionState) -> None:
        if state is SessionState.SUSPENDED:
            if self._disconnected_limit_s is not None and self._cut_off is None and not self._stopping:
                self._cut_off = asyncio.get_running_loop().call_later(self._disconnected_limit_s, self._cut_off_long)
        else:
            self._stop_cut_off_timer()
        if state is SessionState.LOST:
            self._session_live = False
            self._losses += 1
            self._claims.forget()
            log.warning("%s: ZooKeeper session lost: stopping every container until reconnected", self.host_id)
        elif state is SessionState.CONNECTED and not self._session_live:
            self._session_live = True
            self._refresh = True
            log.info("%s: ZooKeeper session re-established: following the assignment again", self.host_id)
        self._kick()

    def _on_owners_changed(self) -> None:
        if self._waiting:
            self._kick()

    def _stop_cut_off_timer(self) -> None:
        if self._cut_off is not None:
            self._cut_off.cancel()
            self._cut_off = None

    def _cut_off_long(self) -> None:
        """No ZooKeeper for ``disconnected_limit_s``: the session is as good as expired (module docstring)."""
        self._cut_off = None
        if self._session_live and not self._stopping:
            self._session_live = False
            self._losses += 1
            log.warning("%s: no ZooKeeper for %.1f s (its session may expire by now): stopping every container until "
                        "reconnected", self.host_id, self._disconnected_limit_s)  # fmt: skip
            self._kick()

    def _kick(self) -> None:
        self._idle.clear()
        self._wake.set()

    # ---- the loop -------------------------------------------------------------------------------------------
    def _interrupted(self) -> bool:
        return self._stopping or not self._session_live or self._losses != self._losses_handled

    async def _run(self) -> None:
        delay = self._retry_delay_s
        while not self._stopping:
            await self._wake.wait()
            self._wake.clear()
            if self._stopping:
                break
            if self._losses != self._losses_handled:
                self._losses_handled = self._losses
                await self._stop_all()
            if not self._session_live:
                continue
            if self._refresh and not await self._reread():
                self._retry_later(delay)
                continue
            version = self._mapping_version
            outcome = await self._apply()
            if outcome is _Applied.DONE:
                delay = self._retry_delay_s
                if not self._wake.is_set():
                    self.applied_version = version
                    self._idle.set()
            elif outcome is _Applied.WAITING:  # woken when an owner node goes; the retry only backs the watch up
                delay = self._retry_delay_s
                self._retry_later(self._max_retry_delay_s)
            elif not self._interrupted():
                self._retry_later(delay)
                delay = min(delay * 2, self._max_retry_delay_s)

    def _retry_later(self, delay: float) -> None:
        if self._retry is not None:
            self._retry.cancel()
        self._retry = asyncio.get_running_loop().call_later(delay, self._wake.set)

    async def _reread(self) -> bool:
        """After a new session: read the assignment directly (the watch may not repeat an unchanged one)."""
        try:
            await self._store.sync(ASSIGNMENT_PATH)
            node: Versioned | None = await self._store.get(ASSIGNMENT_PATH)
        except NodeNotFoundError:
            node = None
        except CoordinationError as exc:
            log.info("%s: cannot read the container assignment yet: %r", self.host_id, exc)
            return False
        self._refresh = False
        known = self._mapping_version
        if node is None or known is None or node.version >= known:  # the watch may have seen a newer one
            self._on_assignment(node)
        return True

    async def _apply(self) -> _Applied:
        """Stop what is no longer assigned and release its owner node, then claim and start what is newly
        assigned: FAILED if a step failed (retried with backoff), WAITING if another host still holds a node."""
        # A container that failed while not assigned here was dropped by the registry, not restarted: if it
        # is assigned here again, it must be started again.
        self._running = {container_id for container_id in self._running if self._runner.holds(container_id)}
        for container_id in sorted(self._running - self._target):
            if self._interrupted():
                return _Applied.FAILED
            await self._stop(container_id)
        ok = await self._release_unassigned()
        self._waiting = {c: holder for c, holder in self._waiting.items() if c in self._target}
        for container_id in sorted(self._target - self._running):
            if self._interrupted():
                return _Applied.FAILED
            if container_id not in self._target:  # taken away while we were starting another one
                continue
            if not await self._claimed(container_id):
                ok = ok and container_id in self._waiting
                continue
            try:
                await self._runner.start_container(container_id)
            except Exception as exc:  # logged; retried with backoff while still assigned here
                log.error("%s: container %d did not start: %r", self.host_id, container_id, exc)
                ok = False
                continue
            self._running.add(container_id)
            log.info("%s: container %d started (assignment version %s)", self.host_id, container_id,
                     self._mapping_version)  # fmt: skip
        if not ok:
            return _Applied.FAILED
        return _Applied.WAITING if self._waiting else _Applied.DONE

    async def _claimed(self, container_id: int) -> bool:
        """Whether this host holds the container's owner node now (claiming it if free)."""
        try:
            holder = await self._claims.claim(container_id)
        except CoordinationError as exc:
            log.info("%s: cannot claim container %d yet: %r", self.host_id, container_id, exc)
            return False
        if holder is None:
            if self._waiting.pop(container_id, None) is not None:
                log.info("%s: container %d released by its previous owner", self.host_id, container_id)
            return True
        if self._waiting.get(container_id) != holder:
            log.info("%s: container %d is assigned here but %s still runs it: starting it once that host stopped "
                     "it or its ZooKeeper session ended", self.host_id, container_id, holder)  # fmt: skip
        self._waiting[container_id] = holder
        return False

    async def _release_unassigned(self) -> bool:
        """Release the owner nodes of containers neither assigned nor running here; False if one failed."""
        ok = True
        for container_id in sorted(self._claims.held - self._target - self._running):
            try:
                await self._claims.release(container_id)
            except CoordinationError as exc:
                log.info("%s: cannot release container %d yet: %r", self.host_id, container_id, exc)
                ok = False
        return ok

    async def _stop(self, container_id: int) -> None:
        self._running.discard(container_id)
        try:
            await self._runner.stop_container(container_id)
        except Exception as exc:  # the registry forgot it already; a failed stop leaves nothing to retry
            log.error("%s: container %d did not stop cleanly: %r", self.host_id, container_id, exc)
        else:
            log.info("%s: container %d stopped", self.host_id, container_id)

    async def _stop_all(self) -> None:
        for container_id in sorted(self._running):
            await self._stop(container_id)
