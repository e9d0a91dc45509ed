"""The event-loop stall recorder (segstore_shared.loop_stalls): stalls injected on a real loop are recorded with
their cause, and reach its Prometheus histograms and its ``/stalls`` document (on a real metrics port)."""

from __future__ import annotations

import asyncio
import gc
import json
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client import CollectorRegistry

from segstore_shared.loop_stalls import (
    BLOCKED,
    DESCHEDULED,
    LOOP_BUSY,
    Activity,
    LoopMetrics,
    LoopStallRecorder,
    Stall,
    stall_route,
    thread_cause,
)
from segstore_shared.metrics_http import MetricsServer

pytestmark = pytest.mark.unit

THRESHOLD_S = 0.005
STALL_S = 0.05


async def _stall_seen(recorder: LoopStallRecorder, after: float, deadline_s: float = 10.0) -> Stall:
    """The first stall seen after ``after`` (the loop keeps running: the recorder sees it on its next tick)."""
    deadline = time.perf_counter() + deadline_s
    while time.perf_counter() < deadline:
        for stall in recorder.stalls:
            if stall.end > after:
                return stall
        await asyncio.sleep(0.01)
    raise AssertionError(f"no stall recorded after {after}: {list(recorder.stalls)}")


def _block_the_loop(activity: Activity | None, cause: str) -> float:
    """Hold the loop thread for STALL_S, noted as ``cause`` when an activity log is given; returns the start."""
    started = time.perf_counter()
    time.sleep(STALL_S)  # the injected stall itself, not a synchronisation
    if activity is not None:
        activity.note(cause, started, time.perf_counter())
    return started


async def test_stall_with_noted_activity_is_recorded_with_its_cause() -> None:
    activity = Activity()
    registry = CollectorRegistry()
    recorder = LoopStallRecorder(activity, LoopMetrics(registry, "test"), threshold_s=THRESHOLD_S)
    recorder.start()
    try:
        await asyncio.sleep(0.02)
        started = _block_the_loop(activity, "checkpoint")
        stall = await _stall_seen(recorder, started)
    finally:
        recorder.stop()
    assert stall.cause == "checkpoint"
    assert stall.lateness >= STALL_S - recorder.interval_s - 0.001
    assert stall.window_start <= started < stall.end
    count = registry.get_sample_value("test_loop_stall_seconds_count", {"cause": "checkpoint"})
    assert count is not None and count >= 1
    assert (registry.get_sample_value("test_loop_lag_seconds_count") or 0) >= 1
    assert registry.get_sample_value("test_activity_seconds_count", {"cause": "checkpoint"}) == 1


async def test_stall_with_nothing_noted_is_what_the_loop_thread_did() -> None:
    recorder = LoopStallRecorder(Activity(), threshold_s=THRESHOLD_S)
    recorder.start()
    try:
        await asyncio.sleep(0.02)
        blocked = await _stall_seen(recorder, _block_the_loop(None, ""))
        await asyncio.sleep(0.02)
        started = time.perf_counter()
        while time.perf_counter() - started < STALL_S:  # Python work on the loop thread
            pass
        busy = await _stall_seen(recorder, started)
    finally:
        recorder.stop()
    assert (blocked.cause, blocked.thread) == (BLOCKED, BLOCKED)  # asleep: neither on a CPU nor runnable
    assert busy.cause in (LOOP_BUSY, DESCHEDULED)  # on a CPU, or runnable on a busy machine
    assert busy.cause == busy.thread


def test_thread_cause_with_each_account() -> None:
    assert thread_cause(0.05, on_cpu_s=0.045, waiting_s=0.001, idle_s=0.002) == LOOP_BUSY
    assert thread_cause(0.05, on_cpu_s=0.005, waiting_s=0.04, idle_s=0.002) == DESCHEDULED
    assert thread_cause(0.05, on_cpu_s=0.001, waiting_s=0.001, idle_s=0.002) == BLOCKED


async def test_stall_with_garbage_collection_is_gc() -> None:
    activity = Activity()
    registry = CollectorRegistry()
    activity.hook_gc()
    recorder = LoopStallRecorder(activity, LoopMetrics(registry, "test"), threshold_s=THRESHOLD_S)
    recorder.start()
    try:
        await asyncio.sleep(0.02)
        cycles = []
        for _ in range(400_000):  # enough cyclic garbage for a full collection to take tens of milliseconds
            node: list[object] = []
            node.append(node)
            cycles.append(node)
        del cycles, node
        started = time.perf_counter()
        gc.collect()
        duration = time.perf_counter() - started
        assert duration >= THRESHOLD_S * 2, f"a collection of 400,000 cycles took only {duration * 1000:.1f} ms"
        stall = await _stall_seen(recorder, started)
    finally:
        recorder.stop()
        activity.unhook_gc()
    assert stall.cause == "gc"
    assert (registry.get_sample_value("test_gc_pause_seconds_count", {"generation": "2"}) or 0) >= 1
    document = recorder.document(since=started - 1)
    (seen,) = [s for s in document["stalls"] if s["end"] == stall.end]
    assert seen["overlap"]["gc"] >= duration * 0.9
    assert any(cause == "gc" and start >= started - 0.001 for cause, start, _ in document["spans"])


async def test_stalls_document_on_a_metrics_port() -> None:
    activity = Activity()
    registry = CollectorRegistry()
    recorder = LoopStallRecorder(activity, LoopMetrics(registry, "test"), threshold_s=THRESHOLD_S)
    server = MetricsServer(registry, lambda: True, documents={"/stalls": stall_route(recorder)})
    await server.start("127.0.0.1", 0)
    recorder.start()
    try:
        await asyncio.sleep(0.02)
        started = _block_the_loop(activity, "parquet_encode")
        await _stall_seen(recorder, started)
        port = server.endpoint[1]

        def get(path: str) -> tuple[int, bytes]:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as response:
                    return response.status, response.read()
            except urllib.error.HTTPError as error:
                return error.code, error.read()

        status, body = await asyncio.to_thread(get, f"/stalls?since={started - 1}")
        assert status == 200
        document = json.loads(body)
        assert document["ticks"] >= 1
        after = [s for s in document["stalls"] if s["end"] > started]  # a loaded machine may stall the loop more
        assert after[0]["cause"] == "parquet_encode" and after[0]["overlap"]["parquet_encode"] > 0
        assert after[0]["thread"] == BLOCKED
        assert [span[0] for span in document["spans"]] == ["parquet_encode"]
        status, body = await asyncio.to_thread(get, f"/stalls?since={time.perf_counter() + 60}")
        assert status == 200 and json.loads(body)["stalls"] == []
        status, body = await asyncio.to_thread(get, "/stalls?since=soon")
        assert status == 400 and b"soon" in body
    finally:
        recorder.stop()
        await server.stop()


def test_recorder_with_bad_interval_names_it() -> None:
    with pytest.raises(ValueError, match="interval_s"):
        LoopStallRecorder(Activity(), interval_s=0)
    with pytest.raises(ValueError, match="threshold_s"):
        LoopStallRecorder(Activity(), threshold_s=-1)
