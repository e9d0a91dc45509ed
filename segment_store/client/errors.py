"""Errors of the segment client: connection loss, and one typed error per failure reply of the wire.

Every failure reply (``WrongHost``, ``NoSuchSegment``, ...) becomes an exception through one registry,
:func:`error_for_reply`, keyed by the reply's wire type code (as aiokafka's ``errors.for_code``). Each
class also derives from the engine's contract error of the same meaning where one exists
(``NoSuchSegmentError`` is a :class:`~segstore_shared.contracts.SegmentNotExistsError`), so callers can
catch one name whether the segment store is local or remote.

``retriable`` says whether repeating the same call may succeed: lost connections, timeouts and
``WrongHost`` (the container moved) are; a sealed or missing segment, a failed condition, an
unsupported operation are not. An expired delegation token is retriable once a new token is fetched.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Callable
from typing import Any

from segment_store.protocol import (
    AuthTokenCheckFailed,
    AuthTokenErrorCode,
    ConditionalCheckFailed,
    ErrorMessage,
    ErrorMessageCode,
    InvalidEventNumber,
    NoSuchSegment,
    OperationUnsupported,
    SegmentAlreadyExists,
    SegmentIsSealed,
    SegmentIsTruncated,
    TableKeyBadVersion,
    TableKeyDoesNotExist,
    TableSegmentNotEmpty,
    WireCommand,
    WrongHost,
)
from segstore_shared.contracts import (
    SegmentError,
    SegmentExistsError,
    SegmentNotExistsError,
    SegmentSealedError,
    SegmentTruncatedError,
)
from segstore_shared.errors import SegstoreError
from segstore_shared.table_errors import (
    TableKeyBadVersionError,
    TableKeyNotExistsError,
    TableSegmentNotEmptyError,
)


class ClientError(SegstoreError):
    """Root of the errors the segment client raises."""


class ConnectionLostError(ClientError, ConnectionError):
    """The connection failed, was closed, or could not be opened; its pending requests fail with this.

    Retriable: the request may or may not have reached the server, so only idempotent requests (reads,
    info, appends through a writer session, which deduplicates) are safe to repeat blindly.
    """

    retriable = True

    def __init__(self, message: str, endpoint: tuple[str, int] | None = None) -> None:
        self.endpoint = endpoint
        where = f" ({endpoint[0]}:{endpoint[1]})" if endpoint else ""
        super().__init__(f"{message}{where}")


class ConnectFailedError(ConnectionLostError):
    """No connection to the segment store could be opened: refused, no answer within the connect timeout, a host
    name that does not resolve. ``reason`` says which in a few words. Retriable (a restarting segment store, a
    container about to move elsewhere)."""

    def __init__(self, reason: str, endpoint: tuple[str, int]) -> None:
        super().__init__(f"cannot connect: {reason}", endpoint)
        self.reason = reason


class SegmentStoreUnreachableError(ConnectionLostError):
    """A segment store that could not be reached within the call's budget (the controller client's
    ``retry_timeout_s``): the one message, naming its ``host:port``, what failed and what to check. Nothing
    retries it again (``segstore_shared.deadline.final``)."""

    final = True

    def __init__(self, cause: ConnectFailedError, elapsed_s: float) -> None:
        host, port = cause.endpoint or ("?", 0)
        where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        ClientError.__init__(
            self,
            f"segment store {where} unreachable after {elapsed_s:.1f} s: {cause.reason} (is the segment store "
            "running, and can this machine reach the address it registered?)",
        )
        self.endpoint = cause.endpoint
        self.reason = cause.reason


def connect_failure(error: OSError, endpoint: tuple[str, int]) -> ConnectFailedError:
    """The client's error for a connection attempt that failed with ``error``."""
    if isinstance(error, ConnectionRefusedError):
        reason = "connection refused"
    elif isinstance(error, TimeoutError):  # the TCP handshake or the Hello exchange
        reason = "no answer"
    elif isinstance(error, socket.gaierror):
        reason = f"host name {endpoint[0]!r} does not resolve"
    else:
        reason = (error.strerror or str(error) or type(error).__name__).lower()
    return ConnectFailedError(reason, endpoint)


class TlsError(ConnectionLostError):
    """A TLS handshake with a segment store failed in a way repeating will not fix: its certificate is not
    trusted or does not name the host, it wants a client certificate, or it refused ours. Not retriable:
    the message says what to check (trust store, host name, client certificate)."""

    retriable = False


_PLAIN_TEXT_PEER = ("WRONG_VERSION_NUMBER", "HTTP_REQUEST", "UNSUPPORTED_PROTOCOL", "RECORD_LAYER_FAILURE")


def tls_failure(error: BaseException, endpoint: tuple[str, int], trust: str) -> ConnectionLostError:
    """The client's error for a TLS failure while connecting: :class:`TlsError` for certificate problems,
    a retriable :class:`ConnectionLostError` for the rest (a closed or reset connection, a server that is
    restarting). ``trust`` names the client's trust store, for the message."""
    host = endpoint[0]
    if isinstance(error, ssl.SSLCertVerificationError):
        why = error.verify_message or error.reason or str(error)
        return TlsError(
            f"TLS: the segment store's certificate was refused ({why}); check that the trust store ({trust}) "
            f"holds the CA that signed it and that the certificate names host {host!r} (subjectAltName; "
            "an IP address matches only an IP entry)",
            endpoint,
        )
    if isinstance(error, ssl.SSLError):
        reason = (error.reason or "").upper()
        if "CERTIFICATE_REQUIRED" in reason:
            return TlsError(
                f"TLS: the segment store requires a client certificate ({error.reason}); give the client a "
                "certificate and key signed by the CA the segment store trusts (TrustConfig cert_path, key_path)",
                endpoint,
            )
        if "ALERT" in reason and ("CA" in reason or "CERTIFICATE" in reason or "HANDSHAKE_FAILURE" in reason):
            return TlsError(
                f"TLS: the segment store refused the handshake ({error.reason}); it may require a client "
                "certificate, or not trust this client's: check it is signed by the CA of its --tls-ca",
                endpoint,
            )
        if reason in _PLAIN_TEXT_PEER:
            return TlsError(
                f"TLS: the segment store does not speak TLS ({error.reason}); connect in plain text", endpoint
            )
        return ConnectionLostError(f"TLS handshake failed: {error.reason or error}", endpoint)
    if isinstance(error, ConnectionResetError | BrokenPipeError):
        return ConnectionLostError(
            "the segment store closed the connection during the TLS handshake (does it serve TLS?)", endpoint
        )
    return ConnectFailedError(f"{error!r}", endpoint)


class RequestTimeoutError(ClientError, TimeoutError):
    """No reply within the request timeout. Retriable; the connection stays open."""

    retriable = True


class ClientClosedError(ClientError):
    """The client, pool, writer or reader was closed; it cannot be used any more."""


class UnexpectedReplyError(ClientError):
    """The server answered with a command that is neither the expected reply nor a failure reply."""

    def __init__(self, request: str, reply: WireCommand) -> None:
        self.reply = reply
        super().__init__(f"{request} was answered by {type(reply).__name__}: {reply!r}"[:2000])


class ReplyError(ClientError):
    """Base of the errors built from failure replies; ``reply`` is the command the server sent."""

    reply: WireCommand
    request_id: int


class _SegmentReplyError(ReplyError, SegmentError):
    """A failure reply that names a segment."""

    def __init__(self, reply: WireCommand, segment: str, message: str = "") -> None:
        self.reply = reply
        self.request_id = getattr(reply, "request_id", -1)
        SegmentError.__init__(self, segment, message)


class WrongHostError(_SegmentReplyError):
    """The segment's container is not on that segment store; ``correct_host`` names it if known ("")."""

    retriable = True

    def __init__(self, reply: WrongHost) -> None:
        self.correct_host = reply.correct_host
        hint = f"; correct host {reply.correct_host}" if reply.correct_host else ""
        super().__init__(reply, reply.segment, f"wrong host{hint}")


class NoSuchSegmentError(_SegmentReplyError, SegmentNotExistsError):
    """The segment does not exist; ``offset`` is the one the request named (-1 if not given)."""

    def __init__(self, reply: NoSuchSegment) -> None:
        self.offset = reply.offset
        super().__init__(reply, reply.segment, "no such segment")


class SegmentIsSealedError(_SegmentReplyError, SegmentSealedError):
    """The segment is sealed; ``offset`` is where (-1 if the server did not say)."""

    def __init__(self, reply: SegmentIsSealed) -> None:
        self.offset = reply.offset
        super().__init__(reply, reply.segment, "segment is sealed")


class SegmentIsTruncatedError(_SegmentReplyError, SegmentTruncatedError):
    """A read below the segment's ``start_offset``; a reader resumes there (``seek``) or gives up."""

    def __init__(self, reply: SegmentIsTruncated) -> None:
        self.start_offset = reply.start_offset
        self.offset = reply.offset
        super().__init__(reply, reply.segment, f"offset {reply.offset} is below start offset {reply.start_offset}")


class SegmentAlreadyExistsError(_SegmentReplyError, SegmentExistsError):
    """A create found the segment already there."""

    def __init__(self, reply: SegmentAlreadyExists) -> None:
        super().__init__(reply, reply.segment, "segment already exists")


class TableKeyBadVersionReplyError(_SegmentReplyError, TableKeyBadVersionError):
    """A conditional table update or removal named a key version that is not current.

    The wire does not say which key: ``versions`` is empty.
    """

    def __init__(self, reply: TableKeyBadVersion) -> None:
        self.versions: dict[bytes, tuple[int, int]] = {}
        super().__init__(reply, reply.segment, "table key version mismatch")


class TableKeyDoesNotExistReplyError(_SegmentReplyError, TableKeyNotExistsError):
    """A conditional table update or removal named a key that does not exist (``key`` unknown: b"")."""

    def __init__(self, reply: TableKeyDoesNotExist) -> None:
        self.key = b""
        super().__init__(reply, reply.segment, "table key does not exist")


class TableSegmentNotEmptyReplyError(_SegmentReplyError, TableSegmentNotEmptyError):
    """A must-be-empty table segment deletion found keys (``entry_count`` unknown: -1)."""

    def __init__(self, reply: TableSegmentNotEmpty) -> None:
        self.entry_count = -1
        super().__init__(reply, reply.segment, "table segment is not empty")


class ErrorMessageError(_SegmentReplyError):
    """A generic failure: ``code`` (an ``ErrorMessageCode``) and the server's ``message``."""

    def __init__(self, reply: ErrorMessage) -> None:
        self.code = reply.error_code
        self.message = reply.message
        kind = "illegal argument" if reply.error_code is ErrorMessageCode.ILLEGAL_ARGUMENT_EXCEPTION else "error"
        super().__init__(reply, reply.segment, f"{kind}: {reply.message}")


class InvalidEventNumberError(ReplyError):
    """The server rejected a writer's event number (a duplicate or out-of-order append).

    A writer session handles it by setting up again and resending; raised to callers only when that
    keeps failing.
    """

    def __init__(self, reply: InvalidEventNumber) -> None:
        self.reply = reply
        self.request_id = reply.request_id
        self.writer_id = reply.writer_id
        self.event_number = reply.event_number
        super().__init__(f"invalid event number {reply.event_number} of writer {reply.writer_id}")


class ConditionalCheckFailedError(ReplyError):
    """A conditional append's expected offset was not the segment's length; nothing was appended."""

    def __init__(self, reply: ConditionalCheckFailed) -> None:
        self.reply = reply
        self.request_id = reply.request_id
        self.writer_id = reply.writer_id
        self.event_number = reply.event_number
        super().__init__(f"conditional append {reply.event_number} of writer {reply.writer_id} failed")


class OperationUnsupportedError(ReplyError):
    """The server does not implement ``operation``."""

    def __init__(self, reply: OperationUnsupported) -> None:
        self.reply = reply
        self.request_id = reply.request_id
        self.operation = reply.operation_name
        super().__init__(f"operation not supported by the server: {reply.operation_name}")


class AuthTokenCheckFailedError(ReplyError):
    """The delegation token was rejected; retriable (after fetching a new token) only if it expired."""

    def __init__(self, reply: AuthTokenCheckFailed) -> None:
        self.reply = reply
        self.request_id = reply.request_id
        self.code = reply.error_code
        self.retriable = reply.error_code is AuthTokenErrorCode.TOKEN_EXPIRED
        super().__init__(f"delegation token rejected ({reply.error_code.name})")


_REGISTRY: dict[int, Callable[[Any], ReplyError]] = {
    reply.TYPE_CODE: error
    for reply, error in (
        (WrongHost, WrongHostError),
        (NoSuchSegment, NoSuchSegmentError),
        (SegmentIsSealed, SegmentIsSealedError),
        (SegmentIsTruncated, SegmentIsTruncatedError),
        (SegmentAlreadyExists, SegmentAlreadyExistsError),
        (TableKeyBadVersion, TableKeyBadVersionReplyError),
        (TableKeyDoesNotExist, TableKeyDoesNotExistReplyError),
        (TableSegmentNotEmpty, TableSegmentNotEmptyReplyError),
        (ErrorMessage, ErrorMessageError),
        (InvalidEventNumber, InvalidEventNumberError),
        (ConditionalCheckFailed, ConditionalCheckFailedError),
        (OperationUnsupported, OperationUnsupportedError),
        (AuthTokenCheckFailed, AuthTokenCheckFailedError),
    )
}
"""Wire type code of a failure reply -> the exception class built from it (the one registry)."""


def is_failure_reply(reply: WireCommand) -> bool:
    """True if ``reply`` is one of the failure replies the registry maps to an exception."""
    return reply.TYPE_CODE in _REGISTRY


def error_for_reply(reply: WireCommand) -> ReplyError:
    """The typed exception for a failure reply. Raises KeyError if ``reply`` is not a failure reply."""
    return _REGISTRY[reply.TYPE_CODE](reply)
