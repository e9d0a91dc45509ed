"""The ``latency`` case of ``bench/wire.py``: an open-loop producer of 100 B events, and what overlapped its slowest
acknowledgements (``bench/wire_stalls.py``: the segment store's and the client's event-loop stalls and activity).

After the 100,000 events/s case, :func:`idle_memory` watches the segment store's RSS while nothing is written (is
the read cache's memory given back?).
"""

from __future__ import annotations

import asyncio
import functools
import time
from typing import Any

import numpy as np
from wire_common import check_length, drain, new_segment, payloads
from wire_server import Meter, ServerProcess
from wire_stalls import activity_during, activity_totals, cache_used_mb, fetch_stalls, rss_mb, slow_overlaps

from segment_store.client import SegmentClient
from segstore_shared.loop_stalls import LoopStallRecorder

IDLE_RSS_MB = 300
"""The segment store's RSS when idle should fall below this (issue 39, item 6)."""


def _stamp(times: dict[int, float], index: int, _future: asyncio.Future[None]) -> None:
    times[index] = time.perf_counter()


async def case_latency(
    client: SegmentClient, server: ServerProcess, stalls: LoopStallRecorder, rate: int, seconds: float
) -> dict[str, Any]:
    """One open-loop run at ``rate`` events/s; ``stalls`` records the client's loop (this process)."""
    segment = new_segment()
    await client.create_segment(segment)
    events = payloads(100, 8192)
    warmup = min(0.5, seconds / 4)
    total = round((seconds + warmup) * rate)
    first_measured = round(warmup * rate)
    firsts: list[int] = []  # per write_many: index of its first event, its size, write time and ack time
    counts: list[int] = []
    written: list[float] = []
    async with client.writer(segment) as writer:
        activity_before = await asyncio.to_thread(activity_totals, server.metrics_port)
        meter = Meter(server)
        start = time.perf_counter() + 0.002
        since = start - 0.1
        ack_at: dict[int, float] = {}
        futures: list[asyncio.Future[None]] = []
        sent = 0
        while sent < total:
            now = time.perf_counter()
            due = min(total, int((now - start) * rate) + 1) if now >= start else 0
            if due > sent:
                batch = [events[i % len(events)] for i in range(sent, due)]
                future = await writer.write_many(batch)
                future.add_done_callback(functools.partial(_stamp, ack_at, len(firsts)))
                firsts.append(sent)
                counts.append(due - sent)
                written.append(now)
                futures.append(future)
                sent = due
            await asyncio.sleep(0.001)
        await writer.flush()
        await asyncio.gather(*futures)
        measured = meter.done()
    await check_length(client, segment, total, 100)
    acked = [ack_at[i] for i in range(len(firsts))]
    first = np.asarray(firsts, dtype=np.int64)
    count = np.asarray(counts, dtype=np.int64)
    numbers = np.arange(total, dtype=np.int64)
    owner = np.repeat(np.arange(len(firsts)), count)
    scheduled = start + numbers / rate
    ack = np.asarray(acked)[owner]
    write = np.asarray(written)[owner]
    keep = numbers >= first_measured
    latency, lag, service = (ack - scheduled)[keep], (write - scheduled)[keep], (ack - write)[keep]
    server_stalls = await asyncio.to_thread(fetch_stalls, server.metrics_port, since)
    activity = activity_during(activity_before, await asyncio.to_thread(activity_totals, server.metrics_port))
    client_stalls = stalls.document(since)
    overlaps = slow_overlaps(scheduled[keep], ack[keep], server_stalls, client_stalls)
    assert int(first[-1] + count[-1]) == total

    def ms(values: np.ndarray, q: float) -> float:
        return round(float(np.quantile(values, q / 100, method="inverted_cdf")) * 1000, 2)

    return {
        "offered_events_per_s": rate,
        "events_measured": int(np.count_nonzero(keep)),
        "writes": len(firsts),
        "events_per_write": round(total / len(firsts), 1),
        "acked_events_per_s": round(total / measured["seconds"]),
        **measured,
        "p50_ms": ms(latency, 50),
        "p99_ms": ms(latency, 99),
        "p99_9_ms": ms(latency, 99.9),
        "max_ms": ms(latency, 100),
        "lag_p99_ms": ms(lag, 99),
        "service_p50_ms": ms(service, 50),
        "service_p99_ms": ms(service, 99),
        "srv_stalls": len(server_stalls["stalls"]),
        "srv_stall_ms": round(sum(s["lateness"] for s in server_stalls["stalls"]) * 1000, 1),
        "cli_stalls": len(client_stalls["stalls"]),
        "cli_stall_ms": round(sum(s["lateness"] for s in client_stalls["stalls"]) * 1000, 1),
        "slow_1pct_overlaps": overlaps,
        "srv_activity": activity,
        "drain_s": await drain(client),
    }


async def idle_memory(server: ServerProcess, seconds: float) -> dict[str, Any]:
    """The segment store's RSS while idle for up to ``seconds`` (polled every 0.5 s, stops once under
    :data:`IDLE_RSS_MB`): at the start, the lowest seen, and when it first fell under."""
    started = time.perf_counter()
    first = lowest = rss_mb(server.pid)["rss_mb"]
    under_s = 0.0 if first < IDLE_RSS_MB else None
    while under_s is None and time.perf_counter() - started < seconds:
        await asyncio.sleep(0.5)
        lowest = min(lowest, rss_mb(server.pid)["rss_mb"])
        if lowest < IDLE_RSS_MB:
            under_s = round(time.perf_counter() - started, 1)
    logs = (server.log_path, server.data_dir / "segmentstore.log")  # its output; its log file (--log-file default)
    log = "".join(path.read_text(errors="replace") for path in logs if path.exists())
    return {
        # with --server-arg=--log-level=info: what each step of returning memory gave (RSS MB by step)
        "srv_memory_releases": [line.split("idle: ", 1)[-1] for line in log.splitlines() if "memory returned" in line],
        "srv_cache_used_mb": await asyncio.to_thread(cache_used_mb, server.metrics_port),
        "srv_rss_at_idle_mb": first,
        "srv_rss_lowest_mb": lowest,
        "watched_s": round(time.perf_counter() - started, 1),
        f"under_{IDLE_RSS_MB}_mb_after_s": under_s,
        "srv_peak_rss_mb": rss_mb(server.pid)["peak_rss_mb"],
        "enc_rss_mb": round(sum(rss_mb(pid).get("rss_mb", 0.0) for pid in server.helpers()), 1),  # its workers
    }
