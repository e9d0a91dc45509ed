"""Auto-scaling: the pure decision, and the controller splitting a hot segment and merging cold ones
from traffic it measures in a real segment store."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from controller_env import ControllerEnv, write_events

from controller.policies.autoscale import decide
from controller_client.model import ScalingPolicy, SegmentRange, StreamConfiguration, qualified_segment_name

pytestmark = pytest.mark.integration

OLD = 10**9


def ranges(*bounds: float) -> list[SegmentRange]:
    return [SegmentRange(i, bounds[i], bounds[i + 1]) for i in range(len(bounds) - 1)]


def test_hot_segment_is_split_into_as_many_parts_as_its_rate_needs_up_to_the_factor() -> None:
    policy = ScalingPolicy.by_event_rate(100, 3, 1)
    segments = ranges(0.0, 0.5, 1.0)
    decision = decide(policy, segments, {0: 250.0, 1: 90.0}, {0: OLD, 1: OLD}, 1000)
    assert decision is not None and decision.seal == (0,)
    assert decision.new_ranges == ((0.0, 0.5 / 3), (0.5 / 3, 2 * 0.5 / 3), (2 * 0.5 / 3, 0.5))
    capped = decide(policy, segments, {0: 10_000.0, 1: 0.0}, {0: OLD, 1: OLD}, 1000)
    assert capped is not None and len(capped.new_ranges) == 3


def test_cold_neighbours_merge_but_not_below_the_minimum_segment_count() -> None:
    policy = ScalingPolicy.by_event_rate(100, 2, 2)
    segments = ranges(0.0, 0.25, 0.5, 1.0)
    rates = {0: 10.0, 1: 20.0, 2: 70.0}
    ages = dict.fromkeys(rates, OLD)
    decision = decide(policy, segments, rates, ages, 1000)
    assert decision is not None and decision.seal == (0, 1) and decision.new_ranges == ((0.0, 0.5),)
    two = ranges(0.0, 0.5, 1.0)
    assert decide(policy, two, {0: 1.0, 1: 1.0}, {0: OLD, 1: OLD}, 1000) is None


def test_young_or_unmeasured_segments_and_fixed_policies_do_not_scale() -> None:
    policy = ScalingPolicy.by_data_rate(10, 2, 1)
    segments = ranges(0.0, 1.0)
    assert decide(policy, segments, {0: 1000.0}, {0: 10}, 1000) is None
    assert decide(policy, segments, {}, {0: OLD}, 1000) is None
    assert decide(ScalingPolicy.fixed(1), segments, {0: 1000.0}, {0: OLD}, 1000) is None


@pytest.fixture
async def env() -> AsyncIterator[ControllerEnv]:
    environment = await ControllerEnv.start(auto_scale_cooldown_s=5.0)
    try:
        yield environment
    finally:
        await environment.close()


async def test_controller_splits_a_hot_segment_and_merges_it_back_when_traffic_stops(env: ControllerEnv) -> None:
    core = env.core()
    await core.create_scope("s")
    await core.create_stream("s", "st", StreamConfiguration(ScalingPolicy.by_event_rate(10, 2, 1)))
    env.clock[0] += 10_000
    assert await core.autoscaler.check("s", "st") is None  # first sample: no rate yet
    await write_events(env.client, qualified_segment_name("s", "st", 0), [b"e"] * 500)
    env.clock[0] += 10_000  # 50 events/s against a target of 10

    decision = await core.autoscaler.check("s", "st")
    assert decision is not None and decision.seal == (0,)
    await core.streams.run_scale("s", "st")
    split = await core.current_segments("s", "st")
    assert len(split) == 2

    env.clock[0] += 10_000
    assert await core.autoscaler.check("s", "st") is None  # first sample of the new segments
    env.clock[0] += 10_000
    merge = await core.autoscaler.check("s", "st")
    assert merge is not None and sorted(merge.seal) == sorted(s.segment_id for s in split)
    await core.streams.run_scale("s", "st")
    merged = await core.current_segments("s", "st")
    assert [(r.key_start, r.key_end) for r in merged] == [(0.0, 1.0)]
