"""Failure replies (Java ``isFailure() == true``), with the error-code enums two of them carry.

Most carry a ``server_stack_trace`` that peers before wire version 5 omit (decoded as "") and some an
``offset`` added later (decoded as -1). The table failure replies always carry their stack trace.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from enum import IntEnum

from segment_store.protocol.registry import WireCommand, register
from segment_store.protocol.types import I64, UTF, UUID, Opt, int_enum

_STACK = Opt(UTF, "", 1)
_OFFSET = Opt(I64, -1, 8)


class AuthTokenErrorCode(IntEnum):
    """``AuthTokenCheckFailed.ErrorCode``; unknown codes decode as ``TOKEN_CHECK_FAILED`` (as Java)."""

    UNSPECIFIED = -1
    TOKEN_CHECK_FAILED = 0
    TOKEN_EXPIRED = 1


class ErrorMessageCode(IntEnum):
    """``ErrorMessage.ErrorCode``; unknown codes decode as ``UNSPECIFIED`` (as Java)."""

    UNSPECIFIED = -1
    ILLEGAL_ARGUMENT_EXCEPTION = 0


@register
@dataclass(frozen=True, slots=True)
class WrongHost(WireCommand):
    """The segment is owned by another segment store (``correct_host`` may be empty)."""

    TYPE_CODE = 50
    LAYOUT = (I64, UTF, UTF, _STACK)
    request_id: int
    segment: str
    correct_host: str
    server_stack_trace: str


@register
@dataclass(frozen=True, slots=True)
class SegmentIsSealed(WireCommand):
    """The segment is sealed; ``offset`` is where (-1 if the peer did not say)."""

    TYPE_CODE = 51
    LAYOUT = (I64, UTF, _STACK, _OFFSET)
    request_id: int
    segment: str
    server_stack_trace: str
    offset: int


@register
@dataclass(frozen=True, slots=True)
class SegmentAlreadyExists(WireCommand):
    """A create found the segment already there."""

    TYPE_CODE = 52
    LAYOUT = (I64, UTF, _STACK)
    request_id: int
    segment: str
    server_stack_trace: str


@register
@dataclass(frozen=True, slots=True)
class NoSuchSegment(WireCommand):
    """The segment does not exist; ``offset`` echoes the request's (-1 if absent)."""

    TYPE_CODE = 53
    LAYOUT = (I64, UTF, _STACK, _OFFSET)
    request_id: int
    segment: str
    server_stack_trace: str
    offset: int


@register
@dataclass(frozen=True, slots=True)
class InvalidEventNumber(WireCommand):
    """A writer's event numbers went wrong. Before v16 the second long meant the event number; it is the
    request id since, and ``event_number`` trails (-1 if absent)."""

    TYPE_CODE = 55
    LAYOUT = (UUID, I64, _STACK, _OFFSET)
    writer_id: uuid.UUID
    request_id: int
    server_stack_trace: str
    event_number: int


@register
@dataclass(frozen=True, slots=True)
class SegmentIsTruncated(WireCommand):
    """A read below the segment's start; ``offset`` is the requested one (-1 if absent)."""

    TYPE_CODE = 56
    LAYOUT = (I64, UTF, I64, _STACK, _OFFSET)
    request_id: int
    segment: str
    start_offset: int
    server_stack_trace: str
    offset: int


@register
@dataclass(frozen=True, slots=True)
class OperationUnsupported(WireCommand):
    """The server does not implement ``operation_name``."""

    TYPE_CODE = 57
    LAYOUT = (I64, UTF, _STACK)
    request_id: int
    operation_name: str
    server_stack_trace: str


@register
@dataclass(frozen=True, slots=True)
class AuthTokenCheckFailed(WireCommand):
    """The delegation token was rejected. ``error_code`` optional: absent decodes as ``UNSPECIFIED``."""

    TYPE_CODE = 60
    LAYOUT = (
        I64,
        _STACK,
        Opt(
            int_enum(AuthTokenErrorCode, AuthTokenErrorCode.TOKEN_CHECK_FAILED),
            AuthTokenErrorCode.UNSPECIFIED,
            4,
        ),
    )
    ErrorCode = AuthTokenErrorCode
    request_id: int
    server_stack_trace: str
    error_code: AuthTokenErrorCode

    @property
    def is_token_expired(self) -> bool:
        """True if the client should fetch a new token and retry."""
        return self.error_code is AuthTokenErrorCode.TOKEN_EXPIRED


@register
@dataclass(frozen=True, slots=True)
class ErrorMessage(WireCommand):
    """A generic failure with a message and an ``ErrorMessageCode`` (all fields always present)."""

    TYPE_CODE = 61
    LAYOUT = (I64, UTF, UTF, int_enum(ErrorMessageCode, ErrorMessageCode.UNSPECIFIED))
    ErrorCode = ErrorMessageCode
    request_id: int
    segment: str
    message: str
    error_code: ErrorMessageCode


@register
@dataclass(frozen=True, slots=True)
class TableSegmentNotEmpty(WireCommand):
    """A must-be-empty table segment delete found keys."""

    TYPE_CODE = 80
    LAYOUT = (I64, UTF, UTF)
    request_id: int
    segment: str
    server_stack_trace: str


@register
@dataclass(frozen=True, slots=True)
class TableKeyDoesNotExist(WireCommand):
    """A conditional table update named a key that does not exist."""

    TYPE_CODE = 81
    LAYOUT = (I64, UTF, UTF)
    request_id: int
    segment: str
    server_stack_trace: str


@register
@dataclass(frozen=True, slots=True)
class TableKeyBadVersion(WireCommand):
    """A conditional table update's key version did not match."""

    TYPE_CODE = 82
    LAYOUT = (I64, UTF, UTF)
    request_id: int
    segment: str
    server_stack_trace: str
