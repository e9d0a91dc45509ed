"""Case 10 of ``bench/spark.py`` (``--pushdown``, or ``--pushdown-only``): a time window out of a long stream, read
with and without filter pushdown (:mod:`pravega_spark.read.pushdown`).

The stream (``--segments`` segments) gets ``--pushdown-rows`` events of 100 B (default 10,000,000; 1,000,000 with
``--quick``) in ``PHASES`` phases, one streaming query each (``bench_numpy`` into the ``segstore`` sink). An event's
``timestamp`` is its ingestion time, the segment store's clock when it accepted the append; the standalone has no
other clock to set, so the "hours" of a long stream are these phases: each phase starts after the clock passed the
end of the one before, and phase ``p`` stands for hour ``p`` (the window is one phase out of ``PHASES``: 1/12 of the
stream, one hour out of twelve). Then every container is flushed to Tier-2 (not timed), and the window
``timestamp >= start(p) AND timestamp < start(p + 1)`` of the middle phase is read as a batch query into ``noop``,
with ``spark.sql.python.filterPushdown.enabled`` on and off (interleaved, ``--repeats`` rounds, best kept), from
Tier-2 directly (the segment store says where the chunks are).

``bytes read`` is what the read plans: the sum of the segment ranges of its input partitions (what pyspark gets from
the reader after pushing the same filters; without pushdown, the whole stream); ``window bytes`` is the framed size
of the events in the window (rows x 108 B). Both ``timestamp`` bounds narrow, exactly (the segment store's
``LocateOffsetAtTime`` and ``LocateOffsetBeforeTime``; ``docs/spark.md``): the target is at most 1.2x the window's
bytes. Both reads are checked to count the same rows, and the window to hold exactly one phase.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from pyspark.sql.datasource import GreaterThanOrEqual, LessThan

from pravega_spark.read.pushdown_readers import PUSHDOWN_CONF
from pravega_spark.read.source import SCHEMA, SegstoreDataSource

PHASES = 12
STREAM = "rows-hours"
TARGET_RATIO = 1.2


def _now_ms() -> int:
    return int(time.time() * 1000)


def _after(ms: int) -> int:
    """The clock once it is past ``ms``."""
    while (now := _now_ms()) <= ms:
        time.sleep(0.001)
    return now


def planned_bytes(options: dict[str, str], window: tuple[int, int] | None) -> int:
    """The bytes a batch read of ``options`` plans, with the window's filters pushed (None: without pushdown)."""
    reader = SegstoreDataSource(options).reader(SCHEMA)
    if window is not None:
        lo, hi = (datetime.fromtimestamp(ms / 1000, UTC) for ms in window)
        reader.pushFilters([GreaterThanOrEqual(("timestamp",), lo), LessThan(("timestamp",), hi)])
    parts = reader.partitions()
    ranges: list[Any] = [r for p in parts for r in (p.parts if hasattr(p, "parts") else (p,))]
    return sum(r.end - r.start for r in ranges)


def run(bench: Any, scope: str, framed_bytes: int) -> dict[str, Any]:
    """Write the phases, read the window both ways; the rows go into ``bench.rows``; returns the case's facts."""
    args, spark = bench.args, bench.spark
    per_phase = args.pushdown_rows // PHASES
    writes = {"controller": bench.system.uri, "scope": scope, "stream": STREAM, "exactlyOnce": "false",
              "defaultNumSegments": str(args.segments)}  # fmt: skip
    starts: list[int] = []
    started = time.perf_counter()
    for _ in range(PHASES):
        starts.append(_after(starts[-1] if starts else 0))
        bench.query("setup", bench.numpy(per_phase, 16384).select("event"), sink="segstore", options=writes)
    end = _after(_now_ms())
    write_s = time.perf_counter() - started
    flush_s = bench.flush_tier2()
    middle = PHASES // 2
    window = (starts[middle], starts[middle + 1] if middle + 1 < PHASES else end)
    reads = {"controller": bench.system.uri, "scope": scope, "stream": STREAM}
    where = f"timestamp >= timestamp_millis({window[0]}) AND timestamp < timestamp_millis({window[1]})"

    def frame() -> Any:
        return spark.read.format("segstore").options(**reads).load().where(where)

    counts = {}
    for pushed in (True, False):
        spark.conf.set(PUSHDOWN_CONF, str(pushed).lower())
        counts[pushed] = frame().count()
    if counts[True] != counts[False] or counts[True] < per_phase:
        raise AssertionError(f"window rows: {counts[True]:,} with pushdown, {counts[False]:,} without")
    window_bytes = counts[True] * framed_bytes
    bytes_read = {True: planned_bytes(reads, window), False: planned_bytes(reads, None)}
    runs: dict[bool, list[dict[str, Any]]] = {True: [], False: []}
    cases = {pushed: f"batch 1 h of {PHASES} h, pushdown {'on' if pushed else 'off'}" for pushed in (True, False)}
    for _ in range(args.repeats):
        for pushed in (True, False):
            spark.conf.set(PUSHDOWN_CONF, str(pushed).lower())
            runs[pushed].append(bench.batch_run(cases[pushed], frame, counts[True]))
    spark.conf.set(PUSHDOWN_CONF, "true")
    for pushed in (True, False):
        row = bench.keep_best(cases[pushed], runs[pushed])
        row["bytes_read"] = bytes_read[pushed]
        row["read_ratio"] = round(bytes_read[pushed] / window_bytes, 3)
    facts = {"phases": PHASES, "rows_per_phase": per_phase, "window_ms": list(window), "window_rows": counts[True],
             "window_bytes": window_bytes, "stream_bytes": bytes_read[False], "write_s": round(write_s, 1),
             "flush_s": round(flush_s, 2), "target_read_ratio": TARGET_RATIO}  # fmt: skip
    ratio = bytes_read[True] / window_bytes
    verdict = "met" if ratio <= TARGET_RATIO else "MISSED"
    print(f"pushdown: window {counts[True]:,} rows, {window_bytes:,} B of {bytes_read[False]:,} B; read "
          f"{bytes_read[True]:,} B with pushdown ({ratio:.3f}x the window; target <= {TARGET_RATIO:.1f}x: {verdict})",
          flush=True)  # fmt: skip
    return facts
