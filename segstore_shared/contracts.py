"""The segment store's public contract: segment types, attributes, segment info and errors.

These are the names the wire server, the controller and the client library speak
when they talk to a segment container. Values follow Pravega's
``segmentstore/contracts`` so that attribute ids and type flags written by Pravega
clients mean the same here.

Attribute ids are 128-bit integers (a UUID's ``.int``); values are signed 64-bit.
:data:`NULL_ATTRIBUTE_VALUE` (``-2**63``) means "not set".
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass, field

from segstore_shared.errors import RetriableError, SegstoreError

NULL_ATTRIBUTE_VALUE = -(2**63)
_CORE_PREFIX = (1 << 63) << 64  # Pravega's CORE_ATTRIBUTE_ID_PREFIX (Long.MIN_VALUE) as the high 64 bits


def core_attribute(number: int) -> int:
    """The id of Pravega core attribute ``number`` (``AttributeId.uuid(Long.MIN_VALUE, number)``)."""
    return _CORE_PREFIX | number


CREATION_TIME = core_attribute(0)
EVENT_COUNT = core_attribute(1)
SCALE_POLICY_TYPE = core_attribute(2)
SCALE_POLICY_RATE = core_attribute(3)
ROLLOVER_SIZE = core_attribute(4)
ATTRIBUTE_SEGMENT_TYPE = core_attribute(9)
SLTS_LATEST_SNAPSHOT_ID = core_attribute(10)
SLTS_LATEST_SNAPSHOT_EPOCH = core_attribute(11)
CREATION_EPOCH = core_attribute(15)


def is_core_attribute(attribute_id: int) -> bool:
    return attribute_id >> 64 == 1 << 63


def attribute_id_of(value: uuid.UUID | int) -> int:
    """Normalize a UUID (writer ids, wire attribute ids) to the 128-bit integer key used internally."""
    return value.int if isinstance(value, uuid.UUID) else value


class SegmentType(enum.IntFlag):
    """Segment type flags (Pravega ``SegmentType``): a format plus roles."""

    STREAM = 0
    TABLE = 0b0000_0001
    FIXED_KEY_TABLE = 0b0000_0101
    INTERNAL = 0b0001_0000
    SYSTEM = 0b0011_0000
    CRITICAL = 0b0100_0000
    TRANSIENT = 0b1000_0000

    @property
    def is_table(self) -> bool:
        return bool(self & SegmentType.TABLE)

    @property
    def holds_events(self) -> bool:
        """Event segments hold wire-framed events; Tier-2 stores them one Parquet row per event."""
        return not (self & SegmentType.TABLE) and not (self & SegmentType.INTERNAL)


class AttributeUpdateType(enum.IntEnum):
    """How an attribute update applies (Pravega ``AttributeUpdateType``)."""

    NONE = 0  # set only if not set yet
    REPLACE = 1
    REPLACE_IF_GREATER = 2
    ACCUMULATE = 3
    REPLACE_IF_EQUALS = 4


@dataclass(frozen=True, slots=True)
class AttributeUpdate:
    """One attribute change; ``comparison_value`` is used by REPLACE_IF_EQUALS only."""

    attribute_id: int
    update_type: AttributeUpdateType
    value: int
    comparison_value: int = NULL_ATTRIBUTE_VALUE


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    """A point-in-time view of one segment (what ``GetStreamSegmentInfo`` answers)."""

    name: str
    segment_id: int
    segment_type: SegmentType
    start_offset: int
    length: int
    storage_length: int
    sealed: bool
    deleted: bool
    last_modified_ms: int
    attributes: dict[int, int] = field(default_factory=dict)


# ---- errors -----------------------------------------------------------------------------------------------------


class SegmentError(SegstoreError):
    """An operation on a named segment failed; ``segment`` names it."""

    def __init__(self, segment: str, message: str = "") -> None:
        self.segment = segment
        super().__init__(f"{message or type(self).__name__}: {segment}")


class SegmentNotExistsError(SegmentError):
    """The segment does not exist (never created, deleted, or merged away)."""


class SegmentExistsError(SegmentError):
    """A segment with this name already exists."""


class SegmentSealedError(SegmentError):
    """The segment is sealed: no more appends or attribute changes."""


class SegmentTruncatedError(SegmentError):
    """A read below the segment's start offset."""

    def __init__(self, segment: str, start_offset: int, offset: int) -> None:
        self.start_offset = start_offset
        self.offset = offset
        super().__init__(segment, f"offset {offset} is below start offset {start_offset}")


class BadOffsetError(SegmentError):
    """A conditional append whose expected offset is not the segment's length."""

    def __init__(self, segment: str, expected_offset: int, actual_length: int) -> None:
        self.expected_offset = expected_offset
        self.actual_length = actual_length
        super().__init__(segment, f"expected offset {expected_offset}, segment length is {actual_length}")


class BadAttributeUpdateError(SegmentError):
    """A conditional attribute update whose condition did not hold."""

    def __init__(self, segment: str, attribute_id: int, message: str) -> None:
        self.attribute_id = attribute_id
        super().__init__(segment, f"attribute {uuid.UUID(int=attribute_id)}: {message}")


class InvalidOffsetError(SegmentError):
    """An offset outside the segment (a read or truncate beyond its length, a negative offset)."""


class SegmentTypeMismatchError(SegmentError):
    """An operation for another kind of segment (a table command on a stream segment, or the reverse)."""


class TooLargeError(SegstoreError):
    """An append or attribute update larger than allowed."""


class ContainerNotOwnedError(RetriableError):
    """This process does not run the container for that segment (the wire answers ``WrongHost``)."""

    def __init__(self, container_id: int) -> None:
        self.container_id = container_id
        super().__init__(f"container {container_id} is not owned by this segment store")


class ContainerOfflineError(RetriableError):
    """The container is stopping, recovering or has failed; try again (possibly elsewhere)."""


class ThrottledTimeoutError(RetriableError):
    """An append waited for Tier-2 to catch up longer than its timeout."""
