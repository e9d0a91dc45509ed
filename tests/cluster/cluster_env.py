"""Helpers of the cluster tests: waiting, reading the assignment, registering fake hosts, recording runners."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from segstore_shared.cluster.layout import ASSIGNMENT_PATH, SEGMENT_STORES_PATH, ContainerAssignment, HostInfo
from segstore_shared.coordination.memory_store import MemoryCoordinationServer, MemoryCoordinationStore
from segstore_shared.coordination.store import CoordinationStore, NodeNotFoundError


async def wait_until(condition: Callable[[], bool], timeout_s: float = 10.0, what: str = "condition") -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"{what} not reached within {timeout_s}s")
        await asyncio.sleep(0.01)


async def read_assignment(store: CoordinationStore) -> ContainerAssignment | None:
    try:
        return ContainerAssignment.decode((await store.get(ASSIGNMENT_PATH)).data)
    except NodeNotFoundError:
        return None


async def write_assignment(store: CoordinationStore, assignment: ContainerAssignment) -> None:
    """Create or overwrite the assignment node (as a controller would)."""
    try:
        node = await store.get(ASSIGNMENT_PATH)
    except NodeNotFoundError:
        await store.create(ASSIGNMENT_PATH, assignment.encode(), make_parents=True)
    else:
        await store.compare_and_set(ASSIGNMENT_PATH, assignment.encode(), node.version)


async def register_host(server: MemoryCoordinationServer, name: str) -> MemoryCoordinationStore:
    """A session holding the ephemeral registration of ``name`` ("host:port"); close it to make the host go."""
    session = server.connect()
    host, port = name.rsplit(":", 1)
    info = HostInfo(host, int(port), 1, 0.0, name)
    await session.create(f"{SEGMENT_STORES_PATH}/{name}", info.encode(), ephemeral=True, make_parents=True)
    return session


def counts(assignment: ContainerAssignment) -> dict[str, int]:
    return {host: len(ids) for host, ids in assignment.hosts.items()}
