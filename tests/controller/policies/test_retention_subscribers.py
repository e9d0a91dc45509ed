"""Retention by time and size, with and without subscribers (consumption-based retention, PDP-47): the cut algebra
(lower bound, order), the decision within the policy's min and max, and the controller truncating a real stream —
a subscriber holds truncation back until the max bound, one ahead of the min waits for it, a removed one stops
counting."""

from __future__ import annotations

import uuid

import pytest
from controller_env import ControllerEnv, write_events

from controller.core import ControllerCore
from controller.metadata.records import StreamCutReference
from controller.policies.cuts import Order, compare, lower_bound
from controller.policies.retention import Recorded, consumption_truncation
from controller_client.model import (
    ReaderGroupConfig,
    ReaderGroupRetention,
    RetentionPolicy,
    ScalingPolicy,
    StreamConfiguration,
    StreamCut,
    qualified_segment_name,
    segment_id,
)
from controller_client.watermarks import SegmentWithRange

pytestmark = pytest.mark.integration

EVENT = 100  # bytes of one event with its 8-byte header
S = "ret"


def whole(segment: int = 0, epoch: int = 0) -> SegmentWithRange:
    return SegmentWithRange(segment_id(segment, epoch), 0.0, 1.0)


# ---- the cut algebra ------------------------------------------------------------------------------------------


def test_lower_bound_and_order_follow_segments_across_a_scale() -> None:
    low, high = SegmentWithRange(segment_id(1, 1), 0.0, 0.5), SegmentWithRange(segment_id(2, 1), 0.5, 1.0)
    before = {whole(): 300}
    after = {low: 10, high: 20}  # the successors of segment 0
    assert compare(after, before) is Order.EQUAL_OR_AFTER and compare(before, after) is Order.BEFORE
    assert lower_bound([after, before]) == before
    mixed = {low: 5, high: 30}
    assert lower_bound([after, mixed]) == {low: 5, high: 20}
    assert compare(after, mixed) is Order.OVERLAPS
    assert lower_bound([]) == {}


def recorded(*sizes: int, times: tuple[int, ...] | None = None) -> list[Recorded]:
    times = times or tuple(range(len(sizes)))
    return [Recorded(StreamCutReference(t, s), {whole(): s}) for s, t in zip(sizes, times, strict=True)]


def test_size_policy_truncates_at_the_subscribers_within_min_and_max() -> None:
    policy = RetentionPolicy.by_size_bytes(200, 600)
    refs = recorded(100, 300, 500, 700, 900)
    decide = lambda lower: consumption_truncation(policy, refs, {whole(): lower}, lower, 10, 1_000)  # noqa: E731
    chosen = decide(500)
    assert chosen is not None and chosen.size == 500, "between the bounds: at the subscribers"
    chosen = decide(900)  # the subscribers read almost everything: keep the 200 bytes of the min anyway
    assert chosen is not None and chosen.size == 700 and chosen.recorded == refs[3].reference
    chosen = decide(100)  # lagging: 900 bytes kept > max 600 -> truncate at the oldest cut within max
    assert chosen is not None and chosen.size == 500
    assert consumption_truncation(RetentionPolicy.by_size_bytes(200), refs, {whole(): 100}, 100, 10, 1_000) is not None


def test_time_policy_holds_for_a_lagging_subscriber_until_its_max() -> None:
    policy = RetentionPolicy.by_time_ms(1_000, 5_000)
    refs = recorded(100, 200, 300, 400, times=(0, 2_000, 4_000, 6_000))
    lagging = {whole(): 50}
    held = consumption_truncation(policy, refs, lagging, 50, 4_500, 500)
    assert held is not None and held.size == 50, "at the subscriber: nothing it has not read goes"
    assert consumption_truncation(policy, refs, lagging, 50, 4_500, 500, truncated_size_bytes=50) is None
    forced = consumption_truncation(policy, refs, lagging, 50, 9_500, 500, truncated_size_bytes=50)
    assert forced is not None and forced.size == 300, "past max (5 s): the newest cut at least that old goes"
    ahead = consumption_truncation(policy, refs, {whole(): 400}, 400, 6_500, 500)
    assert ahead is not None and ahead.size == 300, "at most up to what min keeps (recorded 2.5 s ago)"


# ---- the controller on a real stream ---------------------------------------------------------------------------


async def stream_with(core: ControllerCore, name: str, policy: RetentionPolicy) -> None:
    await core.create_scope(S)
    await core.create_stream(S, name, StreamConfiguration(ScalingPolicy.fixed(1), retention=policy))


async def subscribe(core: ControllerCore, stream: str, group: str = "readers") -> ReaderGroupConfig:
    config = ReaderGroupConfig(
        S, group, (StreamCut(S, stream, {}),), retention_type=ReaderGroupRetention.MANUAL, reader_group_id=uuid.uuid4()
    )
    return await core.create_reader_group(config)


async def consumed(core: ControllerCore, group: ReaderGroupConfig, stream: str, offset: int) -> None:
    cut = StreamCut(S, stream, {segment_id(0, 0): offset})
    await core.update_subscriber_stream_cut(cut, f"{S}/{group.reader_group}", str(group.reader_group_id), 0)


async def round_(env: ControllerEnv, core: ControllerCore, stream: str, events: int = 1) -> int:
    """Write ``events`` events, let a second pass, run retention; the segment's start offset after it."""
    segment = qualified_segment_name(S, stream, 0)
    for _ in range(events):
        await write_events(env.client, segment, [b"x" * (EVENT - 8)])
    env.clock[0] += 1_000
    await core.retain(S, stream)
    return (await env.client.get_segment_info(segment)).start_offset


async def test_time_retention_without_subscribers_keeps_the_minimum(env: ControllerEnv) -> None:
    core = env.core()
    await stream_with(core, "plain", RetentionPolicy.by_time_ms(2_500))
    starts = [await round_(env, core, "plain") for _ in range(5)]
    assert starts == [0, 0, 0, 100, 200], "the newest cut recorded at least 2.5 s ago"


async def test_a_subscriber_holds_size_retention_back_until_the_max(env: ControllerEnv) -> None:
    core = env.core()
    await stream_with(core, "subs", RetentionPolicy.by_size_bytes(200, 500))
    group = await subscribe(core, "subs")
    await consumed(core, group, "subs", 0)
    starts = [await round_(env, core, "subs") for _ in range(5)]
    assert starts == [0, 0, 0, 0, 0], "500 bytes kept: within max, the subscriber is at 0"
    assert await round_(env, core, "subs") == 100, "600 bytes: more than max, the lagging subscriber loses 100"
    await consumed(core, group, "subs", 300)
    assert await round_(env, core, "subs") == 300, "at the subscriber (400 bytes kept, between min and max)"
    await consumed(core, group, "subs", 800)
    assert await round_(env, core, "subs") == 600, "never less than min (200 bytes): not at the subscriber's 800"


async def test_a_removed_subscriber_no_longer_holds_data(env: ControllerEnv) -> None:
    core = env.core()
    await stream_with(core, "gone", RetentionPolicy.by_size_bytes(100))
    group = await subscribe(core, "gone")
    await consumed(core, group, "gone", 0)
    assert [await round_(env, core, "gone") for _ in range(3)] == [0, 0, 0]
    await core.delete_reader_group(S, group.reader_group, group.reader_group_id)
    assert await round_(env, core, "gone") == 300, "the policy alone: keep 100 bytes"


@pytest.mark.parametrize("lagging", [True, False])
async def test_the_slowest_of_two_subscribers_decides(env: ControllerEnv, lagging: bool) -> None:
    core = env.core()
    await stream_with(core, "two", RetentionPolicy.by_size_bytes(100))
    fast, slow = await subscribe(core, "two", "fast"), await subscribe(core, "two", "slow")
    await consumed(core, fast, "two", 0)
    await consumed(core, slow, "two", 0)
    assert [await round_(env, core, "two") for _ in range(4)] == [0, 0, 0, 0]
    await consumed(core, fast, "two", 400)
    await consumed(core, slow, "two", 100 if lagging else 300)
    assert await round_(env, core, "two") == (100 if lagging else 300)
