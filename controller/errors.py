"""Errors of the controller's domain API (:class:`controller.core.ControllerCore`).

The gRPC layer turns each into the status enum value ``Controller.proto`` defines for the call (for
example ``StreamNotFoundError`` -> ``UpdateStreamStatus.STREAM_NOT_FOUND``), or, where the protocol has
none, into a gRPC status code: malformed input -> ``INVALID_ARGUMENT``, a failed precondition ->
``FAILED_PRECONDITION``, coordination outages -> ``UNAVAILABLE``. Every error names what it is about.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from controller.metadata import errors as md
from segstore_shared.errors import RetriableError, SegstoreError


class ControllerError(SegstoreError):
    """Base of the controller's domain errors."""


class ControllerUnavailableError(RetriableError, ControllerError):
    """The controller cannot serve now (ZooKeeper unreachable, no segment store for a container, ...)."""


class ScopeNotFoundError(ControllerError):
    def __init__(self, scope: str) -> None:
        super().__init__(f"scope {scope!r} does not exist")
        self.scope = scope


class ScopeNotEmptyError(ControllerError):
    def __init__(self, scope: str, what: str = "streams") -> None:
        super().__init__(f"scope {scope!r} is not empty: it still has {what}")
        self.scope = scope


class StreamError(ControllerError):
    def __init__(self, scope: str, stream: str, message: str) -> None:
        super().__init__(f"stream {scope}/{stream}: {message}")
        self.scope = scope
        self.stream = stream


class StreamNotFoundError(StreamError):
    def __init__(self, scope: str, stream: str) -> None:
        super().__init__(scope, stream, "does not exist")


class StreamSealedError(StreamError):
    def __init__(self, scope: str, stream: str) -> None:
        super().__init__(scope, stream, "is sealed")


class StreamNotSealedError(StreamError):
    def __init__(self, scope: str, stream: str) -> None:
        super().__init__(scope, stream, "must be sealed before it is deleted")


class StreamBusyError(StreamError):
    """Another operation holds the stream (state barrier): retry later."""

    retriable = True


class StreamBeingCreatedError(StreamError):
    """The stream is listed but its creation has not finished (records or first segments still missing): a
    lookup of its segments or a transaction waits for it. Retriable (``UNAVAILABLE``): clients retry within their
    time budget, so a reader that finds a new stream in a listing sees it whole a moment later."""

    retriable = True

    def __init__(self, scope: str, stream: str) -> None:
        super().__init__(scope, stream, "is still being created")


class InvalidStreamCutError(StreamError):
    """A stream cut that does not describe a valid position (or is behind the truncation point)."""


class StreamDataNotFoundError(StreamError):
    """Something the request names in a stream does not exist (a segment, an epoch)."""


class ScalePreconditionError(StreamError):
    """The scale request does not fit the stream's current segments (wrong segments or key ranges)."""


class TxnNotFoundError(StreamError):
    def __init__(self, scope: str, stream: str, txn: str) -> None:
        super().__init__(scope, stream, f"transaction {txn} does not exist")
        self.txn = txn


class TxnStateError(StreamError):
    """The transaction is not in a state that allows the operation (e.g. committing an aborted one)."""

    def __init__(self, scope: str, stream: str, txn: str, state: str, operation: str) -> None:
        super().__init__(scope, stream, f"transaction {txn} is {state}: cannot {operation}")
        self.txn = txn
        self.state = state


class LeaseTooLargeError(ControllerError):
    def __init__(self, lease_ms: int, max_ms: int) -> None:
        super().__init__(f"lease {lease_ms} ms is larger than the maximum {max_ms} ms")


class ReaderGroupNotFoundError(ControllerError):
    def __init__(self, scope: str, group: str) -> None:
        super().__init__(f"reader group {scope}/{group} does not exist")


class ReaderGroupConflictError(ControllerError):
    """An update with a stale generation, or a create that differs from the existing group."""


class SubscriberNotFoundError(StreamError):
    def __init__(self, scope: str, stream: str, subscriber: str) -> None:
        super().__init__(scope, stream, f"subscriber {subscriber!r} is not registered")


@contextlib.contextmanager
def from_metadata(scope: str = "", stream: str = "", txn: str = "") -> Iterator[None]:
    """Translate the metadata store's errors (storage vocabulary) into this API's (one place)."""
    try:
        yield
    except md.ScopeNotFoundError:
        raise ScopeNotFoundError(scope) from None
    except md.StreamNotFoundError:
        raise StreamNotFoundError(scope, stream) from None
    except md.ScopeNotEmptyError as error:
        raise ScopeNotEmptyError(scope, str(error)) from None
    except (md.ScaleConflictError, md.ScalePreconditionError, md.ScaleInputError) as error:
        raise ScalePreconditionError(scope, stream, str(error)) from None
    except md.InvalidStreamCutError as error:
        raise InvalidStreamCutError(scope, stream, str(error)) from None
    except md.TxnNotFoundError:
        raise TxnNotFoundError(scope, stream, txn) from None
    except (md.IllegalTxnTransitionError, md.TxnMaxExecutionTimeExceededError) as error:
        raise TxnStateError(scope, stream, txn, str(error), "proceed") from None
    except md.ReaderGroupNotFoundError:
        raise ReaderGroupNotFoundError(scope, stream) from None
    except (md.ReaderGroupExistsError, md.GenerationMismatchError) as error:
        raise ReaderGroupConflictError(str(error)) from None
    except md.DataNotFoundError as error:
        raise StreamDataNotFoundError(scope, stream, str(error)) from None
    except (md.OperationConflictError, md.IllegalStateTransitionError) as error:
        raise StreamBusyError(scope, stream, str(error)) from None
