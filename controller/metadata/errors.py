"""Typed errors of the stream metadata store.

Every error derives from :class:`MetadataError` (a ``SegstoreError``) and names the scope and the
object (stream, reader group, ...) it is about; ``scope`` and ``name`` are also attributes.
:class:`WriteConflictError` is the only retriable one: a versioned update lost a compare-and-set
race, nothing was changed, and the caller re-reads and tries again. Coordination outages are not
wrapped: ``segstore_shared.coordination.store.CoordinationUnavailableError`` (retriable, outcome of a
mutation unknown) propagates unchanged.
"""

from __future__ import annotations

from segstore_shared.errors import RetriableError, SegstoreError


class MetadataError(SegstoreError):
    """Base of the metadata store's errors."""

    def __init__(self, message: str, *, scope: str = "", name: str = "") -> None:
        where = f"{scope}/{name}" if name else scope
        super().__init__(f"{message}: {where}" if where else message)
        self.scope = scope
        self.name = name


class ScopeNotFoundError(MetadataError):
    """The scope does not exist."""


class ScopeExistsError(MetadataError):
    """The scope exists already (``create_scope`` reports this as a status instead)."""


class ScopeNotEmptyError(MetadataError):
    """The scope still holds streams, reader groups or key-value tables."""


class StreamNotFoundError(MetadataError):
    """The stream does not exist (or its deletion has begun)."""


class StreamExistsError(MetadataError):
    """The stream exists already (``create_stream`` reports this as a status instead)."""


class DataNotFoundError(MetadataError):
    """A record the operation needs is absent (an epoch, a segment, a stream cut record, ...)."""


class IllegalStateTransitionError(MetadataError):
    """The stream state machine does not allow the requested transition."""

    def __init__(self, current: str, requested: str, *, scope: str, name: str) -> None:
        super().__init__(f"state transition {current} -> {requested} is not allowed", scope=scope, name=name)
        self.current = current
        self.requested = requested


class IllegalStreamStateError(MetadataError):
    """The operation is not allowed in the stream's current state (e.g. scaling a sealed stream)."""


class WriteConflictError(MetadataError, RetriableError):
    """A versioned update found a newer version; nothing was changed. Re-read and retry."""


class OperationConflictError(MetadataError):
    """A different operation of the same kind is already in progress (update, truncation, commit batch)."""


class ScaleConflictError(OperationConflictError):
    """A different scale is in progress on the stream; the request changed nothing."""


class ScaleInputError(MetadataError):
    """The scale request is malformed: new ranges do not cover exactly the sealed segments' ranges."""


class ScalePreconditionError(MetadataError):
    """The scale request does not fit the stream now (segments not active, too few segments after)."""


class InconsistentMetadataError(MetadataError):
    """Stored records contradict each other; this is a bug or a foreign writer, never retried."""


class InvalidStreamCutError(MetadataError):
    """The stream cut is not a valid position, or is behind the position it must not precede."""


class TxnNotFoundError(MetadataError):
    """No active or completed record of the transaction exists."""

    def __init__(self, txn_id: object, *, scope: str, name: str) -> None:
        super().__init__(f"transaction {txn_id} not found", scope=scope, name=name)
        self.txn_id = txn_id


class IllegalTxnTransitionError(MetadataError):
    """The transaction's status does not allow the operation (e.g. committing an aborted one)."""

    def __init__(self, txn_id: object, status: str, operation: str, *, scope: str, name: str) -> None:
        super().__init__(f"transaction {txn_id} is {status}: cannot {operation}", scope=scope, name=name)
        self.txn_id = txn_id
        self.status = status


class TxnMaxExecutionTimeExceededError(MetadataError):
    """A ping would extend the transaction's lease past its maximum execution time."""


class ReaderGroupNotFoundError(MetadataError):
    """The reader group does not exist (or has another id than the one given)."""


class ReaderGroupExistsError(MetadataError):
    """A reader group of that name exists with a different configuration."""


class GenerationMismatchError(MetadataError):
    """The reader group (or subscriber) generation given is not the stored one."""
