"""Does a long-running Spark streaming query's micro-batch planning stay as cheap as a fresh one's?

Simulated, in memory (no segment store, no controller, no Spark): a stream of 4-6 segments scaled every hour for
a year (8,760 scales, splits and merges alternating as the segment count asks) whose writers' times make a million
watermarks (114 an hour, each cut at the current segments), and a ``watermarkColumn`` query that planned one
micro-batch an hour all along. A fake connection answers the planner's segment statuses and successors from the
simulated history; the mark segment is the watermarks' real bytes. Then both the aged query and a fresh one (a new
stream, nothing behind it) plan ``--batches`` micro-batches of the same shape (every segment written, one new
watermark) and the table shows the per-micro-batch cost of what the driver runs for it: ``advance`` (latestOffset),
``plan_ranges`` and the watermark thresholds (partitions), with the successor cache and
:class:`~pravega_spark.read.watermark_cache.WatermarkCache` the source keeps between batches; and, for comparison,
the full re-read of the mark segment the driver did before (decode every watermark, scan them all per segment).
Costs are the driver thread's CPU time (single-threaded, in memory: robust to whatever else the machine runs);
the wall p50 is shown too.

    .venv/bin/python bench/long_running.py [--quick] [--batches 300] [--out PATH]

About 3.5 minutes of CPU (110 s making the year's history, 100 s its one full re-read) and 250 MB of memory;
``--quick`` simulates a month (720 scales, 82,080 watermarks) in about 15 s. Writes JSON (default
``bench/results/long_running.json``). The target: the aged query's micro-batch within 1.2x of the fresh one's.

Measured (2 CPUs, shared): fresh 318 us, aged 347 us of CPU per micro-batch (p50; 1.09x); the full re-read of the
year's 999,000 watermarks (233 MB) that every micro-batch did before took 98.6 s.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchlib import table

from controller_client.model import segment_id
from controller_client.watermarks import SegmentWithRange, Watermark, decode_watermark_events
from pravega_spark.offsets import ReadState
from pravega_spark.read.planning import LiveCatalog, advance, forget_successors, plan_ranges
from pravega_spark.read.watermark_cache import WatermarkCache
from pravega_spark.read.watermark_column import segment_thresholds
from segment_store.protocol import encode_events

RESULTS = Path(__file__).resolve().parent / "results"
HOURS_PER_YEAR = 8_760
WATERMARKS_PER_HOUR = 114  # 998,640 in a year (999,000 with the measured batches)
EVENT_BYTES = 1_000


@dataclass
class _Status:
    start_offset: int
    write_offset: int
    sealed: bool


class SimulatedStream:
    """A stream's history in memory, answering as a :class:`~pravega_spark.connection.StreamConnection` does the
    calls :class:`LiveCatalog` makes (``segment_statuses``, ``successors``), with its mark segment's bytes."""

    def __init__(self, seed: int = 1) -> None:
        self.rng = random.Random(seed)
        self.epoch = 0
        first = [SegmentWithRange(segment_id(i, 0), i / 4, (i + 1) / 4) for i in range(4)]
        self.ranges = {s.segment_id: s for s in first}
        self.current = [s.segment_id for s in first]
        self.lengths = dict.fromkeys(self.current, 0)
        self.sealed: set[int] = set()
        self.succ: dict[int, dict[int, list[int]]] = {}
        self.mark = bytearray()
        self.bound = 1_700_000_000_000
        self.watermarks = 0

    # ---- what LiveCatalog asks of a connection ----
    def segment_statuses(self, scope: str, stream: str, segments: Iterable[int]) -> dict[int, _Status]:
        return {s: _Status(0, self.lengths[s], s in self.sealed) for s in segments}

    def successors(self, scope: str, stream: str, segment: int) -> dict[int, list[int]]:
        return self.succ.get(segment, {})

    # ---- what the watermark cache reads ----
    def read_marks(self, offset: int) -> tuple[list[Watermark], int]:
        return decode_watermark_events(bytes(memoryview(self.mark)[offset:]), offset)

    def range_of(self, segment: int) -> SegmentWithRange:
        return self.ranges[segment]

    # ---- the history ----
    def write(self) -> None:
        for s in self.current:
            self.lengths[s] += EVENT_BYTES

    def note(self) -> None:
        """A watermark at the current segments' ends, its bound a minute on."""
        self.bound += 60_000
        cut = {self.ranges[s]: self.lengths[s] for s in self.current}
        self.mark += encode_events([Watermark(self.bound, self.bound + 1_000, cut).encode()])
        self.watermarks += 1

    def scale(self) -> None:
        self.epoch += 1
        ordered = sorted(self.current, key=lambda s: self.ranges[s].low)
        if len(ordered) >= 6 or (len(ordered) > 4 and self.rng.random() < 0.5):
            i = self.rng.randrange(len(ordered) - 1)
            olds = ordered[i : i + 2]
            pieces = [(self.ranges[olds[0]].low, self.ranges[olds[1]].high)]
        else:
            olds = [ordered[self.rng.randrange(len(ordered))]]
            low, high = self.ranges[olds[0]].low, self.ranges[olds[0]].high
            pieces = [(low, (low + high) / 2), ((low + high) / 2, high)]
        news = [
            SegmentWithRange(segment_id(len(self.ranges) + k, self.epoch), lo, hi) for k, (lo, hi) in enumerate(pieces)
        ]
        for n in news:
            self.ranges[n.segment_id] = n
            self.lengths[n.segment_id] = 0
        for old in olds:
            self.sealed.add(old)
            self.succ[old] = {n.segment_id: sorted(o for o in olds if self.ranges[o].overlaps(n)) for n in news}
        self.current = [s for s in self.current if s not in olds] + [n.segment_id for n in news]


class Query:
    """A ``watermarkColumn`` streaming query's driver state between micro-batches, as the source keeps it."""

    def __init__(self, stream: SimulatedStream) -> None:
        self.stream = stream
        self.state = ReadState("bench", "s", dict.fromkeys(stream.current, 0))
        self.successors: dict[int, dict[int, list[int]]] = {}
        self.cache = WatermarkCache()

    def micro_batch(self) -> int:
        """latestOffset then partitions' planning and thresholds; how many ranges."""
        catalog = LiveCatalog(self.stream, "bench", "s", self.successors)  # type: ignore[arg-type]
        end = advance(self.state, catalog)
        forget_successors(self.successors, self.state.positions)
        catalog = LiveCatalog(self.stream, "bench", "s", self.successors)  # type: ignore[arg-type]
        ranges = plan_ranges(self.state, end, catalog)
        asked = {r.segment_id: r.start for r in ranges}
        frontier = [*self.state.positions, *self.state.pending]
        self.cache.plan(self.stream.read_marks, self.stream.range_of, asked, frontier, self.state.positions)
        self.state = end
        return len(ranges)


def age(stream: SimulatedStream, query: Query, hours: int) -> float:
    """``hours`` of history: each hour a scale, writes and watermarks, and one micro-batch of the query (CPU s)."""
    began = time.thread_time()
    for _ in range(hours):
        stream.scale()
        for _ in range(WATERMARKS_PER_HOUR):
            stream.write()
            stream.note()
        query.micro_batch()
    return time.thread_time() - began


def measure(queries: list[Query], batches: int) -> list[list[tuple[float, float]]]:
    """``(CPU s, wall s)`` of each of ``batches`` micro-batches per query, the queries taking turns batch by batch
    (so both meet the same machine); each batch after a write to every segment and one watermark. CPU time is the
    measure: the work is single-threaded and in memory, so it is what a batch costs whatever else runs."""
    times: list[list[tuple[float, float]]] = [[] for _ in queries]
    for _ in range(batches):
        for query, spent in zip(queries, times, strict=True):
            query.stream.write()
            query.stream.note()
            cpu, wall = time.thread_time(), time.perf_counter()
            query.micro_batch()
            spent.append((time.thread_time() - cpu, time.perf_counter() - wall))
    return times


def full_reread(stream: SimulatedStream, query: Query) -> float:
    """Seconds of the driver's previous way for one micro-batch: decode the whole mark segment, scan it all for
    every segment of the batch."""
    began = time.thread_time()
    watermarks, _ = stream.read_marks(0)
    for s in query.state.positions:
        segment_thresholds(stream.ranges[s], watermarks)
    return time.thread_time() - began


def _row(name: str, query: Query, times: list[tuple[float, float]], reread_s: float) -> dict[str, Any]:
    cpu, wall = sorted(c for c, _ in times), sorted(w for _, w in times)
    stream = query.stream
    return {
        "query": name,
        "scales": stream.epoch,
        "watermarks": stream.watermarks,
        "mark_mb": round(len(stream.mark) / 1e6, 1),
        "cpu_p50_us": round(statistics.median(cpu) * 1e6),
        "cpu_p90_us": round(cpu[int(0.9 * (len(cpu) - 1))] * 1e6),
        "wall_p50_us": round(statistics.median(wall) * 1e6),
        "cache_points": len(query.cache),
        "successor_cache": len(query.successors),
        "cache_restarts": query.cache.restarts,
        "full_reread_cpu_ms": round(reread_s * 1e3, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="a month of history instead of a year (~15 s)")
    parser.add_argument("--batches", type=int, default=300, help="micro-batches measured per query")
    parser.add_argument("--out", type=Path, default=RESULTS / "long_running.json", help="JSON output")
    args = parser.parse_args(argv)
    hours = 720 if args.quick else HOURS_PER_YEAR

    aged_stream = SimulatedStream()
    aged = Query(aged_stream)
    aging_s = age(aged_stream, aged, hours)
    fresh_stream = SimulatedStream(seed=2)
    while len(fresh_stream.current) != len(aged_stream.current):  # the same shape: as many segments, a new stream
        fresh_stream.scale()
    fresh = Query(fresh_stream)
    measure([fresh, aged], args.batches // 5)  # warm-up
    fresh_times, aged_times = measure([fresh, aged], args.batches)
    rows = [
        _row("fresh", fresh, fresh_times, full_reread(fresh_stream, fresh)),
        _row("aged", aged, aged_times, full_reread(aged_stream, aged)),
    ]
    ratio = rows[1]["cpu_p50_us"] / rows[0]["cpu_p50_us"]
    table(
        f"Micro-batch planning, fresh query vs one after {hours:,} hourly scales (aging: {aging_s:.0f} CPU s)",
        rows,
        [
            ("query", "query"),
            ("scales", "scales"),
            ("watermarks", "watermarks"),
            ("mark_mb", "mark MB"),
            ("cpu_p50_us", "CPU p50 us"),
            ("cpu_p90_us", "CPU p90 us"),
            ("wall_p50_us", "wall p50 us"),
            ("cache_points", "wm cache"),
            ("successor_cache", "succ cache"),
            ("cache_restarts", "restarts"),
            ("full_reread_cpu_ms", "full re-read CPU ms"),
        ],
    )
    print(f"\naged / fresh CPU p50 per micro-batch: {ratio:.2f}x (target <= 1.2x)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "benchmark": "long_running",
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "simulated": "in memory: fake connection and mark segment bytes; no segment store, controller or Spark",
        "hours": hours,
        "watermarks_per_hour": WATERMARKS_PER_HOUR,
        "batches": args.batches,
        "aging_s": round(aging_s, 1),
        "aged_over_fresh_p50": round(ratio, 3),
        "rows": rows,
    }
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
