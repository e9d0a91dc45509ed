"""The containers one segment store process runs, and the routing of segment names to them.

Which containers a process runs comes from outside (a static list in standalone mode,
the controller's assignment through ZooKeeper in a cluster; there, no container answers while the ZooKeeper session
may have expired: :attr:`ContainerRegistry.refusal`). A container that fails
(Tier-1 or Tier-2 trouble it cannot ride out) is restarted here: a new instance
recovers from Tier-1 and fences the failed one. Requests for a container that is not
running here raise :class:`ContainerNotOwnedError` (the wire server answers
``WrongHost``). A restart happens only while ``should_run(container_id)`` holds: in a cluster the
assignment follower answers it, so a container moved to another host is not restarted here (which
would fence its new owner).

The registry also sweeps the process's read cache (from the first container start to :meth:`ContainerRegistry.close`):
every ``CacheConfig.idle_check_s`` it evicts entries idle for ``CacheConfig.idle_evict_s`` and, once the cache has
been quiet since the previous sweep after enough churn (:meth:`CacheBudget.sweep_idle`), returns freed memory to
the OS (:func:`release_memory`, in a worker thread), so an idle segment store shrinks.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable

from segment_store.containers.config import ContainerConfig
from segment_store.containers.segment_container import ContainerState, SegmentContainer, StorageFactory
from segment_store.metrics import NO_METRICS, StoreMetrics
from segment_store.reading.cache import CacheBudget
from segment_store.tier1.log import DurableDataLogFactory
from segstore_shared.cluster.container_mapping import container_of
from segstore_shared.contracts import ContainerNotOwnedError
from segstore_shared.memory_release import release_memory

log = logging.getLogger(__name__)

_MAX_CACHED_IDS = 100_000


class ContainerRegistry:
    def __init__(
        self,
        container_count: int,
        data_log_factory: DurableDataLogFactory,
        storage_factory: StorageFactory,
        config: ContainerConfig | None = None,
        restart_delay_s: float = 1.0,
        should_run: Callable[[int], bool] | None = None,
        metrics: StoreMetrics = NO_METRICS,
    ) -> None:
        """``metrics``: what the containers measure (default none)."""
        if container_count <= 0:
            raise ValueError(f"container_count must be positive, not {container_count}")
        self.container_count = container_count
        self.config = config or ContainerConfig()
        self.cache = CacheBudget(self.config.cache)
        """The process's cache budget: every container here shares it (``config.cache.max_bytes`` in all)."""
        self._data_logs = data_log_factory
        self._storage_factory = storage_factory
        self._restart_delay_s = restart_delay_s
        self._should_run: Callable[[int], bool] = should_run or (lambda _container_id: True)
        self._containers: dict[int, SegmentContainer] = {}
        self._restarts: dict[int, asyncio.Task[None]] = {}
        self._closed = False
        self._metrics = metrics
        self._ids: dict[str, int] = {}  # container_of per segment name (a hash: every append asks)
        self._sweeper: asyncio.Task[None] | None = None
        self.refusal: Callable[[], str | None] = lambda: None
        """Why no container here may answer now (None: they may). In a cluster the ZooKeeper session's lease
        (:class:`~segstore_shared.coordination.session_lease.SessionLease`): a process frozen past its session
        answers nothing for its containers (``WrongHost``: ask the controller) until ZooKeeper answers it again."""
        self.memory_releases = 0
        """Times freed memory was returned to the OS after an idle sweep (tests, logs)."""

    # ---- routing --------------------------------------------------------------------------------------------
    def container_id(self, segment_name: str) -> int:
        ids = self._ids
        cid = ids.get(segment_name)
        if cid is None:
            if len(ids) >= _MAX_CACHED_IDS:
                ids.clear()
            cid = ids[segment_name] = container_of(segment_name, self.container_count)
        return cid

    def get(self, container_id: int) -> SegmentContainer:
        container = self._containers.get(container_id)
        if container is None or container.state is not ContainerState.RUNNING:
            raise ContainerNotOwnedError(container_id)
        if self.refusal() is not None:
            raise ContainerNotOwnedError(container_id)
        return container

    def for_segment(self, segment_name: str) -> SegmentContainer:
        return self.get(self.container_id(segment_name))

    @property
    def running(self) -> list[int]:
        return sorted(cid for cid, c in self._containers.items() if c.state is ContainerState.RUNNING)

    def unflushed_bytes(self) -> dict[int, int]:
        """Bytes appended but not yet in Tier-2, per running container."""
        return {cid: c.unflushed_bytes for cid, c in self._containers.items() if c.state is ContainerState.RUNNING}

    def holds(self, container_id: int) -> bool:
        """Whether ``container_id`` is here: running, starting, or failed and being restarted."""
        return container_id in self._containers

    # ---- lifecycle ------------------------------------------------------------------------------------------
    async def start_container(self, container_id: int) -> SegmentContainer:
        """Start (recover) ``container_id`` here; returns it once it serves."""
        if not 0 <= container_id < self.container_count:
            raise ValueError(f"container id {container_id} outside [0, {self.container_count})")
        existing = self._containers.get(container_id)
        if existing is not None and existing.state in (ContainerState.RUNNING, ContainerState.STARTING):
            return existing
        self._start_idle_sweeps()
        container = self._new_container(container_id)
        self._containers[container_id] = container
        container.add_failure_listener(functools.partial(self._on_failure_of, container_id, container))
        started = time.perf_counter()
        try:
            await container.start()
        except BaseException:
            if self._containers.get(container_id) is container:
                del self._containers[container_id]
            raise
        self._metrics.recovered(time.perf_counter() - started)
        return container

    def _new_container(self, container_id: int) -> SegmentContainer:
        log = self._metrics.data_log(container_id, self._data_logs.create_log(container_id))
        return SegmentContainer(container_id, log, self._storage_factory, self.config, self.cache, self._metrics)

    async def stop_container(self, container_id: int) -> None:
        task = self._restarts.pop(container_id, None)
        if task is not None:
            task.cancel()
        container = self._containers.pop(container_id, None)
        if container is not None:
            await container.stop()

    def _on_failure_of(self, container_id: int, container: SegmentContainer, exc: BaseException) -> None:
        if self._closed or self._containers.get(container_id) is not container or container_id in self._restarts:
            return
        self._restarts[container_id] = asyncio.create_task(self._restart(container_id, container))

    async def _restart(self, container_id: int, failed: SegmentContainer) -> None:
        delay = self._restart_delay_s
        try:
            await failed.stop()
            while self._may_restart(container_id, failed):
                await asyncio.sleep(delay)
                if not self._may_restart(container_id, failed):
                    break
                try:
                    new = self._new_container(container_id)
                    new.add_failure_listener(functools.partial(self._on_failure_of, container_id, new))
                    started = time.perf_counter()
                    await new.start()
                    self._metrics.recovered(time.perf_counter() - started)
                except Exception as exc:  # logged; retried with backoff until it works or we are told to stop
                    log.error("container %s: restart failed, retrying in %.1fs: %r", container_id, delay, exc)
                    delay = min(delay * 2, 30.0)
                    continue
                self._containers[container_id] = new
                log.info("container %s: restarted after failure", container_id)
            if self._containers.get(container_id) is failed and not self._should_run(container_id):
                del self._containers[container_id]
                log.info("container %s: failed and not restarted, it is no longer assigned here", container_id)
        finally:
            self._restarts.pop(container_id, None)

    def _may_restart(self, container_id: int, failed: SegmentContainer) -> bool:
        return not self._closed and self._containers.get(container_id) is failed and self._should_run(container_id)

    def _start_idle_sweeps(self) -> None:
        if self._sweeper is None and not self._closed and self.config.cache.idle_evict_s > 0:
            self._sweeper = asyncio.create_task(self._sweep_idle(), name="cache-idle-sweep")

    async def _sweep_idle(self) -> None:
        while True:
            await asyncio.sleep(self.config.cache.idle_check_s)
            if self.cache.sweep_idle():
                started = time.perf_counter()
                rss = await asyncio.to_thread(release_memory)
                self.memory_releases += 1
                took_ms = (time.perf_counter() - started) * 1000
                used_mb = self.cache.used_bytes / 1e6
                log.info("idle: cache %.1f MB, memory returned in %.0f ms (RSS MB by step: %s)", used_mb, took_ms, rss)

    async def close(self) -> None:
        self._closed = True
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None
        for task in list(self._restarts.values()):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for container_id in list(self._containers):
            await self.stop_container(container_id)
