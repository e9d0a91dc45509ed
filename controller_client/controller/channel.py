"""The gRPC channels to the controllers: their URI, the client's settings, and TLS.

A URI names one controller or a list of them (:mod:`controller_client.controller.uri`): ``tcp://h1:9090,h2:9090``
(also ``pravega://`` or no scheme) is plain text; ``tls://h1:9090,h2:9090`` (also ``ssl://``, ``tcps://``,
``pravegas://``, Pravega's TLS schemes) is TLS, and then the segment stores are reached with TLS too (as Pravega's
clients decide: by the controller URI's scheme, since ``getURI`` answers a bare host and port). Each controller
gets a channel of its own (:func:`open_channel`), so TLS checks each one's certificate against its own host name.
(gRPC's own multi-address target, ``ipv4:h1:p1,h2:p2`` with ``pick_first`` or ``round_robin``, takes IP addresses
only and checks every address's certificate against the one name of the channel: no per-host name check.)

TLS: the channel checks the controller's certificate against ``ControllerClientConfig.trust_store`` (a PEM
file of CA certificates, or of the servers' own; None = the system's default trust store) and that it names
the URI's host (gRPC always checks host names: connect by a name the certificate holds, ``localhost`` on one
machine). A controller that requires client certificates gets ``client_cert``/``client_key``.

Certificate problems are not retried: gRPC reports them as UNAVAILABLE, like a controller that is down. On
the first UNAVAILABLE of a call the client looks closer, by what gRPC says (:func:`tls_problem`) and with one
TLS connection of its own (:func:`probe_tls`), and raises :class:`~controller_client.errors.ControllerTlsError`
at once when the certificates do not fit, instead of retrying for ``retry_timeout_s`` (with several controllers:
once no controller of the list is left whose certificates fit; the others are tried meanwhile). A plain-text client that
gives up on a controller serving TLS is told so (:func:`serves_tls`). Other gRPC statuses map to the typed errors
of :mod:`controller_client.errors` in :func:`status_error`.

A controller that cannot be reached within the budget (``retry_timeout_s``) gives one message, whoever asked (the
client library, ``segstore admin``, Spark): :func:`unreachable_message`, e.g. ``controller tcp://127.0.0.1:9999
unreachable after 30.0 s: connection refused (is the controller running, and is the URI right?)``; with a list,
``controllers tcp://h1:9090,h2:9090 unreachable after 30.0 s: last h2:9090: connection refused (...)``.
"""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import grpc.aio

from controller_client.controller.uri import ControllerAddress as ControllerAddress  # re-exported
from controller_client.controller.uri import ControllerList as ControllerList  # re-exported
from controller_client.controller.uri import parse_controller_address as parse_controller_address  # re-exported
from controller_client.controller.uri import parse_controller_uri as parse_controller_uri  # re-exported
from controller_client.controller.uri import parse_controllers as parse_controllers  # re-exported
from controller_client.errors import (
    ControllerAuthenticationError,
    ControllerError,
    ControllerFailureError,
    ControllerPermissionError,
    ControllerUnavailableError,
    InvalidArgumentError,
)
from segstore_shared.auth.passwords import basic_header
from segstore_shared.auth.tls import TrustConfig
from segstore_shared.deadline import DEFAULT_UNREACHABLE_TIMEOUT_S


@dataclass(frozen=True, slots=True)
class ControllerClientConfig:
    """Deadlines, retry policy and TLS trust of a :class:`~controller_client.controller.api.ControllerClient`."""

    rpc_timeout_s: float = 30.0
    """Deadline of one RPC attempt."""
    retry_timeout_s: float = DEFAULT_UNREACHABLE_TIMEOUT_S
    """The budget for "unreachable": how long a call retries a controller it cannot reach (gRPC UNAVAILABLE:
    refused, no answer, a leader change), counted from the start of the call; then it fails with
    :class:`~controller_client.errors.ControllerUnavailableError` naming the URI. A ``StreamManager`` on this client
    gives its segment store calls the same budget. Once reached, an answer has ``rpc_timeout_s``."""
    initial_backoff_s: float = 0.05
    max_backoff_s: float = 2.0
    backoff_multiplier: float = 2.0
    max_reconnect_backoff_ms: int = 2000
    """gRPC channel reconnect backoff cap, so a restarted controller is found again quickly."""
    trust_store: str | None = None
    """TLS (a ``tls://`` URI): PEM file of the certificates trusted in the controller and the segment stores;
    None = the system's default trust store."""
    client_cert: str | None = None
    """TLS: a certificate (PEM) to present to servers that require client certificates, with ``client_key``."""
    client_key: str | None = None
    username: str | None = None
    """Authentication (``Basic``): the user, with ``password``; every call carries them."""
    password: str | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)
    """Authentication (``Bearer``): a delegation token from ``getDelegationToken`` (what Spark executors use)."""

    def __post_init__(self) -> None:
        if (self.username is None) != (self.password is None):
            raise ValueError("password: Basic authentication needs both username and password")
        if self.username is not None and self.token is not None:
            raise ValueError("token: give either username/password or a token, not both")
        for key in ("rpc_timeout_s", "initial_backoff_s", "max_backoff_s", "max_reconnect_backoff_ms"):
            if getattr(self, key) <= 0:
                raise ValueError(f"{key}: must be positive, not {getattr(self, key)}")
        if self.retry_timeout_s < 0:
            raise ValueError(f"retry_timeout_s: must be >= 0, not {self.retry_timeout_s}")
        if self.backoff_multiplier < 1:
            raise ValueError(f"backoff_multiplier: must be >= 1, not {self.backoff_multiplier}")
        if self.max_backoff_s < self.initial_backoff_s:
            raise ValueError("max_backoff_s: must be >= initial_backoff_s")
        if (self.client_cert is None) != (self.client_key is None):
            raise ValueError("client_key: a client certificate needs both client_cert and client_key")

    def call_metadata(self) -> tuple[tuple[str, str], ...] | None:
        """The ``authorization`` metadata every call carries (None without credentials)."""
        if self.username is not None and self.password is not None:
            return (("authorization", basic_header(self.username, self.password)),)
        if self.token is not None:
            return (("authorization", f"Bearer {self.token}"),)
        return None

    def trust(self) -> TrustConfig:
        """The TLS trust these settings describe (used when the URI asks for TLS)."""
        return TrustConfig(
            Path(self.trust_store) if self.trust_store else None,
            cert_path=Path(self.client_cert) if self.client_cert else None,
            key_path=Path(self.client_key) if self.client_key else None,
        )


def open_channel(address: ControllerAddress, config: ControllerClientConfig) -> grpc.aio.Channel:
    """An insecure channel, or with TLS one whose credentials come from ``config.trust()``. Raises TlsConfigError
    (naming the file) when the trust store or client certificate cannot be used."""
    options = [
        ("grpc.initial_reconnect_backoff_ms", min(100, config.max_reconnect_backoff_ms)),
        ("grpc.min_reconnect_backoff_ms", min(100, config.max_reconnect_backoff_ms)),
        ("grpc.max_reconnect_backoff_ms", config.max_reconnect_backoff_ms),
    ]
    if not address.tls:
        return grpc.aio.insecure_channel(address.target, options=options)
    trust = config.trust()
    identity = trust.client_identity()
    credentials = grpc.ssl_channel_credentials(
        root_certificates=trust.root_certificates(),
        private_key=identity[1] if identity else None,
        certificate_chain=identity[0] if identity else None,
    )
    return grpc.aio.secure_channel(address.target, credentials, options=options)


_NOT_TRUSTED = ("CERTIFICATE_VERIFY_FAILED", "certificate verify failed", "unable to get local issuer")
_WRONG_NAME = ("Hostname Verification Check failed", "Peer name", "hostname mismatch")
_NOT_TLS = ("WRONG_VERSION_NUMBER", "wrong version number", "HTTP_REQUEST", "UNSUPPORTED_PROTOCOL")


def _not_trusted(trust: TrustConfig) -> str:
    return (
        f"the controller's certificate is not trusted: check that the trust store ({trust.describe()}) holds "
        "the CA that signed it"
    )


def _wrong_name(address: ControllerAddress) -> str:
    return (
        f"the controller's certificate does not name host {address.host!r}: connect by a host name it holds "
        "(its subjectAltName; Pravega's clients accept no IP addresses)"
    )


def tls_problem(details: str, address: ControllerAddress, trust: TrustConfig) -> str | None:
    """What to fix when gRPC's UNAVAILABLE ``details`` tell of a TLS failure that repeating will not cure
    (the certificate is not trusted or names another host; the server speaks no TLS); None otherwise."""
    if any(mark in details for mark in _NOT_TRUSTED):
        return _not_trusted(trust)
    if any(mark in details for mark in _WRONG_NAME):
        return _wrong_name(address)
    if any(mark in details for mark in _NOT_TLS):
        return "the controller does not speak TLS: use a tcp:// URI"
    return None


async def probe_tls(address: ControllerAddress, trust: TrustConfig, timeout_s: float) -> str | None:
    """What is wrong with TLS to the controller, found with one TLS connection of our own (gRPC reports only
    the last address it tried, which for ``localhost`` may be an IPv6 one refusing): None when the handshake
    works and the controller speaks first (its HTTP/2 settings), or when it cannot be reached at all."""
    context = trust.client_context(alpn_protocols=("h2",))  # gRPC servers require ALPN h2
    try:
        async with asyncio.timeout(timeout_s):
            reader, writer = await asyncio.open_connection(
                address.host, address.port, ssl=context, server_hostname=address.host
            )
            try:
                first = await reader.read(1)
            finally:
                writer.close()
    except ssl.SSLCertVerificationError as error:
        message = f"{error.verify_message or error}"
        return _wrong_name(address) if "mismatch" in message.lower() else _not_trusted(trust)
    except ssl.SSLError as error:
        reason = (error.reason or "").upper()
        if any(mark in reason for mark in _NOT_TLS):
            return "the controller does not speak TLS: use a tcp:// URI"
        return _client_certificate_refused(trust) if "CERTIFICATE" in reason else None
    except (OSError, TimeoutError):
        return None
    return None if first else _client_certificate_refused(trust)


def _client_certificate_refused(trust: TrustConfig) -> str:
    if trust.cert_path is None:
        return (
            "the controller closed the connection right after the TLS handshake: it requires a client certificate "
            "(set client_cert and client_key)"
        )
    return (
        f"the controller closed the connection right after the TLS handshake: it did not accept the client "
        f"certificate {trust.cert_path} (is it signed by the CA of its --tls-ca?)"
    )


async def diagnose_tls(details: str, address: ControllerAddress, config: ControllerClientConfig) -> str | None:
    """What to fix when a TLS channel is UNAVAILABLE for a reason repeating will not cure; None if none is seen."""
    trust = config.trust()
    return tls_problem(details, address, trust) or await probe_tls(address, trust, min(5.0, config.rpc_timeout_s))


_REASONS = (
    (("connection refused",), "connection refused"),
    # no answer: also SYNs dropped once a backlog is full, a connection attempt given up by its deadline
    (("timed out", "timeout occurred", "deadline exceeded", "handshaker shutdown"), "no answer"),
    (("dns resolution failed", "name resolution", "could not resolve"), "the host name does not resolve"),
    (("no route to host",), "no route to host"),
    (("network is unreachable",), "network is unreachable"),
    (("socket closed", "connection reset", "broken pipe", "end of tcp stream"), "the connection was closed"),
)  # fmt: skip


def reach_failure(details: str) -> str:
    """What gRPC's UNAVAILABLE ``details`` say in a few words ("connection refused", "no answer", ...); the details
    themselves when they say something else (a controller that answered UNAVAILABLE)."""
    lowered = details.lower()
    for marks, reason in _REASONS:
        if any(mark in lowered for mark in marks):
            return reason
    return " ".join(details.split()) or "unavailable"


_NOTHING_THERE = (_REASONS[1][1], _REASONS[2][1])  # no answer, no such host: no TLS to find there
# "connection refused" is probed (at once refused again if nothing listens): ``localhost`` may name ``::1``, which
# refuses, and 127.0.0.1, where a TLS controller listens; gRPC reports the first.


async def unreachable_message(
    address: ControllerAddress | None, target: str, elapsed_s: float, details: str, tried: ControllerList | None = None
) -> str:
    """The one message for controllers not reached within the budget (module docstring): the URI and the last
    error; with several controllers (``tried``), the whole list, and which one the last error came from
    (``address``). A plain-text client that finds TLS there is told to use a ``tls://`` URI instead of what to
    check."""
    reason = reach_failure(details)
    hint = "is the controller running, and is the URI right?"
    plain = address is not None and not address.tls
    if plain and reason not in _NOTHING_THERE and address is not None and await serves_tls(address, 1.0):
        hint = "it serves TLS: use a tls:// URI"
    if tried is not None and len(tried.addresses) > 1:
        last = address.target if address is not None else target
        hint = hint.replace("is the controller running", "are the controllers running")
        return f"controllers {tried.uri} unreachable after {elapsed_s:.1f} s: last {last}: {reason} ({hint})"
    where = address.uri if address is not None else target
    return f"controller {where} unreachable after {elapsed_s:.1f} s: {reason} ({hint})"


async def serves_tls(address: ControllerAddress, timeout_s: float) -> bool:
    """Whether a TLS handshake with ``address`` works, the certificate unchecked (a hint for plain-text clients)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(["h2"])
    try:
        async with asyncio.timeout(timeout_s):
            _, writer = await asyncio.open_connection(address.host, address.port, ssl=context)
            writer.close()
    except (OSError, TimeoutError):
        return False
    return True


def status_error(
    rpc: str, e: grpc.aio.AioRpcError, target: str, rpc_timeout_s: float, not_found: ControllerError | None
) -> ControllerError:
    """The typed error for a gRPC status other than UNAVAILABLE (``not_found`` for NOT_FOUND, if given)."""
    code = e.code()
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return ControllerUnavailableError(f"{rpc}: controller {target} did not answer within {rpc_timeout_s}s")
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        return InvalidArgumentError(f"{rpc}: {e.details()}")
    details = e.details() or ""
    said = details if details.startswith(f"{rpc}: ") else f"{rpc}: {details}"  # ours name the RPC already
    if code == grpc.StatusCode.UNAUTHENTICATED:
        return ControllerAuthenticationError(f"controller {target}: {said}")
    if code == grpc.StatusCode.PERMISSION_DENIED:
        return ControllerPermissionError(said)
    if code == grpc.StatusCode.NOT_FOUND and not_found is not None:
        return not_found
    return ControllerFailureError(f"{rpc}: gRPC {code.name}: {e.details()}")
