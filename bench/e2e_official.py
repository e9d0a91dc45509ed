"""The official Pravega client's cases of ``bench/e2e.py`` (its docstring says what each measures)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from e2e_common import (
    SCOPE,
    check_read_back,
    check_stored,
    count_events,
    fall_result,
    latency_row,
    payload_bytes,
    payload_text,
    throughput_row,
    turn_order,
    windowed,
)
from e2e_system import Meter, Standalone

OFFICIAL_MAX_SEGMENTS = 64  # pravega 0.3.7 writes to streams of at most 64 segments (README)


# ---- the official client -----------------------------------------------------------------------------
def official_throughput(system: Standalone, seconds: float, inflight: int) -> dict[str, Any]:

    manager = system.official_manager()
    manager.create_scope(SCOPE)
    stream = "official4"
    manager.create_stream(SCOPE, stream, 4)
    writer = manager.create_writer(SCOPE, stream, inflight)
    payload = payload_bytes()
    keys = [f"key-{k}" for k in range(100)]
    write = writer.write_event_bytes

    flushed = 0.0

    def run(for_s: float) -> int:
        nonlocal flushed
        deadline = time.perf_counter() + for_s
        n = 0
        while time.perf_counter() < deadline:
            for _ in range(1000):
                write(payload, keys[n % 100])
                n += 1
        flushed = time.perf_counter()
        writer.flush()
        flushed = time.perf_counter() - flushed
        return n

    warm = run(min(0.5, seconds / 4))
    meter = Meter(system)
    count = run(seconds)
    measured = meter.done()
    row = throughput_row("official", f"write_event_bytes, {inflight:,} in flight", stream, 4, 100, count, measured)
    row["flush_s"] = round(flushed, 2)
    row["max_inflight_events"] = inflight
    row.update(asyncio.run(count_events(system.uri, stream, system.client_config)))
    check_read_back(row, warm + count)
    return row


def official_fall(
    system: Standalone, segment_counts: list[int], slices: int, slice_s: float, inflight: int
) -> dict[str, Any]:
    """``ours_fall`` for the official client (``write_event_bytes`` as in ``official_throughput``, 1,000 keys),
    over the same segment counts capped at ``OFFICIAL_MAX_SEGMENTS``."""

    counts = sorted({min(count, OFFICIAL_MAX_SEGMENTS) for count in segment_counts})
    manager = system.official_manager()
    manager.create_scope(SCOPE)
    keys = [f"key-{k}" for k in range(1000)]
    payload = payload_bytes()
    writers = {}
    for count in counts:
        manager.create_stream(SCOPE, f"officialfall{count}", count)
        writers[count] = manager.create_writer(SCOPE, f"officialfall{count}", inflight)
        for key in keys:
            writers[count].write_event_bytes(payload, key)
        writers[count].flush()
    events = dict.fromkeys(counts, 0)
    seconds = dict.fromkeys(counts, 0.0)
    for count in turn_order(counts, slices):
        write = writers[count].write_event_bytes
        started = time.perf_counter()
        n = events[count]
        while time.perf_counter() < started + slice_s:
            for _ in range(1000):
                write(payload, keys[n % 1000])
                n += 1
        writers[count].flush()
        events[count] = n
        seconds[count] += time.perf_counter() - started
    for count in counts:
        stream = f"officialfall{count}"
        asyncio.run(check_stored(system.uri, stream, events[count] + len(keys), system.client_config))
    return fall_result("official", f"write_event_bytes, {inflight:,} in flight", slices, slice_s, events, seconds)


async def official_latency(system: Standalone, seconds: float, window: int) -> dict[str, Any]:

    manager = system.official_manager()
    stream = f"officiallat{window}"
    manager.create_stream(SCOPE, stream, 4)
    writer = manager.create_writer(SCOPE, stream, 0)  # its futures complete on the ack (window 1: ~3 ms)
    payload = payload_text()
    keys = [f"key-{k}" for k in range(100)]

    async def submit(i: int) -> asyncio.Future[Any]:
        return writer.write_event_async(payload, keys[i % 100])

    warm = len(await windowed(submit, min(0.5, seconds / 4), window))
    meter = Meter(system)
    latencies = await windowed(submit, seconds, window)
    row = latency_row("official", window, latencies, meter.done())
    row["stream"] = stream
    row.update(await count_events(system.uri, stream, system.client_config))
    check_read_back(row, warm + len(latencies))
    return row
