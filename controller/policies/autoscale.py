"""When a stream with a rate-based scaling policy scales, and how (seed 003, "Scaling Infrastructure").

Input: the stream's current segments with their measured rates (events/s, or KiB/s for a data-rate
policy) and ages. Output: at most one scale for this round (a stream has one scale at a time):

- **Split** the hottest segment whose rate exceeds the policy's target: into
  ``min(scale_factor, ceil(rate / target))`` equal key ranges, at least 2.
- Otherwise **merge** the coldest pair of key-space neighbours that are both below half the target
  (and together below the target, so the merged segment is not immediately hot), while the stream keeps
  at least ``min_num_segments`` segments.

A segment younger than the cooldown is neither split nor merged: its rate was measured over too short
a life, and a scale must not be undone by the next round.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from controller_client.model import ScaleType, ScalingPolicy, SegmentRange


@dataclass(frozen=True, slots=True)
class ScaleDecision:
    seal: tuple[int, ...]
    new_ranges: tuple[tuple[float, float], ...]
    reason: str


def decide(
    policy: ScalingPolicy,
    segments: Sequence[SegmentRange],
    rates: Mapping[int, float],
    ages_ms: Mapping[int, int],
    cooldown_ms: int,
) -> ScaleDecision | None:
    """The scale to run now, or None. Segments without a measured rate are left alone."""
    if policy.scale_type == ScaleType.FIXED_NUM_SEGMENTS or policy.target_rate <= 0:
        return None
    target = float(policy.target_rate)
    settled = [s for s in segments if s.segment_id in rates and ages_ms.get(s.segment_id, 0) >= cooldown_ms]
    hot = [s for s in settled if rates[s.segment_id] > target]
    if hot:
        segment = max(hot, key=lambda s: rates[s.segment_id])
        rate = rates[segment.segment_id]
        parts = max(2, min(max(policy.scale_factor, 2), math.ceil(rate / target)))
        width = (segment.key_end - segment.key_start) / parts
        bounds = [segment.key_start + i * width for i in range(parts)] + [segment.key_end]
        ranges = tuple((bounds[i], bounds[i + 1]) for i in range(parts))
        return ScaleDecision((segment.segment_id,), ranges, f"rate {rate:.1f} > target {target:.0f}")
    if len(segments) <= policy.min_num_segments:
        return None
    ordered = sorted(segments, key=lambda s: s.key_start)
    cold = {s.segment_id for s in settled if rates[s.segment_id] < target / 2}
    pairs = [
        (left, right)
        for left, right in itertools.pairwise(ordered)
        if left.segment_id in cold
        and right.segment_id in cold
        and left.key_end == right.key_start
        and rates[left.segment_id] + rates[right.segment_id] < target
    ]
    if not pairs:
        return None
    left, right = min(pairs, key=lambda p: rates[p[0].segment_id] + rates[p[1].segment_id])
    combined = rates[left.segment_id] + rates[right.segment_id]
    return ScaleDecision(
        (left.segment_id, right.segment_id),
        ((left.key_start, right.key_end),),
        f"neighbours at {combined:.1f} together < target {target:.0f}",
    )
