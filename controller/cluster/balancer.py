"""The leader controller keeps the container assignment in line with the live segment stores.

:class:`ContainerBalancer` watches ``/cluster/segmentstores``; after a change it waits
``settle_delay_s`` (changes within that window are coalesced, so a flapping host causes one
reassignment, not many), reads the live hosts and the assignment afresh and writes the result of
:func:`~controller.cluster.balancing.rebalance` with compare-and-set. A lost race (another writer in
between) is recomputed from the new state. Run it only on the elected leader
(:class:`~controller.cluster.cluster_manager.ClusterManager` does that).

Errors: :meth:`ContainerBalancer.start` raises
:class:`~segstore_shared.cluster.layout.ContainerCountMismatchError` when the cluster's assignment has
another container count; a coordination outage is retried every ``retry_delay_s``.

Imports only :mod:`controller.cluster.balancing` and :mod:`segstore_shared` (the cluster component is a leaf of the
controller).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from controller.cluster.balancing import moved_containers, rebalance
from segstore_shared.cluster.layout import (
    ASSIGNMENT_PATH,
    SEGMENT_STORES_PATH,
    AssignmentFormatError,
    ContainerAssignment,
    ContainerCountMismatchError,
)
from segstore_shared.coordination.store import (
    BadVersionError,
    CoordinationError,
    CoordinationStore,
    NodeExistsError,
    NodeNotFoundError,
    WatchHandle,
)

log = logging.getLogger(__name__)


class ContainerBalancer:
    """Writes ``/cluster/container-assignment`` for ``container_count`` containers; see the module docstring."""

    def __init__(
        self,
        store: CoordinationStore,
        container_count: int,
        *,
        settle_delay_s: float = 1.0,
        retry_delay_s: float = 0.5,
        members_path: str = SEGMENT_STORES_PATH,
        assignment_path: str = ASSIGNMENT_PATH,
        what: str = "container",
    ) -> None:
        """``members_path``/``assignment_path``/``what``: the same balancing of other things over other members
        (the controllers' buckets: ``controller.cluster.buckets``)."""
        if container_count <= 0:
            raise ValueError(f"container_count must be positive, not {container_count}")
        self.container_count = container_count
        self._members_path = members_path
        self._assignment_path = assignment_path
        self._what = what
        self._store = store
        self._settle_delay_s = settle_delay_s
        self._retry_delay_s = retry_delay_s
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._watch: WatchHandle | None = None
        self.writes = 0
        """How many assignments this balancer wrote; for tests and metrics."""
        self.rounds = 0
        """How many rounds (after a settle delay) it ran, whether they wrote or not; for tests and metrics."""
        self.failure: BaseException | None = None
        """Why the latest round wrote nothing it should have (count mismatch, unreadable assignment), else None."""

    async def start(self) -> None:
        """Check the container count, then follow the hosts; the first round runs after the settle delay."""
        if self._task is not None:
            raise RuntimeError("ContainerBalancer.start() called twice")
        await self._read_assignment()  # raises ContainerCountMismatchError
        with contextlib.suppress(NodeExistsError):
            await self._store.create(self._members_path, b"", make_parents=True)
        self._watch = await self._store.watch_children(self._members_path, self._on_hosts)
        self._changed.set()
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"{self._what} balancer")

    async def stop(self) -> None:
        """Stop reacting (an assignment write under way may still land); idempotent."""
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _on_hosts(self, _hosts: list[str]) -> None:
        self._changed.set()

    async def _run(self) -> None:
        while True:
            await self._changed.wait()
            await asyncio.sleep(self._settle_delay_s)
            self._changed.clear()
            try:
                await self.balance_once()
            except (ContainerCountMismatchError, AssignmentFormatError) as exc:
                self.failure = exc
                log.error("%s balancer: not writing an assignment: %s", self._what, exc)
            except CoordinationError as exc:
                log.warning("%s balancer: coordination trouble, retrying: %r", self._what, exc)
                await asyncio.sleep(self._retry_delay_s)
                self._changed.set()
            finally:
                self.rounds += 1

    async def balance_once(self) -> ContainerAssignment:
        """Read the live hosts and the assignment now and write the rebalanced one if it differs.

        Returns the assignment in force afterwards. Raises ``ContainerCountMismatchError``,
        ``AssignmentFormatError`` and coordination errors.
        """
        while True:
            await self._store.sync(self._members_path)
            try:
                hosts = await self._store.children(self._members_path)
            except NodeNotFoundError:
                hosts = []
            current, version = await self._read_assignment()
            wanted = rebalance(current, hosts, self.container_count)
            if wanted == current:
                self.failure = None
                return wanted
            try:
                if version is None:
                    await self._store.create(self._assignment_path, wanted.encode(), make_parents=True)
                else:
                    await self._store.compare_and_set(self._assignment_path, wanted.encode(), version)
            except (BadVersionError, NodeExistsError, NodeNotFoundError):
                continue  # someone wrote in between: recompute from what is there now
            self.writes += 1
            self.failure = None
            moves = moved_containers(current, wanted)
            log.info(
                "%s assignment for %d live member(s) of %s: %s; moved %s", self._what, len(hosts), self._members_path,
                dict(wanted.hosts), {cid: f"{old} -> {new}" for cid, (old, new) in sorted(moves.items())},
            )  # fmt: skip
            return wanted

    async def _read_assignment(self) -> tuple[ContainerAssignment | None, int | None]:
        try:
            node = await self._store.get(self._assignment_path)
        except NodeNotFoundError:
            return None, None
        assignment = ContainerAssignment.decode(node.data)
        assignment.check_container_count(self.container_count, self._assignment_path, self._what)
        return assignment, node.version
