"""The watches one object keeps on a coordination store, and the task they wake: started and stopped as one.

Leader election (:mod:`controller.cluster.election`), host registration (:mod:`segstore_shared.cluster.registration`)
and bucket ownership (:mod:`controller.buckets`) each follow nodes of a :class:`CoordinationStore`: they register a
session listener and data or children watches whose callbacks wake one background task, and at stop cancel both.
:class:`StoreWatches` is that piece, written once, over the port (any store: ZooKeeper through kazoo, or in memory).

Guarantees (the store's contract, in one place for its users):

- **When a callback runs.** A data or children callback runs first with the node's state at registration (the data
  callback with ``None`` while the node does not exist), then after every change; consecutive changes may be
  coalesced into one call, and the last state is always delivered. A session callback runs at every later change of
  the session's state, never for the current one.
- **Where.** Every callback runs on the event loop that registered it (the one awaiting :meth:`StoreWatches.data`
  and the like), synchronously, one at a time, in change order; never on a store thread (kazoo's). The task given
  to :meth:`StoreWatches.run` runs on the same loop, so callbacks and task share state without locks.
- **Re-arming.** The store re-arms data and children watches after every delivery, and across a reconnect or a new
  session: nothing is registered again by the user. A children watch ends when its node is deleted.
- **Session loss.** The session listener hears ``LOST`` (the session expired: its ephemeral nodes are gone), then
  ``CONNECTED`` once the store has opened a new session; data and children watches carry over to the new session
  and deliver the node's state again if it changed meanwhile. A user that owns ephemeral nodes re-creates them on
  ``CONNECTED`` (or at once, retrying while the store is unavailable). ``SUSPENDED`` only says the connection is down
  for now: the session, and its ephemeral nodes, may still be alive.
- **Stop.** :meth:`StoreWatches.stop` cancels every watch and listener first (a delivery already queued on the loop
  is dropped: no callback runs once ``stop`` has begun), then cancels the task and waits for it to end; it is
  idempotent, and harmless before or without :meth:`StoreWatches.run`. The nodes are left as they are: resigning a
  claim is the user's work, after ``stop``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import Any

from segstore_shared.coordination.store import (
    ChildrenCallback,
    CoordinationStore,
    DataCallback,
    SessionCallback,
    WatchHandle,
)


class StoreWatches:
    """Watches and a session listener on ``store``, and the one task they wake (see the module docstring).

    Use from one event loop: register with :meth:`session`, :meth:`data`, :meth:`children`, then :meth:`run` the
    task; :meth:`stop` ends them all. After ``stop`` the same object may be started again.
    """

    def __init__(self, store: CoordinationStore) -> None:
        self._store = store
        self._handles: list[WatchHandle] = []
        self._task: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        """Whether :meth:`run` started the task and :meth:`stop` has not been called since."""
        return self._task is not None

    async def session(self, callback: SessionCallback) -> None:
        """Call ``callback`` with every later change of the store's session state."""
        self._handles.append(await self._store.add_session_listener(callback))

    async def data(self, path: str, callback: DataCallback) -> None:
        """Call ``callback`` with the node at ``path`` (``None`` while absent) now and after every change."""
        self._handles.append(await self._store.watch_data(path, callback))

    async def children(self, path: str, callback: ChildrenCallback) -> None:
        """Call ``callback`` with the sorted child names of ``path`` now and after every change; ``path`` must exist
        (else :class:`~segstore_shared.coordination.store.NodeNotFoundError`)."""
        self._handles.append(await self._store.watch_children(path, callback))

    def run(self, body: Coroutine[Any, Any, None], *, name: str) -> None:
        """Run ``body`` as the task the callbacks wake, on the running loop, until :meth:`stop`."""
        if self._task is not None:
            body.close()
            raise RuntimeError(f"{name}: a task runs already")
        self._task = asyncio.get_running_loop().create_task(body, name=name)

    async def stop(self) -> None:
        """Cancel every watch and listener, then the task, and wait for the task to end; idempotent."""
        for handle in self._handles:
            handle.cancel()
        self._handles.clear()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
