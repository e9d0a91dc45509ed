"""Applying a stream's retention policy (run by the owner of its bucket every ``retention_period_s``).

A round records the stream's tail cut in its retention set (time, size up to it), then truncates where the
policy says (:mod:`controller.policies.retention`): by the retention set alone, or — when reader groups
subscribe to the stream and have reported positions (``updateSubscriberStreamCut``) — at their lower bound held
within the policy's minimum and maximum (consumption-based retention, PDP-47). A subscriber that has reported
no position yet does not hold truncation back (as in Pravega); one that is removed stops counting at once.
Only an ACTIVE stream is truncated.

Part of :mod:`controller.periodic`: imports the metadata store, :mod:`controller.policies`, the segment store calls
and the stream workflows (truncation), none of the other periodic rounds.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping

from controller.metadata import StreamMetadataStore, StreamState
from controller.metadata.records import StreamCutReference
from controller.policies.cuts import Cut, lower_bound
from controller.policies.retention import Recorded, Truncation, consumption_truncation, truncation_point
from controller.segment_ops import SegmentStoreOps
from controller.workflows.streams import StreamWorkflows
from controller_client.model import RetentionPolicy, StreamCut
from controller_client.watermarks import SegmentWithRange

log = logging.getLogger(__name__)


class Retention:
    def __init__(
        self,
        store: StreamMetadataStore,
        ops: SegmentStoreOps,
        streams: StreamWorkflows,
        clock_ms: Callable[[], int],
    ) -> None:
        self._store = store
        self._ops = ops
        self._streams = streams
        self._clock_ms = clock_ms

    async def run(self, scope: str, stream: str) -> Truncation | None:
        """One round for the stream; where it truncated, if it did."""
        config = await self._store.get_configuration(scope, stream)
        policy = config.retention
        if policy is None or await self._store.get_state(scope, stream) != StreamState.ACTIVE:
            return None
        current = await self._store.get_active_epoch(scope, stream)
        lengths = await asyncio.gather(*(self._ops.segment_length(scope, stream, s) for s in current.segment_ids))
        tail = {sid: length[1] for sid, length in zip(current.segment_ids, lengths, strict=True)}
        now = self._clock_ms()
        size = await self._store.get_size_till_stream_cut(scope, stream, tail)
        await self._store.add_stream_cut_reference(scope, stream, tail, now, size)
        truncated = (await self._store.get_truncation_record(scope, stream))[0].size_till
        subscribers = [s.truncation_cut for s in await self._store.get_subscribers(scope, stream) if s.truncation_cut]
        if subscribers:
            chosen = await self._by_subscribers(scope, stream, policy, subscribers, now, size, truncated)
        else:
            chosen = await self._by_policy(scope, stream, policy, now, size, truncated)
        if chosen is None:
            return None
        await self._streams.truncate(StreamCut(scope, stream, {s.segment_id: o for s, o in chosen.cut.items()}))
        if chosen.recorded is not None:
            await self._store.delete_references_before(scope, stream, chosen.recorded)
        log.info("retention truncated %s/%s at %d bytes", scope, stream, chosen.size)
        return chosen

    async def _by_policy(
        self, scope: str, stream: str, policy: RetentionPolicy, now: int, size: int, truncated: int
    ) -> Truncation | None:
        references = (await self._store.get_retention_set(scope, stream)).references
        chosen = truncation_point(policy, references, now, size, truncated)
        if chosen is None:
            return None
        return Truncation(await self._ranged(scope, stream, chosen), chosen.recording_size_bytes, chosen)

    async def _by_subscribers(
        self,
        scope: str,
        stream: str,
        policy: RetentionPolicy,
        cuts: list[Mapping[int, int]],
        now: int,
        size: int,
        truncated: int,
    ) -> Truncation | None:
        ranges: dict[int, SegmentWithRange] = {}
        lower = lower_bound([await self._with_ranges(scope, stream, cut, ranges) for cut in cuts])
        positions = {segment.segment_id: offset for segment, offset in lower.items()}
        lower_size = await self._store.get_size_till_stream_cut(scope, stream, positions)
        references = (await self._store.get_retention_set(scope, stream)).references
        recorded = [
            Recorded(r, await self._ranged(scope, stream, r, ranges))
            for r in references
            if r.recording_size_bytes > truncated
        ]
        return consumption_truncation(policy, recorded, lower, lower_size, now, size, truncated)

    async def _ranged(
        self, scope: str, stream: str, reference: StreamCutReference, ranges: dict[int, SegmentWithRange] | None = None
    ) -> Cut:
        record = await self._store.get_stream_cut_record(scope, stream, reference)
        return await self._with_ranges(scope, stream, record.stream_cut, {} if ranges is None else ranges)

    async def _with_ranges(
        self, scope: str, stream: str, cut: Mapping[int, int], ranges: dict[int, SegmentWithRange]
    ) -> Cut:
        for segment_id in cut:
            if segment_id not in ranges:
                record = await self._store.get_segment(scope, stream, segment_id)
                ranges[segment_id] = SegmentWithRange(segment_id, record.key_start, record.key_end)
        return {ranges[s]: offset for s, offset in cut.items()}
