"""Latency cases of ``bench/spark.py``: a streaming query tailing a live stream, end to end, next to Spark's own
``rate`` source and a trivial Python streaming source (``bench_ticks``), one after another on one SparkSession.

Each case runs ``seconds`` at ``rate`` events/s with the default trigger (micro-batches back to back) into a
``foreachBatch`` sink that collects each event's stamp (epoch us) to the driver and notes the time it got them:

* ``segstore``: a writer process (:func:`writer_main`, our client library, events handed to the writer every
  millisecond) appends 100 B events to a stream of ``segments`` segments over 16 routing keys, each event
  beginning with the time it was handed to the writer (16 ASCII digits of epoch us) and its number; the query
  starts with the default ``startingOffsets`` (``latest``) while the writer writes. At the end the writer
  stops, the query reads what is left, and every event the writer wrote after the query's start position is
  checked to have arrived exactly once (the run fails otherwise).
* ``rate``: Spark's built-in source (JVM only), ``rowsPerSecond`` = rate; the stamp is its ``timestamp``.
* ``python floor``: ``bench_ticks`` (:mod:`spark_ticks`), events due on a clock, same schema and payload layout
  as segstore's: what Spark's Python data source path costs with no I/O at all.
* ``floor + writer``: the same while the segstore case's writer writes at the same rate to a stream nobody
  reads: the floor on a machine as loaded as in the segstore case (the writer and the segment store share the
  two cores with Spark), so the difference between the segstore case and this one is what its micro-batches
  do beyond the floor.

Latency = the time the sink had the event minus its stamp, over the events stamped after the first fifth of the
run (start-up: Python workers, first connections). The cases run after warm-up queries of the trivial source and
of segstore (not measured), so every case starts in Python workers that have imported its source; the first
segstore query's start-up is printed apart (``cold_start`` in the JSON). ``1st row s``: from ``start()`` to the
sink's first rows (the query's start-up). ``batch ms``: the median micro-batch (``triggerExecution``)
after the first fifth of the batches; the other ``*_ms`` columns are medians of Spark's ``durationMs`` parts.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchlib import percentile
from spark_ticks import stamped_event

STAMP = "CAST(CAST(substring(event, 1, 16) AS STRING) AS BIGINT)"
NUMBER = "CAST(CAST(substring(event, 17, 12) AS STRING) AS BIGINT)"
KEYS = 16
PARTS = ("latestOffset", "queryPlanning", "walCommit", "addBatch", "commitOffsets")


# ---- the writer process ----------------------------------------------------------------------------------------
async def _write(uri: str, scope: str, stream: str, rate: int, seconds: float) -> int:
    from controller_client import ControllerClient, StreamManager

    async with (
        await ControllerClient.connect(uri) as controller,
        StreamManager(controller) as manager,
        await manager.create_writer(scope, stream) as writer,
    ):
        print("writing", flush=True)
        started = time.monotonic()
        written = 0
        while (elapsed := time.monotonic() - started) < seconds:
            due = int(elapsed * rate) - written
            if due > 0:
                stamp = time.time_ns() // 1000
                events = [(stamped_event(stamp, n), f"key-{n % KEYS}") for n in range(written, written + due)]
                await writer.write_events(events)
                written += due
            await asyncio.sleep(0.001)
        await writer.flush()
    return written


def writer_main(argv: list[str]) -> None:
    """``spark_latency.py writer URI SCOPE STREAM RATE SECONDS``: prints ``writing`` once the writer is open,
    then ``{"written": N}`` when every event is acknowledged."""
    uri, scope, stream, rate, seconds = argv
    written = asyncio.run(_write(uri, scope, stream, int(rate), float(seconds)))
    print(json.dumps({"written": written}), flush=True)


class Writer:
    """The writer process of one segstore case."""

    def __init__(self, uri: str, scope: str, stream: str, rate: int, seconds: float) -> None:
        command = [sys.executable, __file__, "writer", uri, scope, stream, str(rate), str(seconds)]
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if line.strip() != "writing":
            self.proc.kill()
            raise RuntimeError(f"latency writer did not start: {line!r}")

    def wait(self) -> int:
        out, _ = self.proc.communicate(timeout=120)
        if self.proc.returncode != 0:
            raise RuntimeError(f"latency writer failed ({self.proc.returncode}): {out[-500:]}")
        return int(json.loads(out.strip().splitlines()[-1])["written"])

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


# ---- the sink --------------------------------------------------------------------------------------------------
class StampSink:
    """``foreachBatch``: keeps ``(stamp us, number, arrival us)`` of every row."""

    def __init__(self, stamp: str, number: str | None) -> None:
        self.columns = [f"{stamp} AS stamp"] + ([f"{number} AS number"] if number else [])
        self.rows: list[tuple[int, int, int]] = []
        self.lock = threading.Lock()

    def __call__(self, frame: Any, batch_id: int) -> None:
        rows = frame.selectExpr(*self.columns).collect()
        arrived = time.time_ns() // 1000
        got = [(r[0], r[1] if len(r) > 1 else -1, arrived) for r in rows]
        with self.lock:
            self.rows.extend(got)


def _median(values: list[float]) -> float | None:
    return percentile(sorted(values), 50) if values else None


def summarize(case: str, rate: int, seconds: float, started_us: int, sink: StampSink, progress: list[Any]) -> dict:
    """One result row: latency over the events stamped after the first fifth of the run, medians of the
    micro-batches after the first fifth of them."""
    steady_from = started_us + int(seconds * 1e6 / 5)
    latencies = sorted((arrived - stamp) / 1e6 for stamp, _, arrived in sink.rows if stamp >= steady_from)
    batches = [p for p in progress if p.numInputRows] or list(progress)
    steady = batches[len(batches) // 5 :]
    row: dict[str, Any] = {
        "case": case,
        "rate": rate,
        "rows": len(sink.rows),
        "measured_rows": len(latencies),
        "p50_s": round(percentile(latencies, 50), 3) if latencies else None,
        "p99_s": round(percentile(latencies, 99), 3) if latencies else None,
        "max_s": round(latencies[-1], 3) if latencies else None,
        "first_row_s": round((min(a for _, _, a in sink.rows) - started_us) / 1e6, 2) if sink.rows else None,
        "micro_batches": len(progress),
        "batch_ms": _median([p.durationMs.get("triggerExecution", 0) for p in steady]),
    }
    for part in PARTS:
        row[f"{part}_ms"] = _median([p.durationMs.get(part, 0) for p in steady])
    row["slowest_batches_ms"] = sorted((p.durationMs.get("triggerExecution", 0) for p in batches), reverse=True)[:5]
    return row


# ---- the cases -------------------------------------------------------------------------------------------------
class LatencyCases:
    """Runs the three cases at each rate on ``spark`` against the standalone at ``uri``."""

    def __init__(self, spark: Any, uri: str, work: Path, seconds: float, segments: int) -> None:
        from spark_ticks import TickSource

        self.spark = spark
        self.uri = uri
        self.work = work
        self.seconds = seconds
        self.segments = segments
        self.queries = 0
        self.cold_start: dict[str, Any] = {}
        spark.dataSource.register(TickSource)

    def _run(
        self,
        case: str,
        rate: int,
        frame: Any,
        sink: StampSink,
        during: Callable[[], None],
        drain: bool = False,
        quiet: bool = False,
    ) -> dict:
        self.queries += 1
        checkpoint = self.work / "latency-checkpoints" / f"q{self.queries}"
        started_us = time.time_ns() // 1000
        query = frame.writeStream.foreachBatch(sink).option("checkpointLocation", str(checkpoint)).start()
        try:
            during()
            if drain:  # the writer stopped: read what is left
                query.processAllAvailable()
        finally:
            query.stop()
        if query.exception() is not None:
            raise RuntimeError(f"{case}: the query failed: {query.exception()}")
        row = summarize(case, rate, self.seconds, started_us, sink, list(query.recentProgress))
        if not quiet:
            print(f"  {case} @ {rate:,}/s: p50 {row['p50_s']} s, p99 {row['p99_s']} s, batch {row['batch_ms']} ms "
                  f"({row['rows']:,} rows, {row['micro_batches']} micro-batches)", flush=True)  # fmt: skip
        return row

    def _writing(self, scope: str, stream: str, rate: int) -> Writer:
        """A new stream of ``self.segments`` segments and the writer process writing ``rate`` events/s to it."""
        from controller_client import BlockingStreamManager, ScalingPolicy, StreamConfiguration

        with BlockingStreamManager.connect(self.uri) as manager:
            manager.create_scope(scope)
            manager.create_stream(scope, stream, StreamConfiguration(ScalingPolicy.fixed(self.segments)))
        return Writer(self.uri, scope, stream, rate, self.seconds)

    def segstore(self, rate: int, quiet: bool = False) -> dict:
        scope, stream = "latency", f"tail-{rate}-{self.queries}"
        writer = self._writing(scope, stream, rate)
        try:
            options = {"controller": self.uri, "scope": scope, "stream": stream}
            frame = self.spark.readStream.format("segstore").options(**options).load()
            sink = StampSink(STAMP, NUMBER)
            written: list[int] = []

            def wait() -> None:
                written.append(writer.wait())

            row = self._run("segstore", rate, frame, sink, wait, drain=True, quiet=quiet)
        finally:
            writer.kill()
        numbers = sorted(n for _, n, _ in sink.rows)
        # the start is a position per segment, so events near it may be on either side; after the first second
        # of what the query read, every event must be there once
        settled = numbers[0] + rate if numbers else 0
        missing = sorted(set(range(settled, written[0])) - set(numbers))
        if len(set(numbers)) != len(numbers) or missing:
            raise AssertionError(f"segstore @ {rate}/s: {len(numbers) - len(set(numbers))} events twice, "
                                 f"{len(missing)} lost (first {missing[:5]}) of {written[0]}")  # fmt: skip
        row["written"] = written[0]
        return row

    def rate_source(self, rate: int) -> dict:
        frame = self.spark.readStream.format("rate").option("rowsPerSecond", str(rate)).load()
        return self._run("rate", rate, frame, StampSink("unix_micros(timestamp)", None), self._wait)

    def python_floor(self, rate: int, quiet: bool = False) -> dict:
        frame = self.spark.readStream.format("bench_ticks").option("rowsPerSecond", str(rate)).load()
        return self._run("python floor", rate, frame, StampSink(STAMP, NUMBER), self._wait, quiet=quiet)

    def loaded_floor(self, rate: int) -> dict:
        """The trivial source while the segstore case's writer writes as much to a stream nobody reads: the floor
        with the same two cores taken by the writer and the segment store (what of the difference is the load)."""
        writer = self._writing("latency", f"unread-{rate}-{self.queries}", rate)
        try:
            frame = self.spark.readStream.format("bench_ticks").option("rowsPerSecond", str(rate)).load()
            written: list[int] = []
            sink = StampSink(STAMP, NUMBER)
            return self._run("floor + writer", rate, frame, sink, lambda: written.append(writer.wait()))
        finally:
            writer.kill()

    def _wait(self) -> None:
        time.sleep(self.seconds)

    def run(self, rates: list[int]) -> list[dict]:
        """Every case at every rate, after warm-up queries (not recorded) of the trivial source and of segstore
        that start Spark's Python workers, import each source's modules there and warm the JVM, so no case pays
        start-up inside its measured part (a first segstore query's workers import the client library, ~0.6 s,
        and open their connections: its first micro-batch took ~2 s and the backlog it left slowed the next ~10 in
        a 30 s case, past the first fifth that is left out). What a cold start costs: :attr:`cold_start`."""
        seconds, self.seconds = self.seconds, min(5.0, self.seconds)
        self.python_floor(rates[0], quiet=True)
        cold = self.segstore(rates[0], quiet=True)
        self.cold_start = {"first_row_s": cold["first_row_s"], "slowest_batches_ms": cold["slowest_batches_ms"]}
        print(f"  segstore's first query (warm-up, not measured): first row after {cold['first_row_s']} s, slowest "
              f"micro-batches {cold['slowest_batches_ms']} ms", flush=True)  # fmt: skip
        self.seconds = seconds
        rows = []
        for rate in rates:
            rows += [self.segstore(rate), self.rate_source(rate), self.python_floor(rate), self.loaded_floor(rate)]
        return rows


TARGETS = (("rate", 1.5, 2.0), ("python floor", 1.2, 1.2), ("floor + writer", 1.2, 1.2))
"""Per other case, the most segstore's p50 and p99 may be of its: Spark's rate source (the live tail's first target);
the trivial Python source, alone and with the writer's load (issue 39 item 7)."""


def verdicts(rows: list[dict]) -> list[str]:
    """The targets per rate (:data:`TARGETS`)."""
    lines = []
    for rate in sorted({r["rate"] for r in rows}):
        by_case = {r["case"]: r for r in rows if r["rate"] == rate}
        ours = by_case.get("segstore")
        for case, p50_target, p99_target in TARGETS:
            theirs = by_case.get(case)
            if not ours or not theirs or not ours["p50_s"] or not theirs["p50_s"]:
                continue
            p50, p99 = ours["p50_s"] / theirs["p50_s"], ours["p99_s"] / theirs["p99_s"]
            lines.append(
                f"{rate:,}/s: segstore/{case} p50 {p50:.2f} (target <= {p50_target}), "
                f"p99 {p99:.2f} (target <= {p99_target})"
            )
    return lines


COLUMNS = [
    ("case", "case"),
    ("rate", "events/s"),
    ("p50_s", "p50 s"),
    ("p99_s", "p99 s"),
    ("max_s", "max s"),
    ("first_row_s", "1st row s"),
    ("batch_ms", "batch ms"),
    ("latestOffset_ms", "latest ms"),
    ("walCommit_ms", "wal ms"),
    ("addBatch_ms", "add ms"),
    ("commitOffsets_ms", "commit ms"),
    ("micro_batches", "batches"),
    ("rows", "rows"),
]

if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        if sys.argv[1:2] == ["writer"]:
            sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
            writer_main(sys.argv[2:])
        else:
            sys.exit("usage: spark_latency.py writer URI SCOPE STREAM RATE SECONDS (run bench/spark.py --latency-only)")
    os._exit(0)
