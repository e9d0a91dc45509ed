"""``segstore standalone``: a whole system on this machine (run by the supervisor :mod:`segstore_cli.standalone`)."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from segment_store.iceberg.config import ICEBERG_FLAGS, IcebergConfig
from segstore_cli.arguments import (
    PERIODS,
    Subparsers,
    add_cache_argument,
    add_log_level_argument,
    add_metrics_arguments,
    add_periodic_arguments,
    add_security_arguments,
    add_storage_arguments,
    check_data_dir,
    controller_auth,
    controller_tls,
    fail,
    positive_int,
    setup_logging,
    warn_ip_literal,
)

STORAGE_FLAGS = ("tier1", "nats", "nats_monitor", "nats_tls_ca", "nats_creds", "tier1_replicas",
                 "tier1_stream_prefix", "tier1_lease_ms", "tier2", "tier2_dir", "s3_endpoint", "s3_bucket", "s3_prefix",
                 "s3_region", *ICEBERG_FLAGS)  # fmt: skip
"""The Tier-1, Tier-2 and Iceberg flags with a value, passed on to the segment store process (and
``--s3-create-bucket``)."""


def add_parser(sub: Subparsers) -> None:
    """Add ``standalone`` to the ``segstore`` command line."""
    st = sub.add_parser(
        "standalone",
        help="run a whole system on this machine: ZooKeeper, a controller and a segment store",
        description="Start ZooKeeper, one controller and one segment store process with file Tier-1 and "
        "filesystem Tier-2 under --data-dir (or Tier-1 on NATS JetStream, Tier-2 on S3). Prints one ready line; "
        "stops cleanly on SIGTERM/SIGINT; a restart on the same --data-dir finds every stream.",
    )
    st.add_argument("--data-dir", default="segstore-data", help="all state lives here (default ./segstore-data)")
    st.add_argument("--host", default="127.0.0.1", help="address every server binds (default 127.0.0.1)")
    st.add_argument("--controller-port", type=int, default=9090, help="controller gRPC port (default 9090; 0: free)")
    st.add_argument("--segmentstore-port", type=int, default=12345, help="segment store port (default 12345; 0: free)")
    st.add_argument("--zookeeper-port", type=int, default=0, help="ZooKeeper client port (default: a free one)")
    st.add_argument(
        "--container-count", type=positive_int, default=4, help="segment containers (default 4; fixed per data)"
    )
    st.add_argument(
        "--advertise-host",
        help="host name in the controller URI and what getURI answers (default --host; with TLS: localhost)",
    )
    add_log_level_argument(st)
    add_periodic_arguments(st, buckets=False)
    add_cache_argument(st)
    add_metrics_arguments(
        st,
        "the controller's /metrics, /healthz and /readyz on this port, the segment store's on "
        "the next one (0: a free one each; default: no metrics)",
    )
    add_storage_arguments(st)
    add_security_arguments(st, controller=True)
    st.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the standalone system until SIGINT/SIGTERM, logging to ``<data-dir>/controller.log`` (its segment store
    process to ``<data-dir>/segmentstore.log``); exit 2 naming a bad TLS or authentication setting."""
    from segment_store.storage.tier2_config import Tier2Config
    from segment_store.tier1.config import Tier1Config
    from segstore_cli.standalone import LOG_FILE, StandaloneConfig, run_standalone

    data_dir = Path(args.data_dir).resolve()
    check_data_dir("standalone", data_dir)
    try:  # refused here, before ZooKeeper starts (its segment store would refuse them seconds later)
        Tier1Config.from_cli(args)
        Tier2Config.from_cli(args)
        IcebergConfig.from_cli(args, data_dir)
    except ValueError as exc:
        fail("standalone", str(exc))
        return 2
    setup_logging("standalone", args.log_level, data_dir / LOG_FILE, flag="--data-dir")
    tls, trust = controller_tls("standalone", args, own_trust=True)
    auth = controller_auth("standalone", args, make_key=True)
    config = StandaloneConfig(
        data_dir=data_dir,
        host=args.host,
        controller_port=args.controller_port,
        segmentstore_port=args.segmentstore_port,
        zookeeper_port=args.zookeeper_port,
        container_count=args.container_count,
        log_level=args.log_level,
        storage_args=tuple(_storage_flags(args)),
        cache_size_mb=args.cache_size_mb,
        cache_idle_evict_s=args.cache_idle_evict_s,
        tls=tls,
        segment_store_tls=trust,
        advertise_host=args.advertise_host,
        auth=auth,
        periodic={name: getattr(args, name) for name in PERIODS},
        metrics_port=args.metrics_port,
        metrics_host=args.metrics_host,
    )
    if tls is not None:
        warn_ip_literal("standalone", config.advertised_host)
    return asyncio.run(run_standalone(config))


def _storage_flags(args: argparse.Namespace) -> list[str]:
    """The Tier-1 and Tier-2 flags given to ``standalone``, to pass on to its segment store process."""
    flags: list[str] = []
    for name in STORAGE_FLAGS:
        value = getattr(args, name, None)
        if value is not None:
            flags += [f"--{name.replace('_', '-')}", str(value)]
    if getattr(args, "s3_create_bucket", None):
        flags.append("--s3-create-bucket")
    return flags
