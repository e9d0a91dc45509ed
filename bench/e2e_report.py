"""The printed report of ``bench/e2e.py`` (its tables, the fall ratio, the profile, the problems found)."""

from __future__ import annotations

from typing import Any

from benchlib import table
from e2e_open_loop import open_loop_verdicts

CPU_COLUMNS = [
    ("cpu_client", "cpu cli"),
    ("cpu_controller", "cpu ctl"),
    ("cpu_segmentstore", "cpu ss"),
    ("cpu_segmentstore_loop", "ss loop"),
    ("cpu_zookeeper", "cpu zk"),
    ("cpu_other", "cpu other"),
    ("peak_rss_mb_client", "cli peak MB"),
    ("peak_rss_mb_controller", "ctl peak MB"),
    ("peak_rss_mb_segmentstore", "ss peak MB"),
]


def report(results: dict[str, Any], event_bytes: int, fall_ratio: float) -> None:
    """Print the tables and the findings of one ``bench/e2e.py`` run."""
    table(
        f"1-2. throughput, {event_bytes} B events, acknowledged (flush) and read back (cpu = cores busy)",
        results["throughput"],
        [("client", "client"), ("producer", "producer"), ("segments", "segments"), ("round", "round"),
         ("events", "events"),
         ("events_per_s", "events/s"), ("mb_per_s", "MB/s"), ("flush_s", "flush s"), *CPU_COLUMNS,
         ("avg_block_bytes", "block B"), ("pool_connections", "conns"),
         ("read_events_per_s", "read ev/s")],
    )  # fmt: skip
    table(
        f"latency, {event_bytes} B events, bounded window of outstanding events, 4 segments (ms)",
        results["latency"],
        [("client", "client"), ("window", "window"), ("events", "events"), ("events_per_s", "events/s"),
         ("p50_ms", "p50"), ("p99_ms", "p99"), ("p99_9_ms", "p99.9"), ("max_ms", "max"), *CPU_COLUMNS],
    )  # fmt: skip
    if results.get("open_loop"):
        table(
            f"open-loop latency, {event_bytes} B events offered at a fixed rate, 4 segments, 100 keys (ms)",
            results["open_loop"],
            [("client", "client"), ("offered_events_per_s", "offered ev/s"), ("events", "events"), ("p50_ms", "p50"),
             ("p99_ms", "p99"), ("p99_9_ms", "p99.9"), ("max_ms", "max"), *CPU_COLUMNS],
        )  # fmt: skip
        for line in open_loop_verdicts(results["open_loop"]):
            print(line)
    ratios = results.get("ours_largest_over_smallest", {})
    if ratios:
        said = ", ".join(f"yield every {k}: {v}" if k != "0" else f"no yield: {v}" for k, v in ratios.items())
        print(f"\nours, median events/s over {results['rounds']} rounds of the most segments / of the fewest: "
              f"{said}")  # fmt: skip
        medians = ", ".join(f"{k}: {v:,}" for k, v in results.get("ours_median_events_per_s", {}).items())
        print(f"ours, median events/s by yield every / segments: {medians}")
    for fall in results.get("fall", []):
        rates = ", ".join(f"{segments} segments {rate:,}" for segments, rate in fall["events_per_s"].items())
        verdict = "falls" if fall["ratio"] < fall_ratio else "holds"
        turns = f"{fall['slices']} turns of {fall['slice_s']} s each"
        print(f"{fall['client']}, {fall['producer']}, interleaved ({turns}): {rates} events/s; "
              f"most / fewest {fall['ratio']} ({verdict}: the line is {fall_ratio})")  # fmt: skip
    profile = results.get("profile")
    if profile:
        row = profile["case"]
        cpu = f"cpu cli {row['cpu_client']}, ss {row['cpu_segmentstore']}, ss loop {row['cpu_segmentstore_loop']}"
        what = f"ours, {row['producer']}, {row['segments']} segments"
        under = "without cProfile" if profile["client"] is None else "under cProfile"
        print(f"\nprofiled: {what}, {row['events_per_s']:,} events/s {under} ({cpu})")
        if profile["client"] is not None:
            columns = [("self_s", "self s"), ("cum_s", "cum s"), ("calls", "calls"), ("function", "function")]
            table("client (cProfile), by self time", profile["client"]["by_self"], columns)
        server = profile["segmentstore"]
        if server:
            busy = [("busy", "busy"), ("thread", "thread")]
            table("segment store threads (py-spy busy share)", server["threads"], busy)
            table("segment store event loop, % of its samples, by self", server["event_loop"]["by_self"],
                  [("percent", "%"), ("function", "function")])  # fmt: skip
            table("segment store, all threads, % of all samples, by self", server["all_threads"]["by_self"],
                  [("percent", "%"), ("function", "function")])  # fmt: skip
    for source, found in results["problems"].items():
        print(f"\n{source}: {found['count']} warning/error lines")
        for line in found["first"]:
            print(f"  {line[:200]}")
        if found.get("traceback"):
            print(f"  ... {found['traceback'][-1][:200]}")
