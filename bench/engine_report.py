"""Targets, verdicts and tables of ``bench/engine.py``."""

from __future__ import annotations

from typing import Any

from benchlib import table

TARGETS = {
    "throughput_100B_events_per_s": 1_000_000,
    "throughput_10KB_mb_per_s": 350,
    "latency_100k_p99_ms": 10,
    "replay_mb_per_s": 200,
}


def verdicts(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Each target the run measured: the value, the target and whether it was met."""
    out = []

    def check(name: str, value: float, target: float, higher_is_better: bool = True) -> None:
        met = value >= target if higher_is_better else value <= target
        out.append(
            {
                "target": name,
                "value": value,
                "goal": f"{'>=' if higher_is_better else '<='} {target:,}",
                "met": "yes" if met else "NO",
            }
        )

    by_size = {r["event_bytes"]: r for r in results.get("throughput", [])}
    if 100 in by_size:
        check("events/s, 100 B events", by_size[100]["events_per_s"], TARGETS["throughput_100B_events_per_s"])
        check(
            "  same, 2nd half of the run",
            by_size[100]["second_half_events_per_s"],
            TARGETS["throughput_100B_events_per_s"],
        )
    if 10_000 in by_size:
        check("MB/s, 10 KB events", by_size[10_000]["mb_per_s"], TARGETS["throughput_10KB_mb_per_s"])
        check(
            "  same, 2nd half of the run", by_size[10_000]["second_half_mb_per_s"], TARGETS["throughput_10KB_mb_per_s"]
        )
    for r in results.get("latency", []):
        if r["offered_events_per_s"] == 100_000:
            check("p99 ms at 100,000 events/s", r["p99_ms"], TARGETS["latency_100k_p99_ms"], higher_is_better=False)
    for r in results.get("replay", []):
        check(f"replay MB/s ({r['page_cache']}, start())", r["start_mb_per_s"], TARGETS["replay_mb_per_s"])
    return out


TABLES = {
    "throughput": (
        "1. throughput, the storage writer flushing to Tier-2 concurrently",
        "event_bytes=event B, in_flight=in flight, events_per_s=events/s, mb_per_s=MB/s, "
        "second_half_events_per_s=2nd half ev/s, second_half_mb_per_s=2nd half MB/s, tier2_mb_flushed=T2 MB, "
        "tier2_mb_per_s=T2 MB/s, tier2_chunks=chunks, unflushed_mb_at_end=unflushed MB, drain_s=drain s",
    ),
    "latency": (
        "2. append latency (ms), open loop, 1 append/ms, from scheduled send to ack",
        "offered_events_per_s=offered ev/s, events_per_append=ev/append, p50_ms=p50, p99_ms=p99, p99_9_ms=p99.9, "
        "max_ms=max, service_p99_ms=service p99, send_lag_p99_ms=send lag p99, acked_events_per_s=acked ev/s",
    ),
    "replay": (
        "3. Tier-1 replay on start()",
        "page_cache=pages, mb_replayed=MB, replay_s=replay s, replay_mb_per_s=replay MB/s, start_s=start s, "
        "start_mb_per_s=start MB/s",
    ),
    "flush": (
        "4. Tier-2 flush: flush_to_storage() of data appended while the writer waited",
        "event_bytes=event B, mb=MB, segments=segments, flush_s=flush s, flush_mb_per_s=MB/s, "
        "flush_events_per_s=events/s, chunks=chunks, tier2_disk_mb=disk MB, append_mb_per_s=append MB/s",
    ),
    "read": (
        "5. reads, 1 MiB at a time",
        "event_bytes=event B, segment_mb=segment MB, cache_read_mb=cache MB read, cache_mb_per_s=cache MB/s, "
        "tier2_read_mb=T2 MB read, tier2_mb_per_s=T2 MB/s, cache_read_tier2_mb=T2 MB in cache pass",
    ),
    "targets": ("targets", "target=target, value=value, goal=goal, met=met"),
}
"""Per case: the table's title and its columns as ``key=header`` pairs."""


def report(results: dict[str, Any]) -> None:
    for case, rows in [*results.items(), ("targets", verdicts(results))]:
        title, spec = TABLES[case]
        if rows:
            table(title, rows, [(key, header) for key, _, header in (c.partition("=") for c in spec.split(", "))])
