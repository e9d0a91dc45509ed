"""Validation and metadata changes of log operations (Pravega's OperationMetadataUpdater).

Two steps per operation:

1. :meth:`MetadataUpdater.pre_process` runs when the operation processor takes
   the operation, before it is serialized. It validates the operation against the
   *pending* state (committed state plus every operation still in flight),
   completes it (segment id, offset, seal length, merge offset) and applies it to
   the pending state. It raises a :mod:`segstore_shared.contracts` error and changes
   nothing if the operation is invalid.
2. :meth:`MetadataUpdater.accept` applies a completed operation to the
   *committed* :class:`ContainerMetadata`, once it is durable (in log order) or
   while replaying the log at recovery. It does not validate; it is deterministic.

:meth:`rollback` drops the pending state (every in-flight operation failed), so
the pending view equals the committed one again. Only the fields operations
change are pending; ``storage_length`` and ``sealed_in_storage`` are always read
from the committed segment.
"""

from __future__ import annotations

from collections.abc import Callable

from segment_store.logs.operations import (
    AppendOperation,
    DeleteOperation,
    MapSegmentOperation,
    MergeOperation,
    MetadataCheckpointOperation,
    Operation,
    SealOperation,
    TruncateOperation,
    UpdateAttributesOperation,
)
from segment_store.metadata import ContainerMetadata, SegmentMetadata, now_ms
from segstore_shared.contracts import (
    NULL_ATTRIBUTE_VALUE,
    AttributeUpdate,
    AttributeUpdateType,
    BadAttributeUpdateError,
    BadOffsetError,
    InvalidOffsetError,
    SegmentExistsError,
    SegmentNotExistsError,
    SegmentSealedError,
)


def resolve_attribute_updates(segment: SegmentMetadata, updates: tuple[AttributeUpdate, ...]) -> dict[int, int]:
    """The new values ``updates`` give, validated against ``segment``'s attributes; raises, changing nothing."""
    result: dict[int, int] = {}
    for u in updates:
        current = result.get(u.attribute_id, segment.attributes.get(u.attribute_id, NULL_ATTRIBUTE_VALUE))
        kind = u.update_type
        if kind == AttributeUpdateType.NONE and current != NULL_ATTRIBUTE_VALUE:
            raise BadAttributeUpdateError(segment.name, u.attribute_id, "already set")
        if kind == AttributeUpdateType.REPLACE_IF_GREATER and current != NULL_ATTRIBUTE_VALUE and u.value <= current:
            raise BadAttributeUpdateError(segment.name, u.attribute_id, f"{u.value} is not greater than {current}")
        if kind == AttributeUpdateType.REPLACE_IF_EQUALS and current != u.comparison_value:
            raise BadAttributeUpdateError(
                segment.name, u.attribute_id, f"expected {u.comparison_value}, found {current}"
            )
        if kind == AttributeUpdateType.ACCUMULATE and current != NULL_ATTRIBUTE_VALUE:
            result[u.attribute_id] = current + u.value
        else:
            result[u.attribute_id] = u.value
    return result


def _store_attributes(segment: SegmentMetadata, values: dict[int, int]) -> None:
    for key, value in values.items():
        if value == NULL_ATTRIBUTE_VALUE:
            segment.attributes.pop(key, None)
        else:
            segment.attributes[key] = value


class MetadataUpdater:
    """Pending and committed metadata changes of one container (see module docstring). Not thread-safe."""

    def __init__(self, metadata: ContainerMetadata, clock_ms: Callable[[], int] = now_ms) -> None:
        self.metadata = metadata
        self._clock_ms = clock_ms
        self._pending: dict[int, SegmentMetadata] = {}
        self._pending_names: dict[str, int | None] = {}
        self._next_id = metadata.next_segment_id
        self._in_flight = 0

    # ---- pending view ---------------------------------------------------------------------------------------
    def segment_by_name(self, name: str) -> SegmentMetadata | None:
        """The pending state of the live segment called ``name`` (a copy; do not mutate)."""
        if name in self._pending_names:
            segment_id = self._pending_names[name]
            return None if segment_id is None else self._view(segment_id)
        committed = self.metadata.get_by_name(name)
        return None if committed is None else self._view(committed.segment_id)

    def name_freed_in_flight(self, name: str) -> bool:
        """An in-flight delete or merge frees ``name`` (its segment is not yet committed as gone)."""
        return name in self._pending_names and self._pending_names[name] is None

    def segment_by_id(self, segment_id: int) -> SegmentMetadata | None:
        return self._view(segment_id)

    def _view(self, segment_id: int) -> SegmentMetadata | None:
        pending = self._pending.get(segment_id)
        committed = self.metadata.get(segment_id)
        if pending is None:
            return committed
        if committed is not None:
            pending.storage_length = committed.storage_length
            pending.sealed_in_storage = committed.sealed_in_storage
        return pending

    def _touch(self, segment_id: int) -> SegmentMetadata:
        pending = self._pending.get(segment_id)
        if pending is None:
            committed = self.metadata.get(segment_id)
            assert committed is not None
            pending = committed.copy()
            self._pending[segment_id] = pending
        return pending

    def _live(self, name: str | None, segment_id: int) -> SegmentMetadata:
        segment = self._view(segment_id)
        if segment is None or not segment.live:
            raise SegmentNotExistsError(name if name is not None else f"#{segment_id}")
        return self._touch(segment_id)

    def pending_snapshot(self) -> bytes:
        return self.metadata.snapshot(
            {sid: self._view(sid) for sid in self._pending}  # type: ignore[misc]
        )

    # ---- step 1: validate, complete, apply to pending --------------------------------------------------------
    def pre_process(self, op: Operation) -> None:
        handler = _PRE.get(type(op))
        if handler is None:
            raise TypeError(f"no metadata handling for {type(op).__name__}")
        handler(self, op)
        self._in_flight += 1

    def _pre_map(self, op: MapSegmentOperation) -> None:
        if self.segment_by_name(op.name) is not None:
            raise SegmentExistsError(op.name)
        op.segment_id = self._next_id
        op.created_ms = op.created_ms or self._clock_ms()
        self._next_id += 1
        segment = SegmentMetadata(
            segment_id=op.segment_id,
            name=op.name,
            segment_type=op.segment_type,
            start_offset=op.start_offset,
            length=op.length,
            storage_length=op.storage_length,
            sealed=op.sealed,
            created_ms=op.created_ms,
            last_modified_ms=op.created_ms,
            attributes=dict(op.attributes),
        )
        self._pending[op.segment_id] = segment
        self._pending_names[op.name] = op.segment_id

    def _pre_append(self, op: AppendOperation) -> None:
        segment = self._live(None, op.segment_id)
        if segment.sealed:
            raise SegmentSealedError(segment.name)
        if op.expected_offset >= 0 and op.expected_offset != segment.length:
            raise BadOffsetError(segment.name, op.expected_offset, segment.length)
        values = resolve_attribute_updates(segment, op.attribute_updates)
        op.offset = segment.length
        # never earlier than the segment's last change (a merge sets it after the transaction's writes), so
        # an event's time bounds every earlier event's: what makes time lookups exact (reading/ingest_times.py)
        op.ingest_time_ms = op.ingest_time_ms or max(self._clock_ms(), segment.last_modified_ms)
        segment.length += len(op.data)
        segment.last_modified_ms = op.ingest_time_ms
        _store_attributes(segment, values)

    def _pre_update_attributes(self, op: UpdateAttributesOperation) -> None:
        segment = self._live(None, op.segment_id)
        if segment.sealed:
            raise SegmentSealedError(segment.name)
        _store_attributes(segment, resolve_attribute_updates(segment, op.attribute_updates))

    def _pre_seal(self, op: SealOperation) -> None:
        segment = self._live(None, op.segment_id)
        if segment.sealed:
            raise SegmentSealedError(segment.name)
        op.length = segment.length
        segment.sealed = True

    def _pre_truncate(self, op: TruncateOperation) -> None:
        segment = self._live(None, op.segment_id)
        if op.offset < 0 or op.offset > segment.length:
            raise InvalidOffsetError(segment.name, f"truncate offset {op.offset} outside [0, {segment.length}]")
        op.offset = max(op.offset, segment.start_offset)
        segment.start_offset = op.offset

    def _pre_merge(self, op: MergeOperation) -> None:
        target = self._live(None, op.segment_id)
        source = self._live(None, op.source_id)
        if op.segment_id == op.source_id:
            raise InvalidOffsetError(target.name, "cannot merge a segment into itself")
        if target.sealed:
            raise SegmentSealedError(target.name)
        if not source.sealed:
            raise InvalidOffsetError(source.name, "merge source must be sealed first")
        if source.start_offset != 0:
            raise InvalidOffsetError(source.name, "a truncated segment cannot be merged")
        values = resolve_attribute_updates(target, op.attribute_updates)
        op.target_offset = target.length
        op.length = source.length
        target.length += source.length
        target.last_modified_ms = max(self._clock_ms(), target.last_modified_ms, source.last_modified_ms)
        op.merge_time_ms = target.last_modified_ms  # every merged event's time (reading/ingest_times.py)
        source.merged = True
        self._pending_names[source.name] = None
        _store_attributes(target, values)

    def _pre_delete(self, op: DeleteOperation) -> None:
        segment = self._live(None, op.segment_id)
        segment.deleted = True
        self._pending_names[segment.name] = None

    def _pre_checkpoint(self, op: MetadataCheckpointOperation) -> None:
        op.snapshot = self.pending_snapshot()

    # ---- step 2: apply durable operations to committed metadata ---------------------------------------------
    def accept(self, op: Operation) -> None:
        """Apply a durable, completed operation to the committed metadata (in log order)."""
        meta = self.metadata
        if isinstance(op, AppendOperation):
            segment = self._committed(op.segment_id)
            segment.length = op.offset + len(op.data)
            segment.last_modified_ms = op.ingest_time_ms
            if op.attribute_updates:
                _store_attributes(segment, resolve_attribute_updates_unchecked(segment, op.attribute_updates))
        elif isinstance(op, MapSegmentOperation):
            meta.add(
                SegmentMetadata(
                    segment_id=op.segment_id,
                    name=op.name,
                    segment_type=op.segment_type,
                    start_offset=op.start_offset,
                    length=op.length,
                    storage_length=op.storage_length,
                    sealed=op.sealed,
                    created_ms=op.created_ms,
                    last_modified_ms=op.created_ms,
                    attributes=dict(op.attributes),
                )
            )
        elif isinstance(op, UpdateAttributesOperation):
            segment = self._committed(op.segment_id)
            _store_attributes(segment, resolve_attribute_updates_unchecked(segment, op.attribute_updates))
        elif isinstance(op, SealOperation):
            segment = self._committed(op.segment_id)
            segment.sealed = True
            segment.length = op.length
        elif isinstance(op, TruncateOperation):
            segment = self._committed(op.segment_id)
            segment.start_offset = max(segment.start_offset, op.offset)
        elif isinstance(op, MergeOperation):
            target = self._committed(op.segment_id)
            source = self._committed(op.source_id)
            target.length = op.target_offset + op.length
            # at least every merged event's time (an op logged without its merge time carries 0)
            target.last_modified_ms = max(target.last_modified_ms, source.last_modified_ms, op.merge_time_ms)
            if op.attribute_updates:
                _store_attributes(target, resolve_attribute_updates_unchecked(target, op.attribute_updates))
            source.merged = True
            meta.unlink_name(source)
        elif isinstance(op, DeleteOperation):
            segment = self._committed(op.segment_id)
            segment.deleted = True
            meta.unlink_name(segment)
        elif isinstance(op, MetadataCheckpointOperation):
            pass
        else:
            raise TypeError(f"no metadata handling for {type(op).__name__}")
        meta.sequence_number = max(meta.sequence_number, op.sequence_number)
        meta.next_segment_id = max(meta.next_segment_id, self._next_id)

    def committed(self, op: Operation) -> None:
        """``op`` (pre-processed here) is durable: apply it and retire it from the in-flight count."""
        self.accept(op)
        self._in_flight -= 1
        if self._in_flight <= 0:
            self._in_flight = 0
            self._pending.clear()
            self._pending_names.clear()

    def rollback(self) -> None:
        """Every in-flight operation failed: the pending view becomes the committed state again."""
        self._pending.clear()
        self._pending_names.clear()
        self._in_flight = 0
        self._next_id = max(self._next_id, self.metadata.next_segment_id)

    def _committed(self, segment_id: int) -> SegmentMetadata:
        segment = self.metadata.get(segment_id)
        if segment is None:
            raise SegmentNotExistsError(f"#{segment_id}")
        return segment


def resolve_attribute_updates_unchecked(
    segment: SegmentMetadata, updates: tuple[AttributeUpdate, ...]
) -> dict[int, int]:
    """Like :func:`resolve_attribute_updates` for already validated updates (no condition is checked)."""
    result: dict[int, int] = {}
    for u in updates:
        current = result.get(u.attribute_id, segment.attributes.get(u.attribute_id, NULL_ATTRIBUTE_VALUE))
        if u.update_type == AttributeUpdateType.ACCUMULATE and current != NULL_ATTRIBUTE_VALUE:
            result[u.attribute_id] = current + u.value
        else:
            result[u.attribute_id] = u.value
    return result


_PRE: dict[type, Callable[[MetadataUpdater, Operation], None]] = {
    MapSegmentOperation: MetadataUpdater._pre_map,  # type: ignore[dict-item]
    AppendOperation: MetadataUpdater._pre_append,  # type: ignore[dict-item]
    UpdateAttributesOperation: MetadataUpdater._pre_update_attributes,  # type: ignore[dict-item]
    SealOperation: MetadataUpdater._pre_seal,  # type: ignore[dict-item]
    TruncateOperation: MetadataUpdater._pre_truncate,  # type: ignore[dict-item]
    MergeOperation: MetadataUpdater._pre_merge,  # type: ignore[dict-item]
    DeleteOperation: MetadataUpdater._pre_delete,  # type: ignore[dict-item]
    MetadataCheckpointOperation: MetadataUpdater._pre_checkpoint,  # type: ignore[dict-item]
}
