"""Spark benchmark of the ``segstore`` connector: reads and writes of 100 B events, next to Spark's own Parquet
source and a trivial in-memory Python data source, all in one run on one machine.

The system under test is ``segstore standalone`` (controller, segment store, ZooKeeper; file Tier-1 with
fsync, filesystem Tier-2) started as a child process on a temporary data directory under ``--dir``; it
never runs in the bench process. Spark runs ``local[2]`` in the bench process (driver; the JVM and its
Python workers are its children). Events are 100 B of random bytes; MB = 10^6 bytes of event payload.
Every measurement is a streaming query with ``Trigger.AvailableNow`` (one micro-batch: no read limit)
into the ``noop`` sink (reads) or the ``segstore`` sink (writes), on a fresh checkpoint. ``rows/s`` =
rows / wall time from ``start()`` to the end of ``awaitTermination()`` (query start-up, planning and the
~0.2 s per micro-batch Spark and its Python runners cost included); ``batch rows/s`` = rows / the
micro-batches' ``addBatch`` time (the data path alone). Reads run ``--repeats`` times (the best is shown,
every run is in the JSON); each write ``--repeats`` times: once in order (cases 2 and 3) and again, both
kinds in turn, after the last read (each run is a row). Before every write the
containers are flushed to Tier-2 (not timed), so no write shares the machine with the last one's flushes.

Cases, in this order (7 runs right after the streaming form of each read; warm-up queries before are not
recorded: JIT, Python workers, a first write of each kind):

1. ``source: parquet(event) -> noop``: the write cases' input (``readStream.parquet`` of the pre-generated
   rows, ``select("event")``) alone, to show it is not what limits the writes.
2. ``write exactlyOnce=false``: that input into ``writeStream.format("segstore")``, a new stream of
   ``--segments`` segments. The stream's length is checked afterwards (>= rows * 108 B).
3. ``write exactlyOnce=true``: the same input into a new stream (length checked: exactly rows * 108 B); its
   transactions are merged into the stream before the restart of 6., which recovers them.
4. ``read (a) cache``: ``readStream.format("segstore")`` of the stream of 2., just written, no
   ``tier2Location``: the segment store serves it from its cache (1 GiB per container: nothing was evicted).
5. ``FlushToStorage`` of every container, then ``read (b) tier2 direct``: ``tier2Location`` =
   ``<data dir>/tier2``, executors read the Parquet chunks themselves (the segment store only lists them).
6. The standalone is restarted on the same data (its cache is empty), then ``read (c) tier2 via
   segstore``: no ``tier2Location``, the segment store reads Tier-2 for the executors (one run: a second
   would be served from the cache the first filled).
7. ``batch read (a)`` / ``(b)`` (after the streaming form of each): the same read as a batch query,
   ``spark.read.format("segstore")...write.format("noop")``: no streaming runner, no checkpoint.
8. ``parquet (5 cols) -> noop`` (Spark's own file source on the same rows, all columns) and ``numpy N/batch
   -> noop``: ``bench_numpy`` (``bench/spark_sources.py``), Arrow batches from numpy with the segstore
   schema, ``--segments`` partitions, N rows per batch: the upper bound of the Python data source path.
   The segstore source yields ~19k-row batches from the segment store (2 MiB) and ~39k from Tier-2 (4 MiB).
9. ``batch 1 segment tier2 direct, N part.`` (``--partitions``, default 1,2,4,8): the rows written once more
   (exactly once, before the flush of 5.; not recorded) into a 1-segment stream, read from Tier-2 directly as a
   batch query by N input partitions (option ``minPartitions``: cuts at event starts), then ``batch parquet (5
   cols) -> noop``: Spark's own batch Parquet source over the same rows (the issue-27 target: the segstore read
   at least as fast). ``batch numpy 32768/batch, N part.``: ``bench_numpy`` as a batch query with the same
   partitions, the most Spark's Python data source path gives (no I/O). With ``local[2]`` more than 2
   partitions cannot run more than 2 at once, and each task costs Spark ~0.1 s more (numpy too). These cases run
   interleaved, ``--repeats`` rounds of each case in turn (best kept), so a busy spell of the machine does not
   fall on one case only.
10. ``batch 1 h of 12 h, pushdown on`` / ``off``: a time window out of a stream of ``--pushdown-rows`` events written
   in 12 phases (the "hours"), read with and without filter pushdown, with the bytes each read plans and their
   ratio to the window's: ``bench/spark_pushdown.py``.

Every read is checked to return every event. The Tier-2 chunks are in the OS page cache in (b) and (c)
(just written): no disk reads. Columns: ``start s``: wall time outside the micro-batches (query start,
the Python streaming runner's start, termination); ``cpu us/row``: CPU time of every process of the run
(not ``other``) per row; ``cpu``: CPU seconds per wall second (1.0 = one core) of the bench process
(Spark's Python driver), the Spark JVM, Spark's Python workers (every Python descendant of the JVM), the
segment store process (``ss loop``: its event loop thread alone), the controller, ZooKeeper, and
everything else on the machine (``other``: the machine is shared; a high value means a disturbed run).
``load``: the 1-minute load average when the case started.

    .venv/bin/python bench/spark.py [--quick] [--writes-only | --partitions-only | --pushdown-only] [--rows 3000000]
                                    [--segments 4] [--repeats 3] [--batch-rows 16384,131072] [--partitions 1,2,4,8]
                                    [--pushdown-rows 10000000] [--dir /tmp]
                                    [--out PATH] [--keep]

The full run takes about 3.5 minutes on 2 cores, ``--quick`` about 2. ``--writes-only`` skips the reads
(cases 4-9; about 1.5 minutes), for work on the write path; ``--partitions-only`` runs case 9 alone (with a
Parquet warm-up), for work on parallel reads; ``--pushdown-only`` case 10 alone. Prints a
table, writes JSON (default ``bench/results/spark.json``, ``spark-writes.json`` with ``--writes-only``,
``spark-partitions.json`` with ``--partitions-only``, ``spark-pushdown.json`` with ``--pushdown-only``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
# Spark's Python workers import spark_sources (the in-memory source) and pravega_spark from these paths.
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(BENCH), str(REPO), os.environ.get("PYTHONPATH")]))
os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable

from benchlib import MB, filesystem_of, table  # noqa: E402
from e2e_system import Standalone  # noqa: E402
from spark_latency import COLUMNS as LATENCY_COLUMNS  # noqa: E402
from spark_latency import LatencyCases, verdicts  # noqa: E402
from spark_pushdown import run as pushdown_case  # noqa: E402
from spark_sources import SCHEMA_DDL, NumpySource, ProcessMeter, write_rows  # noqa: E402

from pravega_spark.connection import StreamConnection  # noqa: E402
from pravega_spark.offsets import tail_cut  # noqa: E402

EVENT_BYTES = 100
FRAMED_BYTES = EVENT_BYTES + 8
SCOPE = "bench"
RESULTS = REPO / "bench" / "results"
READ_TARGET = 2_000_000
WRITE_TARGET = 500_000
ONE_SEGMENT = "rows-one-segment"


class Bench:
    def __init__(self, args: argparse.Namespace, work: Path) -> None:
        self.args = args
        self.work = work
        self.data_dir = work / "data"
        self.parquet_dir = work / "rows"
        self.system = Standalone(self.data_dir)
        self.spark: Any = None
        self.meter: ProcessMeter | None = None
        self.rows: list[dict[str, Any]] = []
        self.latency: list[dict[str, Any]] = []
        self.latency_cold_start: dict[str, Any] = {}
        self.queries = 0

    # ---- set-up ------------------------------------------------------------------------------------------
    def roles(self) -> dict[int, str]:
        s = self.system
        return {s.pid: "controller", s.segmentstore_pid: "segmentstore", s.zookeeper_pid: "zookeeper"}

    def start_spark(self) -> None:
        from pyspark.sql import SparkSession

        self.spark = (
            SparkSession.builder.master("local[2]")
            .appName("segstore-bench")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.driver.memory", "2g")
            .config("spark.sql.catalogImplementation", "in-memory")
            .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
            .config("spark.driver.extraJavaOptions", "-Xss64m")  # a quiet stop of streaming queries: docs/spark.md
            .getOrCreate()
        )
        self.spark.sparkContext.setLogLevel("ERROR")
        self.spark.dataSource.register(NumpySource)
        import pravega_spark

        pravega_spark.register(self.spark)
        gateway = self.spark.sparkContext._gateway
        self.meter = ProcessMeter(self.roles)
        proc = getattr(gateway, "proc", None)
        if proc is not None:
            self.meter.jvm = proc.pid

    def restart_standalone(self, stream: str) -> dict[str, Any]:
        """Stop the standalone, start it on the same data, wait until ``stream``'s segments answer (the ready
        line can come before they do: see ``readable_after_ready_s`` and ``wrong_host_errors`` in the JSON)."""
        expected = self.stream_bytes(stream)
        self.system.stop()
        self.system = Standalone(self.data_dir)
        restart: dict[str, Any] = {"ready_s": round(self.system.start(), 1)}
        started, errors = time.perf_counter(), []
        while True:
            try:
                if self.stream_bytes(stream) == expected:
                    break
            except Exception as error:
                errors.append(repr(error)[:200])
                if time.perf_counter() - started > 120:
                    raise
            time.sleep(0.5)
        restart["readable_after_ready_s"] = round(time.perf_counter() - started, 1)
        restart["wrong_host_errors"] = errors[:3] + ([f"... {len(errors)} in all"] if len(errors) > 3 else [])
        return restart

    def flush_tier2(self) -> float:
        return asyncio.run(self.system.flush_tier2())

    def stream_bytes(self, stream: str) -> int:
        connection = StreamConnection(self.system.uri)
        try:
            return sum(tail_cut(connection, SCOPE, stream).positions.values())
        finally:
            connection.close()

    # ---- one query -----------------------------------------------------------------------------------------
    def query(self, case: str, frame: Any, sink: str = "noop", options: dict[str, str] | None = None) -> dict[str, Any]:
        """Run ``frame`` into ``sink`` with Trigger.AvailableNow on a fresh checkpoint; one result row."""
        assert self.meter is not None
        self.queries += 1
        checkpoint = str(self.work / "checkpoints" / f"q{self.queries}")
        load1 = os.getloadavg()[0]
        writer = frame.writeStream.format(sink).options(**(options or {})).option("checkpointLocation", checkpoint)
        with self.meter.span() as cpu:
            started = time.perf_counter()
            query = writer.trigger(availableNow=True).start()
            query.awaitTermination()
            seconds = time.perf_counter() - started
        progress = [p for p in query.recentProgress if p.numInputRows]
        rows = sum(p.numInputRows for p in progress)
        durations: dict[str, int] = {}
        for p in query.recentProgress:
            for key, ms in p.durationMs.items():
                durations[key] = durations.get(key, 0) + ms
        add_batch_s = durations.get("addBatch", 0) / 1000
        return {
            "case": case,
            "rows": rows,
            "seconds": round(seconds, 2),
            "rows_per_s": round(rows / seconds),
            "mb_per_s": round(rows * EVENT_BYTES / seconds / MB, 1),
            "micro_batches": len(progress),
            "add_batch_s": round(add_batch_s, 2),
            "batch_rows_per_s": round(rows / add_batch_s) if add_batch_s else None,
            "startup_s": round(seconds - durations.get("triggerExecution", 0) / 1000, 2),
            "cpu_us_per_row": round(cpu["own_cpu_s"] / rows * 1e6, 2) if rows else None,
            "duration_ms": durations,
            "load1": round(load1, 2),
            **cpu,
        }

    def batch_read(self, case: str, make: Any, repeats: int, rows: int) -> dict[str, Any]:
        """Best of ``repeats`` batch reads ``make().write.format("noop")`` (rows not counted: the streaming
        form of the same read is checked)."""
        return self.keep_best(case, [self.batch_run(case, make, rows) for _ in range(repeats)])

    def batch_run(self, case: str, make: Any, rows: int) -> dict[str, Any]:
        """One batch read ``make().write.format("noop")`` of ``rows`` rows."""
        assert self.meter is not None
        load1 = os.getloadavg()[0]
        with self.meter.span() as cpu:
            started = time.perf_counter()
            make().write.format("noop").mode("overwrite").save()
            seconds = time.perf_counter() - started
        return {"case": case, "rows": rows, "seconds": round(seconds, 2), "rows_per_s": round(rows / seconds),
                "mb_per_s": round(rows * EVENT_BYTES / seconds / MB, 1), "load1": round(load1, 2),
                "cpu_us_per_row": round(cpu["own_cpu_s"] / rows * 1e6, 2), **cpu}  # fmt: skip

    def keep_best(self, case: str, runs: list[dict[str, Any]]) -> dict[str, Any]:
        """The fastest of ``runs`` (batch reads of one case) as the case's row, every run in ``runs``."""
        best = dict(max(runs, key=lambda r: r["rows_per_s"]))
        best["runs"] = [{k: r[k] for k in ("rows_per_s", "seconds", "load1")} for r in runs]
        self.rows.append(best)
        print(f"  {case}: {best['rows_per_s']:,} rows/s ({best['seconds']} s; load {best['load1']})", flush=True)
        return best

    def measure(self, case: str, make: Any, repeats: int, expect: int | None = None, **kw: Any) -> dict[str, Any]:
        """Best of ``repeats`` runs of ``make()`` (a fresh DataFrame each time); all runs kept in ``runs``."""
        runs = [self.query(case, make(), **kw) for _ in range(repeats)]
        for run in runs:
            if expect is not None and run["rows"] != expect:
                raise AssertionError(f"{case}: {run['rows']:,} rows, expected {expect:,}")
        best = dict(max(runs, key=lambda r: r["rows_per_s"]))
        best["runs"] = [{k: r[k] for k in ("rows_per_s", "seconds", "batch_rows_per_s", "load1")} for r in runs]
        self.rows.append(best)
        print(f"  {case}: {best['rows_per_s']:,} rows/s ({best['seconds']} s; data path "
              f"{best['batch_rows_per_s']:,} rows/s; load {best['load1']})", flush=True)  # fmt: skip
        return best

    # ---- frames ------------------------------------------------------------------------------------------
    def parquet(self, columns: tuple[str, ...] = ()) -> Any:
        frame = self.spark.readStream.schema(SCHEMA_DDL).parquet(str(self.parquet_dir))
        return frame.select(*columns) if columns else frame

    def segstore(self, stream: str, tier2: bool = False, batch: bool = False, partitions: int = 0) -> Any:
        options = {"controller": self.system.uri, "scope": SCOPE, "stream": stream, "startingOffsets": "earliest"}
        if tier2:
            options["tier2Location"] = str(self.data_dir / "tier2")
        if partitions > 1:
            options["minPartitions"] = str(partitions)
        return (self.spark.read if batch else self.spark.readStream).format("segstore").options(**options).load()

    def numpy(self, rows: int, batch_rows: int) -> Any:
        options = {"rows": str(rows), "partitions": str(self.args.segments), "batchRows": str(batch_rows)}
        return self.spark.readStream.format("bench_numpy").options(**options).load()

    def warm_up_write(self, exactly_once: bool, rows: int) -> None:
        """A first write of that kind (not recorded): the write path's Python workers and JIT."""
        options = {
            "controller": self.system.uri,
            "scope": SCOPE,
            "stream": f"warm-up-{'eo' if exactly_once else 'alo'}",
            "exactlyOnce": str(exactly_once).lower(),
        }
        self.query("warm-up", self.numpy(rows, 16384).select("event"), sink="segstore", options=options)

    # ---- the run -----------------------------------------------------------------------------------------
    def write(self, exactly_once: bool, stream: str) -> dict[str, Any]:
        options = {
            "controller": self.system.uri,
            "scope": SCOPE,
            "stream": stream,
            "exactlyOnce": str(exactly_once).lower(),
            "defaultNumSegments": str(self.args.segments),
        }
        case = f"write exactlyOnce={str(exactly_once).lower()}"
        self.flush_tier2()  # each write starts on a settled store, not beside the last one's Tier-2 flushes
        row = self.measure(case, lambda: self.parquet(("event",)), 1, self.args.rows, sink="segstore", options=options)
        stored = self.stream_bytes(stream)
        row["stream_bytes"] = stored
        if (exactly_once and stored != self.args.rows * FRAMED_BYTES) or stored < self.args.rows * FRAMED_BYTES:
            raise AssertionError(f"{case}: stream holds {stored:,} B, expected {self.args.rows * FRAMED_BYTES:,}")
        return row

    def run(self) -> dict[str, Any]:
        args = self.args
        info: dict[str, Any] = {}
        started = time.perf_counter()
        rows = 0 if args.latency_only else args.rows
        info["parquet_bytes"] = write_rows(self.parquet_dir, rows, args.segments, EVENT_BYTES) if rows else 0
        info["generate_s"] = round(time.perf_counter() - started, 1)
        info["standalone_start_s"] = round(self.system.start(), 1)
        started = time.perf_counter()
        self.start_spark()
        info["spark_start_s"] = round(time.perf_counter() - started, 1)
        info["spark_version"] = self.spark.version
        print(f"rows {args.rows:,} ({info['parquet_bytes'] / MB:.0f} MB Parquet); standalone ready in "
              f"{info['standalone_start_s']} s; Spark {self.spark.version} in {info['spark_start_s']} s",
              flush=True)  # fmt: skip
        if args.latency_seconds > 0:
            print(f"latency: {args.latency_seconds:g} s per case at {args.latency_rates} events/s", flush=True)
            cases = LatencyCases(self.spark, self.system.uri, self.work, args.latency_seconds, args.segments)
            self.latency = cases.run(args.latency_rates)
            self.latency_cold_start = cases.cold_start
        if args.latency_only:
            return info
        if args.pushdown_only:
            self.query("warm-up", self.numpy(args.rows // 4, 16384))
            info["pushdown"] = pushdown_case(self, SCOPE, FRAMED_BYTES)
            return info
        if args.partitions_only:
            self.query("warm-up", self.parquet())
            self.write_one_segment()
            info["flush_s"] = round(self.flush_tier2(), 2)
            self.partition_reads()
            return info
        repeats = args.repeats
        # warm-up (not recorded): JIT, Python worker daemon, first segstore connections
        self.query("warm-up", self.numpy(args.rows // 4, 16384))
        self.query("warm-up", self.parquet())
        self.warm_up_write(False, args.rows // 30)
        self.measure("source: parquet(event) -> noop", lambda: self.parquet(("event",)), repeats, args.rows)
        alo = self.write(False, "rows-alo")
        events = alo["stream_bytes"] // FRAMED_BYTES  # at least once: a resent block could add rows
        self.warm_up_write(True, args.rows // 10)
        self.write(True, "rows-eo")  # its transactions are merged before the restart below
        if not args.writes_only:
            self.reads(events, info)
            info["pushdown"] = pushdown_case(self, SCOPE, FRAMED_BYTES)
        for run in range(1, repeats):  # again at the end, where its Tier-2 flushes disturb no read
            self.write(False, f"rows-alo-{run}")  # (the first measured write of a run is the slow one)
            self.write(True, f"rows-eo-{run}")
        return info

    def reads(self, events: int, info: dict[str, Any]) -> None:
        """Cases 4-8 (``info`` gets the flush and restart timings)."""
        args, repeats = self.args, self.args.repeats
        self.measure("read (a) cache", lambda: self.segstore("rows-alo"), repeats, events)
        self.batch_read("batch read (a) cache", lambda: self.segstore("rows-alo", batch=True), repeats, events)
        if args.partitions:
            self.write_one_segment()
        info["flush_s"] = round(self.flush_tier2(), 2)
        self.measure("read (b) tier2 direct", lambda: self.segstore("rows-alo", tier2=True), repeats, events)
        read_b = lambda: self.segstore("rows-alo", tier2=True, batch=True)  # noqa: E731
        self.batch_read("batch read (b) tier2 direct", read_b, repeats, events)
        if args.partitions:
            self.partition_reads()
        info["restart"] = self.restart_standalone("rows-alo")
        self.measure("read (c) tier2 via segstore", lambda: self.segstore("rows-alo"), 1, events)
        self.measure("parquet (5 cols) -> noop", self.parquet, repeats, args.rows)
        for batch_rows in args.batch_rows:
            self.measure(f"numpy {batch_rows}/batch -> noop", lambda b=batch_rows: self.numpy(args.rows, b), repeats,
                         args.rows)  # fmt: skip

    def write_one_segment(self) -> None:
        """The rows into a new 1-segment stream (exactly once; not recorded) for :meth:`partition_reads`."""
        options = {"controller": self.system.uri, "scope": SCOPE, "stream": ONE_SEGMENT, "defaultNumSegments": "1"}
        self.query("setup", self.parquet(("event",)), sink="segstore", options=options)
        stored = self.stream_bytes(ONE_SEGMENT)
        if stored != self.args.rows * FRAMED_BYTES:
            raise AssertionError(f"{ONE_SEGMENT}: holds {stored:,} B, expected {self.args.rows * FRAMED_BYTES:,}")

    def partition_reads(self) -> None:
        """Case 9: batch reads of the 1-segment stream from Tier-2 (direct) by 1, 2, 4, 8 input partitions (option
        ``minPartitions``), then Spark's own batch Parquet source over the same rows, in the same run."""
        args, rows = self.args, self.args.rows
        cases: list[tuple[str, Any]] = []
        for n in args.partitions:
            make = lambda n=n: self.segstore(ONE_SEGMENT, tier2=True, batch=True, partitions=n)  # noqa: E731
            frame = make()
            if frame.rdd.getNumPartitions() != n:
                raise AssertionError(f"{n} partitions asked, {frame.rdd.getNumPartitions()} planned")
            if n == max(args.partitions) and frame.count() != rows:
                raise AssertionError(f"{ONE_SEGMENT} by {n} partitions: not {rows:,} rows")
            cases.append((f"batch 1 segment tier2 direct, {n} part.", make))
        for n in args.partitions:  # the same partitions from memory: what Spark's Python data source path allows
            options = {"rows": str(rows), "partitions": str(n), "batchRows": "32768"}
            numpy = lambda o=options: self.spark.read.format("bench_numpy").options(**o).load()  # noqa: E731
            cases.append((f"batch numpy 32768/batch, {n} part.", numpy))
        parquet = lambda: self.spark.read.schema(SCHEMA_DDL).parquet(str(self.parquet_dir))  # noqa: E731
        cases.append(("batch parquet (5 cols) -> noop", parquet))
        runs: dict[str, list[dict[str, Any]]] = {case: [] for case, _ in cases}
        for _ in range(args.repeats):  # interleaved: the machine's drift (a shared one) touches every case alike
            for case, make in cases:
                runs[case].append(self.batch_run(case, make, rows))
        for case, _ in cases:
            self.keep_best(case, runs[case])

    def close(self) -> None:
        if self.spark is not None:
            with contextlib.suppress(Exception):
                for query in self.spark.streams.active:
                    query.stop()
            self.spark.stop()
            self.spark = None
        self.system.stop()


SETTINGS = ("rows", "segments", "repeats", "batch_rows", "partitions", "pushdown_rows", "latency_seconds",
            "latency_rates")  # fmt: skip
COLUMNS = [
    ("case", "case"),
    ("rows_per_s", "rows/s"),
    ("mb_per_s", "MB/s"),
    ("seconds", "s"),
    ("batch_rows_per_s", "batch rows/s"),
    ("startup_s", "start s"),
    ("cpu_us_per_row", "cpu us/row"),
    ("cpu_driver", "cpu drv"),
    ("cpu_jvm", "cpu jvm"),
    ("cpu_pyworkers", "cpu py"),
    ("cpu_segmentstore", "cpu ss"),
    ("cpu_segmentstore_loop", "ss loop"),
    ("cpu_controller", "cpu ctl"),
    ("cpu_zookeeper", "cpu zk"),
    ("cpu_other", "cpu other"),
    ("load1", "load"),
    ("bytes_read", "bytes read"),
    ("read_ratio", "x window"),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="1,000,000 rows, one run per case")
    parser.add_argument(
        "--writes-only", action="store_true",
        help="only the source and write cases, the exactly-once write --repeats times (to work on the write path)",
    )  # fmt: skip
    parser.add_argument("--latency-only", action="store_true", help="only the latency cases (spark_latency.py)")
    parser.add_argument(
        "--partitions-only", action="store_true", help="only case 9 (the 1-segment partition reads and batch Parquet)"
    )
    parser.add_argument("--pushdown-only", action="store_true", help="only case 10 (a time window, pushdown on/off)")
    parser.add_argument("--pushdown-rows", type=int, help="events of case 10 (default 10,000,000; --quick 1,000,000)")
    parser.add_argument("--latency-seconds", type=float, help="per latency case (default 60, --quick 20; 0: none)")
    parser.add_argument("--latency-rates", default="2000,20000", help="events/s of the latency cases")
    parser.add_argument("--rows", type=int, help="events per case (default 3,000,000)")
    parser.add_argument("--segments", type=int, default=4, help="segments of the written streams (default 4)")
    parser.add_argument("--repeats", type=int, help="runs of each read case, best kept (default 3)")
    parser.add_argument("--batch-rows", default="16384,131072", help="rows per batch of bench_numpy")
    parser.add_argument(
        "--partitions", default="1,2,4,8", help="input partitions of the 1-segment batch reads (case 9; '' for none)"
    )
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="where the data directory lives (a real disk)")
    parser.add_argument("--out", type=Path, default=RESULTS / "spark.json", help="JSON output")
    parser.add_argument("--keep", action="store_true", help="keep the data directory (printed)")
    args = parser.parse_args()
    if args.writes_only and args.out == RESULTS / "spark.json":
        args.out = RESULTS / "spark-writes.json"
    if args.latency_only and args.out == RESULTS / "spark.json":
        args.out = RESULTS / "spark-latency.json"
    if args.partitions_only and args.out == RESULTS / "spark.json":
        args.out = RESULTS / "spark-partitions.json"
    if args.pushdown_only and args.out == RESULTS / "spark.json":
        args.out = RESULTS / "spark-pushdown.json"
    args.pushdown_rows = args.pushdown_rows or (1_000_000 if args.quick else 10_000_000)
    if args.latency_seconds is None:
        only = args.writes_only or args.partitions_only or args.pushdown_only
        args.latency_seconds = 0 if only else 20 if args.quick else 60
    args.latency_rates = [int(r) for r in args.latency_rates.split(",")]
    args.rows = args.rows or (1_000_000 if args.quick else 3_000_000)
    args.repeats = args.repeats or (1 if args.quick else 3)
    args.batch_rows = [int(b) for b in args.batch_rows.split(",")]
    args.partitions = [int(n) for n in args.partitions.split(",") if n.strip()]
    fs_type = filesystem_of(Path(args.dir))
    print(f"segstore standalone with data under {args.dir} ({fs_type}); {os.cpu_count()} CPUs; "
          f"Python {platform.python_version()}; Spark local[2] in this process", flush=True)  # fmt: skip
    load_before = os.getloadavg()
    if load_before[0] > 0.5:
        print(f"warning: load average {load_before[0]:.2f} before starting; something else uses the CPUs", flush=True)
    started = time.perf_counter()
    with contextlib.ExitStack() as stack:
        tmp = tempfile.mkdtemp(prefix="bench-spark-", dir=args.dir)
        if args.keep:
            print(f"keeping {tmp}")
        else:
            stack.callback(shutil.rmtree, tmp, ignore_errors=True)
        bench = Bench(args, Path(tmp))
        try:
            info = bench.run()
        except BaseException:
            print("standalone output tail:\n" + "\n".join(bench.system.output[-30:]), file=sys.stderr)
            raise
        finally:
            bench.close()
        problems = bench.system.problems()
    total_s = time.perf_counter() - started
    load_after = os.getloadavg()
    if bench.latency:
        table("Live tail, end to end (append -> row in foreachBatch), default trigger, local[2]", bench.latency,
              LATENCY_COLUMNS)  # fmt: skip
        print("\n".join(verdicts(bench.latency)))
    if bench.rows:
        table("Spark <-> segstore, 100 B events (Trigger.AvailableNow, one micro-batch, local[2])", bench.rows, COLUMNS)
        print_targets(bench.rows, args)
    for source, found in problems.items():
        if found["count"]:
            print(f"{source}: {found['count']} warnings/errors, first: {found['first'][:2]}")
    print(f"total {total_s:.0f} s; load average before {load_before[0]:.2f}, after {load_after[0]:.2f} "
          f"({os.cpu_count()} CPUs; the machine is shared: see cpu other)")  # fmt: skip
    document = {
        "benchmark": "spark",
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "dir": args.dir,
        "filesystem": fs_type,
        "event_bytes": EVENT_BYTES,
        "megabyte": MB,
        "quick": args.quick,
        "writes_only": args.writes_only,
        "partitions_only": args.partitions_only,
        "pushdown_only": args.pushdown_only,
        "measurement": "streaming queries with Trigger.AvailableNow (one micro-batch, fresh checkpoint); "
        "'batch read' cases: batch queries into noop; 'latency': live-tail queries (spark_latency.py)",
        "settings": {k: getattr(args, k) for k in SETTINGS},
        "targets": {
            "read_rows_per_s": READ_TARGET,
            "exactly_once_write_rows_per_s": WRITE_TARGET,
            "latency": "segstore p50 <= 1.5x and p99 <= 2x the rate source's; p50 and p99 <= 1.2x the python floor's",
        },
        "total_s": round(total_s, 1),
        "load_average_before": [round(v, 2) for v in load_before],
        "load_average_after": [round(v, 2) for v in load_after],
        **info,
        "latency": bench.latency,
        "latency_cold_start": bench.latency_cold_start,
        "results": bench.rows,
        "problems": problems,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(document, indent=2) + "\n")
    print(f"wrote {args.out}")


def print_targets(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    by_case = {r["case"]: r for r in rows}
    eo_writes = ", ".join(f"{r['rows_per_s']:,}" for r in rows if r["case"] == "write exactlyOnce=true")
    reads = "skipped (--writes-only)" if args.writes_only else "skipped (--partitions-only / --pushdown-only)"
    if not args.writes_only and not args.partitions_only and not args.pushdown_only:
        stream_read = max(by_case[c]["rows_per_s"] for c in by_case if c.startswith("read"))
        batch_read = max(by_case[c]["rows_per_s"] for c in by_case if c.startswith("batch read"))
        reads = f"best {stream_read:,} (streaming), {batch_read:,} (batch)"
    print(f"\ntargets: read >= {READ_TARGET:,} rows/s: {reads}; "
          f"exactly-once write >= {WRITE_TARGET:,} rows/s: {eo_writes}")  # fmt: skip
    parquet = by_case.get("batch parquet (5 cols) -> noop")
    for prefix, what in (("batch 1 segment", "a 1-segment stream from Tier-2"), ("batch numpy", "bench_numpy")):
        split = [r for r in rows if r["case"].startswith(prefix)]
        if parquet and split:
            base = parquet["rows_per_s"]
            ratios = ", ".join(f"{r['case'].rsplit(', ', 1)[1]} {r['rows_per_s'] / base:.2f}x" for r in split)
            print(f"batch read of {what} against Spark's batch Parquet ({base:,} rows/s; target >= 1.0x): {ratios}")


if __name__ == "__main__":
    main()
