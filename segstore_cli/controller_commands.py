"""The ``segstore controller`` and ``segstore standalone`` subcommands (registered by ``segstore_cli.main``)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import secrets
import signal
import sys
from pathlib import Path

from controller.config import AuthConfig, ControllerConfig
from controller.rpc.authentication import ControllerAuth
from segment_store.storage.tier2_config import add_cli_arguments as add_tier2_arguments
from segment_store.tier1.config import add_cli_arguments as add_tier1_arguments
from segstore_cli.main import add_cache_argument
from segstore_shared.auth.passwords import PasswordFileError
from segstore_shared.auth.settings import add_cli_arguments as add_auth_arguments
from segstore_shared.auth.tls import TlsConfig, TlsConfigError, TrustConfig, is_ip_literal, trust_from_cli
from segstore_shared.auth.tls import add_cli_arguments as add_tls_arguments


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``controller`` and ``standalone`` to the ``segstore`` command line."""
    st = sub.add_parser(
        "standalone",
        help="run a whole system on this machine: ZooKeeper, a controller and a segment store",
        description="Start ZooKeeper, one controller and one segment store process with file Tier-1 and "
        "filesystem Tier-2 under --data-dir (or Tier-1 on NATS JetStream, Tier-2 on S3). Prints one ready line; "
        "stops cleanly on SIGTERM/SIGINT; a restart on the same --data-dir finds every stream.",
    )
    st.add_argument("--data-dir", default="segstore-data", help="all state lives here (default ./segstore-data)")
    st.add_argument("--host", default="127.0.0.1", help="address every server binds (default 127.0.0.1)")
    st.add_argument("--controller-port", type=int, default=9090, help="controller gRPC port (default 9090)")
    st.add_argument("--segmentstore-port", type=int, default=12345, help="segment store port (default 12345)")
    st.add_argument("--zookeeper-port", type=int, default=0, help="ZooKeeper client port (default: a free one)")
    st.add_argument("--container-count", type=int, default=4, help="segment containers (default 4; fixed per data)")
    st.add_argument(
        "--advertise-host",
        help="host name in the controller URI and what getURI answers (default --host; with TLS: localhost)",
    )
    st.add_argument("--log-level", default="info", help="logging level (default info)")
    _add_periodic_arguments(st, buckets=False)
    add_cache_argument(st)
    _add_metrics_arguments(
        st,
        "the controller's /metrics, /healthz and /readyz on this port, the segment store's on "
        "the next one (default: no metrics)",
    )
    add_tier1_arguments(st)
    add_tier2_arguments(st)
    add_tls_arguments(st, trust_store=True)
    add_auth_arguments(st, controller=True)
    st.set_defaults(func=_cmd_standalone)

    ct = sub.add_parser(
        "controller",
        help="run a controller process (Pravega Controller.proto over gRPC) for a cluster",
        description="Serve Controller.proto on --port. Stream metadata, cluster membership and the "
        "container-to-segment-store mapping live in ZooKeeper; several controllers may run (one leads).",
    )
    ct.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    ct.add_argument("--port", type=int, default=9090, help="gRPC port (default 9090)")
    ct.add_argument("--advertise-host", help="host name clients use for this controller (default --host)")
    ct.add_argument("--zookeeper", required=True, help="ZooKeeper connect string, e.g. zk1:2181,zk2:2181")
    ct.add_argument("--container-count", type=int, default=4, help="segment containers in the cluster (default 4)")
    ct.add_argument(
        "--zookeeper-session-timeout-ms",
        type=int,
        default=10_000,
        help="how soon after this controller dies others take over its work (default 10000)",
    )
    ct.add_argument("--log-level", default="info", help="logging level (default info)")
    _add_periodic_arguments(ct)
    _add_metrics_arguments(
        ct,
        "serve /metrics (Prometheus), /healthz and /readyz over HTTP on this port (0: a free one; default: no metrics)",
    )
    add_tls_arguments(ct, trust_store=True)
    add_auth_arguments(ct, controller=True)
    ct.set_defaults(func=_cmd_controller)


_PERIODS = {
    "retention_period_s": "how often retention policies are applied",
    "watermark_period_s": "how often watermarks are computed from the writers' marks",
    "auto_scale_period_s": "how often traffic is checked against auto-scaling policies",
    "txn_timeout_check_s": "how often expired transaction leases are aborted",
}


def _add_metrics_arguments(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--metrics-port", type=int, default=None, help=what)
    parser.add_argument(
        "--metrics-host", default="127.0.0.1", help="address the metrics port binds (default 127.0.0.1)"
    )


def _add_periodic_arguments(parser: argparse.ArgumentParser, *, buckets: bool = True) -> None:
    group = parser.add_argument_group("periodic work", "shared among the controllers by buckets of streams")
    defaults = ControllerConfig()
    if buckets:
        group.add_argument(
            "--bucket-count",
            type=int,
            default=defaults.bucket_count,
            help=f"buckets of streams the controllers share the periodic work by; fixed for the life of the "
            f"cluster (default {defaults.bucket_count})",
        )
    for name, what in _PERIODS.items():
        flag = "--" + name.replace("_", "-")
        group.add_argument(flag, type=float, default=getattr(defaults, name), help=f"{what} (default %(default)s)")


def _logging(level: str) -> None:
    logging.basicConfig(level=getattr(logging, level.upper()), format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def _tls(command: str, args: argparse.Namespace, own_trust: bool) -> tuple[TlsConfig | None, TrustConfig | None]:
    """The TLS of the gRPC port and of the connections to segment stores; raises SystemExit(2) naming a bad
    file. ``own_trust``: the standalone trusts its own certificate unless told otherwise."""
    try:
        tls = TlsConfig.from_cli(args)
        if tls is None:
            return None, None
        tls.check()
        trust = trust_from_cli(args, fallback=tls.cert_path if own_trust else None)
        trust.client_context()
    except TlsConfigError as error:
        print(f"segstore {command}: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    return tls, trust


def _auth(command: str, args: argparse.Namespace, make_key: bool) -> AuthConfig | None:
    """Authentication from the flags and environment (None: off); SystemExit(2) naming a bad setting.
    ``make_key``: without a signing key, make a random one (the standalone: its segment store is its child)."""
    from segstore_shared.auth import settings

    try:
        passwords = settings.password_file(args)
        if passwords is None:
            return None
        key = settings.signing_key(args)
        if key is None and make_key:
            key = secrets.token_urlsafe(32)
        if key is None:
            raise settings.AuthSettingsError(
                f"--auth-password-file needs a token signing key shared with the segment stores: "
                f"--auth-token-signing-key-file or ${settings.SIGNING_KEY_ENV}"
            )
        config = AuthConfig(
            passwords, key, settings.token_ttl_s(args), token_max_lifetime_s=settings.token_max_lifetime_s(args)
        )
        ControllerAuth(config)  # reads the password file now: a bad one stops the start, naming the line
    except (settings.AuthSettingsError, PasswordFileError, ValueError) as error:
        print(f"segstore {command}: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    return config


def _warn_ip_literal(command: str, host: str) -> None:
    if is_ip_literal(host):
        print(
            f"segstore {command}: warning: with TLS, clients reach this process as {host}, an IP address: Pravega's "
            "own clients refuse IP addresses as TLS host names; give --advertise-host a host name its certificate "
            "names",
            file=sys.stderr,
        )


def _cmd_standalone(args: argparse.Namespace) -> int:
    from segstore_cli.standalone import StandaloneConfig, run_standalone

    _logging(args.log_level)
    tls, trust = _tls("standalone", args, own_trust=True)
    auth = _auth("standalone", args, make_key=True)
    config = StandaloneConfig(
        data_dir=Path(args.data_dir).resolve(),
        host=args.host,
        controller_port=args.controller_port,
        segmentstore_port=args.segmentstore_port,
        zookeeper_port=args.zookeeper_port,
        container_count=args.container_count,
        log_level=args.log_level,
        storage_args=tuple(_storage_flags(args)),
        cache_size_mb=args.cache_size_mb,
        tls=tls,
        segment_store_tls=trust,
        advertise_host=args.advertise_host,
        auth=auth,
        periodic={name: getattr(args, name) for name in _PERIODS},
        metrics_port=args.metrics_port,
        metrics_host=args.metrics_host,
    )
    if tls is not None:
        _warn_ip_literal("standalone", config.advertised_host)
    return asyncio.run(run_standalone(config))


def _storage_flags(args: argparse.Namespace) -> list[str]:
    """The Tier-1 and Tier-2 flags given to ``standalone``, to pass on to its segment store process."""
    flags: list[str] = []
    names = ("tier1", "nats", "tier1_replicas", "tier1_stream_prefix", "tier2", "tier2_dir", "s3_endpoint", "s3_bucket",
             "s3_prefix", "s3_region")  # fmt: skip
    for name in names:
        value = getattr(args, name, None)
        if value is not None:
            flags += [f"--{name.replace('_', '-')}", str(value)]
    if getattr(args, "s3_create_bucket", None):
        flags.append("--s3-create-bucket")
    return flags


def _cmd_controller(args: argparse.Namespace) -> int:
    _logging(args.log_level)
    tls, trust = _tls("controller", args, own_trust=False)
    auth = _auth("controller", args, make_key=False)
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
        **{name: getattr(args, name) for name in _PERIODS},
    )
    if tls is not None:
        _warn_ip_literal("controller", config.advertised_host)
    return asyncio.run(_run_controller(config, args.metrics_port, args.metrics_host))


async def _run_controller(config: ControllerConfig, metrics_port: int | None, metrics_host: str) -> int:
    from controller.service import ControllerService

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    service = await ControllerService.start(config, metrics_port, metrics_host)
    host, port = service.endpoint
    tls = f", TLS, segment stores: {config.segment_store_tls.describe()}" if config.segment_store_tls else ""
    tls += ", authentication on" if config.auth is not None else ""
    if service.metrics_endpoint is not None:
        tls += ", metrics on http://{}:{}/metrics".format(*service.metrics_endpoint)
    print(f"segstore controller ready on {host}:{port} ({service.uri}, zookeeper {config.zookeeper}{tls})", flush=True)
    await stop.wait()
    await service.stop()
    return 0
