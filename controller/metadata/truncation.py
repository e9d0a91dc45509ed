"""Truncation (head of the stream), stream sizes and the retention set."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping

from controller.metadata.epochs import CutLike, EpochOps
from controller.metadata.errors import DataNotFoundError, InvalidStreamCutError, OperationConflictError
from controller.metadata.records import (
    RetentionSet,
    SegmentRecord,
    StreamCutRecord,
    StreamCutReference,
    TruncationRecord,
)
from controller.metadata.stream_logic import (
    compute_span,
    cut_equal_or_after,
    positions_of,
    segments_between,
    size_between,
)
from segstore_shared.coordination.store import NodeNotFoundError


class TruncationOps(EpochOps):
    # ---- truncation -------------------------------------------------------------------------------------------
    async def start_truncation(self, scope: str, stream: str, cut: CutLike) -> tuple[TruncationRecord, int]:
        """Record the intent to truncate at ``cut`` (``updating=True``) with the segments to delete:
        those between the previous head and ``cut`` that are not in ``cut`` nor deleted already.

        Raises :class:`InvalidStreamCutError` if the cut is invalid or behind the current head,
        :class:`OperationConflictError` while another truncation is pending (the same one is
        returned unchanged), :class:`WriteConflictError` on a lost race.
        """
        uid = (await self._stream(scope, stream)).uid
        positions = positions_of(cut)
        record, version = await self.get_truncation_record(scope, stream)
        if record.updating:
            if dict(record.stream_cut) == positions:
                return record, version
            raise OperationConflictError("another truncation is in progress", scope=scope, name=stream)
        records, epochs = await self._valid_cut(scope, stream, uid, positions)
        span = compute_span(positions, epochs)
        if record.is_empty:
            epoch0 = await self._epoch(scope, stream, uid, 0)
            previous_records: list[SegmentRecord] = list(epoch0.segments)
            previous_cut: Mapping[int, int] = {s.segment_id: 0 for s in epoch0.segments}
        else:
            previous_records, previous_cut = list(record.span), record.stream_cut
            if not cut_equal_or_after(positions, records.values(), previous_cut, previous_records):
                raise InvalidStreamCutError(
                    "stream cut is behind the current truncation point", scope=scope, name=stream
                )
        low = min(s.creation_epoch for s in previous_records)
        high = max(s.creation_epoch for s in records.values())
        between = segments_between(
            previous_records, records.values(), (await self._epochs(scope, stream, uid, low, high)).values()
        )
        to_delete = frozenset(s.segment_id for s in between if s.segment_id not in positions) - record.deleted_segments
        sizes = await self._sealed_sizes(scope, stream, (s.segment_id for s in between))
        size = size_between(previous_cut, positions, between, sizes)
        update = TruncationRecord(positions, span, record.deleted_segments, to_delete, record.size_till + size, True)
        new_version = await self._cas(
            self._sp(scope, stream, "truncation"), update, version, scope=scope, name=stream, what="truncation record"
        )
        return update, new_version

    async def complete_truncation(self, scope: str, stream: str) -> TruncationRecord:
        """Mark the pending truncation done (its segments join ``deleted_segments``); idempotent."""
        await self._stream(scope, stream)
        return await self._update(
            self._sp(scope, stream, "truncation"),
            TruncationRecord,
            lambda r: r.completed() if r.updating else None,
            scope=scope,
            name=stream,
            what="truncation record",
        )

    # ---- sizes ------------------------------------------------------------------------------------------------
    async def get_size_till_stream_cut(
        self, scope: str, stream: str, cut: CutLike, reference: StreamCutRecord | None = None
    ) -> int:
        """Bytes in the stream before ``cut`` (since creation: truncated data counts), computed from
        sealed sizes and the cut's offsets; from ``reference`` plus its recorded size when given."""
        uid = (await self._stream(scope, stream)).uid
        positions = positions_of(cut)
        to_records = list((await self._known_cut(scope, stream, uid, positions)).values())
        if reference is not None:
            from_cut = dict(reference.stream_cut)
            from_records = list((await self._known_cut(scope, stream, uid, from_cut)).values())
            base = reference.recording_size_bytes
        else:
            epoch0 = await self._epoch(scope, stream, uid, 0)
            from_records, base = list(epoch0.segments), 0
            from_cut = {s.segment_id: 0 for s in from_records}
        if not cut_equal_or_after(positions, to_records, from_cut, from_records):
            raise InvalidStreamCutError("stream cut is before the reference stream cut", scope=scope, name=stream)
        low = min(s.creation_epoch for s in from_records)
        high = max(s.creation_epoch for s in to_records)
        between = segments_between(
            from_records, to_records, (await self._epochs(scope, stream, uid, low, high)).values()
        )
        sizes = await self._sealed_sizes(scope, stream, (s.segment_id for s in between))
        return base + size_between(from_cut, positions, between, sizes)

    # ---- retention set ----------------------------------------------------------------------------------------
    async def add_stream_cut_reference(
        self, scope: str, stream: str, cut: CutLike, recording_time_ms: int, recording_size_bytes: int
    ) -> StreamCutRecord:
        """Store a stream cut recorded at ``recording_time_ms`` and append its reference to the
        retention set, unless the set already holds a reference at or after that time. Idempotent."""
        record = StreamCutRecord(recording_time_ms, recording_size_bytes, positions_of(cut))
        await self._stream(scope, stream)
        await self._create_in_stream(scope, stream, self._sp(scope, stream, "cuts", recording_time_ms), record)
        reference = record.reference

        def add(current: RetentionSet) -> RetentionSet | None:
            latest = current.latest()
            if latest is not None and latest.recording_time_ms >= recording_time_ms:
                return None
            return RetentionSet((*current.references, reference))

        await self._update(
            self._sp(scope, stream, "retention"), RetentionSet, add, scope=scope, name=stream, what="retention set"
        )
        return record

    async def get_retention_set(self, scope: str, stream: str) -> RetentionSet:
        return (await self._stream_get(scope, stream, "retention", RetentionSet))[0]

    async def get_stream_cut_record(self, scope: str, stream: str, reference: StreamCutReference) -> StreamCutRecord:
        """The stream cut a retention set reference points to; :class:`DataNotFoundError`."""
        found = await self._get_opt(self._sp(scope, stream, "cuts", reference.recording_time_ms), StreamCutRecord)
        if found is None:
            raise DataNotFoundError(
                f"stream cut recorded at {reference.recording_time_ms} not found", scope=scope, name=stream
            )
        return found[0]

    async def delete_references_before(self, scope: str, stream: str, reference: StreamCutReference) -> RetentionSet:
        """Drop ``reference`` and every older one from the retention set, then their stream cut
        records (set first, so a reference never points to a deleted record)."""
        await self._stream(scope, stream)
        bound = reference.recording_time_ms

        def drop(current: RetentionSet) -> RetentionSet | None:
            kept = tuple(r for r in current.references if r.recording_time_ms > bound)
            return RetentionSet(kept) if len(kept) != len(current.references) else None

        result = await self._update(
            self._sp(scope, stream, "retention"), RetentionSet, drop, scope=scope, name=stream, what="retention set"
        )
        try:
            names = await self._coord.children(self._sp(scope, stream, "cuts"))
        except NodeNotFoundError:
            return result
        for name in names:
            if int(name) <= bound:
                with contextlib.suppress(NodeNotFoundError):
                    await self._coord.delete(self._sp(scope, stream, "cuts", name))
        return result
