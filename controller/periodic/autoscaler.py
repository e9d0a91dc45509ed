"""Auto-scaling: measure the traffic of streams with a rate policy, and scale them by it.

Every ``auto_scale_period_s`` the leader controller samples, for each active stream whose scaling
policy is by event rate or by data rate, every current segment's counters in the segment store (bytes
appended, and the ``EVENT_COUNT`` attribute the segment store accumulates on every append). The rate of
a segment is the difference between two samples over the time between them; the decision is
:func:`controller.policies.autoscale.decide`, and the scale runs through the same workflow as a manual
one. Samples live in memory: a new leader measures from its own first sample on.

Part of :mod:`controller.periodic`: imports the metadata store, :mod:`controller.policies.autoscale` and the
segment store calls, none of the other periodic rounds.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from controller.metadata import StreamMetadataStore, StreamState
from controller.policies.autoscale import ScaleDecision, decide
from controller.segment_ops import SegmentStoreOps
from controller_client.model import ScaleType, SegmentRange

log = logging.getLogger(__name__)

Scale = Callable[[str, str, list[int], list[tuple[float, float]], int], Awaitable[object]]


@dataclass(frozen=True, slots=True)
class Sample:
    time_ms: int
    bytes: int
    events: int


class AutoScaler:
    def __init__(
        self,
        store: StreamMetadataStore,
        ops: SegmentStoreOps,
        scale: Scale,
        cooldown_s: float,
        clock_ms: Callable[[], int],
    ) -> None:
        self._store = store
        self._ops = ops
        self._scale = scale
        self._cooldown_ms = int(cooldown_s * 1000)
        self._clock_ms = clock_ms
        self._samples: dict[tuple[str, str, int], Sample] = {}

    async def check(self, scope: str, stream: str) -> ScaleDecision | None:
        """Sample the stream's segments and start a scale if its policy asks for one; returns the decision."""
        config = await self._store.get_configuration(scope, stream)
        policy = config.scaling
        if policy.scale_type == ScaleType.FIXED_NUM_SEGMENTS:
            return None
        if await self._store.get_state(scope, stream) != StreamState.ACTIVE:
            return None
        epoch = await self._store.get_active_epoch(scope, stream)
        now = self._clock_ms()
        counters = await asyncio.gather(
            *(self._ops.segment_traffic(scope, stream, s.segment_id) for s in epoch.segments)
        )
        rates: dict[int, float] = {}
        for segment, (size, events) in zip(epoch.segments, counters, strict=True):
            key = (scope, stream, segment.segment_id)
            previous = self._samples.get(key)
            self._samples[key] = Sample(now, size, events)
            if previous is None or now <= previous.time_ms:
                continue
            seconds = (now - previous.time_ms) / 1000
            if policy.scale_type == ScaleType.BY_RATE_IN_EVENTS_PER_SEC:
                rates[segment.segment_id] = (events - previous.events) / seconds
            else:
                rates[segment.segment_id] = (size - previous.bytes) / 1024 / seconds
        ranges = [SegmentRange(s.segment_id, s.key_start, s.key_end) for s in epoch.segments]
        ages = {s.segment_id: now - s.creation_time_ms for s in epoch.segments}
        decision = decide(policy, ranges, rates, ages, self._cooldown_ms)
        if decision is not None:
            log.info(
                "auto-scaling %s/%s: seal %s into %s (%s)",
                scope,
                stream,
                decision.seal,
                decision.new_ranges,
                decision.reason,
            )
            await self._scale(scope, stream, list(decision.seal), list(decision.new_ranges), now)
        current = {(scope, stream, s.segment_id) for s in epoch.segments}
        for key in [k for k in self._samples if k[:2] == (scope, stream) and k not in current]:
            del self._samples[key]
        return decision
