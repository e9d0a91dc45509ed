"""The records the stream metadata store keeps, as immutable values.

One record is one coordination node (see :mod:`controller.metadata.layout`). Records are
serialized by :mod:`controller.metadata.codec`. Mutable records (state, configuration, current
epoch, epoch transition, truncation, committing transactions, retention set, ...) are always read
together with their node version and replaced by a compare-and-set on that version; immutable ones
(epoch records, stream cut records) are written once and may be cached.

These carry over Pravega's ``controller/store/stream/records``: an epoch record lists all the
segments of one epoch; the epoch transition record holds the intent of a scale; the truncation
record holds the head of the stream and the intent of a truncation; the committing transactions
record holds the batch of transactions being committed (and, for a rolling transaction, the epoch
that was active when it began).
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from controller_client.model import (
    SegmentRange,
    StreamConfiguration,
    StreamCut,
    TxnState,
    creation_epoch,
    segment_number,
)

NO_EPOCH = -1


# ---- stream state ---------------------------------------------------------------------------------------------
class StreamState(enum.IntEnum):
    """The stream's state; every workflow moves ACTIVE -> its state -> ACTIVE (Pravega ``State``)."""

    UNKNOWN = 0
    CREATING = 1
    ACTIVE = 2
    UPDATING = 3
    SCALING = 4
    COMMITTING_TXN = 5
    TRUNCATING = 6
    SEALING = 7
    SEALED = 8


_TRANSITIONS: dict[StreamState, frozenset[StreamState]] = {
    StreamState.UNKNOWN: frozenset({StreamState.UNKNOWN, StreamState.CREATING}),
    StreamState.CREATING: frozenset({StreamState.CREATING, StreamState.ACTIVE}),
    StreamState.ACTIVE: frozenset(
        {
            StreamState.ACTIVE,
            StreamState.SCALING,
            StreamState.TRUNCATING,
            StreamState.COMMITTING_TXN,
            StreamState.SEALING,
            StreamState.SEALED,
            StreamState.UPDATING,
        }
    ),
    StreamState.SCALING: frozenset({StreamState.SCALING, StreamState.ACTIVE}),
    StreamState.COMMITTING_TXN: frozenset({StreamState.COMMITTING_TXN, StreamState.ACTIVE}),
    StreamState.TRUNCATING: frozenset({StreamState.TRUNCATING, StreamState.ACTIVE}),
    StreamState.UPDATING: frozenset({StreamState.UPDATING, StreamState.ACTIVE}),
    StreamState.SEALING: frozenset({StreamState.SEALING, StreamState.SEALED}),
    StreamState.SEALED: frozenset({StreamState.SEALED}),
}


def is_transition_allowed(current: StreamState, new: StreamState) -> bool:
    """Whether the state machine allows ``current -> new`` (same state is always allowed)."""
    return new in _TRANSITIONS[current]


# ---- segments and epochs --------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class SegmentRecord:
    """A segment: its 64-bit id, creation time and key range ``[key_start, key_end)``."""

    segment_id: int
    creation_time_ms: int
    key_start: float
    key_end: float

    @property
    def number(self) -> int:
        return segment_number(self.segment_id)

    @property
    def creation_epoch(self) -> int:
        return creation_epoch(self.segment_id)

    @property
    def range(self) -> SegmentRange:
        return SegmentRange(self.segment_id, self.key_start, self.key_end)

    def overlaps(self, other: SegmentRecord) -> bool:
        return self.key_start < other.key_end and other.key_start < self.key_end

    def overlaps_range(self, start: float, end: float) -> bool:
        return self.key_start < end and start < self.key_end


@dataclass(frozen=True, slots=True)
class EpochRecord:
    """All segments of one epoch. ``reference_epoch`` differs from ``epoch`` only for the duplicate
    epochs a rolling transaction writes: it is the epoch whose segments (numbers and ranges) this one
    repeats."""

    epoch: int
    reference_epoch: int
    segments: tuple[SegmentRecord, ...]
    creation_time_ms: int
    _by_id: dict[int, SegmentRecord] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_id", {s.segment_id: s for s in self.segments})

    @property
    def is_duplicate(self) -> bool:
        return self.epoch != self.reference_epoch

    @property
    def segment_ids(self) -> frozenset[int]:
        return frozenset(self._by_id)

    def segment(self, segment_id: int) -> SegmentRecord | None:
        return self._by_id.get(segment_id)

    def contains(self, segment_id: int) -> bool:
        return segment_id in self._by_id

    def max_segment_number(self) -> int:
        return max(s.number for s in self.segments)


@dataclass(frozen=True, slots=True)
class EpochSummary:
    """One entry of a stream's epoch history: what the epoch created and sealed."""

    epoch: int
    reference_epoch: int
    creation_time_ms: int
    segments: tuple[SegmentRecord, ...]
    segments_created: tuple[SegmentRecord, ...]
    segments_sealed: tuple[SegmentRecord, ...]


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    """A compact index entry per epoch (kept in chunks) for time lookups."""

    epoch: int
    reference_epoch: int
    creation_time_ms: int


@dataclass(frozen=True, slots=True)
class HistoryChunk:
    chunk: int
    entries: tuple[HistoryEntry, ...]


@dataclass(frozen=True, slots=True)
class EpochTransitionRecord:
    """The intent of a scale: from ``active_epoch``, seal ``segments_to_seal`` and create
    ``new_segments`` (id, key start, key end) in epoch ``active_epoch + 1``. ``EMPTY`` when none."""

    active_epoch: int
    time_ms: int
    segments_to_seal: frozenset[int]
    new_segments: tuple[tuple[int, float, float], ...]

    @property
    def is_empty(self) -> bool:
        return self.active_epoch == NO_EPOCH

    @property
    def new_epoch(self) -> int:
        return self.active_epoch + 1

    @property
    def new_ranges(self) -> tuple[tuple[float, float], ...]:
        return tuple((start, end) for _, start, end in self.new_segments)


EMPTY_TRANSITION = EpochTransitionRecord(NO_EPOCH, 0, frozenset(), ())


class ScaleStatus(enum.Enum):
    """Answer of ``check_scale`` (``Controller.proto`` ``ScaleStatusResponse.ScaleStatus``)."""

    IN_PROGRESS = "IN_PROGRESS"
    SUCCESS = "SUCCESS"
    INVALID_INPUT = "INVALID_INPUT"


# ---- stream-level records -------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class StreamRecord:
    """The stream's root node: written first by create, deleted last by delete. ``uid`` tells apart
    two incarnations of a stream name (it keys the epoch cache)."""

    uid: str
    creation_time_ms: int
    starting_segment_number: int = 0


@dataclass(frozen=True, slots=True)
class ConfigurationRecord:
    """The configuration; while ``updating`` it is the new one, not yet applied to the segments."""

    config: StreamConfiguration
    updating: bool = False
    tag_only: bool = False
    removed_tags: tuple[str, ...] = ()


class CreateStreamStatus(enum.Enum):
    """``NEW``: this request created (or is resuming its own creation of) the stream;
    ``EXISTS_CREATING``: another request created it and it is not active yet;
    ``EXISTS_ACTIVE``: it exists and its creation completed."""

    NEW = "NEW"
    EXISTS_CREATING = "EXISTS_CREATING"
    EXISTS_ACTIVE = "EXISTS_ACTIVE"


@dataclass(frozen=True, slots=True)
class CreateStreamResult:
    status: CreateStreamStatus
    config: StreamConfiguration
    creation_time_ms: int
    starting_segment_number: int


@dataclass(frozen=True, slots=True)
class TruncationRecord:
    """The head of the stream (``stream_cut`` with the ``span``: segment -> latest epoch it is in, up
    to the cut's newest epoch) and, while ``updating``, the segments still to delete."""

    stream_cut: Mapping[int, int]
    span: Mapping[SegmentRecord, int]
    deleted_segments: frozenset[int]
    to_delete: frozenset[int]
    size_till: int
    updating: bool

    @property
    def is_empty(self) -> bool:
        return not self.stream_cut

    def completed(self) -> TruncationRecord:
        return TruncationRecord(
            self.stream_cut, self.span, self.deleted_segments | self.to_delete, frozenset(), self.size_till, False
        )


EMPTY_TRUNCATION = TruncationRecord({}, {}, frozenset(), frozenset(), 0, False)


@dataclass(frozen=True, slots=True)
class SealedSizesShard:
    """Sizes at sealing of the segments created in epochs ``[shard * N, (shard + 1) * N)``."""

    shard: int
    sizes: Mapping[int, int]


@dataclass(frozen=True, slots=True)
class StreamCutReference:
    """An entry of the retention set: when a stream cut was recorded and the stream size up to it."""

    recording_time_ms: int
    recording_size_bytes: int


@dataclass(frozen=True, slots=True)
class StreamCutRecord:
    recording_time_ms: int
    recording_size_bytes: int
    stream_cut: Mapping[int, int]

    @property
    def reference(self) -> StreamCutReference:
        return StreamCutReference(self.recording_time_ms, self.recording_size_bytes)


@dataclass(frozen=True, slots=True)
class RetentionSet:
    """Chronological references to recorded stream cuts (times strictly increasing)."""

    references: tuple[StreamCutReference, ...] = ()

    def latest(self) -> StreamCutReference | None:
        return self.references[-1] if self.references else None

    def reference_for_time(self, time_ms: int) -> StreamCutReference | None:
        """The latest reference recorded at or before ``time_ms``."""
        found = [r for r in self.references if r.recording_time_ms <= time_ms]
        return found[-1] if found else None

    def reference_for_size(self, size_bytes: int) -> StreamCutReference | None:
        """The latest reference whose recorded size is at most ``size_bytes``."""
        found = [r for r in self.references if r.recording_size_bytes <= size_bytes]
        return found[-1] if found else None


class StreamCutComparison(enum.Enum):
    EQUAL_OR_AFTER = "EQUAL_OR_AFTER"
    BEFORE = "BEFORE"
    OVERLAPS = "OVERLAPS"


# ---- transactions ---------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ActiveTxnRecord:
    """An open, committing or aborting transaction. Expiry times are absolute (ms since the epoch),
    so a restarted controller resumes the timeouts. ``commit_order`` orders commits (-1 until sealed
    for commit)."""

    creation_time_ms: int
    lease_expiry_ms: int
    max_execution_expiry_ms: int
    status: TxnState
    writer_id: str = ""
    commit_time_ms: int = -1
    commit_order: int = -1
    commit_offsets: Mapping[int, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CompletedTxnRecord:
    epoch: int
    complete_time_ms: int
    status: TxnState


@dataclass(frozen=True, slots=True)
class TxnInfo:
    """A transaction with the epoch it belongs to and the version of its record."""

    txn_id: uuid.UUID
    epoch: int
    record: ActiveTxnRecord
    version: int


@dataclass(frozen=True, slots=True)
class CommittingTxnsRecord:
    """The batch of transactions of ``epoch`` being committed, in commit order. ``active_epoch`` is set
    once a rolling transaction began: the epoch active then; the rolling transaction writes epochs
    ``active_epoch + 1`` (the transaction epoch's duplicate) and ``active_epoch + 2`` (the active
    epoch's duplicate)."""

    epoch: int
    txn_ids: tuple[uuid.UUID, ...]
    active_epoch: int | None = None

    @property
    def is_empty(self) -> bool:
        return self.epoch == NO_EPOCH

    @property
    def is_rolling(self) -> bool:
        return self.active_epoch is not None

    @property
    def new_txn_epoch(self) -> int:
        assert self.active_epoch is not None
        return self.active_epoch + 1

    @property
    def new_active_epoch(self) -> int:
        assert self.active_epoch is not None
        return self.active_epoch + 2


EMPTY_COMMITTING = CommittingTxnsRecord(NO_EPOCH, ())


# ---- writers --------------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class WriterMark:
    """The latest time and position a writer reported (for watermarks)."""

    timestamp: int
    position: Mapping[int, int]
    alive: bool = True


class WriterMarkStatus(enum.Enum):
    SUCCESS = "SUCCESS"
    INVALID_TIME = "INVALID_TIME"
    INVALID_POSITION = "INVALID_POSITION"


# ---- reader groups and subscribers ----------------------------------------------------------------------------
class ReaderGroupRetentionType(enum.IntEnum):
    """``Controller.proto`` ``ReaderGroupConfiguration.RetentionType``: NONE groups are no subscribers."""

    NONE = 0
    MANUAL = 1
    AUTOMATIC = 2


NIL_UUID = uuid.UUID(int=0)
UNBOUNDED = "unbounded"
"""The stream cut value meaning "from the head" (starting) or "to the tail" (ending)."""


@dataclass(frozen=True, slots=True)
class ReaderGroupConfigRecord:
    """A reader group's configuration (``Controller.proto`` ``ReaderGroupConfiguration``).

    Stream cuts are keyed by scoped stream name (``scope/stream``); a value is a
    :class:`~controller_client.model.StreamCut` or :data:`UNBOUNDED`. The streams the group reads
    are the keys of ``starting_stream_cuts``. ``generation`` grows by one per update;
    ``reader_group_id`` is assigned at creation; ``updating`` is set while an update's subscriber
    changes are being applied, ``removed_streams`` then names the streams the group stops
    subscribing to.
    """

    group_refresh_time_ms: int = 3000
    automatic_checkpoint_interval_ms: int = 30000
    max_outstanding_checkpoint_request: int = 3
    retention_type: ReaderGroupRetentionType = ReaderGroupRetentionType.NONE
    starting_stream_cuts: Mapping[str, StreamCut | str] = field(default_factory=dict)
    ending_stream_cuts: Mapping[str, StreamCut | str] = field(default_factory=dict)
    rollover_size_bytes: int = 0
    generation: int = 0
    reader_group_id: uuid.UUID = NIL_UUID
    updating: bool = False
    removed_streams: frozenset[str] = frozenset()

    @property
    def streams(self) -> frozenset[str]:
        return frozenset(self.starting_stream_cuts)

    @property
    def is_subscriber(self) -> bool:
        return self.retention_type != ReaderGroupRetentionType.NONE

    def same_config(self, other: ReaderGroupConfigRecord) -> bool:
        """Equal apart from generation, id and the updating flag."""
        return (
            self.group_refresh_time_ms == other.group_refresh_time_ms
            and self.automatic_checkpoint_interval_ms == other.automatic_checkpoint_interval_ms
            and self.max_outstanding_checkpoint_request == other.max_outstanding_checkpoint_request
            and self.retention_type == other.retention_type
            and dict(self.starting_stream_cuts) == dict(other.starting_stream_cuts)
            and dict(self.ending_stream_cuts) == dict(other.ending_stream_cuts)
            and self.rollover_size_bytes == other.rollover_size_bytes
        )


@dataclass(frozen=True, slots=True)
class SubscriberRecord:
    """A subscribing reader group's position on one stream (consumption based retention)."""

    subscriber: str
    generation: int
    truncation_cut: Mapping[int, int]
    update_time_ms: int
