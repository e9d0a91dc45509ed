"""What several ``segstore`` subcommands share: their common flags and the reading of them.

The flags: ``--log-level`` and ``--log-file`` (and the logging they set up: :func:`setup_logging`), ``--cache-*``,
``--metrics-port``/``--metrics-host``, the Tier-1 and Tier-2 flags, the TLS and authentication flags, the controller's
periodic work. The readers turn the TLS and authentication flags of a controller process (``controller``,
``standalone``) into its settings, or exit 2 naming what is wrong. The ports a command listens on are checked before
it starts anything (:func:`check_ports`, exit 2 naming the flag and the port).

Imported by the command modules (:mod:`segstore_cli.commands`) and the dispatch (:mod:`segstore_cli.main`: the log
record attribute :data:`FILE_ONLY`); it imports no command.
"""

from __future__ import annotations

import argparse
import logging
import os
import secrets
import sys
from collections.abc import Sequence
from io import TextIOWrapper
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

from controller.config import ControllerConfig
from segment_store.iceberg.config import add_cli_arguments as add_iceberg_arguments
from segment_store.storage.tier2_config import add_cli_arguments as add_tier2_arguments
from segment_store.tier1.config import add_cli_arguments as add_tier1_arguments
from segstore_shared.auth.settings import add_cli_arguments as add_auth_arguments
from segstore_shared.auth.tls import TlsConfig, TlsConfigError, TrustConfig, is_ip_literal, trust_from_cli
from segstore_shared.auth.tls import add_cli_arguments as add_tls_arguments
from segstore_shared.event_loop import EVENT_LOOPS
from segstore_shared.ports import IN_USE, PortClaim, PortInUseError, claim_of, unavailable
from segstore_shared.processes import report_status

if TYPE_CHECKING:
    from controller.config import AuthConfig

Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
"""What each command module's ``add_parser`` adds its subcommand to."""

LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
"""The levels ``--log-level`` names in its help (any name of :mod:`logging`'s levels works, in any case)."""

LOG_TO_STDERR = "-"
"""``--log-file -``: no log file, the whole log on stderr (a container's log; a supervisor keeping the stderr)."""

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

FILE_ONLY = "segstore_file_only"
"""A log record with this attribute true (``extra={FILE_ONLY: True}``) goes to the log file, never to stderr."""

METRICS_PORT_HELP = (
    "serve /metrics (Prometheus), /healthz and /readyz over HTTP on this port (0: a free one; default: no metrics)"
)

PERIODS = {
    "retention_period_s": "how often retention policies are applied",
    "watermark_period_s": "how often watermarks are computed from the writers' marks",
    "auto_scale_period_s": "how often traffic is checked against auto-scaling policies",
    "txn_timeout_check_s": "how often expired transaction leases are aborted",
}
"""The controller's periodic work: ``--<name>`` flags, :class:`ControllerConfig` fields of the same names."""


def positive_int(text: str) -> int:
    """An argparse ``type``: a whole number above 0."""
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, not {text}")
    return value


def non_negative_seconds(text: str) -> float:
    """An argparse ``type``: a number of seconds, 0 or more."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, not {text}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number of seconds, 0 or more, not {text}")
    return value


def log_level(text: str) -> str:
    """An argparse ``type``: a :mod:`logging` level name in any case (``INFO``, ``warn``), as lower case."""
    if text.upper() not in logging.getLevelNamesMapping():
        raise argparse.ArgumentTypeError(f"{text!r} is not a log level: {', '.join(LOG_LEVELS)}")
    return text.lower()


def add_log_level_argument(parser: argparse.ArgumentParser, log_file: str | None = None) -> None:
    """``--log-level``, and ``--log-file`` if ``log_file`` says where the log goes by default (its help); both read
    by :func:`setup_logging`."""
    parser.add_argument(
        "--log-level",
        type=log_level,
        default="info",
        metavar="{" + ",".join(LOG_LEVELS) + "}",
        help="what the log file gets (default info); stderr gets warnings and errors only",
    )
    if log_file is not None:
        parser.add_argument(
            "--log-file",
            metavar="PATH",
            help=f"the log, at --log-level (default {log_file}); '-': no file, the whole log on stderr",
        )


def add_event_loop_argument(parser: argparse.ArgumentParser) -> None:
    """``--event-loop``: the loop the server runs on (:mod:`segstore_shared.event_loop`)."""
    parser.add_argument(
        "--event-loop",
        choices=EVENT_LOOPS,
        default="asyncio",
        help="the event loop: asyncio (the default, the standard loop), uvloop (needs the uvloop package), "
        "or auto (uvloop when installed)",
    )


def setup_logging(command: str, level: str, log_file: Path | None, flag: str = "--log-file") -> None:
    """Log at ``level`` (a :mod:`logging` level name, any case) to ``log_file``, created with its directory at the
    first record (a command that stops before logging leaves nothing); stderr gets WARNING and above only, not
    kazoo's connection retries (expected events, in the file only). ``log_file`` None: everything at ``level`` on
    stderr. A ``log_file`` that cannot be written stops the command: one line naming ``flag``, SystemExit(2).

    A process whose logging is set up already (a test calling :func:`segstore_cli.main.main`) keeps it."""
    if log_file is not None:
        problem = _log_file_problem(log_file)
        if problem is not None:
            fail(command, f"{flag} {log_file}: {problem}")
            raise SystemExit(2)
    root = logging.getLogger()
    if root.handlers:
        return
    numeric = logging.getLevelNamesMapping()[level.upper()]
    formatter = logging.Formatter(LOG_FORMAT)
    stderr = logging.StreamHandler(sys.stderr)
    stderr.setFormatter(formatter)
    stderr.addFilter(_not_file_only)
    stderr.setLevel(numeric)
    if log_file is not None:
        stderr.setLevel(max(numeric, logging.WARNING))
        stderr.addFilter(_not_expected)
        file = _LogFile(log_file)
        file.setLevel(numeric)
        file.setFormatter(formatter)
        root.addHandler(file)
    root.addHandler(stderr)
    root.setLevel(numeric)


def log_file_of(args: argparse.Namespace, default: Path) -> Path | None:
    """The log file ``--log-file`` names (``default`` without it); None for ``-`` (the log on stderr)."""
    value: str | None = args.log_file
    if value == LOG_TO_STDERR:
        return None
    return Path(value).resolve() if value else default.resolve()


class _LogFile(logging.FileHandler):
    """A log file opened (with its directory made) at the first record."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, encoding="utf-8", delay=True)

    def _open(self) -> TextIOWrapper:
        Path(self.baseFilename).parent.mkdir(parents=True, exist_ok=True)
        return super()._open()


def _not_file_only(record: logging.LogRecord) -> bool:
    return not getattr(record, FILE_ONLY, False)


def _not_expected(record: logging.LogRecord) -> bool:
    """Off stderr: kazoo's WARNING at each connection attempt (it retries; the process says itself on stderr when
    ZooKeeper cannot be reached at start or its session was lost)."""
    return not (record.name.startswith("kazoo") and record.levelno < logging.ERROR)


def _log_file_problem(path: Path) -> str | None:
    """Why ``path`` cannot be a log file this process writes (None: it can); nothing is created."""
    if path.is_dir():
        return "is a directory"
    existing = path.parent
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is not a directory"
    if not os.access(path if path.exists() else existing, os.W_OK):
        return "not writable by this process (permission denied)"
    return None


def check_data_dir(command: str, path: Path) -> None:
    """``--data-dir`` must be a directory or not exist yet; else one line naming it and SystemExit(2)."""
    if path.exists() and not path.is_dir():
        fail(command, f"--data-dir {path}: not a directory")
        raise SystemExit(2)


def add_cache_argument(parser: argparse.ArgumentParser) -> None:
    """``--cache-size-mb`` and ``--cache-idle-evict-s``: the segment store process's read cache (shared by its
    containers)."""
    parser.add_argument(
        "--cache-size-mb",
        type=positive_int,
        default=None,
        help="read cache of the segment store process, all its containers together, in MiB (default 1024); "
        "data not yet in Tier-2 beyond it throttles appends",
    )
    parser.add_argument(
        "--cache-idle-evict-s",
        type=non_negative_seconds,
        default=None,
        help="cached data already in Tier-2 and neither written nor read for this many seconds leaves the cache, "
        "and an idle process returns freed memory to the OS (default 30; 0: evict only when the cache is full)",
    )


def add_metrics_arguments(parser: argparse.ArgumentParser, port_help: str = METRICS_PORT_HELP) -> None:
    """``--metrics-port`` and ``--metrics-host``: Prometheus ``/metrics``, ``/healthz`` and ``/readyz``."""
    parser.add_argument("--metrics-port", type=int, default=None, help=port_help)
    parser.add_argument(
        "--metrics-host", default="127.0.0.1", help="address the metrics port binds (default 127.0.0.1)"
    )


def add_storage_arguments(parser: argparse.ArgumentParser) -> None:
    """The Tier-1 flags, then the Tier-2 flags, then the Iceberg tables' flags (each an argument group)."""
    add_tier1_arguments(parser)
    add_tier2_arguments(parser)
    add_iceberg_arguments(parser)


def add_security_arguments(parser: argparse.ArgumentParser, *, controller: bool) -> None:
    """The TLS flags, then the authentication flags; a controller's (``controller`` and ``standalone``) also name
    the certificates it trusts in segment stores and its password file and tokens."""
    add_tls_arguments(parser, trust_store=controller)
    add_auth_arguments(parser, controller=controller)


def add_periodic_arguments(parser: argparse.ArgumentParser, *, buckets: bool = True) -> None:
    """The controller's periodic work (:data:`PERIODS`), with ``--bucket-count`` if ``buckets``."""
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
    for name, what in PERIODS.items():
        flag = "--" + name.replace("_", "-")
        group.add_argument(flag, type=float, default=getattr(defaults, name), help=f"{what} (default %(default)s)")


def controller_tls(
    command: str, args: argparse.Namespace, own_trust: bool
) -> tuple[TlsConfig | None, TrustConfig | None]:
    """The TLS of a controller's gRPC port and of its connections to segment stores; raises SystemExit(2) naming
    a bad file. ``own_trust``: the standalone trusts its own certificate unless told otherwise."""
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


def controller_auth(command: str, args: argparse.Namespace, make_key: bool) -> AuthConfig | None:
    """A controller's authentication from the flags and environment (None: off); SystemExit(2) naming a bad
    setting. ``make_key``: without a signing key, make a random one (the standalone: its segment store is its
    child)."""
    from controller.config import AuthConfig
    from controller.rpc.authentication import ControllerAuth
    from segstore_shared.auth import settings
    from segstore_shared.auth.passwords import PasswordFileError

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


def check_ports(command: str, claims: Sequence[PortClaim]) -> None:
    """Before anything starts: if a fixed port of ``claims`` cannot be listened on (taken, or given twice), say so in
    one line on stderr naming its flag and the port (``segstore controller: --port 9090: address already in use``)
    and exit 2. A supervisor that started this process learns it too (:func:`report_status`)."""
    problem = unavailable(claims)
    if problem is not None:
        claim, why = problem
        fail(command, claim.line(why), flag=claim.flag, port=claim.port, why=why)
        raise SystemExit(2)


def port_in_use(command: str, claims: Sequence[PortClaim], error: PortInUseError) -> int:
    """A server of this process could not listen after all (another process took the port since the check): the
    same one line as :func:`check_ports`; returns exit code 2."""
    claim = claim_of(claims, error)
    if claim is None:
        fail(command, str(error))
    else:
        fail(command, claim.line(IN_USE), flag=claim.flag, port=claim.port, why=IN_USE)
    return 2


def fail(command: str, line: str, **details: object) -> None:
    """Say ``segstore <command>: <line>`` on stderr, and to a supervisor that started this process (the line and
    ``details``: ``flag``, ``port`` and ``why`` for a port)."""
    print(f"segstore {command}: {line}", file=sys.stderr, flush=True)
    report_status({"state": "failed", "line": line, **details})


def warn_ip_literal(command: str, host: str) -> None:
    """With TLS: say on stderr if clients reach this process by an IP address (Pravega's clients refuse it)."""
    if is_ip_literal(host):
        print(
            f"segstore {command}: warning: with TLS, clients reach this process as {host}, an IP address: Pravega's "
            "own clients refuse IP addresses as TLS host names; give --advertise-host a host name its certificate "
            "names",
            file=sys.stderr,
        )
