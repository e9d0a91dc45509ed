"""Where a container may run now: one ephemeral owner node per running container (a two-step handoff).

The assignment (``/cluster/container-assignment``) says where a container *should* run; it changes in one write,
and the old and the new owner each learn of it on their own time. Fencing through Tier-1 keeps the old owner from
writing once the new one recovered, but not from answering reads: a balancer moving a container away from a live
host that is cut off ZooKeeper (it rebalances onto a host that came back) let the new owner recover and take
appends while the old one, which had not heard of the move, still answered a segment's length from its own state,
and a tail cut built from that length left acknowledged events out.

The owner node ``/cluster/container-owners/<id>`` closes that. Invariants:

- **Claim before start, release after stop.** A segment store starts a container only while it holds the
  container's node (:meth:`ContainerClaims.claim`) and deletes the node only after the container stopped there
  (:meth:`ContainerClaims.release`). So a move from a live host waits until the old owner has stopped the
  container (it saw the new assignment) or its ZooKeeper session is gone (the node is ephemeral). A host cut off
  ZooKeeper stops answering before that session may expire
  (:class:`~segstore_shared.coordination.session_lease.SessionLease`, and the assignment follower's
  ``disconnected_limit_s``): at no moment do two hosts answer for one container.
- **A node is this process's own** when its data is this process's (host id and a token unique per process).
  A node naming this host id with another token was left by an earlier process with this id (``kill -9`` and a
  quick restart: its session lingers): it is taken over at once instead of waiting for that session to expire, as
  the assignment follower starts the host's containers at once anyway (two live processes with one host id are a
  misconfiguration nothing here can tell apart). A node of another host is never deleted.
- **Sessions.** The nodes go with this process's session: after a session loss :meth:`ContainerClaims.forget` is
  called and nothing is held. A claim whose outcome was unknown (ZooKeeper unavailable) is settled by the next
  :meth:`claim`, which finds the node its own.
"""

from __future__ import annotations

import contextlib
import json
import logging
import uuid
from collections.abc import Callable

from segstore_shared.cluster.layout import CONTAINER_OWNERS_PATH, owner_path
from segstore_shared.coordination.store import (
    BadVersionError,
    CoordinationStore,
    NodeExistsError,
    NodeNotFoundError,
    WatchHandle,
)

log = logging.getLogger(__name__)

_TAKE_ATTEMPTS = 5  # a node deleted or replaced between our create and get: try again (bounded)


class ContainerClaims:
    """The owner nodes this process holds; see the module docstring. Use from one event loop."""

    def __init__(self, store: CoordinationStore, host_id: str, token: str | None = None) -> None:
        self.host_id = host_id
        self._store = store
        self._data = json.dumps({"host": host_id, "token": token or uuid.uuid4().hex}, sort_keys=True).encode()
        self._held: set[int] = set()
        self._watch: WatchHandle | None = None

    @property
    def held(self) -> frozenset[int]:
        """Containers whose node this process created and has not released (as far as it knows)."""
        return frozenset(self._held)

    async def watch(self, on_change: Callable[[], None]) -> None:
        """Call ``on_change`` whenever an owner node appears or goes (a claim this process waits for may be free)."""
        with contextlib.suppress(NodeExistsError):  # the directory, once per cluster
            await self._store.create(CONTAINER_OWNERS_PATH, b"", make_parents=True)
        self._watch = await self._store.watch_children(CONTAINER_OWNERS_PATH, lambda _names: on_change())

    def stop_watching(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None

    async def claim(self, container_id: int) -> str | None:
        """Hold the container's node: None once held (now or already), else the host id holding it.

        Raises the store's :class:`~segstore_shared.coordination.store.CoordinationError` when ZooKeeper cannot
        answer (the claim is then retried)."""
        path = owner_path(container_id)
        for _ in range(_TAKE_ATTEMPTS):
            try:
                await self._store.create(path, self._data, ephemeral=True, make_parents=True)
            except NodeExistsError:
                pass
            else:
                self._held.add(container_id)
                return None
            try:
                node = await self._store.get(path)
            except NodeNotFoundError:
                continue  # released in between: create it now
            if node.data == self._data:
                self._held.add(container_id)
                return None
            holder = _holder_of(node.data)
            if holder != self.host_id:
                return holder
            log.warning("container %d: taking over the owner node an earlier process on %s left", container_id,
                        self.host_id)  # fmt: skip
            with contextlib.suppress(NodeNotFoundError, BadVersionError):  # gone or changed in between: look again
                await self._store.delete(path, node.version)
        return "(the owner node keeps changing)"

    async def release(self, container_id: int) -> None:
        """Delete the container's node if it is this process's (after the container stopped here).

        Raises the store's ``CoordinationError`` when ZooKeeper cannot answer; the container stays in
        :attr:`held` and the release is retried by the caller."""
        path = owner_path(container_id)
        try:
            node = await self._store.get(path)
            if node.data == self._data:
                await self._store.delete(path, node.version)
        except (NodeNotFoundError, BadVersionError):
            pass  # gone with an old session, or taken over: not ours any more
        self._held.discard(container_id)

    def forget(self) -> None:
        """The session that held the nodes is gone, and they with it."""
        self._held.clear()


def _holder_of(data: bytes) -> str:
    try:
        return str(json.loads(data)["host"])
    except (ValueError, KeyError, TypeError):
        return f"(unreadable owner node {data[:80]!r})"
