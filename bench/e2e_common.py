"""Pieces shared by the cases of ``bench/e2e.py``: the events written, our writers' set-up, read-back checks, result
rows and the windowed latency loop."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import random
import string
import time
from collections.abc import Awaitable, Callable
from typing import Any

from benchlib import mb_per_s, percentile

from controller_client import (
    ControllerClient,
    ControllerClientConfig,
    EventStreamWriter,
    ScalingPolicy,
    StreamConfiguration,
    StreamManager,
)

EVENT_BYTES = 100
FRAME_HEADER = 8
SCOPE = "e2e"


def payload_bytes(seed: int = 7) -> bytes:
    return random.Random(seed).randbytes(EVENT_BYTES)


def payload_text(seed: int = 7) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(EVENT_BYTES))


async def ours_writer(
    controller: ControllerClient, stream: str, segments: int, keys: list[str]
) -> tuple[StreamManager, EventStreamWriter]:
    """A stream of ``segments``, a manager (default client config) and a writer that wrote and flushed one
    event per key (every session set up). Returns (manager, writer)."""
    manager = StreamManager(controller)
    try:
        await manager.create_stream(SCOPE, stream, StreamConfiguration(ScalingPolicy.fixed(segments)))
        writer = await manager.create_writer(SCOPE, stream)
        payload = payload_bytes()
        for key in keys:
            await writer.write_event(payload, key)
        await writer.flush()
    except BaseException:
        with contextlib.suppress(Exception):
            await manager.close()
        raise
    return manager, writer


async def count_events(uri: str, stream: str, config: ControllerClientConfig | None = None) -> dict[str, Any]:
    """Read ``SCOPE/stream`` from the head to its tail cut with our reader; events, sizes, rate."""
    async with await ControllerClient.connect(uri, config) as controller, StreamManager(controller) as manager:
        started = time.perf_counter()
        end = await manager.tail_cut(SCOPE, stream)
        count = wrong_size = 0
        async with manager.create_reader(SCOPE, stream, end=end) as reader:
            async for event in reader:
                count += 1
                wrong_size += len(event.data) != EVENT_BYTES
        elapsed = time.perf_counter() - started
    if wrong_size:
        raise AssertionError(f"{SCOPE}/{stream}: {wrong_size} of {count} events are not {EVENT_BYTES} B")
    return {"read_events": count, "read_events_per_s": round(count / elapsed)}


async def check_stored(uri: str, stream: str, acknowledged: int, config: ControllerClientConfig | None = None) -> None:
    """``SCOPE/stream`` holds exactly ``acknowledged`` events of ``EVENT_BYTES`` (its segments' lengths, framed)."""
    async with await ControllerClient.connect(uri, config) as controller, StreamManager(controller) as manager:
        stored = sum((await manager.tail_cut(SCOPE, stream)).positions.values())
    if stored != acknowledged * (EVENT_BYTES + FRAME_HEADER):
        expected = acknowledged * (EVENT_BYTES + FRAME_HEADER)
        raise AssertionError(f"{SCOPE}/{stream}: {expected} bytes of events acknowledged, {stored} stored")


def turn_order(counts: list[int], turns: int) -> list[int]:
    """The writers' turns in an interleaved fall measurement: every count once per turn, the order reversed
    every other turn, so a drift of the machine's speed hits every count alike."""
    return [count for turn in range(turns) for count in (counts if turn % 2 == 0 else counts[::-1])]


def fall_result(
    client: str, producer: str, turns: int, turn_s: float, events: dict[int, int], seconds: dict[int, float]
) -> dict[str, Any]:
    """The row of one interleaved fall measurement: events/s per segment count, most over fewest."""
    rates = {count: events[count] / seconds[count] for count in events}
    counts = sorted(rates)
    return {
        "client": client,
        "producer": producer,
        "slices": turns,
        "slice_s": turn_s,
        "events_per_s": {str(count): round(rate) for count, rate in rates.items()},
        "ratio": round(rates[counts[-1]] / rates[counts[0]], 3),
    }


def check_read_back(row: dict[str, Any], written: int) -> None:
    if row["read_events"] != written:
        raise AssertionError(f"{row['stream']}: {written} events acknowledged, {row['read_events']} read back")


def throughput_row(
    client: str, producer: str, stream: str, segments: int, keys: int, events: int, measured: dict[str, float]
) -> dict[str, Any]:
    return {
        "client": client,
        "producer": producer,
        "stream": stream,
        "segments": segments,
        "keys": keys,
        "events": events,
        **measured,
        "events_per_s": round(events / measured["seconds"]),
        "mb_per_s": mb_per_s(events * EVENT_BYTES, measured["seconds"]),
    }


async def windowed(submit: Callable[[int], Awaitable[asyncio.Future[Any]]], seconds: float, window: int):
    """Submit events while fewer than ``window`` are outstanding, for ``seconds``; wait for all. Returns
    the latencies (seconds from submit to the loop seeing the future done), ascending."""
    latencies: list[float] = []
    failures: list[BaseException] = []
    outstanding = 0
    room = asyncio.Event()

    def done(submitted: float, future: asyncio.Future[Any]) -> None:
        nonlocal outstanding
        latencies.append(time.perf_counter() - submitted)
        outstanding -= 1
        room.set()
        if not future.cancelled() and future.exception() is not None:
            failures.append(future.exception())  # type: ignore[arg-type]

    deadline = time.perf_counter() + seconds
    i = 0
    while time.perf_counter() < deadline:
        if outstanding >= window:
            room.clear()
            await room.wait()
            continue
        submitted = time.perf_counter()
        future = await submit(i)
        outstanding += 1
        future.add_done_callback(functools.partial(done, submitted))
        i += 1
    while outstanding:
        room.clear()
        await room.wait()
    if failures:
        raise RuntimeError(f"{len(failures)} of {i} events failed; first: {failures[0]!r}")
    return sorted(latencies)


def latency_row(client: str, window: int, latencies: list[float], measured: dict[str, float]) -> dict[str, Any]:
    def ms(q: float) -> float:
        return round(percentile(latencies, q) * 1000, 2)

    return {"client": client, "window": window, "segments": 4, "keys": 100, "events": len(latencies),
            **measured, "events_per_s": round(len(latencies) / measured["seconds"]),
            "p50_ms": ms(50), "p99_ms": ms(99), "p99_9_ms": ms(99.9), "max_ms": ms(100)}  # fmt: skip
