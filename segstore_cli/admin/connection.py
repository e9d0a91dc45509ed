"""Where the controller is and how to talk to it: the admin options, their environment variables, the session.

===========================  ===========================  ===============================================
option                       environment                  meaning
===========================  ===========================  ===============================================
``--controller URI``         ``SEGSTORE_CONTROLLER``      ``tcp://host:port`` or ``tls://host:port``, or
                                                          a list ``tcp://h1:port1,h2:port2`` (failover)
                                                          (default ``tcp://127.0.0.1:9090``)
``--trust-store PEM``        ``SEGSTORE_TRUST_STORE``     TLS: the CA certificates trusted (default: the
                                                          system's trust store)
``--client-cert PEM``        ``SEGSTORE_CLIENT_CERT``     TLS: a client certificate, with ``--client-key``
``--client-key PEM``         ``SEGSTORE_CLIENT_KEY``      (controllers started with ``--tls-ca``)
``--username USER``          ``SEGSTORE_USERNAME``        authentication: the user
``--password-stdin``         ``SEGSTORE_PASSWORD``        its password: the first line of standard input,
                                                          or the variable (never an option: it would show
                                                          in the process list)
``--retry-timeout S``                                     how long to try to reach the controller and the
                                                          segment stores (default 5: a command typed at a
                                                          prompt answers fast; the library waits 30)
``--rpc-timeout S``                                       the deadline of one call once reached
===========================  ===========================  ===============================================

Options win over the environment. A password is never printed, logged or put in an error message.
"""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TextIO

from segstore_cli.admin.errors import EXIT_USAGE, AdminError

if TYPE_CHECKING:
    from controller_client.controller.api import ControllerClient, ControllerClientConfig
    from controller_client.stream_manager import StreamManager

DEFAULT_CONTROLLER = "tcp://127.0.0.1:9090"
ADMIN_RETRY_TIMEOUT_S = 5.0
"""The admin command's budget for reaching the controller and the segment stores. Shorter than the client
library's 30 s: a wrong port or a stopped controller is answered in seconds at a prompt; a controller failover
(seconds) still fits, and scripts that ride out longer outages pass ``--retry-timeout``."""
_ENV = {
    "controller": "SEGSTORE_CONTROLLER",
    "trust_store": "SEGSTORE_TRUST_STORE",
    "client_cert": "SEGSTORE_CLIENT_CERT",
    "client_key": "SEGSTORE_CLIENT_KEY",
    "username": "SEGSTORE_USERNAME",
    "password": "SEGSTORE_PASSWORD",
}


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a number of seconds") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: must be positive")
    return value


def add_connection_arguments(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
    """The controller and security options and ``--json``. ``suppress``: for the parsers of the subcommands,
    which take the same options again without overriding what was given before the subcommand."""

    def default(value: object) -> object:
        return argparse.SUPPRESS if suppress else value

    group = parser.add_argument_group("controller", "where the controller is and how to log in")
    group.add_argument(
        "--controller",
        metavar="URI",
        default=default(None),
        help="tcp://host:port or tls://host:port, or a list tcp://h1:port1,h2:port2 to fail over "
        f"($SEGSTORE_CONTROLLER; default {DEFAULT_CONTROLLER})",
    )
    group.add_argument(
        "--trust-store",
        metavar="PEM",
        default=default(None),
        help="TLS: CA certificates to trust ($SEGSTORE_TRUST_STORE; default: the system's trust store)",
    )
    group.add_argument(
        "--client-cert",
        metavar="PEM",
        default=default(None),
        help="TLS: a client certificate, with --client-key ($SEGSTORE_CLIENT_CERT)",
    )
    group.add_argument(
        "--client-key",
        metavar="PEM",
        default=default(None),
        help="TLS: the client certificate's key ($SEGSTORE_CLIENT_KEY)",
    )
    group.add_argument(
        "--username",
        metavar="USER",
        default=default(None),
        help="log in as USER ($SEGSTORE_USERNAME); the password comes from $SEGSTORE_PASSWORD or --password-stdin",
    )
    group.add_argument(
        "--password-stdin",
        action="store_true",
        default=default(False),
        help="read the password from the first line of standard input",
    )
    group.add_argument(
        "--retry-timeout",
        metavar="S",
        type=_positive_seconds,
        default=default(ADMIN_RETRY_TIMEOUT_S),
        help="how long to try to reach the controller and the segment stores before giving up, in seconds "
        f"(default {ADMIN_RETRY_TIMEOUT_S:g})",
    )
    group.add_argument(
        "--rpc-timeout",
        metavar="S",
        type=_positive_seconds,
        default=default(60.0),
        help="deadline of one controller call, in seconds (default 60)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        default=default(False),
        help="print the result as JSON (for scripts) instead of tables",
    )


@dataclass(frozen=True, slots=True)
class Connection:
    """The controller to use and the credentials and trust to use with it."""

    controller: str = DEFAULT_CONTROLLER
    trust_store: str | None = None
    client_cert: str | None = None
    client_key: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    retry_timeout_s: float = ADMIN_RETRY_TIMEOUT_S
    rpc_timeout_s: float = 60.0

    @classmethod
    def from_args(cls, args: argparse.Namespace, environ: Mapping[str, str], stdin: TextIO) -> Connection:
        """Options, then the environment (module docstring). Raises AdminError (exit 2) for a bad URI, a user
        without a password, a password without a user, or half a client certificate."""
        from controller_client.controller.uri import parse_controllers
        from controller_client.errors import InvalidArgumentError

        def pick(key: str) -> str | None:
            value = getattr(args, key, None)
            return value if value else (environ.get(_ENV[key]) or None)

        controller = pick("controller") or DEFAULT_CONTROLLER
        try:
            parse_controllers(controller)
        except InvalidArgumentError as e:
            raise AdminError(f"--controller: {e}", EXIT_USAGE) from None
        username = pick("username")
        password = _read_password(stdin) if args.password_stdin else environ.get(_ENV["password"]) or None
        if username is None and password is not None:
            raise AdminError("a password was given without a user: set --username or $SEGSTORE_USERNAME", EXIT_USAGE)
        if username is not None and password is None:
            raise AdminError(
                f"--username {username}: no password: set $SEGSTORE_PASSWORD or pass --password-stdin", EXIT_USAGE
            )
        client_cert, client_key = pick("client_cert"), pick("client_key")
        if (client_cert is None) != (client_key is None):
            raise AdminError("--client-cert and --client-key go together", EXIT_USAGE)
        return cls(
            controller,
            pick("trust_store"),
            client_cert,
            client_key,
            username,
            password,
            args.retry_timeout,
            args.rpc_timeout,
        )

    def client_config(self) -> ControllerClientConfig:
        """The controller client's settings (a short reconnect backoff: an admin command is short-lived)."""
        from controller_client.controller.api import ControllerClientConfig

        return ControllerClientConfig(
            rpc_timeout_s=self.rpc_timeout_s,
            retry_timeout_s=self.retry_timeout_s,
            max_backoff_s=min(1.0, max(self.retry_timeout_s, 0.05)),
            max_reconnect_backoff_ms=1000,
            trust_store=self.trust_store,
            client_cert=self.client_cert,
            client_key=self.client_key,
            username=self.username,
            password=self.password,
        )


def _read_password(stdin: TextIO) -> str:
    password = stdin.readline().removesuffix("\n").removesuffix("\r")
    if not password:
        raise AdminError("--password-stdin: standard input held no password", EXIT_USAGE)
    return password


@dataclass(frozen=True, slots=True)
class Session:
    """One command's clients: the controller's, and a stream manager over it (segment stores, tokens, TLS)."""

    controller: ControllerClient
    manager: StreamManager


@asynccontextmanager
async def open_session(connection: Connection) -> AsyncIterator[Session]:
    """A session on ``connection``; both clients are closed at the end. Each call has one budget, ``--retry-timeout``
    (the controller client's ``retry_timeout_s``, which the manager follows), for reaching the controller and the
    segment stores; the manager repeats no controller call after a missed deadline either."""
    from controller_client.controller.api import ControllerClient
    from controller_client.stream_manager import StreamManager, StreamManagerConfig
    from segment_store.client import RetryPolicy

    controller = await ControllerClient.connect(connection.controller, connection.client_config())
    try:
        manager = StreamManager(controller, config=StreamManagerConfig(controller_retry=RetryPolicy(max_attempts=1)))
        try:
            yield Session(controller, manager)
        finally:
            await manager.close()
    finally:
        await controller.close()
