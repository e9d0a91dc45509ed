"""The operations on a reader group's state: who reads which segment, from where (issue 25).

Each operation is a function of a :class:`~controller_client.reader_groups.table.Update` (the state as every member
sees it) that stages its writes; :meth:`GroupTable.update` applies them atomically or reruns the operation on the
newer state. The operations on the official client's maps are its own (``src/event/reader_group_state.rs``) with
the same effect, so that its readers and ours can share a group:

* a reader is **online** while ``assigned_segments/<reader>`` exists; going offline moves its segments to
  ``unassigned_segments`` at the positions given (or its last reported ones) and tombstones its entries;
* every segment of the group is in exactly one place: one reader's assigned map, the unassigned map, or (a
  successor waiting for predecessors) ``future_segments``; a segment read to its end leaves the state, and its
  successors enter it as futures, becoming unassigned at offset 0 once all their predecessors are done;
* balance: a reader should hold ``ceil(segments / online readers)``; it acquires up to that many and releases one
  at a time above it (:func:`acquire_or_release`).

Our extension, ignored by the official client (it only reads its five maps): **checkpoints**, in the outer map
``segstore_checkpoints`` (one entry per checkpoint, type ``SegstoreCheckpoint``). A checkpoint is created with the
online readers as pending and the unassigned segments' positions and the future segments copied in. Each pending
reader, when it meets the checkpoint, hands its application a checkpoint marker and writes its positions into it;
the checkpoint is complete when no reader is pending (a reader going offline counts as done, at the positions
it leaves). While a checkpoint is pending no reader releases a segment, and a pending reader neither acquires nor
completes a segment (Pravega's rules): so every event is read either before its reader's marker (and is before the
checkpoint) or after (and is after it), and :func:`reset` to a checkpoint rebuilds exactly the state after it.
A group with an official-client reader online completes no checkpoint until that reader goes offline.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from controller_client.reader_groups.cbor_subset import (
    U64_MAX,
    CborMap,
    ReaderGroupFormatError,
    cbor_decode,
    cbor_encode,
)
from controller_client.reader_groups.format import (
    ASSIGNED,
    CHECKPOINTS,
    CONFIG,
    DEFAULT_INNER_KEY,
    DISTANCE,
    FUTURE,
    TYPE_ASSIGNED,
    TYPE_CONFIG,
    TYPE_DISTANCE,
    TYPE_FUTURE,
    TYPE_OFFSET,
    UNASSIGNED,
    ReaderGroupConfig,
    ScopedSegment,
    Segment,
    decode_data,
    encode_data,
)
from controller_client.reader_groups.table import Update
from segstore_shared.errors import SegstoreError

TYPE_CHECKPOINT = "SegstoreCheckpoint"
AUTOMATIC_PREFIX = "segstore-auto-"
"""Names of automatic checkpoints (a subscriber group's ``automatic_checkpoint_interval_ms``): silent, no marker."""
KEPT_CHECKPOINTS = 10
"""Completed checkpoints kept in the state; older ones are deleted when a new one is created."""


class ReaderGroupStateError(SegstoreError):
    """An operation the group's state does not allow (the message says why)."""


class ReaderOfflineError(ReaderGroupStateError):
    """The reader is not online in the group: it went offline, was declared dead, or the group was reset."""

    def __init__(self, reader: str) -> None:
        super().__init__(f"reader {reader!r} is not online in the group (closed, timed out, or the group was reset)")
        self.reader = reader


class ReaderAlreadyOnlineError(ReaderGroupStateError):
    """A reader of that name is online already."""

    def __init__(self, reader: str) -> None:
        super().__init__(f"reader {reader!r} is online in the group already: name readers uniquely")
        self.reader = reader


class CheckpointExistsError(ReaderGroupStateError):
    """A checkpoint of that name exists already."""


# ---------------------------------------------------------------- checkpoints (our extension)


@dataclass(frozen=True, slots=True)
class CheckpointRecord:
    """A checkpoint as stored: readers still to reach it, the positions gathered so far, the futures at creation."""

    name: str
    pending: tuple[str, ...]
    positions: Mapping[ScopedSegment, int]
    future: Mapping[ScopedSegment, tuple[Segment, ...]]
    created_ms: int

    @property
    def complete(self) -> bool:
        return not self.pending


def encode_checkpoint(record: CheckpointRecord) -> bytes:
    return cbor_encode(
        CborMap(
            (
                ("pending", list(record.pending)),
                ("positions", CborMap(tuple((s.qualified_name, o) for s, o in record.positions.items()))),
                (
                    "future",
                    CborMap(tuple((s.qualified_name, [p.number for p in ps]) for s, ps in record.future.items())),
                ),
                ("created_ms", record.created_ms),
            )
        )
    )


def decode_checkpoint(name: str, data: bytes) -> CheckpointRecord:
    item = cbor_decode(data)
    fields = dict(item.items) if isinstance(item, CborMap) else {}
    pending, positions, future, created = (fields.get(k) for k in ("pending", "positions", "future", "created_ms"))
    if not (
        isinstance(pending, list)
        and isinstance(positions, CborMap)
        and isinstance(future, CborMap)
        and isinstance(created, int)
    ):
        raise ReaderGroupFormatError(f"checkpoint {name!r}: not a {TYPE_CHECKPOINT} value: {item!r}")
    return CheckpointRecord(
        name,
        tuple(str(r) for r in pending),
        {ScopedSegment.parse(str(s)): int(o) for s, o in positions.items if isinstance(o, int)},
        {
            ScopedSegment.parse(str(s)): tuple(Segment(int(n)) for n in ps if isinstance(n, int))
            for s, ps in future.items
            if isinstance(ps, list)
        },
        created,
    )


# ---------------------------------------------------------------- the state as an update sees it

_decoded = functools.lru_cache(maxsize=4096)(decode_data)
"""Values decoded once per distinct bytes (a refresh decodes every entry; most have not changed). The payloads
are shared: treat what :func:`view` returns as read-only (the operations copy before they change anything)."""
_decoded_checkpoint = functools.lru_cache(maxsize=256)(decode_checkpoint)


@dataclass(slots=True)
class GroupView:
    """The decoded state an update starts from."""

    config: ReaderGroupConfig | None = None
    assigned: dict[str, dict[ScopedSegment, int]] = field(default_factory=dict)
    unassigned: dict[ScopedSegment, int] = field(default_factory=dict)
    future: dict[ScopedSegment, tuple[Segment, ...]] = field(default_factory=dict)
    checkpoints: dict[str, CheckpointRecord] = field(default_factory=dict)

    @property
    def segment_count(self) -> int:
        return sum(len(s) for s in self.assigned.values()) + len(self.unassigned)

    @property
    def pending_checkpoints(self) -> list[CheckpointRecord]:
        return sorted((c for c in self.checkpoints.values() if not c.complete), key=lambda c: (c.created_ms, c.name))

    def pending_for(self, reader: str) -> CheckpointRecord | None:
        """The oldest checkpoint ``reader`` has still to reach."""
        return next((c for c in self.pending_checkpoints if reader in c.pending), None)

    def owner(self, segment: ScopedSegment) -> str | None:
        return next((r for r, owned in self.assigned.items() if segment in owned), None)


def view(update: Update) -> GroupView:
    """The state ``update`` starts from, decoded."""
    state = GroupView()
    for entry in update.live(CONFIG):
        payload = _decoded(entry.value.type_id, entry.value.data)
        if isinstance(payload, ReaderGroupConfig):
            state.config = payload
    for entry in update.live(ASSIGNED):
        owned = _decoded(TYPE_ASSIGNED, entry.value.data)
        assert isinstance(owned, dict) and entry.inner is not None
        state.assigned[entry.inner] = owned
    for entry in update.live(UNASSIGNED):
        offset = _decoded(TYPE_OFFSET, entry.value.data)
        assert isinstance(offset, int) and entry.inner is not None
        state.unassigned[ScopedSegment.parse(entry.inner)] = offset
    for entry in update.live(FUTURE):
        waiting = _decoded(TYPE_FUTURE, entry.value.data)
        assert isinstance(waiting, tuple) and entry.inner is not None
        state.future[ScopedSegment.parse(entry.inner)] = waiting
    for entry in update.live(CHECKPOINTS):
        if entry.value.type_id == TYPE_CHECKPOINT and entry.inner is not None:
            state.checkpoints[entry.inner] = _decoded_checkpoint(entry.inner, entry.value.data)
    return state


def _put_assigned(update: Update, reader: str, owned: Mapping[ScopedSegment, int]) -> None:
    update.put(ASSIGNED, reader, TYPE_ASSIGNED, encode_data(TYPE_ASSIGNED, dict(owned)))


def _put_unassigned(update: Update, segment: ScopedSegment, offset: int) -> None:
    update.put(UNASSIGNED, segment.qualified_name, TYPE_OFFSET, encode_data(TYPE_OFFSET, offset))


def _put_future(update: Update, segment: ScopedSegment, waiting: Iterable[Segment]) -> None:
    update.put(FUTURE, segment.qualified_name, TYPE_FUTURE, encode_data(TYPE_FUTURE, tuple(waiting)))


def _put_checkpoint(update: Update, record: CheckpointRecord) -> None:
    update.put(CHECKPOINTS, record.name, TYPE_CHECKPOINT, encode_checkpoint(record))


def _online(state: GroupView, reader: str) -> dict[ScopedSegment, int]:
    owned = state.assigned.get(reader)
    if owned is None:
        raise ReaderOfflineError(reader)
    return owned


# ---------------------------------------------------------------- operations


def initialize(update: Update, config: ReaderGroupConfig, segments: Mapping[ScopedSegment, int]) -> bool:
    """Write the config and the starting segments if the group has no state yet (``ReaderGroupState::new``);
    False if it had (the existing state is kept, as the official client keeps it)."""
    if any(True for _ in update.live(CONFIG)):
        return False
    update.put(CONFIG, DEFAULT_INNER_KEY, TYPE_CONFIG, encode_data(TYPE_CONFIG, config))
    for segment, offset in segments.items():
        _put_unassigned(update, segment, offset)
    return True


def add_reader(update: Update, reader: str) -> None:
    """Bring ``reader`` online with no segments (``add_reader``)."""
    if update.contains(ASSIGNED, reader):
        raise ReaderAlreadyOnlineError(reader)
    _put_assigned(update, reader, {})
    update.put(DISTANCE, reader, TYPE_DISTANCE, encode_data(TYPE_DISTANCE, U64_MAX))


def remove_reader(
    update: Update,
    reader: str,
    positions: Mapping[ScopedSegment, int] | None = None,
    if_version: int | None = None,
) -> bool:
    """Take ``reader`` offline: its segments become unassigned at ``positions`` (default: its last reported ones).

    False if it is offline already, or if ``if_version`` is given and its entry has another version now (it
    reported since it was thought dead). A checkpoint pending on it counts it as done at those positions.
    """
    state = view(update)
    owned = state.assigned.get(reader)
    if owned is None or (if_version is not None and update.version(ASSIGNED, reader) != if_version):
        return False
    left = {segment: (positions or {}).get(segment, offset) for segment, offset in owned.items()}
    for segment, offset in left.items():
        _put_unassigned(update, segment, offset)
    update.tombstone(ASSIGNED, reader)
    update.tombstone(DISTANCE, reader)
    for record in state.pending_checkpoints:
        if reader in record.pending:
            _put_checkpoint(update, _reached(record, reader, left))
    return True


def report_positions(update: Update, reader: str, positions: Mapping[ScopedSegment, int]) -> None:
    """Record ``reader``'s read positions of its segments (also its sign of life: written even if unchanged)."""
    owned = dict(_online(view(update), reader))
    for segment in owned:
        if segment in positions:
            owned[segment] = positions[segment]
    _put_assigned(update, reader, owned)


def acquire_or_release(state: GroupView, reader: str) -> int:
    """How many segments ``reader`` should acquire (> 0) or release (< 0): ``ceil(segments / readers)`` minus
    what it holds (``compute_segments_to_acquire_or_release``)."""
    readers = len(state.assigned)
    if readers == 0:
        return 0
    expected = -(-state.segment_count // readers)
    return expected - len(state.assigned.get(reader, {}))


def acquire(update: Update, reader: str, limit: int) -> list[tuple[ScopedSegment, int]]:
    """Move up to ``min(limit, what balance allows)`` unassigned segments to ``reader``; returns them with their
    offsets. Nothing while a checkpoint is pending on the reader."""
    state = view(update)
    owned = dict(_online(state, reader))
    count = min(limit, acquire_or_release(state, reader))
    if count <= 0 or state.pending_for(reader) is not None:
        return []
    taken = sorted(state.unassigned.items(), key=lambda item: item[0].qualified_name)[:count]
    for segment, offset in taken:
        owned[segment] = offset
        update.tombstone(UNASSIGNED, segment.qualified_name)
    if taken:
        _put_assigned(update, reader, owned)
    return taken


def release(update: Update, reader: str, segment: ScopedSegment, offset: int) -> bool:
    """Give ``segment`` back (unassigned at ``offset``) to balance the group; False while a checkpoint is pending
    (the reader keeps it) or if the reader does not hold it."""
    state = view(update)
    owned = dict(_online(state, reader))
    if segment not in owned or state.pending_checkpoints:
        return False
    del owned[segment]
    _put_assigned(update, reader, owned)
    _put_unassigned(update, segment, offset)
    return True


def complete_segment(
    update: Update,
    reader: str,
    segment: ScopedSegment,
    successors: Mapping[ScopedSegment, Iterable[Segment]],
) -> list[ScopedSegment] | None:
    """``reader`` read ``segment`` to its end: drop it, add its successors as futures waiting for their
    predecessors, and make unassigned (offset 0) the futures with none left (``segment_completed``). Returns
    the segments made ready. A successor already in the state (unassigned, assigned or future) is not added again.
    None (nothing changed) while a checkpoint is pending on the reader: it completes the segment after its marker.
    """
    state = view(update)
    owned = dict(_online(state, reader))
    if state.pending_for(reader) is not None:
        return None
    if owned.pop(segment, None) is None:
        raise ReaderGroupStateError(f"reader {reader!r} completed {segment}, which it does not hold")
    _put_assigned(update, reader, owned)
    known = set(state.unassigned) | {s for held in state.assigned.values() for s in held}
    future = dict(state.future)
    for successor, predecessors in successors.items():
        if successor not in future and successor not in known:
            future[successor] = tuple(predecessors)
            _put_future(update, successor, future[successor])
    ready: list[ScopedSegment] = []
    for successor, waiting in future.items():
        if segment.segment in waiting:
            waiting = tuple(p for p in waiting if p != segment.segment)
            future[successor] = waiting
            _put_future(update, successor, waiting)
        if not waiting:
            ready.append(successor)
    for successor in ready:
        _put_unassigned(update, successor, 0)
        update.tombstone(FUTURE, successor.qualified_name)
    return ready


def create_checkpoint(update: Update, name: str, now_ms: int | None = None) -> CheckpointRecord:
    """Start checkpoint ``name``: pending on every online reader, with the unassigned positions and the futures
    of this moment (complete at once if no reader is online). Deletes the oldest completed checkpoints beyond
    :data:`KEPT_CHECKPOINTS`."""
    state = view(update)
    if name in state.checkpoints:
        raise CheckpointExistsError(f"checkpoint {name!r} exists already in the group")
    created = int(time.time() * 1000) if now_ms is None else now_ms
    record = CheckpointRecord(name, tuple(sorted(state.assigned)), dict(state.unassigned), dict(state.future), created)
    _put_checkpoint(update, record)
    done = sorted((c for c in state.checkpoints.values() if c.complete), key=lambda c: (c.created_ms, c.name))
    for old in done[: max(0, len(done) + 1 - KEPT_CHECKPOINTS)]:
        update.tombstone(CHECKPOINTS, old.name)
    return record


def create_automatic_checkpoint(
    update: Update, interval_ms: int, now_ms: int, since_ms: int
) -> CheckpointRecord | None:
    """Start a silent checkpoint ``segstore-auto-<now_ms>`` if none is pending and the newest one (or, without
    one, ``since_ms``: when the caller joined) is at least ``interval_ms`` old; None otherwise. Any reader may call
    it: one wins, the others then see it pending (the checkpoint map is written conditionally)."""
    state = view(update)
    if state.pending_checkpoints:
        return None
    newest = max((c.created_ms for c in state.checkpoints.values()), default=since_ms)
    if now_ms - newest < interval_ms:
        return None
    return create_checkpoint(update, f"{AUTOMATIC_PREFIX}{now_ms}", now_ms)


def newest_complete(state: GroupView, prefix: str = "") -> CheckpointRecord | None:
    """The most recent completed checkpoint whose name starts with ``prefix``."""
    done = [c for c in state.checkpoints.values() if c.complete and c.name.startswith(prefix)]
    return max(done, key=lambda c: (c.created_ms, c.name), default=None)


def _reached(record: CheckpointRecord, reader: str, positions: Mapping[ScopedSegment, int]) -> CheckpointRecord:
    merged = dict(record.positions)
    merged.update(positions)
    pending = tuple(r for r in record.pending if r != reader)
    return CheckpointRecord(record.name, pending, merged, record.future, record.created_ms)


def reach_checkpoint(
    update: Update, reader: str, name: str, positions: Mapping[ScopedSegment, int]
) -> CheckpointRecord | None:
    """``reader`` has handed its application every event before checkpoint ``name`` and read none after: record
    its positions there. Returns the checkpoint as it is now (None if it was deleted meanwhile)."""
    state = view(update)
    _online(state, reader)
    record = state.checkpoints.get(name)
    if record is None or reader not in record.pending:
        return record
    record = _reached(record, reader, positions)
    _put_checkpoint(update, record)
    report_positions(update, reader, positions)
    return record


def reset(
    update: Update,
    positions: Mapping[ScopedSegment, int],
    future: Mapping[ScopedSegment, tuple[Segment, ...]] | None = None,
) -> None:
    """Start the group over at ``positions`` (a checkpoint's, or a stream cut's) with ``future`` (a
    checkpoint's): every reader is taken offline (its next call raises :class:`ReaderOfflineError`), every
    segment entry and pending checkpoint is replaced. Completed checkpoints are kept."""
    state = view(update)
    for reader in state.assigned:
        update.tombstone(ASSIGNED, reader)
        update.tombstone(DISTANCE, reader)
    for segment in state.unassigned:
        if segment not in positions:
            update.tombstone(UNASSIGNED, segment.qualified_name)
    for segment in state.future:
        if segment not in (future or {}):
            update.tombstone(FUTURE, segment.qualified_name)
    for record in state.pending_checkpoints:
        update.tombstone(CHECKPOINTS, record.name)
    for segment, offset in positions.items():
        _put_unassigned(update, segment, offset)
    for segment, waiting in (future or {}).items():
        _put_future(update, segment, waiting)
