"""What a segment store's own metrics say about a span of a benchmark: where an append's time went on the server.

:func:`server_view` reads the segment store's ``/metrics`` (Prometheus text): the histograms of append latency
(submission to acknowledgement, ``segstore_append_latency_seconds``) and of Tier-1 writes
(``segstore_tier1_write_latency_seconds``, every container), the event loop's stalls by cause
(``segstore_loop_stall_seconds``) and the timed activities (``segstore_activity_seconds``: fsyncs, Parquet,
flushes, ...). :func:`span` gives what happened between two views: per histogram the upper bound of the bucket that
holds its p50, p99 and p99.9 (the resolution of the buckets), and per stall cause and activity the count and the
seconds.
"""

from __future__ import annotations

import urllib.request
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

HISTOGRAMS = {"append": "segstore_append_latency_seconds", "tier1_write": "segstore_tier1_write_latency_seconds"}
COUNTED = {"stall": "segstore_loop_stall_seconds", "activity": "segstore_activity_seconds"}


@dataclass
class View:
    """Cumulative bucket counts per histogram (summed over labels) and (count, seconds) per stall cause/activity."""

    buckets: dict[str, dict[float, float]] = field(default_factory=dict)
    counted: dict[str, dict[str, tuple[float, float]]] = field(default_factory=dict)


def server_view(metrics_port: int) -> View:
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=30) as response:
        text = response.read().decode()
    view = View()
    names = {metric: key for key, metric in HISTOGRAMS.items()}
    counted = {metric: key for key, metric in COUNTED.items()}
    for family in text_string_to_metric_families(text):
        if family.name in names:
            buckets = view.buckets.setdefault(names[family.name], {})
            for sample in family.samples:
                if sample.name.endswith("_bucket"):
                    bound = float(sample.labels["le"])
                    buckets[bound] = buckets.get(bound, 0.0) + sample.value
        elif family.name in counted:
            per_cause = view.counted.setdefault(counted[family.name], {})
            for sample in family.samples:
                cause = sample.labels.get("cause", "")
                count, seconds = per_cause.get(cause, (0.0, 0.0))
                if sample.name.endswith("_count"):
                    per_cause[cause] = (sample.value, seconds)
                elif sample.name.endswith("_sum"):
                    per_cause[cause] = (count, sample.value)
    return view


def _quantile_bound(before: dict[float, float], after: dict[float, float], q: float) -> float | None:
    """The upper bound (s) of the bucket holding quantile ``q`` of the observations between the two views."""
    bounds = sorted(after)
    total = after.get(float("inf"), 0.0) - before.get(float("inf"), 0.0)
    if total <= 0:
        return None
    for bound in bounds:
        if after[bound] - before.get(bound, 0.0) >= q * total:
            return bound
    return None


def span(before: View, after: View) -> dict[str, Any]:
    """What happened between two views (module docstring); times in ms."""
    out: dict[str, Any] = {}
    for key in HISTOGRAMS:
        b, a = before.buckets.get(key, {}), after.buckets.get(key, {})
        count = a.get(float("inf"), 0.0) - b.get(float("inf"), 0.0)
        row: dict[str, Any] = {"count": int(count)}
        for q in (0.5, 0.99, 0.999):
            bound = _quantile_bound(b, a, q)
            row[f"p{q * 100:g}_le_ms"] = None if bound is None else (bound * 1000 if bound != float("inf") else "inf")
        out[key] = row
    for key in COUNTED:
        b, a = before.counted.get(key, {}), after.counted.get(key, {})
        out[key] = {
            cause: {
                "count": int(count - b.get(cause, (0.0, 0.0))[0]),
                "ms": round((s - b.get(cause, (0.0, 0.0))[1]) * 1000, 1),
            }
            for cause, (count, s) in sorted(a.items())
            if count > b.get(cause, (0.0, 0.0))[0]
        }
    return out
