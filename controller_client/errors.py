"""Errors of the controller client.

Every failure of a controller call surfaces as a :class:`ControllerError`. The status enums of
``Controller.proto`` (``CreateStreamStatus.SCOPE_NOT_FOUND``, ``TxnStatus.TRANSACTION_NOT_FOUND``,
...) and the gRPC status codes map to the subclasses below, in :mod:`controller_client.controller.api`.
Only :class:`ControllerUnavailableError` is ``retriable``: the controller could not be reached or
did not answer in time, so the same call may succeed later. Everything else is the controller's
considered answer and repeating the call gives the same answer.

Each error names what it concerns (scope, stream, transaction, reader group) in its message and
keeps it in attributes.
"""

from __future__ import annotations

import uuid

from segstore_shared.errors import SegstoreError


class ControllerError(SegstoreError):
    """A controller call failed."""


class ControllerUnavailableError(ControllerError):
    """The controller was unreachable (gRPC UNAVAILABLE, connection refused) or missed the deadline
    (DEADLINE_EXCEEDED), also after the client's retries."""

    retriable = True


class ControllerTlsError(ControllerError):
    """TLS with the controller failed in a way repeating will not fix: its certificate is not trusted, names
    another host, or the controller speaks no TLS. The message says what to check. Not retriable."""


class ControllerAuthenticationError(ControllerError):
    """The controller did not accept the credentials (gRPC ``UNAUTHENTICATED``): wrong user or password, an expired
    or foreign token, or none where the controller requires them."""


class ControllerPermissionError(ControllerError):
    """The credentials are valid but do not allow this (gRPC ``PERMISSION_DENIED``); the message names the
    resource and the permission missing."""


class ControllerFailureError(ControllerError):
    """The controller answered FAILURE / INTERNAL_ERROR, a gRPC error without a more specific
    meaning, or a response this client cannot interpret."""


class InvalidArgumentError(ControllerError):
    """The controller rejected the request: gRPC INVALID_ARGUMENT, an invalid scope, stream or
    reader group name, an invalid reader group config or scale input."""


class ScopeNotFoundError(ControllerError):
    def __init__(self, scope: str) -> None:
        super().__init__(f"scope {scope!r} does not exist")
        self.scope = scope


class ScopeNotEmptyError(ControllerError):
    """The scope still has streams, reader groups or key-value tables."""

    def __init__(self, scope: str) -> None:
        super().__init__(f"scope {scope!r} is not empty")
        self.scope = scope


class _StreamError(ControllerError):
    _what = ""

    def __init__(self, scope: str, stream: str) -> None:
        super().__init__(f"stream {scope}/{stream} {self._what}")
        self.scope = scope
        self.stream = stream


class StreamNotFoundError(_StreamError):
    _what = "does not exist"


class StreamSealedError(_StreamError):
    """The stream is sealed and the operation needs an open stream."""

    _what = "is sealed"


class StreamNotSealedError(_StreamError):
    """Only a sealed stream can be deleted."""

    _what = "is not sealed"


class ScalePreconditionFailedError(ControllerError):
    """``scale`` was refused: the segments to seal are not all active, or the new ranges do not
    cover exactly the sealed ones, or another scale is in progress."""

    def __init__(self, scope: str, stream: str) -> None:
        super().__init__(f"scale of stream {scope}/{stream} refused: precondition failed")
        self.scope = scope
        self.stream = stream


class _TxnError(ControllerError):
    def __init__(self, scope: str, stream: str, txn_id: uuid.UUID, what: str) -> None:
        super().__init__(f"transaction {txn_id} on stream {scope}/{stream} {what}")
        self.scope = scope
        self.stream = stream
        self.txn_id = txn_id


class TxnNotFoundError(_TxnError):
    """The transaction does not exist (any more): unknown, or already committed/aborted and forgotten."""

    def __init__(self, scope: str, stream: str, txn_id: uuid.UUID) -> None:
        super().__init__(scope, stream, txn_id, "does not exist")


class TxnFailedError(_TxnError):
    """The transaction cannot go on: its lease or maximum execution time ran out, the lease asked
    for is too large, or commit/abort failed. ``reason`` is the status name the controller gave."""

    def __init__(self, scope: str, stream: str, txn_id: uuid.UUID, reason: str) -> None:
        super().__init__(scope, stream, txn_id, f"failed: {reason}")
        self.reason = reason


class ReaderGroupNotFoundError(ControllerError):
    def __init__(self, scope: str, reader_group: str) -> None:
        super().__init__(f"reader group {scope}/{reader_group} does not exist")
        self.scope = scope
        self.reader_group = reader_group


class SubscriberNotFoundError(ControllerError):
    """The reader group is not a subscriber of the stream."""

    def __init__(self, scope: str, stream: str, subscriber: str) -> None:
        super().__init__(f"{subscriber!r} is not a subscriber of stream {scope}/{stream}")
        self.scope = scope
        self.stream = stream
        self.subscriber = subscriber


class GenerationMismatchError(ControllerError):
    """A reader-group-generation-guarded update carried a stale generation."""

    def __init__(self, what: str, generation: int) -> None:
        super().__init__(f"{what}: generation {generation} is not the current one")
        self.generation = generation
