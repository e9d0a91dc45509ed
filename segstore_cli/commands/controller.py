"""``segstore controller``: a controller process (Pravega's ``Controller.proto`` over gRPC) for a cluster."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from controller.config import ControllerConfig
from segstore_cli.arguments import (
    PERIODS,
    Subparsers,
    add_log_level_argument,
    add_metrics_arguments,
    add_periodic_arguments,
    add_security_arguments,
    check_ports,
    controller_auth,
    controller_tls,
    log_file_of,
    port_in_use,
    positive_int,
    setup_logging,
    warn_ip_literal,
)
from segstore_cli.stopping import Stopping
from segstore_shared.ports import PortClaim, PortInUseError

LOG_FILE = "segstore-controller.log"
"""The log's default place, in the current directory (``--log-file``)."""


def add_parser(sub: Subparsers) -> None:
    """Add ``controller`` to the ``segstore`` command line."""
    ct = sub.add_parser(
        "controller",
        help="run a controller process (Pravega Controller.proto over gRPC) for a cluster",
        description="Serve Controller.proto on --port. Stream metadata, cluster membership and the "
        "container-to-segment-store mapping live in ZooKeeper; several controllers may run (one leads).",
    )
    ct.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    ct.add_argument("--port", type=int, default=9090, help="gRPC port (default 9090; 0: a free one)")
    ct.add_argument("--advertise-host", help="host name clients use for this controller (default --host)")
    ct.add_argument("--zookeeper", required=True, help="ZooKeeper connect string, e.g. zk1:2181,zk2:2181")
    ct.add_argument(
        "--container-count", type=positive_int, default=4, help="segment containers in the cluster (default 4)"
    )
    ct.add_argument(
        "--zookeeper-session-timeout-ms",
        type=int,
        default=10_000,
        help="how soon after this controller dies others take over its work (default 10000)",
    )
    add_log_level_argument(ct, log_file=f"{LOG_FILE} in the current directory")
    add_periodic_arguments(ct)
    add_metrics_arguments(ct)
    add_security_arguments(ct, controller=True)
    ct.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run a controller in the foreground until SIGINT/SIGTERM, logging to ``--log-file``; exit 2 naming a bad TLS or
    authentication setting, or a port something else listens on (checked before anything starts)."""
    log_file = log_file_of(args, Path(LOG_FILE))
    setup_logging("controller", args.log_level, log_file)
    tls, trust = controller_tls("controller", args, own_trust=False)
    auth = controller_auth("controller", args, make_key=False)
    config = ControllerConfig(
        host=args.host,
        port=args.port,
        advertise_host=args.advertise_host,
        zookeeper=args.zookeeper,
        container_count=args.container_count,
        tls=tls,
        segment_store_tls=trust,
        auth=auth,
        bucket_count=args.bucket_count,
        zookeeper_session_timeout_s=args.zookeeper_session_timeout_ms / 1000.0,
        **{name: getattr(args, name) for name in PERIODS},
    )
    if tls is not None:
        warn_ip_literal("controller", config.advertised_host)
    claims = [
        PortClaim("--port", args.host, args.port),
        PortClaim("--metrics-port", args.metrics_host, args.metrics_port or 0),
    ]
    check_ports("controller", claims)
    return asyncio.run(_serve(config, args.metrics_port, args.metrics_host, claims, log_file))


async def _serve(
    config: ControllerConfig,
    metrics_port: int | None,
    metrics_host: str,
    claims: list[PortClaim],
    log_file: Path | None,
) -> int:
    from controller.service import ControllerService

    stopping = Stopping("controller")
    try:
        service = await stopping.started(ControllerService.start(config, metrics_port, metrics_host))
    except PortInUseError as error:  # taken since the check
        return port_in_use("controller", claims, error)
    host, port = service.endpoint
    tls = f", TLS, segment stores: {config.segment_store_tls.describe()}" if config.segment_store_tls else ""
    tls += ", authentication on" if config.auth is not None else ""
    if service.metrics_endpoint is not None:
        tls += ", metrics on http://{}:{}/metrics".format(*service.metrics_endpoint)
    tls += f", log {log_file}" if log_file is not None else ""
    print(f"segstore controller ready on {host}:{port} ({service.uri}, zookeeper {config.zookeeper}{tls})", flush=True)
    await stopping.stop(service.stop())
    return 0
