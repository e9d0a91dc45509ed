"""``segstore segmentstore``: a segment store process (wire server and containers) in the foreground.

Its steps: read and check the flags (:func:`_settings`; exit 2 naming a bad one) and its ports (exit 2 naming the
flag of one something else listens on), start the service in memory or durable (:func:`_start`; exit 1 if a
dependency refuses it), print one ready line, serve until SIGINT or SIGTERM. Started by ``segstore standalone``, it
reports how its start went to the standalone (:func:`~segstore_shared.processes.report_status`): the ports it listens
on, or the line it printed on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from segstore_cli.arguments import (
    Subparsers,
    add_cache_argument,
    add_event_loop_argument,
    add_log_level_argument,
    add_metrics_arguments,
    add_security_arguments,
    add_storage_arguments,
    check_data_dir,
    check_ports,
    fail,
    log_file_of,
    port_in_use,
    positive_int,
    setup_logging,
    warn_ip_literal,
)
from segstore_cli.stopping import Stopping
from segstore_shared import event_loop
from segstore_shared.event_loop import EventLoopUnavailableError, loop_name
from segstore_shared.memory_release import arrow_on_system_allocator
from segstore_shared.ports import PortClaim, PortInUseError
from segstore_shared.processes import report_status

if TYPE_CHECKING:
    from segment_store.containers.config import ContainerConfig
    from segment_store.iceberg.config import IcebergConfig
    from segment_store.server.config import ServerConfig
    from segment_store.server.service import SegmentStoreService, ServiceConfig
    from segment_store.storage.tier2_config import Tier2Config
    from segment_store.tier1.config import Tier1Config
    from segstore_shared.auth.tls import TlsConfig

COMMAND = "segmentstore"
LOG_FILE = "segmentstore.log"
"""The log's default place, in ``--data-dir`` (``--log-file``)."""


def add_parser(sub: Subparsers) -> None:
    """Add ``segmentstore`` to the ``segstore`` command line."""
    ss = sub.add_parser(
        "segmentstore",
        help="run a segment store process (Pravega wire protocol)",
        description="Serve the Pravega wire protocol on --port until SIGINT or SIGTERM.",
    )
    ss.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    ss.add_argument("--port", type=int, default=12345, help="wire protocol port (default 12345; 0: a free one)")
    ss.add_argument("--data-dir", default="segstore-data", help="Tier-1 and Tier-2 data (default ./segstore-data)")
    ss.add_argument("--zookeeper", help="ZooKeeper connect string (default: an embedded one under --data-dir)")
    ss.add_argument("--in-memory", action="store_true", help="keep everything in memory (lost at exit)")
    ss.add_argument("--container-count", type=positive_int, default=4, help="containers in the cluster (default 4)")
    ss.add_argument("--run-containers", help="comma-separated container ids to run here (default: all)")
    ss.add_argument(
        "--cluster",
        action="store_true",
        help="cluster mode: register in ZooKeeper and run the containers the controller assigns (needs --zookeeper)",
    )
    ss.add_argument("--advertise-host", help="cluster mode: host name clients reach this process by (default --host)")
    ss.add_argument(
        "--advertise-port",
        type=int,
        help="cluster mode: port clients reach this process by, forwarded to --port (default: the bound port)",
    )
    ss.add_argument(
        "--zookeeper-session-timeout-ms",
        type=int,
        default=10_000,
        help="ZooKeeper session timeout; a crashed process's containers move after it (default 10000)",
    )
    add_log_level_argument(ss, log_file=f"{LOG_FILE} in --data-dir")
    add_cache_argument(ss)
    add_metrics_arguments(ss)
    add_event_loop_argument(ss)
    add_storage_arguments(ss)
    add_security_arguments(ss, controller=False)
    ss.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run a segment store process (wire server + containers) in the foreground until SIGINT/SIGTERM, logging to
    ``--log-file``."""
    data_dir = Path(args.data_dir)
    check_data_dir(COMMAND, data_dir)
    args.log_file = log_file_of(args, data_dir / LOG_FILE)
    setup_logging(COMMAND, args.log_level, args.log_file)
    arrow_on_system_allocator()  # done by segstore_cli.entry already, unless main() was called in-process
    try:
        return event_loop.run(_serve(args), args.event_loop)
    except EventLoopUnavailableError as error:
        fail(COMMAND, str(error))
        return 2


@dataclass(frozen=True, slots=True)
class _Settings:
    """What the flags say, checked."""

    run: tuple[int, ...] | None
    """The containers to run here (None: all)."""
    tier1: Tier1Config
    tier2: Tier2Config
    tls: TlsConfig | None
    key: str | None
    """The delegation tokens' signing key (None: tokens are not checked)."""
    iceberg: IcebergConfig | None = None
    """The streams kept as Iceberg tables (None: none)."""


async def _serve(args: argparse.Namespace) -> int:
    from segment_store.server.gc_policy import settle_after_start

    settings = _settings(args)
    if settings is None:
        return 2
    claims = [
        PortClaim("--port", args.host, args.port),
        PortClaim("--metrics-port", args.metrics_host, args.metrics_port or 0),
    ]
    check_ports(COMMAND, claims)
    with contextlib.ExitStack() as stack:
        stopping = Stopping(COMMAND, before_exit=stack.close)  # an embedded ZooKeeper goes with the process
        try:
            started = await stopping.started(_start(args, settings, stack))
        except PortInUseError as error:  # taken since the check
            return port_in_use(COMMAND, claims, error)
        if started is None:
            return 1
        service, config = started
        settle_after_start()  # the process's own: see gc_policy
        metrics = service.metrics_endpoint
        ports = {"--port": service.endpoint[1], **({"--metrics-port": metrics[1]} if metrics else {})}
        report_status({"state": "serving", "ports": ports})
        print(_ready_line(args, settings, service, config), flush=True)
        await stopping.stop(service.stop())
    return 0


def _settings(args: argparse.Namespace) -> _Settings | None:
    """The checked flags, or None after saying on stderr what is wrong (exit 2)."""
    from segment_store.iceberg.config import IcebergConfig
    from segment_store.storage.tier2_config import Tier2Config
    from segment_store.tier1.config import Tier1Config
    from segstore_shared.auth.settings import AuthSettingsError, signing_key
    from segstore_shared.auth.tls import TlsConfig, TlsConfigError

    run = tuple(int(c) for c in args.run_containers.split(",")) if args.run_containers else None
    if args.cluster and (args.zookeeper is None or args.in_memory or run is not None):
        fail(COMMAND, "--cluster needs --zookeeper and excludes --in-memory and --run-containers")
        return None
    try:
        tier1 = Tier1Config.from_cli(args)
        tier2 = Tier2Config.from_cli(args)
    except ValueError as exc:
        fail(COMMAND, str(exc))
        return None
    if args.in_memory and tier1.backend != "file":
        fail(COMMAND, "--in-memory keeps Tier-1 in memory; it excludes --tier1 jetstream")
        return None
    try:
        tls = TlsConfig.from_cli(args)
        if tls is not None:
            tls.check()
    except TlsConfigError as exc:
        fail(COMMAND, str(exc))
        return None
    try:
        key = signing_key(args)
    except AuthSettingsError as exc:
        fail(COMMAND, str(exc))
        return None
    try:
        iceberg = IcebergConfig.from_cli(args, Path(args.data_dir).resolve())
    except ValueError as exc:
        fail(COMMAND, str(exc))
        return None
    if iceberg is not None and args.in_memory:
        fail(COMMAND, "--iceberg-tables needs chunk files readers can open: it excludes --in-memory")
        return None
    return _Settings(run=run, tier1=tier1, tier2=tier2, tls=tls, key=key, iceberg=iceberg)


async def _start(
    args: argparse.Namespace, settings: _Settings, stack: contextlib.ExitStack
) -> tuple[SegmentStoreService, ServiceConfig] | None:
    """The started service and its configuration, or None after saying on stderr why it cannot start (exit 1).
    An embedded ZooKeeper (no ``--zookeeper``) stops when ``stack`` closes."""
    import dataclasses

    from segment_store.containers.config import ContainerConfig
    from segment_store.reading.cache import CacheConfig
    from segment_store.server.config import ServerConfig
    from segment_store.server.service import SegmentStoreService, ServiceConfig
    from segstore_shared.errors import SegstoreError

    server = ServerConfig(host=args.host, port=args.port, tls=settings.tls, auth_token_signing_key=settings.key)
    container = ContainerConfig()
    cache = CacheConfig()
    if args.cache_size_mb is not None:
        cache = dataclasses.replace(cache, max_bytes=args.cache_size_mb * 1024 * 1024)
    if args.cache_idle_evict_s is not None:
        cache = dataclasses.replace(cache, idle_evict_s=args.cache_idle_evict_s)
    container = dataclasses.replace(container, cache=cache)
    if args.in_memory:
        config = ServiceConfig(
            server=server,
            container=container,
            container_count=args.container_count,
            containers=settings.run,
            metrics_port=args.metrics_port,
            metrics_host=args.metrics_host,
        )
        return await SegmentStoreService.start_in_memory(args.container_count, args.port, config), config
    config = _durable_config(args, settings, server, container, stack)
    advertised = config.advertise_host or args.host
    if settings.tls is not None and args.cluster and advertised not in ("0.0.0.0", "::"):
        warn_ip_literal("segmentstore", advertised)
    try:
        service = await SegmentStoreService.start_durable(config)
    except SegstoreError as exc:  # a dependency is unreachable or refuses us: say which, exit 1
        fail(COMMAND, f"cannot start: {type(exc).__name__}: {exc}")
        return None
    return service, config


def _durable_config(
    args: argparse.Namespace,
    settings: _Settings,
    server: ServerConfig,
    container: ContainerConfig,
    stack: contextlib.ExitStack,
) -> ServiceConfig:
    """The configuration of a durable service; starts an embedded ZooKeeper on ``stack`` without ``--zookeeper``."""
    from segment_store.server.service import ServiceConfig
    from segstore_shared.coordination.zookeeper_server import EmbeddedZooKeeper, ZooKeeperConfig, free_port

    data_dir = Path(args.data_dir).resolve()
    zookeeper = args.zookeeper
    if zookeeper is None:
        zk = stack.enter_context(EmbeddedZooKeeper(ZooKeeperConfig(data_dir=data_dir / "zookeeper", port=free_port())))
        zookeeper = zk.connect_string
    return ServiceConfig(
        server=server,
        container=container,
        container_count=args.container_count,
        containers=settings.run,
        data_dir=data_dir,
        zookeeper=zookeeper,
        zookeeper_session_timeout_ms=args.zookeeper_session_timeout_ms,
        cluster=args.cluster,
        advertise_host=args.advertise_host,
        advertise_port=args.advertise_port,
        tier1=settings.tier1,
        tier2=settings.tier2,
        metrics_port=args.metrics_port,
        metrics_host=args.metrics_host,
        iceberg=settings.iceberg,
    )


def _ready_line(
    args: argparse.Namespace, settings: _Settings, service: SegmentStoreService, config: ServiceConfig
) -> str:
    """``segstore segmentstore ready on HOST:PORT (...)``: what runs, where its data is, its cache and security."""
    host, port = service.endpoint
    if args.in_memory:
        where = "in memory"
    else:
        where = f"data {args.data_dir}, zookeeper {config.zookeeper}, {settings.tier1.describe()}"
    if args.cluster:
        what = "cluster mode, registered as {}:{}".format(*service.advertised_endpoint)
    else:
        what = f"containers {service.registry.running}"
    cache_mib = config.container.cache.max_bytes // (1024 * 1024)
    security = f", {settings.tls.describe()}" if settings.tls is not None else ""
    security += ", delegation tokens checked" if settings.key is not None else ""
    if service.metrics_endpoint is not None:
        security += ", metrics on http://{}:{}/metrics".format(*service.metrics_endpoint)
    security += f", log {args.log_file}" if args.log_file is not None else ""
    security += f", event loop {loop_name(asyncio.get_running_loop())}"
    return f"segstore segmentstore ready on {host}:{port} ({what}, {where}, cache {cache_mib} MiB{security})"
