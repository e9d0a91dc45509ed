"""Where a container (and so a segment) is served: the controller's read side of the assignment.

:class:`HostStore` follows ``/cluster/container-assignment`` through a data watch and answers from its
copy, so lookups do not touch ZooKeeper. The copy may lag the node briefly; a client sent to the
wrong host gets ``WrongHost`` and asks again. Pravega's ``HostControllerStore`` (``getHostForSegment``).
"""

from __future__ import annotations

import asyncio
import logging

from segstore_shared.cluster.container_mapping import container_of
from segstore_shared.cluster.layout import (
    ASSIGNMENT_PATH,
    AssignmentFormatError,
    ContainerAssignment,
    ContainerCountMismatchError,
    NoOwnerError,
    parse_host_id,
)
from segstore_shared.coordination.store import CoordinationStore, NodeNotFoundError, Versioned, WatchHandle

log = logging.getLogger(__name__)

Endpoint = tuple[str, int]


class HostStore:
    """Container -> segment store endpoint, from the cluster's assignment (``container_count`` containers)."""

    def __init__(self, store: CoordinationStore, container_count: int) -> None:
        if container_count <= 0:
            raise ValueError(f"container_count must be positive, not {container_count}")
        self.container_count = container_count
        self._store = store
        self._assignment: ContainerAssignment | None = None
        self._version: int | None = None
        self._watch: WatchHandle | None = None
        self._changed = asyncio.Event()
        self.failure: BaseException | None = None
        """Why the latest assignment seen was not taken (count mismatch, unreadable), else None."""

    async def start(self) -> None:
        """Check the cluster's container count and follow the assignment; raises ContainerCountMismatchError."""
        try:
            node = await self._store.get(ASSIGNMENT_PATH)
        except NodeNotFoundError:
            pass
        else:
            ContainerAssignment.decode(node.data).check_container_count(self.container_count)
        self._watch = await self._store.watch_data(ASSIGNMENT_PATH, self._on_assignment)

    async def stop(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None

    @property
    def assignment(self) -> ContainerAssignment | None:
        """The latest assignment taken (None before there is one)."""
        return self._assignment

    @property
    def version(self) -> int | None:
        """Version of the assignment node the copy is at."""
        return self._version

    def endpoint_of_container(self, container_id: int) -> Endpoint | None:
        """``(host, port)`` of the segment store running ``container_id``, or None if none does now."""
        if not 0 <= container_id < self.container_count:
            raise ValueError(f"container id {container_id} outside [0, {self.container_count})")
        if self._assignment is None:
            return None
        owner = self._assignment.owner_of(container_id)
        return None if owner is None else parse_host_id(owner)

    def endpoint_of_segment(self, segment: str) -> Endpoint | None:
        """The endpoint of the container owning ``segment`` (``container_of``), or None."""
        return self.endpoint_of_container(container_of(segment, self.container_count))

    async def resolve(self, segment: str) -> Endpoint:
        """Like :meth:`endpoint_of_segment`, as a segment client resolver: raises
        :class:`~segstore_shared.cluster.layout.NoOwnerError` (retriable) when nobody owns it now."""
        endpoint = self.endpoint_of_segment(segment)
        if endpoint is None:
            raise NoOwnerError(container_of(segment, self.container_count))
        return endpoint

    async def wait_all_assigned(self) -> ContainerAssignment:
        """Return the assignment once every container has a segment store (a controller's readiness check;
        the containers may still be recovering there). Bound it with ``asyncio.timeout``."""
        while True:
            assignment = self._assignment
            if assignment is not None and len(assignment.owners()) == self.container_count:
                return assignment
            self._changed.clear()
            await self._changed.wait()

    async def wait_for_change(self) -> None:
        """Return after the next assignment change is taken (for tests and tools)."""
        self._changed.clear()
        await self._changed.wait()

    def _on_assignment(self, node: Versioned | None) -> None:
        if node is None:
            self._assignment, self._version = None, None
        else:
            try:
                assignment = ContainerAssignment.decode(node.data)
                assignment.check_container_count(self.container_count)
            except (AssignmentFormatError, ContainerCountMismatchError) as exc:
                self.failure = exc
                log.error("host store: ignoring container assignment version %d: %s", node.version, exc)
                return
            self._assignment, self._version = assignment, node.version
        self.failure = None
        self._changed.set()
