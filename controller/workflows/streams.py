"""Stream workflows: create, update, scale, truncate, seal, delete (seed 003, "Stream Operations").

Each workflow first stores its intent in the metadata store (the stream state as a barrier, and the
epoch transition / truncation / pending-configuration record), then does the segment store work, then
completes the records. Every step is idempotent (see :mod:`controller.segment_ops` and the store's
invariants), so :meth:`StreamWorkflows.resume` can finish, after a controller restart, whatever a
previous controller left midway: it looks at the state and the intent records and repeats the
remaining steps.

Within one controller the workflows of one stream run one at a time (a lock per stream); across
controllers the state barrier keeps them apart (a conflicting operation gets ``StreamBusyError``,
which clients retry).

Part of :mod:`controller.workflows`: imports the metadata store, the segment store calls and the controller's
errors, nothing above them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterable

from controller.errors import (
    StreamBusyError,
    StreamNotFoundError,
    StreamNotSealedError,
    StreamSealedError,
    from_metadata,
)
from controller.metadata import StreamMetadataStore, StreamState
from controller.metadata import errors as md
from controller.metadata.records import CreateStreamStatus, EpochRecord
from controller.segment_ops import SegmentStoreOps
from controller_client.model import SegmentRange, StreamConfiguration, StreamCut
from controller_client.watermarks import mark_stream

log = logging.getLogger(__name__)


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


class StreamLocks:
    """One asyncio lock per stream: the workflows of a stream run one at a time in this process."""

    def __init__(self) -> None:
        self._locks: defaultdict[tuple[str, str], asyncio.Lock] = defaultdict(asyncio.Lock)

    def of(self, scope: str, stream: str) -> asyncio.Lock:
        return self._locks[(scope, stream)]


class StreamWorkflows:
    def __init__(
        self,
        store: StreamMetadataStore,
        ops: SegmentStoreOps,
        locks: StreamLocks,
        clock_ms: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self._store = store
        self._ops = ops
        self._locks = locks
        self._clock_ms = clock_ms

    # ---- create ---------------------------------------------------------------------------------------------
    async def create(self, scope: str, stream: str, config: StreamConfiguration) -> bool:
        """Create the stream and its first segments; False if it existed already (any configuration)."""
        async with self._locks.of(scope, stream):
            with from_metadata(scope, stream):
                result = await self._store.create_stream(scope, stream, config, self._clock_ms())
                if result.status == CreateStreamStatus.EXISTS_ACTIVE:
                    return False
                await self._finish_create(scope, stream)
            return result.status == CreateStreamStatus.NEW

    async def _finish_create(self, scope: str, stream: str) -> None:
        config = await self._store.get_configuration(scope, stream)
        epoch0 = await self._store.get_epoch(scope, stream, 0)
        await asyncio.gather(
            *(
                self._ops.create_segment(scope, stream, s.segment_id, config.scaling, config.rollover_size_bytes)
                for s in epoch0.segments
            )
        )
        await self._store.set_state(scope, stream, StreamState.ACTIVE)

    # ---- update ---------------------------------------------------------------------------------------------
    async def update(self, scope: str, stream: str, config: StreamConfiguration) -> None:
        async with self._locks.of(scope, stream):
            with from_metadata(scope, stream):
                await self._require_open(scope, stream)
                await self._store.set_state(scope, stream, StreamState.UPDATING)
                await self._store.start_update_configuration(scope, stream, config)
                await self._finish_update(scope, stream)

    async def _finish_update(self, scope: str, stream: str) -> None:
        record, _ = await self._store.get_configuration_record(scope, stream)
        if record.updating:
            current = await self._store.get_active_epoch(scope, stream)
            await asyncio.gather(
                *(self._ops.update_policy(scope, stream, s.segment_id, record.config.scaling) for s in current.segments)
            )
            await self._store.complete_update_configuration(scope, stream)
        await self._store.set_state(scope, stream, StreamState.ACTIVE)

    async def _require_open(self, scope: str, stream: str) -> StreamState:
        state = await self._store.get_state(scope, stream)
        if state in (StreamState.SEALING, StreamState.SEALED):
            raise StreamSealedError(scope, stream)
        if state == StreamState.CREATING:
            raise StreamBusyError(scope, stream, "is being created")
        return state

    # ---- scale ----------------------------------------------------------------------------------------------
    async def submit_scale(
        self, scope: str, stream: str, sealed: list[int], new_ranges: list[tuple[float, float]], time_ms: int
    ) -> tuple[list[SegmentRange], int]:
        """Record a scale (validated); returns the new segments and the epoch being scaled (what
        ``checkScale`` takes, as in Pravega). The work runs in :meth:`run_scale` (callers start it in the
        background: ``scale`` answers STARTED)."""
        with from_metadata(scope, stream):
            await self._require_open(scope, stream)
            transition, _ = await self._store.submit_scale(scope, stream, sealed, new_ranges, time_ms)
        segments = [SegmentRange(sid, start, end) for sid, start, end in transition.new_segments]
        return segments, transition.active_epoch

    async def run_scale(self, scope: str, stream: str, *, manual: bool = True) -> EpochRecord | None:
        """Carry out the submitted scale (or finish one left midway); None if there was none."""
        async with self._locks.of(scope, stream):
            with from_metadata(scope, stream):
                transition, _ = await self._store.get_epoch_transition(scope, stream)
                if transition.is_empty:
                    await self._settle_state(scope, stream, StreamState.SCALING)
                    return None
                try:
                    transition, _ = await self._store.start_scale(scope, stream, manual=manual)
                except md.ScalePreconditionError:
                    log.warning("scale of %s/%s no longer applies; discarded", scope, stream)
                    await self._settle_state(scope, stream, StreamState.SCALING)
                    return None
                await self._store.set_state(scope, stream, StreamState.SCALING)
                config = await self._store.get_configuration(scope, stream)
                await asyncio.gather(
                    *(
                        self._ops.create_segment(scope, stream, sid, config.scaling, config.rollover_size_bytes)
                        for sid, _, _ in transition.new_segments
                    )
                )
                await self._store.scale_create_new_epoch(scope, stream)
                sizes = await self._seal_all(scope, stream, transition.segments_to_seal)
                epoch = await self._store.scale_complete(scope, stream, sizes)
                await self._store.set_state(scope, stream, StreamState.ACTIVE)
                log.info("scaled %s/%s to epoch %d", scope, stream, epoch.epoch)
                return epoch

    async def _seal_all(self, scope: str, stream: str, segments: Iterable[int]) -> dict[int, int]:
        ids = sorted(segments)
        lengths = await asyncio.gather(*(self._ops.seal_segment(scope, stream, s) for s in ids))
        return dict(zip(ids, lengths, strict=True))

    async def _settle_state(self, scope: str, stream: str, busy: StreamState) -> None:
        """Return the stream to ACTIVE if a workflow of kind ``busy`` left it in that state."""
        if await self._store.get_state(scope, stream) == busy:
            await self._store.set_state(scope, stream, StreamState.ACTIVE)

    # ---- truncate -------------------------------------------------------------------------------------------
    async def truncate(self, cut: StreamCut) -> None:
        scope, stream = cut.scope, cut.stream
        async with self._locks.of(scope, stream):
            with from_metadata(scope, stream):
                await self._require_open(scope, stream)
                if not await self._store.is_stream_cut_valid(scope, stream, cut.positions):  # before any write
                    raise md.InvalidStreamCutError(
                        f"invalid stream cut {dict(cut.positions)}", scope=scope, name=stream
                    )
                await self._store.set_state(scope, stream, StreamState.TRUNCATING)
                try:
                    await self._store.start_truncation(scope, stream, cut.positions)
                except md.InvalidStreamCutError:
                    await self._settle_state(scope, stream, StreamState.TRUNCATING)
                    raise
                await self._finish_truncation(scope, stream)

    async def _finish_truncation(self, scope: str, stream: str) -> None:
        record, _ = await self._store.get_truncation_record(scope, stream)
        if record.updating:
            await asyncio.gather(*(self._ops.delete_segment(scope, stream, s) for s in sorted(record.to_delete)))
            await asyncio.gather(
                *(
                    self._ops.truncate_segment(scope, stream, segment, offset)
                    for segment, offset in sorted(record.stream_cut.items())
                    if offset > 0
                )
            )
            await self._store.complete_truncation(scope, stream)
        await self._settle_state(scope, stream, StreamState.TRUNCATING)

    # ---- seal and delete ------------------------------------------------------------------------------------
    async def seal(self, scope: str, stream: str) -> None:
        async with self._locks.of(scope, stream):
            with from_metadata(scope, stream):
                state = await self._store.get_state(scope, stream)
                if state == StreamState.SEALED:
                    return
                if state not in (StreamState.ACTIVE, StreamState.SEALING):
                    raise StreamBusyError(scope, stream, f"is {state.name.lower()}: seal it later")
                await self._store.set_state(scope, stream, StreamState.SEALING)
                await self._finish_seal(scope, stream)

    async def _finish_seal(self, scope: str, stream: str) -> None:
        current = await self._store.get_active_epoch(scope, stream)
        sizes = await self._seal_all(scope, stream, current.segment_ids)
        await self._store.record_sealed_sizes(scope, stream, sizes)
        await self._store.set_state(scope, stream, StreamState.SEALED)
        log.info("sealed %s/%s", scope, stream)

    async def delete(self, scope: str, stream: str) -> None:
        """Delete a sealed stream: every segment it ever had and its mark segment, then its metadata."""
        async with self._locks.of(scope, stream):
            with from_metadata(scope, stream):
                if not await self._store.stream_exists(scope, stream):
                    raise StreamNotFoundError(scope, stream)
                state = await self._store.get_state(scope, stream)
                if state not in (StreamState.SEALED, StreamState.CREATING):
                    raise StreamNotSealedError(scope, stream)
                await self._delete_segments(scope, stream)
                await self._store.delete_stream(scope, stream)
                log.info("deleted %s/%s", scope, stream)

    async def _delete_segments(self, scope: str, stream: str) -> None:
        truncation, _ = await self._store.get_truncation_record(scope, stream)
        active = await self._store.get_active_epoch(scope, stream)
        transition, _ = await self._store.get_epoch_transition(scope, stream)
        last = max(active.epoch, transition.new_epoch if not transition.is_empty else 0)
        segments: set[int] = set()
        for number in range(last + 1):
            with contextlib.suppress(md.DataNotFoundError):
                segments |= (await self._store.get_epoch(scope, stream, number)).segment_ids
        if not transition.is_empty:
            segments |= {sid for sid, _, _ in transition.new_segments}
        segments -= set(truncation.deleted_segments)
        await asyncio.gather(*(self._ops.delete_segment(scope, stream, s) for s in sorted(segments)))
        # its watermarks (``controller.periodic.watermarking``)
        await self._ops.delete_segment(scope, mark_stream(stream), 0)

    # ---- resume ---------------------------------------------------------------------------------------------
    async def resume(self, scope: str, stream: str) -> None:
        """Finish whatever workflow the stored state says was left midway on this stream."""
        with from_metadata(scope, stream):
            state = await self._store.get_state(scope, stream)
        if state == StreamState.CREATING:
            async with self._locks.of(scope, stream):
                with from_metadata(scope, stream):
                    await self._finish_create(scope, stream)
        elif state == StreamState.UPDATING:
            async with self._locks.of(scope, stream):
                with from_metadata(scope, stream):
                    await self._finish_update(scope, stream)
        elif state == StreamState.TRUNCATING:
            async with self._locks.of(scope, stream):
                with from_metadata(scope, stream):
                    await self._finish_truncation(scope, stream)
        elif state == StreamState.SEALING:
            async with self._locks.of(scope, stream):
                with from_metadata(scope, stream):
                    await self._finish_seal(scope, stream)
        with from_metadata(scope, stream):
            transition, _ = await self._store.get_epoch_transition(scope, stream)
        if not transition.is_empty and state in (StreamState.SCALING, StreamState.ACTIVE):
            await self.run_scale(scope, stream)
        elif state == StreamState.SCALING:
            async with self._locks.of(scope, stream):
                with from_metadata(scope, stream):
                    await self._settle_state(scope, stream, StreamState.SCALING)
