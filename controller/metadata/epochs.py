"""Epoch and segment queries, and the scale steps (submit, start, create epoch, complete)."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from controller.metadata.codec import encode
from controller.metadata.errors import (
    DataNotFoundError,
    IllegalStreamStateError,
    InconsistentMetadataError,
    InvalidStreamCutError,
    ScaleConflictError,
    ScalePreconditionError,
    WriteConflictError,
)
from controller.metadata.records import (
    EMPTY_TRANSITION,
    ConfigurationRecord,
    EpochRecord,
    EpochSummary,
    EpochTransitionRecord,
    HistoryEntry,
    ScaleStatus,
    SegmentRecord,
    StreamCutComparison,
    StreamState,
    TruncationRecord,
)
from controller.metadata.store_base import StoreBase
from controller.metadata.stream_logic import (
    build_scaled_epoch,
    check_scale,
    compare_cuts,
    compute_epoch_transition,
    cut_equal_or_after,
    cut_records,
    epoch_at_time,
    is_stream_cut_valid,
    migrate_transition,
    positions_of,
    predecessors,
    segments_between,
    successors,
    summarize,
    transition_matches,
    validate_scale,
)
from controller_client.model import SegmentRange, StreamCut, creation_epoch
from segstore_shared.coordination.store import BadVersionError

CutLike = StreamCut | Mapping[int, int]


class EpochOps(StoreBase):
    # ---- queries ----------------------------------------------------------------------------------------------
    async def get_epoch_history(self, scope: str, stream: str) -> list[EpochSummary]:
        """Epochs 0..active with their creation time and the segments each created and sealed."""
        uid = (await self._stream(scope, stream)).uid
        current, _ = await self._current(scope, stream)
        epochs = await self._epochs(scope, stream, uid, 0, current.epoch)
        return summarize([epochs[e] for e in range(current.epoch + 1)])

    async def get_segment(self, scope: str, stream: str, segment: int) -> SegmentRecord:
        """Range and creation time of a segment (from its creation epoch); :class:`DataNotFoundError`."""
        epoch = await self.get_epoch(scope, stream, creation_epoch(segment))
        record = epoch.segment(segment)
        if record is None:
            raise DataNotFoundError(f"segment {segment} not found", scope=scope, name=stream)
        return record

    async def get_current_segments(self, scope: str, stream: str) -> list[SegmentRange]:
        """The active epoch's segments, by key range."""
        current, _ = await self._current(scope, stream)
        return [s.range for s in sorted(current.segments, key=lambda s: s.key_start)]

    async def is_segment_valid(self, scope: str, stream: str, segment: int) -> bool:
        """Whether ``segment`` is open for appends: in the active epoch of a stream not sealed."""
        current, _ = await self._current(scope, stream)
        return current.contains(segment) and await self.get_state(scope, stream) != StreamState.SEALED

    async def get_truncation_record(self, scope: str, stream: str) -> tuple[TruncationRecord, int]:
        return await self._stream_get(scope, stream, "truncation", TruncationRecord)

    async def get_segments_at_head(self, scope: str, stream: str) -> StreamCut:
        """The head: the truncation cut, or epoch 0's segments at offset 0 before any truncation."""
        truncation, _ = await self.get_truncation_record(scope, stream)
        if not truncation.is_empty:
            return StreamCut(scope, stream, dict(truncation.stream_cut))
        epoch0 = await self.get_epoch(scope, stream, 0)
        return StreamCut(scope, stream, {s.segment_id: 0 for s in epoch0.segments})

    async def get_segments_at_time(self, scope: str, stream: str, time_ms: int) -> StreamCut:
        """The segments of the epoch active at ``time_ms`` at offset 0; the head if ``time_ms`` is
        before the stream's creation or that position was truncated away."""
        current, _ = await self._current(scope, stream)
        history = await self._history(scope, stream, current.epoch)
        epoch = epoch_at_time(history, time_ms, current.epoch)
        truncation, _ = await self.get_truncation_record(scope, stream)
        if epoch is None:
            return await self.get_segments_at_head(scope, stream)
        record = await self.get_epoch(scope, stream, epoch)
        cut = {s.segment_id: 0 for s in record.segments}
        if not truncation.is_empty and not cut_equal_or_after(
            cut, record.segments, truncation.stream_cut, truncation.span.keys()
        ):
            return StreamCut(scope, stream, dict(truncation.stream_cut))
        return StreamCut(scope, stream, cut)

    async def get_successors(self, scope: str, stream: str, segment: int) -> dict[SegmentRange, list[int]]:
        """The segments that replaced ``segment`` when it was sealed, each with its predecessors;
        empty while ``segment`` is in the latest epoch written. :class:`DataNotFoundError` if the
        segment never existed.

        A caller asks once a segment store said ``segment`` is sealed, and a scale writes the new epoch before it
        seals anything; but a ZooKeeper member answers reads as far as it has caught up with the leader. So an
        empty answer is given only after a ``sync``: from a member behind the scale's writes it would be stale,
        and a reader would take the sealed segment for the end of its key range (found by ``segstore
        selftest``: a merge overlapping ZooKeeper leader kills, its events never read)."""
        uid = (await self._stream(scope, stream)).uid
        await self._segment_in(scope, stream, uid, segment)
        sealed = await self._sealed_in_latest(scope, stream, uid, segment)
        if sealed is None:
            await self._coord.sync(self._sp(scope, stream, "current"))
            sealed = await self._sealed_in_latest(scope, stream, uid, segment)
        if sealed is None:
            return {}
        epochs = await self._epochs(scope, stream, uid, sealed - 1, sealed)
        return successors(segment, epochs[sealed], epochs[sealed - 1])

    async def _sealed_in_latest(self, scope: str, stream: str, uid: str, segment: int) -> int | None:
        """The first epoch without ``segment`` up to the latest epoch written, or None."""
        current, _ = await self._current(scope, stream)
        latest = await self._latest_epoch(scope, stream, current.epoch)
        return await self._sealed_epoch(scope, stream, uid, segment, latest)

    async def get_predecessors(self, scope: str, stream: str, segment: int) -> list[SegmentRange]:
        """The segments ``segment`` replaced (empty for the first epoch's)."""
        uid = (await self._stream(scope, stream)).uid
        record = await self._segment_in(scope, stream, uid, segment)
        epoch = creation_epoch(segment)
        previous = await self._epoch(scope, stream, uid, epoch - 1) if epoch > 0 else None
        return [p.range for p in predecessors(record, previous)]

    async def _segment_in(self, scope: str, stream: str, uid: str, segment: int) -> SegmentRecord:
        record = (await self._epoch(scope, stream, uid, creation_epoch(segment))).segment(segment)
        if record is None:
            raise DataNotFoundError(f"segment {segment} not found", scope=scope, name=stream)
        return record

    async def get_segments_between(
        self, scope: str, stream: str, from_cut: CutLike | None, to_cut: CutLike | None
    ) -> set[SegmentRange]:
        """Segments from ``from_cut`` to ``to_cut``, both included (Pravega semantics: an empty or
        ``None`` from-cut means epoch 0 from offset 0, an empty to-cut the active epoch to its end).

        Raises :class:`InvalidStreamCutError` for a cut naming unknown segments or a to-cut before
        the from-cut.
        """
        uid = (await self._stream(scope, stream)).uid
        lower, upper = positions_of(from_cut or {}), positions_of(to_cut or {})
        if lower:
            from_records = list((await self._known_cut(scope, stream, uid, lower)).values())
        else:
            epoch0 = await self._epoch(scope, stream, uid, 0)
            from_records, lower = list(epoch0.segments), {s.segment_id: 0 for s in epoch0.segments}
        if upper:
            to_records = list((await self._known_cut(scope, stream, uid, upper)).values())
        else:
            current, _ = await self._current(scope, stream)
            to_records, upper = list(current.segments), {s.segment_id: -1 for s in current.segments}
        if not cut_equal_or_after(upper, to_records, lower, from_records):
            raise InvalidStreamCutError("the to-cut is before the from-cut", scope=scope, name=stream)
        low = min(s.creation_epoch for s in from_records)
        high = max(s.creation_epoch for s in to_records)
        epochs = await self._epochs(scope, stream, uid, low, high)
        return {s.range for s in segments_between(from_records, to_records, epochs.values())}

    async def _known_cut(self, scope: str, stream: str, uid: str, cut: Mapping[int, int]) -> dict[int, SegmentRecord]:
        epochs = await self._cut_epochs(scope, stream, uid, cut)
        records = cut_records(cut, epochs)
        if records is None:
            raise InvalidStreamCutError(f"stream cut names unknown segments: {dict(cut)}", scope=scope, name=stream)
        return records

    async def is_stream_cut_valid(self, scope: str, stream: str, cut: CutLike) -> bool:
        """Whether the cut's segments exist and cover the key space exactly once."""
        uid = (await self._stream(scope, stream)).uid
        positions = positions_of(cut)
        try:
            epochs = await self._cut_epochs(scope, stream, uid, positions)
        except InvalidStreamCutError:
            return False
        return is_stream_cut_valid(positions, epochs)

    async def compare_stream_cuts(self, scope: str, stream: str, cut1: CutLike, cut2: CutLike) -> StreamCutComparison:
        """How ``cut1`` relates to ``cut2``: EQUAL_OR_AFTER, BEFORE or OVERLAPS (partly both)."""
        uid = (await self._stream(scope, stream)).uid
        p1, p2 = positions_of(cut1), positions_of(cut2)
        r1 = await self._known_cut(scope, stream, uid, p1)
        r2 = await self._known_cut(scope, stream, uid, p2)
        return compare_cuts(p1, r1.values(), p2, r2.values())

    async def get_sealed_sizes(self, scope: str, stream: str, segments: Collection[int]) -> dict[int, int]:
        """Recorded sizes at sealing of ``segments`` (those not recorded are absent)."""
        await self._stream(scope, stream)
        sizes = await self._sealed_sizes(scope, stream, segments)
        return {s: sizes[s] for s in segments if s in sizes}

    # ---- scale ------------------------------------------------------------------------------------------------
    async def get_epoch_transition(self, scope: str, stream: str) -> tuple[EpochTransitionRecord, int]:
        return await self._stream_get(scope, stream, "transition", EpochTransitionRecord)

    async def submit_scale(
        self,
        scope: str,
        stream: str,
        segments_to_seal: Collection[int],
        new_ranges: Sequence[tuple[float, float]],
        scale_time_ms: int,
    ) -> tuple[EpochTransitionRecord, int]:
        """Record the intent of a scale as the epoch transition record (manual and auto scale).

        Validates against the active epoch (:class:`ScalePreconditionError`, :class:`ScaleInputError`)
        and the stream state (:class:`IllegalStreamStateError` when sealing or sealed). Idempotent for
        an identical request; a different scale in progress raises :class:`ScaleConflictError` and
        changes nothing.
        """
        path = self._sp(scope, stream, "transition")
        for _ in range(self._config.update_attempts):
            state = await self.get_state(scope, stream)
            if state in (StreamState.SEALING, StreamState.SEALED):
                raise IllegalStreamStateError(f"cannot scale a stream in state {state.name}", scope=scope, name=stream)
            record, version = await self.get_epoch_transition(scope, stream)
            if not record.is_empty:
                if transition_matches(record, segments_to_seal, new_ranges):
                    return record, version
                raise ScaleConflictError("another scale is in progress", scope=scope, name=stream)
            current, _ = await self._current(scope, stream)
            config, _ = await self._stream_get(scope, stream, "config", ConfigurationRecord)
            validate_scale(
                current,
                segments_to_seal,
                new_ranges,
                config.config.scaling.min_num_segments,
                scope=scope,
                stream=stream,
            )
            transition = compute_epoch_transition(current, segments_to_seal, new_ranges, scale_time_ms)
            try:
                return transition, await self._coord.compare_and_set(path, encode(transition), version)
            except BadVersionError:
                continue
        raise WriteConflictError("epoch transition: too many concurrent updates", scope=scope, name=stream)

    async def start_scale(self, scope: str, stream: str, *, manual: bool) -> tuple[EpochTransitionRecord, int]:
        """Check the submitted transition still applies to the active epoch before its workflow runs.

        If a rolling transaction moved the stream to a duplicate of the transition's epoch, a manual
        scale is re-based onto it (same segment numbers); otherwise the transition is discarded and
        :class:`ScalePreconditionError` raised. Resuming a scale whose epoch is already active
        returns the transition unchanged.
        """
        record, version = await self.get_epoch_transition(scope, stream)
        if record.is_empty:
            raise DataNotFoundError("no scale submitted", scope=scope, name=stream)
        current, _ = await self._current(scope, stream)
        if record.active_epoch == current.epoch:
            return record, version
        if current.epoch == record.new_epoch and all(current.contains(s) for s, _, _ in record.new_segments):
            return record, version
        uid = (await self._stream(scope, stream)).uid
        original = await self._epoch(scope, stream, uid, record.active_epoch)
        if manual and current.epoch > record.active_epoch and current.reference_epoch == original.reference_epoch:
            migrated = migrate_transition(record, current)
            new_version = await self._cas(
                self._sp(scope, stream, "transition"),
                migrated,
                version,
                scope=scope,
                name=stream,
                what="epoch transition",
            )
            return migrated, new_version
        await self._cas(
            self._sp(scope, stream, "transition"),
            EMPTY_TRANSITION,
            version,
            scope=scope,
            name=stream,
            what="epoch transition",
        )
        raise ScalePreconditionError(
            f"scale computed for epoch {record.active_epoch} no longer applies to epoch {current.epoch}",
            scope=scope,
            name=stream,
        )

    async def scale_create_new_epoch(self, scope: str, stream: str) -> EpochRecord:
        """Write the transition's new epoch record and its history entry (idempotent)."""
        record, _ = await self.get_epoch_transition(scope, stream)
        if record.is_empty:
            raise IllegalStreamStateError("no scale in progress", scope=scope, name=stream)
        uid = (await self._stream(scope, stream)).uid
        current, _ = await self._current(scope, stream)
        if current.epoch >= record.new_epoch:
            return await self._epoch(scope, stream, uid, record.new_epoch)
        if current.epoch != record.active_epoch:
            raise ScalePreconditionError(
                f"transition is for epoch {record.active_epoch}, active is {current.epoch}", scope=scope, name=stream
            )
        new = build_scaled_epoch(current, record)
        await self._create_epoch(scope, stream, uid, new)
        return new

    async def _create_epoch(self, scope: str, stream: str, uid: str, epoch: EpochRecord) -> EpochRecord:
        """Create an epoch record (or find the identical one) and add its history entry."""
        path = self._sp(scope, stream, "epochs", epoch.epoch)
        if not await self._create_in_stream(scope, stream, path, epoch):
            existing = await self._epoch(scope, stream, uid, epoch.epoch)
            if existing.segment_ids != epoch.segment_ids:
                raise InconsistentMetadataError(
                    f"epoch {epoch.epoch} exists with other segments", scope=scope, name=stream
                )
            epoch = existing
        await self._append_history(
            scope, stream, HistoryEntry(epoch.epoch, epoch.reference_epoch, epoch.creation_time_ms)
        )
        return epoch

    async def record_sealed_sizes(self, scope: str, stream: str, sizes: Mapping[int, int]) -> None:
        """Remember the sizes at sealing of segments (first value recorded wins; idempotent)."""
        await self._stream(scope, stream)
        await self._record_sealed_sizes(scope, stream, sizes)

    async def scale_complete(
        self, scope: str, stream: str, sealed_sizes: Mapping[int, int] | None = None
    ) -> EpochRecord:
        """Finish the scale: record ``sealed_sizes``, make the new epoch active, clear the transition.

        Each step is idempotent, so a retry after a crash completes it; with no scale in progress it
        returns the active epoch. :class:`IllegalStreamStateError` if the new epoch was not created.
        """
        record, _ = await self.get_epoch_transition(scope, stream)
        if record.is_empty:
            return (await self._current(scope, stream))[0]
        uid = (await self._stream(scope, stream)).uid
        if sealed_sizes:
            await self._record_sealed_sizes(scope, stream, sealed_sizes)
        current, _ = await self._current(scope, stream)
        if current.epoch < record.new_epoch:
            if not await self._coord.exists(self._sp(scope, stream, "epochs", record.new_epoch)):
                raise IllegalStreamStateError(f"epoch {record.new_epoch} was not created yet", scope=scope, name=stream)
            await self._update_current_epoch(scope, stream, uid, record.new_epoch)
        await self._update(
            self._sp(scope, stream, "transition"),
            EpochTransitionRecord,
            lambda r: EMPTY_TRANSITION if r == record else None,
            scope=scope,
            name=stream,
            what="epoch transition",
        )
        return await self._epoch(scope, stream, uid, record.new_epoch)

    async def reset_epoch_transition(self, scope: str, stream: str) -> None:
        """Abandon a submitted scale whose new epoch has not been written."""
        record, version = await self.get_epoch_transition(scope, stream)
        if record.is_empty:
            return
        uid = (await self._stream(scope, stream)).uid
        if await self._coord.exists(self._sp(scope, stream, "epochs", record.new_epoch)):
            written = await self._epoch(scope, stream, uid, record.new_epoch)
            if all(written.contains(s) for s, _, _ in record.new_segments):
                raise IllegalStreamStateError("the scale's epoch exists: complete it instead", scope=scope, name=stream)
        await self._cas(
            self._sp(scope, stream, "transition"),
            EMPTY_TRANSITION,
            version,
            scope=scope,
            name=stream,
            what="epoch transition",
        )

    async def check_scale(self, scope: str, stream: str, epoch: int) -> ScaleStatus:
        """``checkScale`` for a scale submitted against ``epoch``."""
        state = await self.get_state(scope, stream)
        current, _ = await self._current(scope, stream)
        transition, _ = await self.get_epoch_transition(scope, stream)
        return check_scale(epoch, current, state, transition)
