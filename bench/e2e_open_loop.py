"""The open-loop latency case of ``bench/e2e.py`` (issue 39 item 3): our event writer offered ``rate`` events/s.

The producer wakes about every millisecond and hands the writer (``write_event``, 100 B, over 100 routing keys of
a 4-segment stream) every event whose scheduled time has come, never waiting for acknowledgements; latency =
acknowledgement time (the event's future seen done by the loop) - scheduled time, so queueing and a late producer
count. The first ``min(0.5, seconds / 4)`` s are left out. As in ``bench/wire.py``'s ``latency`` case, but
through the whole client library and the standalone (controller, routing, every segment's session), and with
whatever ``bench/e2e.py`` runs the system with (``--tls``, ``--tier1 jetstream-r3``).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import numpy as np
from e2e_common import check_read_back, count_events, ours_writer, payload_bytes
from e2e_system import Meter, Standalone

from controller_client import ControllerClient

TARGET_P99_MS = {10_000: 15.0}
"""Issue 39 item 3: p99 at 10,000 events/s in ``bench/e2e.py``, on every Tier-1 and with TLS."""


async def ours_open_loop(system: Standalone, controller: ControllerClient, rate: int, seconds: float) -> dict[str, Any]:
    keys = [f"key-{k}" for k in range(100)]
    stream = f"oursopen{rate}"
    manager, writer = await ours_writer(controller, stream, 4, keys)
    payload = payload_bytes()
    warm_s = min(0.5, seconds / 4)
    total, first_measured = round((seconds + warm_s) * rate), round(warm_s * rate)
    owner = np.empty(total, dtype=np.int64)  # per event: the index of its future in ``futures``
    futures: list[asyncio.Future[Any]] = []
    acked: list[float] = []
    index_of: dict[int, int] = {}

    def stamp(future: asyncio.Future[Any]) -> None:
        acked[index_of[id(future)]] = time.perf_counter()

    try:
        meter: Meter | None = None
        start = time.perf_counter() + 0.002
        sent = 0
        while sent < total:
            now = time.perf_counter()
            due = min(total, int((now - start) * rate) + 1) if now >= start else 0
            for number in range(sent, due):
                future = await writer.write_event(payload, keys[number % 100])
                index = index_of.get(id(future))
                if index is None:  # events in one block share a future
                    index = index_of[id(future)] = len(futures)
                    futures.append(future)
                    acked.append(0.0)
                    future.add_done_callback(stamp)
                owner[number] = index
            sent = max(sent, due)
            if meter is None and sent >= first_measured:
                meter = Meter(system)
            await asyncio.sleep(0.001)
        await writer.flush()
        await asyncio.gather(*futures)
        assert meter is not None
        measured = meter.done()
        await writer.close()
    finally:
        await manager.close()
    scheduled = start + np.arange(total) / rate
    latency = (np.asarray(acked)[owner] - scheduled)[first_measured:]

    def ms(q: float) -> float:
        return round(float(np.quantile(latency, q / 100, method="inverted_cdf")) * 1000, 2)

    row: dict[str, Any] = {
        "client": "ours",
        "offered_events_per_s": rate,
        "segments": 4,
        "keys": len(keys),
        "events": int(latency.size),
        **measured,
        "p50_ms": ms(50),
        "p99_ms": ms(99),
        "p99_9_ms": ms(99.9),
        "max_ms": ms(100),
        "stream": stream,
    }
    row.update(await count_events(system.uri, stream, system.client_config))
    check_read_back(row, len(keys) + total)
    return row


def open_loop_verdicts(rows: list[dict[str, Any]]) -> list[str]:
    """The issue's target where there is one."""
    lines = []
    for row in rows:
        target = TARGET_P99_MS.get(row["offered_events_per_s"])
        if target is not None:
            met = "met" if row["p99_ms"] <= target else "NOT met"
            rate = row["offered_events_per_s"]
            lines.append(f"open loop {rate:,}/s: p99 {row['p99_ms']} ms (target <= {target}: {met})")
    return lines
