"""``segstore demo``: a standalone system and a Spark job through it, end to end (:mod:`segstore_cli.demo`)."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from segstore_cli.arguments import Subparsers, check_data_dir


def add_parser(sub: Subparsers) -> None:
    """Add ``demo`` to the ``segstore`` command line."""
    demo = sub.add_parser(
        "demo",
        help="start the components that exist and show them working",
        description="Start a standalone system, write and read 100,000 events through it with Spark, check them.",
    )
    demo.add_argument("--data-dir", help="keep the demo's state here (default: a temporary directory)")
    demo.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the demo; exit 1 if a check failed."""
    from segstore_cli.demo import run_demo

    if args.data_dir:
        check_data_dir("demo", Path(args.data_dir))
        return run_demo(Path(args.data_dir))
    with tempfile.TemporaryDirectory(prefix="segstore-demo-") as tmp:
        return run_demo(Path(tmp))
