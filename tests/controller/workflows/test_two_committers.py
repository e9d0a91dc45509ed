"""Two controllers commit transactions of one stream at once (a client's commit goes to whichever controller it
reached; each runs a committer), while a scale runs: every transaction is committed, each of its events once."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest
from controller_env import ControllerEnv, read_events, write_events

from controller.errors import StreamBusyError
from controller_client.model import (
    ScalingPolicy,
    StreamConfiguration,
    TxnState,
    qualified_segment_name,
    transaction_segment_name,
)

pytestmark = pytest.mark.integration

TXNS = 40


async def test_two_controllers_committing_one_stream_while_it_scales_commit_every_event_once(
    env: ControllerEnv,
) -> None:
    a, b = env.core(), env.core()
    a.txns.retry_delay_s = b.txns.retry_delay_s = 0.05
    await a.create_scope("s")
    await a.create_stream("s", "st", StreamConfiguration(ScalingPolicy.fixed(2)))
    txns = []
    for i in range(TXNS):
        core = (a, b)[i % 2]
        txn, segments = await core.create_transaction("s", "st", 60_000)
        for r in segments:
            await write_events(
                env.client, transaction_segment_name(qualified_segment_name("s", "st", r.segment_id), txn), [b"t%d" % i]
            )
        txns.append((core, txn))

    async def commit_all() -> None:
        for step in range(0, len(txns), 2):  # in waves: the committers of both run again and again
            await asyncio.gather(*(core.commit_transaction("s", "st", txn) for core, txn in txns[step : step + 2]))
            await asyncio.sleep(0)

    async def scale() -> None:  # split the first segment, twice, while commits run (through either controller)
        for core in (b, a):
            await asyncio.sleep(0.01)
            current = await core.store.get_active_epoch("s", "st")
            first = min(current.segments, key=lambda s: s.key_start)
            middle = (first.key_start + first.key_end) / 2
            while True:
                try:
                    await core.scale(
                        "s", "st", [first.segment_id], [(first.key_start, middle), (middle, first.key_end)], 0
                    )
                    break
                except StreamBusyError:  # committing: try again
                    await asyncio.sleep(0.01)
            while core._scales:  # the scale runs in the background (it retries while transactions commit)
                await asyncio.sleep(0.01)

    await asyncio.gather(commit_all(), scale())
    for core in (a, b):
        core.txns.schedule_commits("s", "st")
    await asyncio.gather(a.txns.wait_committed("s", "st"), b.txns.wait_committed("s", "st"))

    for core, txn in txns:
        assert await core.transaction_state("s", "st", txn) == TxnState.COMMITTED
    active = await a.store.get_active_epoch("s", "st")
    segments: set[int] = set()
    for number in range(active.epoch + 1):
        segments |= (await a.store.get_epoch("s", "st", number)).segment_ids
    seen: Counter[bytes] = Counter()
    for sid in sorted(segments):
        seen.update(await read_events(env.client, qualified_segment_name("s", "st", sid)))
    assert seen == Counter({b"t%d" % i: 2 for i in range(TXNS)})  # once in each of the transaction's two segments
