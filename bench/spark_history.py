"""Benchmark of ``pravega_spark.history`` (a stream's Tier-2 history through Spark's own Parquet reader) next to
Spark's Parquet source over the very same chunk files and ``spark.read.format("segstore")``, in one run.

``segstore standalone`` (filesystem Tier-2) runs as a child process on a temporary directory; Spark runs
``local[2]`` in this process. ``--rows`` events of 100 random bytes are written over ``--segments`` segments and
flushed to Tier-2 (not timed). Each case is a batch read into the ``noop`` sink, ``--repeats`` rounds of the
cases in turn (interleaved, so a busy spell of a shared machine falls on every case alike; the best run is kept,
every run is in the JSON):

1. ``parquet (same files)``: ``spark.read.schema(...).parquet(files)`` of the chunk files history reads, all four
   chunk columns (``offset``, ``event``, ``ingest_time_ms``, ``framed``): the target (the DataFrame made once, as
   for cases 2 and 4: the read alone is timed, not the listing of the files);
2. ``history``: ``pravega_spark.history(...).df``, the source's six columns (the read alone: planned and pinned
   once before);
3. ``history + planning``: the same with ``pravega_spark.history`` called each time (listing the chunks, planning,
   pinning, releasing: the driver's round trips to the controller and the segment store);
4. ``history, join by path``: the way history reads files it cannot link (S3, Spark on other hosts without
   ``linkDir``): each row's file looked up by ``_metadata.file_path``
   (:func:`~pravega_spark.read.history_rows.joined_rows`);
5. ``format("segstore")``: the Python data source over the same stream (its executors read the chunks with pyarrow).

``rows/s`` = rows / wall time of the read; ``x parquet`` = that over case 1's. Target: history >= 0.9x parquet.
Prints a table, writes JSON (default ``bench/results/spark_history.json``)::

    python bench/spark_history.py [--rows 2000000] [--segments 2] [--repeats 3] [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(BENCH), str(REPO), os.environ.get("PYTHONPATH")]))
os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable

from benchlib import MB, filesystem_of, table  # noqa: E402
from e2e_system import Standalone  # noqa: E402

import pravega_spark  # noqa: E402
from controller_client import BlockingStreamManager, ScalingPolicy, StreamConfiguration  # noqa: E402
from pravega_spark.read.history import PARQUET_SCHEMA  # noqa: E402
from pravega_spark.read.history_rows import joined_rows  # noqa: E402
from segment_store.client import BlockingClient  # noqa: E402

EVENT_BYTES = 100
SCOPE, STREAM = "bench", "history"
RESULTS = REPO / "bench" / "results"
TARGET = 0.9


def _write(uri: str, rows: int, segments: int) -> None:
    manager = BlockingStreamManager.connect(uri)
    try:
        manager.create_scope(SCOPE)
        manager.create_stream(SCOPE, STREAM, StreamConfiguration(ScalingPolicy.fixed(segments)))
        payload = os.urandom(EVENT_BYTES * 1024)
        with manager.create_writer(SCOPE, STREAM) as writer:
            batch = 20_000
            for first in range(0, rows, batch):
                events: list[tuple[bytes, str | None]] = [
                    (payload[(i % 1024) * EVENT_BYTES : (i % 1024 + 1) * EVENT_BYTES], f"k{i % 64}")
                    for i in range(first, min(first + batch, rows))
                ]
                writer.write_events(events).result(300)
    finally:
        manager.close()


def _run(case: str, make: Any, rows: int) -> dict[str, Any]:
    load1 = os.getloadavg()[0]
    started = time.perf_counter()
    make()
    seconds = time.perf_counter() - started
    return {"case": case, "rows": rows, "seconds": round(seconds, 2), "rows_per_s": round(rows / seconds),
            "mb_per_s": round(rows * EVENT_BYTES / seconds / MB, 1), "load1": round(load1, 2)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--segments", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None, help="where the standalone's data goes (default: tmp)")
    parser.add_argument("--out", type=Path, default=RESULTS / "spark_history.json")
    args = parser.parse_args()

    from pyspark.sql import SparkSession

    work = Path(tempfile.mkdtemp(prefix="spark-history-", dir=args.dir))
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    pravega_spark.register(spark)
    system = Standalone(work / "data")
    system.start()
    try:
        started = time.perf_counter()
        _write(system.uri, args.rows, args.segments)
        with BlockingClient(("127.0.0.1", system.segmentstore_port)) as client:
            for container in range(system.container_count):
                client.flush_to_storage(container)
        print(f"rows {args.rows:,} written and flushed in {time.perf_counter() - started:.1f} s", flush=True)
        options = {"controller": system.uri, "scope": SCOPE, "stream": STREAM}
        with pravega_spark.history(spark, **options) as probe:
            files = probe.files
            assert probe.df.count() == args.rows, "history does not hold every row"
            assert probe.plan.frontier == probe.tail, "not everything is in Tier-2"

        plain = spark.read.schema(PARQUET_SCHEMA).parquet(*files)  # made once, as history's: the read alone is timed

        def parquet() -> None:
            plain.write.format("noop").mode("overwrite").save()

        held = pravega_spark.history(spark, **options)  # planned and pinned once: the read alone is timed
        assert held.links is not None, "local mode: history reads through links"

        def history() -> None:
            held.df.write.format("noop").mode("overwrite").save()

        def planned() -> None:
            with pravega_spark.history(spark, **options) as read:
                read.df.write.format("noop").mode("overwrite").save()

        by_path = joined_rows(spark, held.plan.files, SCOPE, STREAM)

        def joined() -> None:
            by_path.write.format("noop").mode("overwrite").save()

        def source() -> None:
            spark.read.format("segstore").options(**options).load().write.format("noop").mode("overwrite").save()

        cases = [
            ("parquet (same files)", parquet),
            ("history", history),
            ("history + planning", planned),
            ("history, join by path", joined),
            ('format("segstore")', source),
        ]
        for _, make in cases:  # warm-up: JIT, Python workers, file system cache
            make()
        runs: dict[str, list[dict[str, Any]]] = {case: [] for case, _ in cases}
        for _ in range(args.repeats):
            for case, make in cases:
                runs[case].append(_run(case, make, args.rows))
        rows = []
        for case, _ in cases:
            best = dict(max(runs[case], key=lambda r: r["rows_per_s"]))
            best["runs"] = [{k: r[k] for k in ("rows_per_s", "seconds", "load1")} for r in runs[case]]
            rows.append(best)
        base = rows[0]["rows_per_s"]
        for row in rows:
            row["x_parquet"] = round(row["rows_per_s"] / base, 2)
        columns = [("case", "case"), ("rows_per_s", "rows/s"), ("mb_per_s", "MB/s"), ("seconds", "s"),
                   ("x_parquet", "x parquet"), ("load1", "load")]  # fmt: skip
        table(f"history read vs Spark's Parquet source, {args.rows:,} rows of {EVENT_BYTES} B", rows, columns)
        verdict = rows[1]["x_parquet"] >= TARGET
        print(f"\nhistory {rows[1]['x_parquet']}x parquet: {'meets' if verdict else 'misses'} the {TARGET}x target")
        info = {
            "rows": args.rows,
            "segments": args.segments,
            "files": len(files),
            "repeats": args.repeats,
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "filesystem": filesystem_of(work),
            "target_x_parquet": TARGET,
            "meets_target": verdict,
        }
        held.close()
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"info": info, "cases": rows}, indent=2) + "\n")
        print(f"JSON: {args.out}")
    finally:
        system.stop()
        spark.stop()


if __name__ == "__main__":
    main()
