"""Controllers elect one leader through an ephemeral node (``/cluster/controller-leader``).

Each candidate tries to create the node holding its identity and a token unique to the candidate.
The one that succeeds leads until its node goes away: it resigns (:meth:`LeaderElection.stop`), its
session expires, or someone deletes the node. The others watch the node and try again when it is gone.

Invariants:

- A candidate believes it leads only after it created the node (or found its own node there, after a
  reconnect), and stops believing it as soon as it hears its session is ``LOST`` or sees the node gone or
  someone else's: loss callbacks run before any new election attempt by this candidate.
- While the connection is only ``SUSPENDED`` the leader keeps leading (its node lives as long as the
  session); whatever a leader writes should be compare-and-set, so a stale leader cannot clobber state.
- Elections, losses and callbacks happen on the event loop that called :meth:`LeaderElection.start`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from collections.abc import Callable

from segstore_shared.cluster.layout import LEADER_PATH
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


class LeaderElection:
    """One candidate; ``identity`` names it in the leader node (e.g. its gRPC endpoint)."""

    def __init__(
        self, store: CoordinationStore, identity: str, *, path: str = LEADER_PATH, retry_delay_s: float = 0.5
    ) -> None:
        self.identity = identity
        self.path = path
        self._store = store
        self._data = json.dumps({"identity": identity, "token": uuid.uuid4().hex}, sort_keys=True).encode()
        self._retry_delay_s = retry_delay_s
        self._leader = False
        self._elected = asyncio.Event()
        self._lost = asyncio.Event()
        self._lost.set()
        self._wake = asyncio.Event()
        self._loss_callbacks: list[Callable[[], None]] = []
        self._watches = StoreWatches(store)
        self._stopping = False
        self.terms = 0
        """How many times this candidate became leader; for tests and metrics."""

    # ---- public ---------------------------------------------------------------------------------------------
    @property
    def is_leader(self) -> bool:
        return self._leader

    async def wait_elected(self) -> None:
        """Return once this candidate leads (at once if it does)."""
        await self._elected.wait()

    async def wait_lost(self) -> None:
        """Return once this candidate does not lead (at once if it does not)."""
        await self._lost.wait()

    def on_lost(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` (on the loop, synchronously) every time this candidate loses leadership."""
        self._loss_callbacks.append(callback)

    async def start(self) -> None:
        if self._watches.running:
            raise RuntimeError("LeaderElection.start() called twice")
        await self._watches.session(self._on_session)
        await self._watches.data(self.path, self._on_node)
        self._watches.run(self._run(), name=f"leader election {self.identity}")

    async def stop(self) -> None:
        """Leave the election; resign (delete the node) if leading. Idempotent."""
        self._stopping = True
        await self._watches.stop()
        if self._leader:
            self._lose("resigned", expected=True)
            with contextlib.suppress(CoordinationError):
                node = await self._store.get(self.path)
                if node.data == self._data:
                    await self._store.delete(self.path, node.version)

    # ---- events ---------------------------------------------------------------------------------------------
    def _on_session(self, state: SessionState) -> None:
        if state is SessionState.LOST and self._leader:
            self._lose("ZooKeeper session lost")
        self._wake.set()

    def _on_node(self, node: Versioned | None) -> None:
        if node is None or node.data != self._data:
            self._wake.set()

    def _win(self) -> None:
        self._leader = True
        self.terms += 1
        self._lost.clear()
        self._elected.set()
        log.info("controller %s is the leader", self.identity)

    def _lose(self, why: str, expected: bool = False) -> None:
        """Leadership is over; a warning unless this controller gave it up itself (``expected``: stopping)."""
        self._leader = False
        self._elected.clear()
        self._lost.set()
        log.log(logging.INFO if expected else logging.WARNING, "controller %s lost leadership: %s", self.identity, why)
        for callback in list(self._loss_callbacks):
            try:
                callback()
            except Exception:  # a broken callback must not stop the election; logged with its traceback
                log.exception("leadership loss callback failed")

    # ---- the loop -------------------------------------------------------------------------------------------
    async def _run(self) -> None:
        while not self._stopping:
            self._wake.clear()
            retry = False
            try:
                if self._leader:
                    await self._check_still_leader()
                else:
                    await self._try_to_lead()
            except CoordinationError as exc:  # unavailable now: try again later
                log.info("leader election %s: %r", self.identity, exc)
                retry = True
            if retry:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._retry_delay_s):
                        await self._wake.wait()
            else:
                await self._wake.wait()

    async def _try_to_lead(self) -> None:
        try:
            await self._store.create(self.path, self._data, ephemeral=True, make_parents=True)
        except NodeExistsError:
            try:
                node = await self._store.get(self.path)
            except NodeNotFoundError:
                self._wake.set()  # gone in between: try again
                return
            if node.data == self._data:  # ours (created by a call whose reply was lost)
                self._win()
            return
        self._win()

    async def _check_still_leader(self) -> None:
        try:
            node = await self._store.get(self.path)
        except NodeNotFoundError:
            node = None
        if node is None or node.data != self._data:
            self._lose("the leader node is gone" if node is None else "another controller holds the leader node")
            self._wake.set()  # try again at once
