"""The main job behind ``./run demo``: a standalone segstore and a Spark job through it, end to end.

1. Starts ``segstore standalone`` (ZooKeeper, controller, segment store; file Tier-1, filesystem Tier-2)
   as a child process, as a user would in a terminal.
2. Spark writes 100,000 orders to a stream of 4 segments through the ``segstore`` sink (exactly-once:
   one transaction per task, committed by the driver), routed by customer.
3. A streaming query reads the stream from its head (``Trigger.AvailableNow``, at most 1 MB per
   micro-batch) into a memory table; a batch query reads it too.
4. Prints a summary (rows, micro-batches, rows per segment, rows/s) and checks that every order was read
   exactly once and each customer's orders in order.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ORDERS = 100_000
CUSTOMERS = 50


def _start_standalone(data_dir: Path) -> tuple[subprocess.Popen[str], str]:
    from segstore_shared.coordination.zookeeper_server import free_port

    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "segstore_cli", "standalone", "--data-dir", str(data_dir),
         "--controller-port", str(port), "--segmentstore-port", str(free_port())],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    assert process.stdout is not None
    for line in process.stdout:
        print(f"[standalone] {line.rstrip()}", flush=True)
        if "ready" in line:
            return process, f"tcp://127.0.0.1:{port}"
    raise RuntimeError(f"segstore standalone exited with {process.wait()} before it was ready")


def _spark_job(controller: str, checkpoint: str) -> bool:
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    import pravega_spark

    ours = SparkContext._active_spark_context is None  # a session the caller runs is theirs to stop, not ours
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("segstore-demo")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.extraJavaOptions", "-Xss64m")  # a quiet stop of streaming queries: docs/spark.md
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    pravega_spark.register(spark)  # not only Spark's own lookup, which runs the JVM's Python (PYSPARK_PYTHON)
    try:
        stream_name = f"orders-{int(time.time())}"  # a new stream per run: a kept data dir holds every run's
        options = {"controller": controller, "scope": "demo", "stream": stream_name}
        orders = spark.range(ORDERS).selectExpr(
            f"concat('customer-', id % {CUSTOMERS}, ':order-', id) AS event",
            f"concat('customer-', id % {CUSTOMERS}) AS routing_key",
        )
        started = time.perf_counter()
        orders.write.format("segstore").options(**options, defaultNumSegments="4").mode("append").save()
        wrote_s = time.perf_counter() - started
        print(f"[spark] wrote {ORDERS:,} orders to demo/{stream_name} exactly-once in {wrote_s:.1f} s (first job)")

        started = time.perf_counter()
        stream = (
            spark.readStream.format("segstore")
            .options(**options, startingOffsets="earliest", maxBytesPerTrigger="1000000")
            .load()
        )
        query = (
            stream.writeStream.format("memory")
            .queryName("orders_read")
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        read_s = time.perf_counter() - started
        seen = spark.table("orders_read")
        batches = len(query.recentProgress)
        rows = seen.count()
        print(f"[spark] streaming read {rows:,} rows in {batches} micro-batches, {read_s:.1f} s")
        per_segment = seen.groupBy("segment_id").count().orderBy("segment_id").collect()
        for row in per_segment:
            print(f"[spark]   segment {row['segment_id']}: {row['count']:,} rows")

        events = [r["event"].decode() for r in seen.orderBy("segment_id", "offset").select("event").collect()]
        exactly_once = len(events) == ORDERS and len(set(events)) == ORDERS
        last: dict[str, int] = {}
        in_order = True
        for event in events:
            customer, order = event.split(":order-")
            in_order &= int(order) > last.get(customer, -1)
            last[customer] = int(order)
        batch_rows = spark.read.format("segstore").options(**options).load().count()
        print(f"[spark] batch read {batch_rows:,} rows")
        print(f"[check] every order exactly once: {exactly_once}; each customer's orders in order: {in_order}")
        return exactly_once and in_order and batch_rows == ORDERS
    finally:
        if ours:
            spark.stop()
        else:
            spark.catalog.dropTempView("orders_read")


def run_demo(data_dir: Path | None = None) -> int:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    with tempfile.TemporaryDirectory(prefix="segstore-demo-") as scratch:
        root = data_dir or Path(scratch) / "data"
        root.mkdir(parents=True, exist_ok=True)
        standalone, controller = _start_standalone(root)
        try:
            passed = _spark_job(controller, str(Path(scratch) / "checkpoint"))
        finally:
            standalone.terminate()
            standalone.wait(60)
        print("all steps passed" if passed else "a check failed", flush=True)
        return 0 if passed else 1
