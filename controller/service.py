"""The controller process's composition root: ZooKeeper session, cluster manager (leader election,
container balancing, host store), stream metadata store, segment store client, the domain API with its
background work, and the gRPC server.

Start order: ZooKeeper session -> cluster manager (so ``getURI`` can answer) -> metadata store -> domain API ->
gRPC server -> joining the controllers and their buckets (``controller.cluster.buckets``; the port is known now) ->
the periodic work over the owned buckets (which resumes workflows a controller left midway). Stop runs in
reverse: the buckets are released at once, so other controllers take them without waiting for this session to
expire; the ZooKeeper session ends last, so the leader's ephemeral node goes away with it.

The top of the controller's layers (the ``controller-layers`` contract in pyproject.toml): it may import every part
of the controller, and nothing in the controller imports it (the metrics read it through
:class:`~controller.metrics.ObservedController`); only the tools (:mod:`segstore_cli`) do.
"""

from __future__ import annotations

import asyncio
import logging
import time

import grpc

from controller.cluster.buckets import BucketOwnership
from controller.cluster.cluster_manager import ClusterManager
from controller.config import ControllerConfig
from controller.core import ControllerCore
from controller.metadata.stream_store import StreamMetadataStore
from controller.metrics import NO_METRICS, ControllerMetrics, ControllerMetricsRegistry
from controller.rpc.authentication import ControllerAuth
from controller.rpc.servicer import start_grpc_server
from controller.segment_ops import SegmentStoreOps
from segment_store.client import ClientConfig, ConnectionConfig, NoSuchSegmentError, SegmentClient, TlsError
from segment_store.client.tokens import SignedTokens
from segstore_shared.cluster.container_mapping import container_of
from segstore_shared.coordination.kazoo_store import KazooCoordinationStore
from segstore_shared.coordination.store import CoordinationStore
from segstore_shared.metrics_http import MetricsServer

log = logging.getLogger(__name__)


class ControllerService:
    """One controller process. Build with :meth:`start` (real ZooKeeper) or :meth:`start_with` (any store)."""

    def __init__(
        self,
        config: ControllerConfig,
        store: CoordinationStore,
        cluster: ClusterManager,
        segments: SegmentClient,
        core: ControllerCore,
        metrics: ControllerMetrics = NO_METRICS,
    ) -> None:
        self.buckets: BucketOwnership | None = None
        self.metrics = metrics
        self._metrics_server: MetricsServer | None = None
        self.config = config
        self.store = store
        self.cluster = cluster
        self.segments = segments
        self.core = core
        self._server: grpc.aio.Server | None = None
        self._port = 0
        self._started = False
        self.auth: ControllerAuth | None = None

    @classmethod
    async def start(
        cls, config: ControllerConfig, metrics_port: int | None = None, metrics_host: str = "127.0.0.1"
    ) -> ControllerService:
        """``metrics_port``: serve ``/metrics``, ``/healthz`` and ``/readyz`` there (0: a free port; None: no
        metrics at all)."""
        store = await KazooCoordinationStore.connect(
            config.zookeeper, session_timeout_s=config.zookeeper_session_timeout_s
        )
        try:
            return await cls.start_with(config, store, metrics_port, metrics_host)
        except BaseException:
            await store.close()
            raise

    @classmethod
    async def start_with(
        cls,
        config: ControllerConfig,
        store: CoordinationStore,
        metrics_port: int | None = None,
        metrics_host: str = "127.0.0.1",
    ) -> ControllerService:
        """Start over ``store`` (which the service then owns and closes); metrics as in :meth:`start`."""
        metrics = ControllerMetricsRegistry() if metrics_port is not None else NO_METRICS
        identity = f"{config.advertised_host}:{config.port}"
        cluster = ClusterManager(store, config.container_count, identity=identity, bucket_count=config.bucket_count)
        await cluster.start()
        auth = ControllerAuth(config.auth) if config.auth is not None else None
        segments = SegmentClient(
            cluster.host_store.resolve,
            ClientConfig(connection=ConnectionConfig(tls=config.segment_store_tls)),
            tokens=SignedTokens(auth.signer) if auth is not None else None,
        )
        metadata = StreamMetadataStore(store, config.metadata_root)
        core = ControllerCore(config, metadata, SegmentStoreOps(segments), cluster.host_store, metrics=metrics)
        measured = metrics if metrics_port is not None else None
        service = cls(config, store, cluster, segments, core, metrics)
        service.auth = auth
        try:
            if metrics.registry is not None and metrics_port is not None:
                metrics.watch(service)
                service._metrics_server = MetricsServer(metrics.registry, service.ready, metrics.refresh)
                await service._metrics_server.start(metrics_host, metrics_port)
            service._server, service._port = await start_grpc_server(
                core, config.host, config.port, config.rpc_workers, config.tls, auth, measured
            )
            service.buckets = BucketOwnership(store, config.advertised_host, service._port, config.bucket_count)
            await service.buckets.start()
            await core.start(service.buckets)
            service._started = True
        except BaseException:
            await service.stop()
            raise
        security = config.tls.describe() if config.tls is not None else "plain text"
        security += ", authentication on" if auth is not None else ""
        log.info("controller serving %s on %s:%d", security, config.host, service._port)
        return service

    @property
    def endpoint(self) -> tuple[str, int]:
        return self.config.host, self._port

    @property
    def metrics_endpoint(self) -> tuple[str, int] | None:
        """``(host, port)`` of ``/metrics``, ``/healthz`` and ``/readyz``; None without a metrics port."""
        return self._metrics_server.endpoint if self._metrics_server is not None else None

    @property
    def leader(self) -> bool:
        """Whether this controller leads the cluster (places containers and buckets)."""
        return self.cluster.is_leader

    def ready(self) -> bool:
        """Serving: the gRPC server is up and the controller has joined the others (its buckets followed)."""
        return self._server is not None and self.buckets is not None and self._started

    @property
    def uri(self) -> str:
        """``tcp://host:port``, or ``tls://host:port`` with TLS (the advertised host)."""
        return f"{self.config.scheme}://{self.config.advertised_host}:{self._port}"

    async def wait_for_containers(self, timeout_s: float) -> None:
        """Return once every container is assigned and answers requests (not ``WrongHost``). Raises TlsError at
        once if the segment stores' certificates do not fit the controller's trust (waiting will not help)."""
        deadline = time.monotonic() + timeout_s
        pending = set(range(self.config.container_count))
        probes = _probe_names(self.config.container_count)
        last_error: BaseException | None = None
        while pending:
            for container_id in sorted(pending):
                try:
                    async with asyncio.timeout(5.0):
                        await self.segments.get_segment_info(probes[container_id])
                    pending.discard(container_id)
                except NoSuchSegmentError:  # answered by the owner: it serves
                    pending.discard(container_id)
                except TlsError:
                    raise
                except Exception as error:  # WrongHost, no owner, connection refused: not ready yet
                    last_error = error
            if pending:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"containers {sorted(pending)} not served after {timeout_s} s: {last_error!r}")
                await asyncio.sleep(0.2)

    async def stop(self) -> None:
        self._started = False
        if self._server is not None:
            await self._server.stop(grace=1.0)
            self._server = None
        if self.auth is not None:
            self.auth.close()
        await self.core.stop()
        if self.buckets is not None:
            await self.buckets.stop()
        await self.segments.close()
        await self.cluster.stop()
        await self.store.close()
        if self._metrics_server is not None:
            await self._metrics_server.stop()
            self._metrics_server = None


def _probe_names(container_count: int) -> dict[int, str]:
    """One segment name per container (no such segment exists: asking about it only tests who serves it)."""
    names: dict[int, str] = {}
    i = 0
    while len(names) < container_count:
        name = f"_system/_probe/{i}"
        names.setdefault(container_of(name, container_count), name)
        i += 1
    return names
