"""What overlapped the slowest acknowledgements of ``bench/wire.py``'s latency case, and each process's memory.

The segment store's metrics port serves ``/stalls`` (``segstore_shared.loop_stalls``): its event loop's recent
stalls (a 5 ms timer late by 2 ms or more), each with the activity that overlapped it most, and its recent
activity spans (GC pauses, fsyncs, Parquet encoding, Tier-1 group commits, storage writer flushes, metadata
checkpoints; those of 0.5 ms or more). The bench client runs the same recorder on its own loop. Timestamps are
``perf_counter`` seconds, ``CLOCK_MONOTONIC`` in both processes, so an event's span from its scheduled time to its
acknowledgement can be compared with them.

:func:`slow_overlaps` answers, for the slowest 1 % of a case's events (latency at or above its p99): which share
of them overlapped a server loop stall of each cause, a client loop stall, or a long (``>= long_s``) activity span
of each kind, against the share of *all* the case's events that did (the base rate: a cause that overlaps
everything explains nothing). ``lift`` = slow share / base share. ``none`` is the slow events nothing overlapped.

Memory: :func:`rss_mb` reads ``VmRSS`` and ``VmHWM`` (peak) of a process from ``/proc/<pid>/status``.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
from prometheus_client.parser import text_string_to_metric_families

LONG_SPAN_S = 0.002
"""An activity span counts in the breakdown from this long (shorter ones are the steady background)."""


def fetch_stalls(metrics_port: int, since: float) -> dict[str, Any]:
    """The segment store's ``/stalls`` document since ``since`` (``perf_counter`` seconds)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/stalls?since={since}", timeout=30) as response:
        document: dict[str, Any] = json.loads(response.read())
    return document


def activity_totals(metrics_port: int) -> dict[str, tuple[float, float]]:
    """Count and seconds so far of every activity (``segstore_activity_seconds{cause}``) and GC generation
    (``segstore_gc_pause_seconds{generation}``, as ``gc<generation>``) on the segment store's /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=30) as response:
        text = response.read().decode()
    totals: dict[str, list[float]] = {}
    for family in text_string_to_metric_families(text):
        if family.name not in ("segstore_activity_seconds", "segstore_gc_pause_seconds"):
            continue
        for sample in family.samples:
            name = sample.labels.get("cause") or f"gc{sample.labels.get('generation')}"
            if sample.name.endswith("_count"):
                totals.setdefault(name, [0.0, 0.0])[0] = sample.value
            elif sample.name.endswith("_sum"):
                totals.setdefault(name, [0.0, 0.0])[1] = sample.value
    return {name: (count, seconds) for name, (count, seconds) in totals.items()}


def activity_during(before: dict[str, tuple[float, float]], after: dict[str, tuple[float, float]]) -> dict[str, str]:
    """``"<count> / <ms> ms"`` of each activity between two :func:`activity_totals`."""
    out = {}
    for name, (count, seconds) in sorted(after.items()):
        was = before.get(name, (0.0, 0.0))
        if count > was[0]:
            out[name] = f"{int(count - was[0])} / {(seconds - was[1]) * 1000:.0f} ms"
    return out


def cache_used_mb(metrics_port: int) -> float:
    """The segment store's read cache in use (``segstore_cache_used_bytes`` of its /metrics), in MB."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=30) as response:
        for line in response.read().decode().splitlines():
            if line.startswith("segstore_cache_used_bytes "):
                return round(float(line.split()[1]) / 1e6, 1)
    raise AssertionError("no segstore_cache_used_bytes on /metrics")


def rss_mb(pid: int) -> dict[str, float]:
    """``rss_mb`` (now) and ``peak_rss_mb`` (high-water mark) of process ``pid``; {} if it is gone."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return {}
    fields = {line.split(":")[0]: line.split()[1] for line in lines if line.startswith(("VmRSS", "VmHWM"))}
    return {"rss_mb": round(int(fields["VmRSS"]) / 1024, 1), "peak_rss_mb": round(int(fields["VmHWM"]) / 1024, 1)}


def _intervals(document: dict[str, Any], prefix: str, long_s: float) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Named interval sets (starts, ends) of one process's document: its stalls by cause, its long spans."""
    named: dict[str, list[tuple[float, float]]] = {}
    for stall in document["stalls"]:
        named.setdefault(f"{prefix} loop stall: {stall['cause']}", []).append(
            (stall["end"] - stall["lateness"], stall["end"])
        )
    for cause, start, end in document["spans"]:
        if end - start >= long_s:
            named.setdefault(f"{prefix} {cause} >= {long_s * 1000:g} ms", []).append((start, end))
    return {
        name: (np.asarray([s for s, _ in pairs]), np.asarray([e for _, e in pairs])) for name, pairs in named.items()
    }


def _overlapped(starts: np.ndarray, ends: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """For each event span ``[a, b]``, whether any interval ``[start, end]`` overlaps it: the intervals that start
    before ``b`` minus those that end by ``a`` (every one of which starts before ``b``)."""
    begun = np.searchsorted(np.sort(starts), b, side="left")
    over = np.searchsorted(np.sort(ends), a, side="right")
    return (begun - over) > 0


def slow_overlaps(
    scheduled: np.ndarray,
    acked: np.ndarray,
    server: dict[str, Any],
    client: dict[str, Any],
    long_s: float = LONG_SPAN_S,
) -> list[dict[str, Any]]:
    """Rows of the breakdown (see the module docstring), most frequent in the slow 1 % first."""
    latency = acked - scheduled
    slow = latency >= np.quantile(latency, 0.99, method="inverted_cdf")
    sets = {**_intervals(server, "srv", long_s), **_intervals(client, "cli", long_s)}
    rows: list[dict[str, Any]] = []
    any_slow = np.zeros(int(slow.sum()), dtype=bool)
    first, last = float(scheduled.min()), float(acked.max())
    for name, (starts, ends) in sets.items():
        inside = (ends > first) & (starts < last)
        if not inside.any():
            continue
        starts, ends = starts[inside], ends[inside]
        hit = _overlapped(starts, ends, scheduled, acked)
        slow_share = float(hit[slow].mean())
        base_share = float(hit.mean())
        if name.startswith(("srv loop stall", "cli loop stall")) or "gc" in name:
            any_slow |= hit[slow]
        rows.append(
            {
                "overlapped": name,
                "slow_pct": round(100 * slow_share, 1),
                "all_pct": round(100 * base_share, 1),
                "lift": round(slow_share / base_share, 1) if base_share else None,
                "count": int(inside.sum()),
                "total_ms": round(float((ends - starts).sum()) * 1000, 1),
                "max_ms": round(float((ends - starts).max()) * 1000, 1),
            }
        )
    rows.sort(key=lambda r: -float(r["slow_pct"]))
    rows.append(
        {
            "overlapped": "no loop stall, no GC pause",
            "slow_pct": round(100 * float((~any_slow).mean()), 1) if any_slow.size else None,
        }
    )
    return rows
