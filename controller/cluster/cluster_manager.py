"""The controller's cluster component: leader election, container balancing when leading, the host store.

Embed one :class:`ClusterManager` per controller process::

    manager = ClusterManager(store, container_count=4, identity="controller-1:9090")
    await manager.start()            # raises ContainerCountMismatchError on a misconfigured count
    endpoint = manager.host_store.endpoint_of_segment("scope/stream/0.#epoch.0")
    ...
    await manager.stop()

Every controller runs the :class:`~controller.cluster.host_store.HostStore` (for ``getURI``) and takes part
in the :class:`~controller.cluster.election.LeaderElection`; only the leader runs the
:class:`~controller.cluster.balancer.ContainerBalancer`s, started when it is elected and stopped when it
loses leadership: one places the segment containers on the segment stores, the other (with ``bucket_count``)
the buckets of periodic work on the controllers (:mod:`controller.cluster.buckets`).

Imports only its siblings in :mod:`controller.cluster` and :mod:`segstore_shared` (the cluster component is a leaf
of the controller).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket

from controller.cluster.balancer import ContainerBalancer
from controller.cluster.buckets import BUCKET_ASSIGNMENT_PATH, CONTROLLERS_PATH
from controller.cluster.election import LeaderElection
from controller.cluster.host_store import HostStore
from segstore_shared.coordination.store import CoordinationError, CoordinationStore

log = logging.getLogger(__name__)


class ClusterManager:
    """Runs the host store always, and the balancer while this controller leads."""

    def __init__(
        self,
        store: CoordinationStore,
        container_count: int,
        *,
        identity: str | None = None,
        settle_delay_s: float = 1.0,
        retry_delay_s: float = 0.5,
        bucket_count: int | None = None,
    ) -> None:
        self.container_count = container_count
        self.bucket_count = bucket_count
        self._store = store
        self._settle_delay_s = settle_delay_s
        self._retry_delay_s = retry_delay_s
        self.host_store = HostStore(store, container_count)
        self.election = LeaderElection(
            store, identity or f"{socket.gethostname()}:{os.getpid()}", retry_delay_s=retry_delay_s
        )
        self.balancer: ContainerBalancer | None = None
        """The balancer while leading, else None."""
        self.bucket_balancer: ContainerBalancer | None = None
        """The balancer of the buckets while leading (with a ``bucket_count``), else None."""
        self._task: asyncio.Task[None] | None = None

    @property
    def is_leader(self) -> bool:
        return self.election.is_leader

    async def start(self) -> None:
        """Start following; raises ContainerCountMismatchError if the cluster has another container count."""
        await self.host_store.start()
        await self.election.start()
        self._task = asyncio.get_running_loop().create_task(self._lead(), name="cluster manager")

    async def stop(self) -> None:
        """Stop balancing, resign, stop the host store; idempotent."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._stop_balancer()
        await self.election.stop()
        await self.host_store.stop()

    async def _lead(self) -> None:
        while True:
            await self.election.wait_elected()
            balancer = ContainerBalancer(
                self._store, self.container_count, settle_delay_s=self._settle_delay_s,
                retry_delay_s=self._retry_delay_s,
            )  # fmt: skip
            buckets = self._bucket_balancer()
            try:
                await balancer.start()
                if buckets is not None:
                    await buckets.start()
            except CoordinationError as exc:
                await balancer.stop()
                log.warning("cluster manager: balancer could not start, retrying: %r", exc)
                await asyncio.sleep(self._retry_delay_s)
                continue
            except Exception:  # a count mismatch: this controller must not balance; resign so another may
                await balancer.stop()
                log.exception("cluster manager: cannot balance containers or buckets; leaving the election")
                await self.election.stop()
                return
            self.balancer, self.bucket_balancer = balancer, buckets
            await self.election.wait_lost()
            await self._stop_balancer()

    def _bucket_balancer(self) -> ContainerBalancer | None:
        if self.bucket_count is None:
            return None
        return ContainerBalancer(
            self._store, self.bucket_count, settle_delay_s=self._settle_delay_s, retry_delay_s=self._retry_delay_s,
            members_path=CONTROLLERS_PATH, assignment_path=BUCKET_ASSIGNMENT_PATH, what="bucket",
        )  # fmt: skip

    async def _stop_balancer(self) -> None:
        balancer, self.balancer = self.balancer, None
        buckets, self.bucket_balancer = self.bucket_balancer, None
        for running in (balancer, buckets):
            if running is not None:
                await running.stop()
