"""``segstore zookeeper``: an embedded ZooKeeper server in the foreground."""

from __future__ import annotations

import argparse
import signal
import threading
from pathlib import Path

from segstore_cli.arguments import Subparsers, check_data_dir, check_ports, fail, port_in_use
from segstore_shared.ports import PortClaim, PortInUseError


def add_parser(sub: Subparsers) -> None:
    """Add ``zookeeper`` to the ``segstore`` command line."""
    zk = sub.add_parser(
        "zookeeper",
        help="run an embedded ZooKeeper server (jars from pyspark)",
        description="Run a ZooKeeper server (pyspark's jars) in the foreground until SIGINT or SIGTERM.",
    )
    zk.add_argument("--data-dir", required=True, help="directory for ZooKeeper's state")
    zk.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    zk.add_argument("--port", type=int, default=2181, help="client port (default 2181; 0: a free one)")
    zk.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run an embedded ZooKeeper server in the foreground until SIGINT/SIGTERM; exit 2 naming a taken port (checked
    before anything starts), 1 if the server does not start."""
    from segstore_shared.coordination.zookeeper_server import (
        EmbeddedZooKeeper,
        ZooKeeperConfig,
        ZooKeeperStartError,
        free_port,
    )

    check_data_dir("zookeeper", Path(args.data_dir))
    claims = [PortClaim("--port", args.host, args.port)]
    try:
        port = args.port or free_port(args.host)
        config = ZooKeeperConfig(data_dir=Path(args.data_dir), host=args.host, port=port)
    except ValueError as error:
        fail("zookeeper", str(error))
        return 2
    server = EmbeddedZooKeeper(config)
    server.kill_orphan()  # a server a killed `segstore zookeeper` left on this data dir holds the port
    check_ports("zookeeper", claims)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        server.start()
    except PortInUseError as error:  # taken since the check
        return port_in_use("zookeeper", claims, error)
    except ZooKeeperStartError as error:
        fail("zookeeper", f"cannot start: {error}")
        return 1
    try:
        print(f"segstore zookeeper ready on {server.connect_string} (pid {server.pid}, data {config.data_dir})",
              flush=True)  # fmt: skip
        stop.wait()
    finally:
        server.stop()
    return 0
