"""The stream model shared by the controller service and the client library.

These are the domain types behind ``Controller.proto`` (Pravega's ``io.pravega.client.stream``
types): stream configurations with scaling and retention policies, segment ids and names,
key ranges, stream cuts, transaction states and reader group configurations. The controller stores
them, the client library builds them, and :mod:`controller_client.controller.proto_convert` turns
them into protobuf messages and back. Everything here is immutable and validated on
construction; an invalid value raises :class:`InvalidModelError` (a ``ValueError``) naming the
field.

Segment ids are 64-bit: ``creation_epoch << 32 | segment_number``. A scale gives its new segments
numbers after the highest so far; the duplicate epochs of a rolling transaction repeat the numbers
of the epochs they copy in a new creation epoch, so the id (not the number) is unique in a stream.
A segment's qualified name is
``<scope>/<stream>/<number>.#epoch.<epoch>``; a transaction segment appends
``#transaction.<16 hex><16 hex>`` (the transaction's 128-bit id, high half first), exactly as
Pravega and its clients spell them.
"""

from __future__ import annotations

import enum
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

EPOCH_DELIMITER = ".#epoch."
TRANSACTION_DELIMITER = "#transaction."

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_INTERNAL_NAME = re.compile(r"^_[A-Za-z0-9][A-Za-z0-9._-]*$")
MAX_NAME_LENGTH = 255


class InvalidModelError(ValueError):
    """A model value is invalid; the message names the field."""


def validate_scope_name(name: str) -> str:
    """A scope name: letters, digits, ``.``, ``-`` and ``_`` (not first), at most 255 characters."""
    return _validate_name("scope", name, internal=False)


def validate_stream_name(name: str, *, internal: bool = True) -> str:
    """A stream name; names starting with ``_`` are reserved for the system (reader groups, ...)."""
    return _validate_name("stream", name, internal=internal)


def _validate_name(what: str, name: str, *, internal: bool) -> str:
    if not isinstance(name, str) or not name:
        raise InvalidModelError(f"{what}: name must be a non-empty string")
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidModelError(f"{what}: name longer than {MAX_NAME_LENGTH} characters: {name[:40]!r}...")
    if _NAME.match(name) or (internal and _INTERNAL_NAME.match(name)):
        return name
    raise InvalidModelError(f"{what}: invalid name {name!r} (letters, digits, '.', '-', '_' only)")


# ---- segment ids and names ------------------------------------------------------------------------------------
def segment_id(number: int, epoch: int) -> int:
    """The 64-bit id of segment ``number`` created in ``epoch``."""
    if not 0 <= number < 2**31 or not 0 <= epoch < 2**31:
        raise InvalidModelError(f"segment id: number {number} / epoch {epoch} out of range")
    return (epoch << 32) | number


def segment_number(segment: int) -> int:
    return segment & 0xFFFFFFFF


def creation_epoch(segment: int) -> int:
    return segment >> 32


def qualified_segment_name(scope: str, stream: str, segment: int) -> str:
    """``<scope>/<stream>/<number>.#epoch.<epoch>``."""
    return f"{scope}/{stream}/{segment_number(segment)}{EPOCH_DELIMITER}{creation_epoch(segment)}"


def transaction_segment_name(segment_name: str, txn_id: uuid.UUID) -> str:
    """The name of ``segment_name``'s segment for transaction ``txn_id``."""
    return f"{segment_name}{TRANSACTION_DELIMITER}{txn_id.int >> 64:016x}{txn_id.int & (2**64 - 1):016x}"


@dataclass(frozen=True, slots=True)
class SegmentName:
    """A parsed qualified stream segment name."""

    scope: str
    stream: str
    segment_id: int

    @property
    def qualified(self) -> str:
        return qualified_segment_name(self.scope, self.stream, self.segment_id)


def parse_segment_name(name: str) -> SegmentName:
    """Parse ``<scope>/<stream>/<number>.#epoch.<epoch>`` (``.#epoch.<e>`` optional: epoch 0)."""
    parts = name.split("/")
    if len(parts) != 3:
        raise InvalidModelError(f"segment: not a qualified stream segment name: {name!r}")
    scope, stream, last = parts
    number_text, _, epoch_text = last.partition(EPOCH_DELIMITER)
    try:
        number = int(number_text)
        epoch = int(epoch_text) if epoch_text else 0
    except ValueError:
        raise InvalidModelError(f"segment: not a qualified stream segment name: {name!r}") from None
    return SegmentName(scope, stream, segment_id(number, epoch))


# ---- key ranges -----------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True, order=True)
class SegmentRange:
    """A segment and the routing-key range ``[key_start, key_end)`` it owns (within ``[0, 1)``)."""

    segment_id: int
    key_start: float
    key_end: float

    def __post_init__(self) -> None:
        if not 0.0 <= self.key_start < self.key_end <= 1.0:
            raise InvalidModelError(f"key range: need 0 <= start < end <= 1, got [{self.key_start}, {self.key_end})")

    def owns(self, key: float) -> bool:
        return self.key_start <= key < self.key_end or (key == 1.0 and self.key_end == 1.0)

    def overlaps(self, start: float, end: float) -> bool:
        return self.key_start < end and start < self.key_end


def even_ranges(count: int) -> list[tuple[float, float]]:
    """``count`` contiguous key ranges splitting ``[0, 1)`` evenly (the last ends exactly at 1.0)."""
    if count <= 0:
        raise InvalidModelError(f"segments: count must be positive, not {count}")
    return [(i / count, 1.0 if i == count - 1 else (i + 1) / count) for i in range(count)]


# ---- policies and configuration -------------------------------------------------------------------------------
class ScaleType(enum.IntEnum):
    """Values of ``Controller.proto``'s ``ScalingPolicy.ScalingPolicyType``."""

    FIXED_NUM_SEGMENTS = 0
    BY_RATE_IN_KBYTES_PER_SEC = 1
    BY_RATE_IN_EVENTS_PER_SEC = 2


@dataclass(frozen=True, slots=True)
class ScalingPolicy:
    """How many segments a stream has and when it scales.

    ``min_num_segments`` is the initial and the minimum segment count. With a rate policy a
    segment whose rate stays above ``target_rate`` (KiB/s or events/s) is split into
    ``scale_factor`` segments, and neighbours far below it are merged.
    """

    scale_type: ScaleType = ScaleType.FIXED_NUM_SEGMENTS
    target_rate: int = 0
    scale_factor: int = 0
    min_num_segments: int = 1

    def __post_init__(self) -> None:
        if self.min_num_segments <= 0:
            raise InvalidModelError(f"scaling_policy.min_num_segments: must be positive, not {self.min_num_segments}")
        if self.scale_type != ScaleType.FIXED_NUM_SEGMENTS:
            if self.target_rate <= 0:
                raise InvalidModelError(f"scaling_policy.target_rate: must be positive, not {self.target_rate}")
            if self.scale_factor < 1:
                raise InvalidModelError(f"scaling_policy.scale_factor: must be at least 1, not {self.scale_factor}")

    @classmethod
    def fixed(cls, segments: int) -> ScalingPolicy:
        return cls(ScaleType.FIXED_NUM_SEGMENTS, 0, 0, segments)

    @classmethod
    def by_event_rate(cls, events_per_second: int, scale_factor: int, min_segments: int) -> ScalingPolicy:
        return cls(ScaleType.BY_RATE_IN_EVENTS_PER_SEC, events_per_second, scale_factor, min_segments)

    @classmethod
    def by_data_rate(cls, kbytes_per_second: int, scale_factor: int, min_segments: int) -> ScalingPolicy:
        return cls(ScaleType.BY_RATE_IN_KBYTES_PER_SEC, kbytes_per_second, scale_factor, min_segments)


class RetentionType(enum.IntEnum):
    """Values of ``Controller.proto``'s ``RetentionPolicy.RetentionPolicyType``."""

    UNKNOWN = 0
    TIME = 1
    SIZE = 2


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    """Keep at least ``retention_param`` (ms or bytes) and, when ``retention_max`` > 0, at most that much."""

    retention_type: RetentionType
    retention_param: int
    retention_max: int = 0

    def __post_init__(self) -> None:
        if self.retention_type == RetentionType.UNKNOWN:
            raise InvalidModelError("retention_policy.retention_type: must be TIME or SIZE")
        if self.retention_param < 0:
            raise InvalidModelError(f"retention_policy.retention_param: must be >= 0, not {self.retention_param}")
        if self.retention_max and self.retention_max < self.retention_param:
            raise InvalidModelError("retention_policy.retention_max: must be 0 (none) or >= retention_param")

    @classmethod
    def by_time_ms(cls, min_ms: int, max_ms: int = 0) -> RetentionPolicy:
        return cls(RetentionType.TIME, min_ms, max_ms)

    @classmethod
    def by_size_bytes(cls, min_bytes: int, max_bytes: int = 0) -> RetentionPolicy:
        return cls(RetentionType.SIZE, min_bytes, max_bytes)


@dataclass(frozen=True, slots=True)
class StreamConfiguration:
    """A stream's configuration (``Controller.proto`` ``StreamConfig`` without the stream info)."""

    scaling: ScalingPolicy = field(default_factory=ScalingPolicy)
    retention: RetentionPolicy | None = None
    timestamp_aggregation_timeout_ms: int = 0
    tags: tuple[str, ...] = ()
    rollover_size_bytes: int = 0

    def __post_init__(self) -> None:
        if self.timestamp_aggregation_timeout_ms < 0:
            raise InvalidModelError("timestamp_aggregation_timeout_ms: must be >= 0")
        if self.rollover_size_bytes < 0:
            raise InvalidModelError("rollover_size_bytes: must be >= 0")
        if len(set(self.tags)) != len(self.tags):
            raise InvalidModelError("tags: duplicate tag")
        for tag in self.tags:
            if not tag or len(tag) > 256:
                raise InvalidModelError(f"tags: a tag must have 1-256 characters: {tag!r}")


# ---- stream cuts and transactions ------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class StreamCut:
    """A position in a stream: for a set of segments that together cover the key space once, an
    offset in each. ``positions`` maps segment id -> offset; offset -1 means "the segment's end"."""

    scope: str
    stream: str
    positions: Mapping[int, int]

    def __post_init__(self) -> None:
        for segment, offset in self.positions.items():
            if offset < -1:
                raise InvalidModelError(f"stream_cut: offset {offset} of segment {segment} is negative")


class TxnState(enum.IntEnum):
    """Values of ``Controller.proto``'s ``TxnState.State``."""

    UNKNOWN = 0
    OPEN = 1
    COMMITTING = 2
    COMMITTED = 3
    ABORTING = 4
    ABORTED = 5


# ---- reader groups ---------------------------------------------------------------------------------------------
class ReaderGroupRetention(enum.IntEnum):
    """``ReaderGroupConfiguration.retentionType``: whether the group's position holds back retention."""

    NONE = 0
    MANUAL = 1  # the application publishes stream cuts (``update_subscriber_stream_cut``)
    AUTOMATIC = 2  # the last completed checkpoint is published


@dataclass(frozen=True, slots=True)
class ReaderGroupConfig:
    """A reader group's configuration, as ``ReaderGroupConfiguration`` carries it.

    ``starting_stream_cuts`` names every stream the group reads, one cut per stream (a cut with no
    positions starts at the stream's head); ``ending_stream_cuts`` optionally bounds some of them
    (no positions: read to the tail). ``automatic_checkpoint_interval_ms`` -1 disables automatic
    checkpoints. ``generation`` grows by one with every update; ``reader_group_id`` is fixed when
    the group is created. Defaults are Pravega's.
    """

    scope: str
    reader_group: str
    starting_stream_cuts: tuple[StreamCut, ...]
    ending_stream_cuts: tuple[StreamCut, ...] = ()
    group_refresh_time_ms: int = 3000
    automatic_checkpoint_interval_ms: int = 30000
    max_outstanding_checkpoint_request: int = 3
    retention_type: ReaderGroupRetention = ReaderGroupRetention.NONE
    generation: int = 0
    reader_group_id: uuid.UUID = field(default_factory=uuid.uuid4)
    rollover_size_bytes: int = 0

    def __post_init__(self) -> None:
        if not self.scope or not self.reader_group:
            raise InvalidModelError("reader_group: scope and name must not be empty")
        if not self.starting_stream_cuts:
            raise InvalidModelError("starting_stream_cuts: a reader group reads at least one stream")
        streams = [(c.scope, c.stream) for c in self.starting_stream_cuts]
        if len(set(streams)) != len(streams):
            raise InvalidModelError("starting_stream_cuts: more than one cut for a stream")
        ends = [(c.scope, c.stream) for c in self.ending_stream_cuts]
        if len(set(ends)) != len(ends):
            raise InvalidModelError("ending_stream_cuts: more than one cut for a stream")
        if not set(ends) <= set(streams):
            raise InvalidModelError("ending_stream_cuts: a stream without a starting cut")
        if self.group_refresh_time_ms < 0:
            raise InvalidModelError("group_refresh_time_ms: must be >= 0")
        if self.automatic_checkpoint_interval_ms < -1:
            raise InvalidModelError("automatic_checkpoint_interval_ms: must be >= 0, or -1 (disabled)")
        if self.max_outstanding_checkpoint_request < 1:
            raise InvalidModelError("max_outstanding_checkpoint_request: must be at least 1")
        if self.generation < 0:
            raise InvalidModelError("generation: must be >= 0")
        if self.rollover_size_bytes < 0:
            raise InvalidModelError("rollover_size_bytes: must be >= 0")

    @property
    def streams(self) -> list[tuple[str, str]]:
        """``(scope, stream)`` of every stream the group reads, in configuration order."""
        return [(c.scope, c.stream) for c in self.starting_stream_cuts]
