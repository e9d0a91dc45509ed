"""Failures as wire replies: one place maps engine exceptions to Pravega's error commands.

The mapping follows Pravega's ``PravegaRequestProcessor.handleException``: a missing segment is
``NoSuchSegment``, a sealed one ``SegmentIsSealed``, a read below the start ``SegmentIsTruncated``,
a segment of a container not running here ``WrongHost`` (the client asks the controller again),
table conditions ``TableKeyBadVersion``/``TableKeyDoesNotExist``/``TableSegmentNotEmpty``, invalid
arguments ``ErrorMessage(ILLEGAL_ARGUMENT_EXCEPTION)``. :func:`error_reply` returns None for
failures that have no reply of their own (the caller closes the connection, as Java does, so the
client reconnects and retries).
"""

from __future__ import annotations

import logging

from segment_store.metadata import MetadataCorruptedError
from segment_store.protocol import (
    ErrorMessage,
    ErrorMessageCode,
    NoSuchSegment,
    SegmentAlreadyExists,
    SegmentIsSealed,
    SegmentIsTruncated,
    TableKeyBadVersion,
    TableKeyDoesNotExist,
    TableSegmentNotEmpty,
    WrongHost,
)
from segment_store.protocol.registry import WireCommand
from segstore_shared.contracts import (
    BadOffsetError,
    ContainerNotOwnedError,
    ContainerOfflineError,
    InvalidOffsetError,
    SegmentExistsError,
    SegmentNotExistsError,
    SegmentSealedError,
    SegmentTruncatedError,
    SegmentTypeMismatchError,
    ThrottledTimeoutError,
    TooLargeError,
)
from segstore_shared.table_errors import (
    InvalidTableKeyError,
    TableBatchTooLargeError,
    TableKeyBadVersionError,
    TableKeyNotExistsError,
    TableSegmentNotEmptyError,
    TableValueTooLongError,
)

log = logging.getLogger(__name__)

_ILLEGAL = ErrorMessageCode.ILLEGAL_ARGUMENT_EXCEPTION


def error_reply(exc: BaseException, request_id: int, segment: str, offset: int = -1) -> WireCommand | None:
    """The reply telling the client why ``segment``'s request failed, or None to close the connection."""
    if isinstance(exc, SegmentNotExistsError):
        return NoSuchSegment(request_id, segment, "", offset)
    if isinstance(exc, SegmentSealedError):
        return SegmentIsSealed(request_id, segment, "", offset)
    if isinstance(exc, SegmentTruncatedError):
        return SegmentIsTruncated(request_id, segment, exc.start_offset, "", exc.offset)
    if isinstance(exc, SegmentExistsError):
        return SegmentAlreadyExists(request_id, segment, "")
    if isinstance(exc, ContainerNotOwnedError):
        return WrongHost(request_id, segment, "", "")
    if isinstance(exc, TableKeyBadVersionError):
        return TableKeyBadVersion(request_id, segment, "")
    if isinstance(exc, TableKeyNotExistsError):
        return TableKeyDoesNotExist(request_id, segment, "")
    if isinstance(exc, TableSegmentNotEmptyError):
        return TableSegmentNotEmpty(request_id, segment, "")
    if isinstance(
        exc,
        InvalidOffsetError
        | BadOffsetError
        | SegmentTypeMismatchError
        | TooLargeError
        | InvalidTableKeyError
        | TableValueTooLongError
        | TableBatchTooLargeError
        | ValueError,
    ):
        return ErrorMessage(request_id, segment, f"{type(exc).__name__}: {exc}", _ILLEGAL)
    if isinstance(exc, ContainerOfflineError | ThrottledTimeoutError):
        log.warning("request %s on %s: %r; closing the connection so the client retries", request_id, segment, exc)
        return None
    if isinstance(exc, MetadataCorruptedError):
        log.error("request %s on %s: %r", request_id, segment, exc)
        return None
    log.error("request %s on %s failed unexpectedly", request_id, segment, exc_info=exc)
    return None
