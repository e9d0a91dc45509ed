"""``segstore zookeeper``: an embedded ZooKeeper server in the foreground."""

from __future__ import annotations

import argparse
import signal
import threading
from pathlib import Path

from segstore_cli.arguments import Subparsers


def add_parser(sub: Subparsers) -> None:
    """Add ``zookeeper`` to the ``segstore`` command line."""
    zk = sub.add_parser(
        "zookeeper",
        help="run an embedded ZooKeeper server (jars from pyspark)",
        description="Run a ZooKeeper server (pyspark's jars) in the foreground until SIGINT or SIGTERM.",
    )
    zk.add_argument("--data-dir", required=True, help="directory for ZooKeeper's state")
    zk.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    zk.add_argument("--port", type=int, default=2181, help="client port (default 2181)")
    zk.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
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
