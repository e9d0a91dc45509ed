"""A segment store process announces itself: one ephemeral node per live process.

The node is ``/cluster/segmentstores/<host>:<port>`` (the advertised endpoint) holding
:class:`~segstore_shared.cluster.layout.HostInfo` as JSON. It lives as long as the process's
ZooKeeper session; the leader controller's balancer watches these nodes to place containers.

Invariants:

- **Re-registration.** When the session expires the node is gone; once the store is connected
  again (on a new session) the node is created again. If someone deletes it, the same.
- **Stale nodes.** After a ``kill -9`` and a quick restart on the same endpoint, the old process's
  node lingers until its session times out. The new process recognises it is not its own (the
  ``token`` differs) and keeps retrying until it can create its own; it never deletes a node it
  did not create (it could belong to a live, misconfigured twin).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
import uuid

from segstore_shared.cluster.layout import SEGMENT_STORES_PATH, HostInfo, host_id
from segstore_shared.coordination.store import (
    CoordinationError,
    CoordinationStore,
    NodeExistsError,
    NodeNotFoundError,
    SessionState,
    Versioned,
)
from segstore_shared.coordination.watches import StoreWatches

log = logging.getLogger(__name__)


class HostRegistration:
    """Keeps this process's registration node in place until :meth:`stop`.

    :meth:`start` returns at once (registration may wait for a stale node to expire); await
    :meth:`wait_registered` to know the node is there. Use from one event loop.
    """

    def __init__(
        self,
        store: CoordinationStore,
        host: str,
        port: int,
        *,
        retry_delay_s: float = 0.5,
        root: str = SEGMENT_STORES_PATH,
        name: str | None = None,
        role: str = "segment store",
    ) -> None:
        """``root``/``name``: where the node goes (default ``/cluster/segmentstores/<host:port>``); the same
        guarantees hold for any ephemeral claim a process makes (a controller's membership, a bucket it owns);
        ``role`` names it in logs."""
        self.host_id = host_id(host, port)
        self.path = f"{root}/{name or self.host_id}"
        self._role = role
        self.info = HostInfo(host, port, os.getpid(), time.time(), uuid.uuid4().hex)
        self._data = self.info.encode()
        self._store = store
        self._retry_delay_s = retry_delay_s
        self._registered = asyncio.Event()
        self._wake = asyncio.Event()
        self._watches = StoreWatches(store)
        self._stopping = False
        self.registrations = 0
        """How many times the node was created (1 + re-registrations); for tests and metrics."""

    @property
    def registered(self) -> bool:
        """Whether the node is known to be there now."""
        return self._registered.is_set()

    async def wait_registered(self) -> None:
        await self._registered.wait()

    async def start(self) -> None:
        if self._watches.running:
            raise RuntimeError("HostRegistration.start() called twice")
        await self._watches.session(self._on_session)
        await self._watches.data(self.path, self._on_node)
        self._watches.run(self._run(), name=f"registration {self.host_id}")

    async def stop(self) -> None:
        """Stop re-registering and delete the node if it is this process's own; idempotent."""
        self._stopping = True
        await self._watches.stop()
        if self._registered.is_set():
            self._registered.clear()
            with contextlib.suppress(CoordinationError):
                node = await self._store.get(self.path)
                if node.data == self._data:
                    await self._store.delete(self.path, node.version)

    # ---- events ---------------------------------------------------------------------------------------------
    def _on_session(self, state: SessionState) -> None:
        if state is SessionState.LOST:
            self._registered.clear()
            log.warning("%s: ZooKeeper session lost; registering again once reconnected", self.path)
        self._wake.set()

    def _on_node(self, node: Versioned | None) -> None:
        if node is None or node.data != self._data:
            self._registered.clear()
            self._wake.set()

    # ---- the loop -------------------------------------------------------------------------------------------
    async def _run(self) -> None:
        warned = False
        while not self._stopping:
            if not self._registered.is_set():
                try:
                    await self._register_once()
                except NodeExistsError:
                    if not warned:
                        log.warning("%s: a registration of another process is there; waiting for it to go", self.path)
                        warned = True
                except CoordinationError as exc:  # unavailable, or an unexpected store error: retried
                    log.info("%s: registration failed, retrying: %r", self.path, exc)
            if self._registered.is_set():
                warned = False
                await self._wake.wait()
            else:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._retry_delay_s):
                        await self._wake.wait()
            self._wake.clear()

    async def _register_once(self) -> None:
        try:
            await self._store.create(self.path, self._data, ephemeral=True, make_parents=True)
        except NodeExistsError:
            try:
                node = await self._store.get(self.path)
            except NodeNotFoundError:
                return  # gone in between: the next round creates it
            if node.data != self._data:
                raise
        else:
            self.registrations += 1
            log.info("registered %s %s (pid %d)", self._role, self.path, self.info.pid)
        self._registered.set()
