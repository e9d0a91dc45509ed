"""The ``segstore`` command line.

Subcommands arrive with the components they run; each lives in its own
function and builds what it needs through the component's composition root.
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from segment_store import __version__


def _cmd_zookeeper(args: argparse.Namespace) -> int:
    """Run an embedded ZooKeeper server in the foreground until SIGINT/SIGTERM."""
    from segment_store.coordination.zookeeper_server import EmbeddedZooKeeper, ZooKeeperConfig

    config = ZooKeeperConfig(data_dir=Path(args.data_dir), host=args.host, port=args.port)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    with EmbeddedZooKeeper(config) as zk:
        print(f"segstore zookeeper ready on {zk.connect_string} (pid {zk.pid}, data {config.data_dir})", flush=True)
        stop.wait()
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    """Start what exists and show it working (grows as components land)."""
    from segment_store.demo import run_demo

    if args.data_dir:
        return run_demo(Path(args.data_dir))
    with tempfile.TemporaryDirectory(prefix="segstore-demo-") as tmp:
        return run_demo(Path(tmp))


def build_parser() -> argparse.ArgumentParser:
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

    demo = sub.add_parser("demo", help="start the components that exist and show them working")
    demo.add_argument("--data-dir", help="keep the demo's state here (default: a temporary directory)")
    demo.set_defaults(func=_cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func: Callable[[argparse.Namespace], int] | None = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 0
    return func(args)


if __name__ == "__main__":
    sys.exit(main())
