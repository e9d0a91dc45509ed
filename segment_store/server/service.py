"""The segment store service: composition root of one segment store process.

Wires Tier-1 (file ledger logs fenced through ZooKeeper, or in memory), Tier-2 (filesystem or
in-memory chunk storage under chunked segment storage), the containers this process runs, their
table stores, and the asyncio wire server. Nothing else constructs these adapters.

``SegmentStoreService.start_in_memory()`` is the in-memory builder for tests (one process, state
lost at exit); :meth:`SegmentStoreService.start` with a :class:`ServiceConfig` naming a data
directory and a ZooKeeper is the durable one.

Which containers run here: a static list (``ServiceConfig.containers``, default all), or, in cluster
mode (``ServiceConfig.cluster``), the ones the leader controller assigns to this process through
ZooKeeper: the service registers itself (:class:`~segment_store.cluster.HostRegistration`) under its
advertised ``host:port`` and follows the assignment (:class:`~segment_store.cluster.ContainerAssignmentFollower`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import socket
import ssl
import time
from dataclasses import dataclass, field
from pathlib import Path

from segment_store.cluster.follower import ContainerAssignmentFollower
from segment_store.containers.config import ContainerConfig
from segment_store.containers.registry import ContainerRegistry
from segment_store.containers.segment_container import SegmentContainer
from segment_store.iceberg.config import IcebergConfig
from segment_store.iceberg.file_io import file_io_properties
from segment_store.iceberg.maintainer import ChunkSource, TableMaintainer, TableStatus
from segment_store.metrics import NO_METRICS, SegmentStoreMetrics, StoreLevels, StoreMetrics, TableLevel
from segment_store.server.config import ServerConfig
from segment_store.server.connection import FlowTracker, ServerConnection
from segment_store.server.requests import RequestHandler
from segment_store.server.tls_accept import TlsHandshake
from segment_store.storage.chunk_encoder import ChunkEncoder, chunk_encoder
from segment_store.storage.chunk_storage import ChunkStorage
from segment_store.storage.chunked_storage import ChunkedSegmentStorage
from segment_store.storage.journal.system_journal import SnapshotInfoStore
from segment_store.storage.segment_storage import SegmentStorage
from segment_store.storage.storage_config import ChunkedStorageConfig
from segment_store.storage.tier2_config import Tier2Config, open_chunk_storage
from segment_store.tables.table_store import TableStore
from segment_store.tier1.config import Tier1Config
from segment_store.tier1.log import DataLogCorruptedError, DurableDataLogFactory
from segstore_shared.cluster.layout import ClusterError
from segstore_shared.cluster.registration import HostRegistration
from segstore_shared.contracts import CREATION_TIME, NULL_ATTRIBUTE_VALUE, ContainerNotOwnedError
from segstore_shared.coordination.session_lease import SessionLease
from segstore_shared.coordination.store import CoordinationStore, suspended_limit_s
from segstore_shared.loop_stalls import ACTIVITY, LoopStallRecorder, stall_route
from segstore_shared.metrics_http import MetricsServer
from segstore_shared.ports import PortInUseError, is_address_in_use

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ServiceConfig:
    """What one segment store process runs."""

    server: ServerConfig = field(default_factory=ServerConfig)
    container: ContainerConfig = field(default_factory=ContainerConfig)
    container_count: int = 4
    """Containers in the whole cluster (fixed for the life of the data: it decides segment placement)."""
    containers: tuple[int, ...] | None = None
    """The containers this process runs (static assignment); None = all of them."""
    data_dir: Path | None = None
    """Tier-1 ledgers under ``<data_dir>/tier1``, filesystem Tier-2 under ``<data_dir>/tier2``; None = in memory."""
    zookeeper: str | None = None
    """ZooKeeper connect string for Tier-1 metadata (required with ``data_dir``) and cluster membership."""
    tier1: Tier1Config = field(default_factory=Tier1Config)
    """Where appends are made durable (durable service): file ledgers under ``<data_dir>/tier1``, or JetStream."""
    tier2: Tier2Config = field(default_factory=Tier2Config)
    """Where flushed segment data goes (durable service): filesystem under ``<data_dir>/tier2`` by default, or S3."""
    zookeeper_session_timeout_ms: int = 10_000
    """ZooKeeper session timeout: how long after a crash this process's registration (and so its containers)
    stays in place before the controller moves the containers elsewhere. The server bounds it (2..20 ticks)."""
    cluster: bool = False
    """Cluster mode: register in ZooKeeper and run the containers the controller assigns to this process,
    not a static list (``containers`` must be None). Needs a coordination store (``zookeeper``)."""
    advertise_host: str | None = None
    """Cluster mode: the host name clients reach this process by, registered with the bound port. None =
    the bind address (``server.host``), or the machine's host name when binding a wildcard address."""
    advertise_port: int | None = None
    """Cluster mode: the port clients reach this process by (a port forwarded to the bound one, as Pravega's
    ``publishedPort``). None = the bound port."""
    metrics_port: int | None = None
    """Serve ``/metrics`` (Prometheus), ``/healthz`` and ``/readyz`` on this port (0: a free one); None = no
    metrics at all (nothing is measured)."""
    metrics_host: str = "127.0.0.1"
    """The address the metrics port binds."""
    iceberg: IcebergConfig | None = None
    """Streams kept as Iceberg tables (docs/iceberg.md); None = none. With tables, the storage writer flushes at
    least every ``iceberg.flush_max_age_ms``."""

    def __post_init__(self) -> None:
        if self.container_count <= 0:
            raise ValueError("container_count: must be positive")
        if self.containers is not None and not all(0 <= c < self.container_count for c in self.containers):
            raise ValueError(f"containers: ids must be within [0, {self.container_count})")
        if self.data_dir is not None and self.zookeeper is None:
            raise ValueError("zookeeper: a durable service (data_dir set) needs a ZooKeeper connect string")
        if self.cluster and self.containers is not None:
            raise ValueError("containers: a static container list cannot be combined with cluster mode")
        if self.zookeeper_session_timeout_ms <= 0:
            raise ValueError("zookeeper_session_timeout_ms: must be positive")
        if self.advertise_host is not None and (not self.advertise_host or "/" in self.advertise_host):
            raise ValueError(f"advertise_host: not a host name: {self.advertise_host!r}")
        if self.advertise_port is not None and not 0 < self.advertise_port <= 65535:
            raise ValueError(f"advertise_port: not a port: {self.advertise_port}")
        if self.metrics_port is not None and not 0 <= self.metrics_port <= 65535:
            raise ValueError(f"metrics_port: not a port: {self.metrics_port}")


class SegmentStoreService:
    def __init__(
        self,
        config: ServiceConfig,
        data_logs: DurableDataLogFactory,
        chunks: ChunkStorage,
        coordination: CoordinationStore | None = None,
        metrics: StoreMetrics | None = None,
    ) -> None:
        """``metrics``: what to measure; None = a :class:`SegmentStoreMetrics` if ``config.metrics_port`` is set,
        else nothing."""
        if config.iceberg is not None:
            config = _with_table_flushes(config, config.iceberg)
        self.config = config
        if metrics is None:
            metrics = SegmentStoreMetrics() if config.metrics_port is not None else NO_METRICS
        self.metrics = metrics
        self._metrics_server: MetricsServer | None = None
        self._loop_stalls: LoopStallRecorder | None = None
        """With a metrics port: the event loop's lag and stalls (``/metrics`` and ``/stalls``)."""
        self._data_logs = data_logs
        self.chunks = chunks
        self.encoder: ChunkEncoder = chunk_encoder(ChunkedStorageConfig.from_env().encode_processes)
        """Where every container's chunks are Parquet-encoded (``SEGSTORE_SLTS_ENCODE_PROCESSES``: a thread, or
        a pool of worker processes started with the service)."""
        self._coordination = coordination
        if config.cluster and coordination is None:
            raise ValueError("cluster: cluster mode needs a coordination store (ServiceConfig.zookeeper)")
        self.registry = ContainerRegistry(
            config.container_count,
            data_logs,
            self._storage,
            config.container,
            should_run=self._should_run,
            metrics=metrics,
        )
        self.follower: ContainerAssignmentFollower | None = None
        self.lease: SessionLease | None = None
        """In a cluster: whether the ZooKeeper session surely lives (the registry refuses requests otherwise)."""
        """Cluster mode: follows the controller's container assignment (None otherwise)."""
        self.registration: HostRegistration | None = None
        """Cluster mode: this process's registration node (None otherwise)."""
        self._tables: dict[SegmentContainer, TableStore] = {}
        self._chunked: dict[int, ChunkedSegmentStorage] = {}
        self.table_maintainer: TableMaintainer | None = None
        """With ``config.iceberg``: keeps the streams' Iceberg tables (None otherwise)."""
        self.tracker = FlowTracker(config.server)
        self.requests = RequestHandler(self.registry, self.tables, config.server, self._iceberg_statuses)
        self._server: asyncio.Server | None = None
        self.connections: set[ServerConnection] = set()
        self._tls: ssl.SSLContext | None = None
        self._handshakes: set[TlsHandshake] = set()

    # ---- builders -------------------------------------------------------------------------------------------
    @classmethod
    async def start_in_memory(
        cls, container_count: int = 4, port: int = 0, config: ServiceConfig | None = None
    ) -> SegmentStoreService:
        """A service on 127.0.0.1 with in-memory Tier-1 and Tier-2 (tests, notebooks)."""
        from segment_store.storage.backends.memory import MemoryChunkStorage
        from segment_store.tier1.memory_log import InMemoryDurableDataLogFactory

        base = config or ServiceConfig()
        server = dataclasses.replace(base.server, host="127.0.0.1", port=port)
        service = cls(
            ServiceConfig(
                server=server,
                container=base.container,
                container_count=container_count,
                containers=base.containers,
                metrics_port=base.metrics_port,
                metrics_host=base.metrics_host,
            ),
            InMemoryDurableDataLogFactory(),
            MemoryChunkStorage(),
        )
        await service.start()
        return service

    @classmethod
    async def start_durable(cls, config: ServiceConfig) -> SegmentStoreService:
        """Tier-1 as ``config.tier1`` says (file ledgers under ``config.data_dir`` by default, or JetStream; metadata
        in ZooKeeper) and Tier-2 as ``config.tier2`` says (filesystem under ``config.data_dir`` by default)."""
        from segment_store.storage.backends.faulty import FaultyChunkStorage
        from segment_store.storage.backends.filesystem import FsChunkStorage
        from segment_store.tier1.file.config import FileLedgerLogConfig
        from segment_store.tier1.file.factory import FileLedgerLogFactory
        from segment_store.tier1.jetstream.factory import JetStreamLogFactory
        from segstore_shared.coordination.kazoo_store import KazooCoordinationStore

        assert config.data_dir is not None and config.zookeeper is not None
        store = await KazooCoordinationStore.connect(
            config.zookeeper, session_timeout_s=config.zookeeper_session_timeout_ms / 1000
        )
        factory: DurableDataLogFactory | None = None
        try:
            if config.tier1.backend == "jetstream":
                factory = JetStreamLogFactory(config.tier1.jetstream(), store)
            else:
                ledgers = FileLedgerLogConfig(
                    root_dir=config.data_dir / "tier1", ownership_lease_s=config.tier1.lease_ms / 1000
                )
                factory = FileLedgerLogFactory(ledgers, store)
            chunks = await asyncio.to_thread(open_chunk_storage, config.tier2, config.data_dir)
            backend = chunks.inner if isinstance(chunks, FaultyChunkStorage) else chunks  # the self-test's hook
            if isinstance(backend, FsChunkStorage):
                backend.sweep_temp_files()
            service = cls(config, factory, chunks, store)
            await service.start()
        except BaseException:
            if factory is not None:
                await factory.close()
            await store.close()
            raise
        return service

    @property
    def data_logs(self) -> DurableDataLogFactory:
        """The Tier-1 log factory (in-memory logs outlive a service, so tests can restart on the same state)."""
        return self._data_logs

    # ---- composition ----------------------------------------------------------------------------------------
    def _should_run(self, container_id: int) -> bool:
        """Whether a failed container may be restarted here (cluster mode: only while assigned here)."""
        return self.follower is None or self.follower.should_run(container_id)

    def _storage(self, container_id: int, snapshot_info: SnapshotInfoStore) -> SegmentStorage:
        chunks = self.metrics.chunks(container_id, self.chunks)
        # SEGSTORE_SLTS_* (gc_delay_s, compaction_interval_s, ...: ChunkedStorageConfig.from_env), else the defaults
        config = ChunkedStorageConfig.from_env()
        storage = ChunkedSegmentStorage(chunks, container_id, snapshot_info, config, encoder=self.encoder)
        self._chunked[container_id] = storage  # the latest instance: a restarted container gets a new one
        return storage

    def _chunk_sources(self) -> list[ChunkSource]:
        """The Tier-2 storages of the containers running here (the table maintainer's view)."""
        running = set(self.registry.running)
        return [storage for cid, storage in self._chunked.items() if cid in running]

    def _segment_created_ms(self, name: str) -> int | None:
        """The creation time of segment ``name`` in its container running here (None: not here, or not recorded)."""
        try:
            segment = self.registry.for_segment(name).metadata.get_by_name(name)
        except ContainerNotOwnedError:
            return None
        value = segment.attributes.get(CREATION_TIME) if segment is not None else None
        return None if value is None or value == NULL_ATTRIBUTE_VALUE else value

    def _iceberg_statuses(self) -> list[TableStatus] | None:
        """The Iceberg tables' statuses (None: no ``--iceberg-tables``; [] until the maintainer's first pass)."""
        if self.config.iceberg is None:
            return None
        return self.table_maintainer.statuses() if self.table_maintainer is not None else []

    def tables(self, container: SegmentContainer) -> TableStore:
        """The table store of a running container instance (a restarted container gets a new one)."""
        store = self._tables.get(container)
        if store is None:
            for stale in [c for c in self._tables if c is not container and c.container_id == container.container_id]:
                del self._tables[stale]
            store = self._tables[container] = TableStore(container)
        return store

    # ---- lifecycle ------------------------------------------------------------------------------------------
    async def start(self) -> None:
        """Start the containers (unless in cluster mode) and the server. Raises TlsConfigError before
        anything starts if the TLS files cannot be used."""
        cfg = self.config.server
        if cfg.tls is not None:
            self._tls = cfg.tls.server_context()
        await self._start_metrics()
        try:
            await asyncio.to_thread(_warm_up_parquet)
            await self.encoder.start()
            await self._data_logs.initialize()
            if not self.config.cluster:
                ids = (
                    self.config.containers if self.config.containers is not None else range(self.config.container_count)
                )
                for container_id in ids:
                    await self._start_or_leave_offline(container_id)
            self._server = await self._listen()
            if self.config.iceberg is not None:
                maintainer = TableMaintainer(
                    self.config.iceberg,
                    self._chunk_sources,
                    self.chunks.location,
                    file_io_properties(self.config.tier2),
                    self._segment_created_ms,
                )
                await maintainer.start()
                self.table_maintainer = maintainer
        except BaseException:
            if self._metrics_server is not None:
                await self._metrics_server.stop()
                self._metrics_server = None
            if self._loop_stalls is not None:
                self._loop_stalls.stop()
            await self.encoder.close()
            raise
        if self.config.cluster:
            try:
                await self._join_cluster()
            except BaseException:
                await self.stop()
                raise
            log.info(
                "segment store %s joined the cluster, listening on %s:%s", self.advertised_endpoint, *self.endpoint
            )
        else:
            log.info("segment store serving %s on %s:%s", self.registry.running, *self.endpoint)
        if cfg.tls is not None:
            log.info("wire protocol over %s (certificate %s)", cfg.tls.describe(), cfg.tls.cert_path)

    async def _start_or_leave_offline(self, container_id: int) -> None:
        """Start a container; one whose Tier-1 log is refused as corrupted or rolled back (acknowledged data
        missing) stays offline, logged as an ERROR, while the others serve (docs/operations.md: what to do)."""
        try:
            await self.registry.start_container(container_id)
        except DataLogCorruptedError as exc:
            log.error("container %s stays offline: its Tier-1 log was refused: %s", container_id, exc)

    async def _listen(self) -> asyncio.Server:
        """The wire server, listening exclusively (no ``SO_REUSEPORT``: a second process on the port fails instead
        of sharing it); PortInUseError if something else listens there."""
        cfg = self.config.server
        factory = self._new_connection if self._tls is None else self._new_tls_connection
        try:
            return await asyncio.get_running_loop().create_server(
                factory, cfg.host, cfg.port, backlog=256, reuse_port=False
            )
        except OSError as error:
            if is_address_in_use(error):
                raise PortInUseError("wire port", cfg.host, cfg.port) from None
            raise

    async def _start_metrics(self) -> None:
        """The metrics port comes up first, so ``/healthz`` answers and ``/readyz`` says 503 during recovery."""
        self.metrics.watch(self)
        if self.config.metrics_port is None or self.metrics.registry is None:
            return
        stalls = self._loop_stalls = self.metrics.loop_watch()
        documents = {"/stalls": stall_route(stalls)} if stalls is not None else {}
        server = MetricsServer(self.metrics.registry, self.ready, documents=documents)
        await server.start(self.config.metrics_host, self.config.metrics_port)
        self._metrics_server = server
        if stalls is not None:
            ACTIVITY.hook_gc()
            stalls.start()

    @property
    def metrics_endpoint(self) -> tuple[str, int] | None:
        """``(host, port)`` of ``/metrics``, ``/healthz`` and ``/readyz``; None without a metrics port."""
        return self._metrics_server.endpoint if self._metrics_server is not None else None

    def ready(self) -> bool:
        """Whether the wire server listens and every container assigned here is recovered (static: every
        configured one; cluster mode: registered, and what the controller assigned here runs)."""
        if self._server is None:
            return False
        running = set(self.registry.running)
        if self.config.cluster:
            if self.follower is None or self.registration is None or not self.registration.registered:
                return False
            return self.follower.assigned <= running
        ids = self.config.containers if self.config.containers is not None else range(self.config.container_count)
        return running.issuperset(ids)

    def levels(self) -> StoreLevels:
        """The levels the metrics report at scrape time (this service is their
        :class:`~segment_store.metrics.LevelSource`)."""
        registry = self.registry
        return StoreLevels(
            unflushed_bytes=registry.unflushed_bytes(),
            cache_used_bytes=registry.cache.used_bytes,
            cache_limit_bytes=registry.config.cache.max_bytes,
            cache_evicted_bytes=registry.cache.evicted_bytes,
            connections=len(self.connections),
            containers_owned=len(registry.running),
            ready=self.ready(),
            tables=self._table_levels(),
        )

    def _table_levels(self) -> tuple[TableLevel, ...]:
        now_ms = int(time.time() * 1000)
        return tuple(
            TableLevel(s.name, s.lag_bytes, s.lag_age_ms(now_ms) / 1000, s.data_files, s.failed_passes)
            for s in self._iceberg_statuses() or ()
        )

    async def _join_cluster(self) -> None:
        """Follow the assignment (after checking the container count), then register so it can name us."""
        assert self._coordination is not None
        lease = SessionLease(self._coordination, self.config.zookeeper_session_timeout_ms / 1000)
        await lease.start()  # no container answers a request once the session may have expired (a frozen process)
        self.lease = lease
        self.registry.refusal = lease.refusal
        host, port = self.advertised_endpoint
        registration = HostRegistration(self._coordination, host, port)
        follower = ContainerAssignmentFollower(
            self._coordination,
            self.registry,
            registration.host_id,
            self.config.container_count,
            disconnected_limit_s=suspended_limit_s(self.config.zookeeper_session_timeout_ms / 1000),
            token=registration.info.token,
        )
        await follower.start()  # raises ContainerCountMismatchError before we announce ourselves
        self.follower = follower
        await registration.start()
        self.registration = registration
        bound_s = 2 * self.config.zookeeper_session_timeout_ms / 1000 + 10
        try:
            async with asyncio.timeout(bound_s):
                await registration.wait_registered()
        except TimeoutError:
            raise ClusterError(f"could not register {registration.path} within {bound_s:.0f}s") from None

    @property
    def advertised_endpoint(self) -> tuple[str, int]:
        """``(host, port)`` other processes reach this one at (the registration in cluster mode)."""
        port = self.config.advertise_port or self.endpoint[1]
        if self.config.advertise_host is not None:
            return self.config.advertise_host, port
        if self.config.server.host in ("", "0.0.0.0", "::"):
            return socket.gethostname(), port
        return self.config.server.host, port

    def _new_connection(self) -> asyncio.Protocol:
        if len(self.connections) >= self.config.server.max_connections:
            log.warning("connection refused: %d connections open", len(self.connections))
            return _Refuse()
        return self._open_connection()

    def _open_connection(self) -> ServerConnection:
        connection = ServerConnection(
            self.registry, self.requests, self.tracker, self.config.server, self.connections.discard
        )
        self.connections.add(connection)
        return connection

    def _new_tls_connection(self) -> asyncio.Protocol:
        """TLS: the handshake first (counted against ``max_connections``), then the connection's protocol."""
        open_now = len(self.connections) + len(self._handshakes)
        if open_now >= self.config.server.max_connections:
            log.warning("connection refused: %d connections open or in their TLS handshake", open_now)
            return _Refuse()
        assert self._tls is not None
        handshake = TlsHandshake(
            self._tls, self.config.server.tls_handshake_timeout_s, self._open_connection, self._handshakes.discard
        )
        self._handshakes.add(handshake)
        return handshake

    @property
    def tls(self) -> bool:
        """Whether the wire server speaks TLS."""
        return self.config.server.tls is not None

    @property
    def endpoint(self) -> tuple[str, int]:
        assert self._server is not None
        host, port = self._server.sockets[0].getsockname()[:2]
        return host, port

    async def stop(self) -> None:
        if self.follower is not None:
            await self.follower.stop()
        if self._server is not None:
            self._server.close()
            for handshake in list(self._handshakes):
                handshake.abort()
            for connection in list(self.connections):
                connection.close()
            await self._server.wait_closed()
            self._server = None
        if self.table_maintainer is not None:
            await self.table_maintainer.stop()
            self.table_maintainer = None
        for store in self._tables.values():
            await store.close()
        self._tables.clear()
        await self.registry.close()
        await self.encoder.close()
        if self.registration is not None:
            await self.registration.stop()
        if self.lease is not None:
            await self.lease.stop()
        await self._data_logs.close()
        if self._coordination is not None:
            await self._coordination.close()
        if self._metrics_server is not None:
            await self._metrics_server.stop()
            self._metrics_server = None
        if self._loop_stalls is not None:
            self._loop_stalls.stop()


def _with_table_flushes(config: ServiceConfig, iceberg: IcebergConfig) -> ServiceConfig:
    """``config`` with the storage writer flushing at least every ``iceberg.flush_max_age_ms``."""
    writer = config.container.writer
    age_s = min(writer.flush_max_age_s, iceberg.flush_max_age_ms / 1000)
    container = dataclasses.replace(config.container, writer=dataclasses.replace(writer, flush_max_age_s=age_s))
    return dataclasses.replace(config, container=container)


def _warm_up_parquet() -> None:
    """Encode one tiny chunk, so pyarrow's lazy imports (pandas among them, 0.1-0.7 s holding the GIL)
    happen at start and not at the first flush, where they would stall every connection."""
    from segment_store.storage.format.parquet_chunk import encode

    encode(b"warm-up", 0, "raw")


class _Refuse(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.close()
