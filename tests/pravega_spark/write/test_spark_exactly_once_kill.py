"""Exactly-once across a driver crash: kill -9 the Spark driver after the sink committed a micro-batch's
transactions and recorded its batch id, before Spark wrote its own commit log; restart from the checkpoint.

The streaming query runs in a child Python process with its own SparkSession (and so its own JVM), started
in a new session so the whole driver is one process group. ``SEGSTORE_SPARK_SINK_CRASH=committed:1`` makes
the sink's driver-side commit of batch 1 SIGKILL that group right after the batch is recorded done and its
transactions are committed (no timing guesses). The checkpoint then holds the offsets of batch 1 but not
its commit, so the restarted query replays batch 1: its new transactions must be aborted, and every input
row must be in the stream exactly once.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from standalone_process import StandaloneProcess

from controller_client import BlockingStreamManager, ControllerClient, StreamManager
from pravega_spark.write.commit_log import DONE, BatchRecord, CommitLog
from pravega_spark.write.sink import CRASH_ENV, CRASH_PGID_ENV

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SCOPE = "killtest"
STREAM = "events"
FILES = 4
LINES = 250

DRIVER = rf"""
import os, sys
controller, scope, stream, source, checkpoint = sys.argv[1:6]
if os.environ.get("{CRASH_ENV}"):
    os.environ["{CRASH_PGID_ENV}"] = str(os.getpgrp())  # the sink's commit kills this whole process group
os.environ["PYSPARK_PYTHON"] = sys.executable
from pyspark.sql import SparkSession
import pravega_spark

spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
         .config("spark.sql.shuffle.partitions", "2").config("spark.sql.catalogImplementation", "in-memory")
         .getOrCreate())
pravega_spark.register(spark)
query = (spark.readStream.format("text").option("maxFilesPerTrigger", 1).load(source)
         .selectExpr("value AS event", "substring_index(value, '-', 2) AS routing_key")
         .writeStream.format("segstore")
         .option("controller", controller).option("scope", scope).option("stream", stream)
         .option("defaultNumSegments", "2").option("checkpointLocation", checkpoint)
         .start())
print("QUERY", query.id, flush=True)
query.processAllAvailable()
query.stop()
spark.stop()
print("DONE", flush=True)
"""


def _session_processes(sid: int) -> list[int]:
    """Pids of live processes in session ``sid`` (the driver's descendants that survived)."""
    out = subprocess.run(["ps", "-e", "-o", "pid=,sid=,stat="], capture_output=True, text=True, check=True).stdout
    return [
        int(p) for p, s, stat in (line.split()[:3] for line in out.splitlines()) if int(s) == sid and "Z" not in stat
    ]


def _run_driver(args: list[str], env: dict[str, str], timeout_s: float = 240.0) -> tuple[int, str]:
    process = subprocess.Popen(
        [sys.executable, "-c", DRIVER, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env=env,
    )
    try:
        output, _ = process.communicate(timeout=timeout_s)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        deadline = time.monotonic() + 30
        while (left := _session_processes(process.pid)) and time.monotonic() < deadline:
            time.sleep(0.5)  # Python workers exit once the JVM's pipes close
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    return process.returncode, output


def _lines(standalone: StandaloneProcess) -> collections.Counter[bytes]:
    with BlockingStreamManager.connect(standalone.controller_uri) as manager:
        end = manager.tail_cut(SCOPE, STREAM)
        return collections.Counter(e.data for e in manager.create_reader(SCOPE, STREAM, end=end))


def _records(standalone: StandaloneProcess, query: str) -> list[BatchRecord | None]:
    async def read() -> list[BatchRecord | None]:
        controller = await ControllerClient.connect(standalone.controller_uri)
        manager = StreamManager(controller)
        try:
            log = CommitLog(manager.client, SCOPE, STREAM)
            return [found[0] if (found := await log.get(query, b)) else None for b in range(FILES)]
        finally:
            await manager.close()
            await controller.close()

    return asyncio.run(read())


def _expected(files: range) -> collections.Counter[bytes]:
    return collections.Counter(f"file{n}-{i}".encode() for n in files for i in range(LINES))


def test_driver_killed_after_commit_before_spark_commit_log(standalone: StandaloneProcess, tmp_path: Path) -> None:
    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    source.mkdir()
    for n in range(FILES):
        (source / f"part-{n}.txt").write_text("".join(f"file{n}-{i}\n" for i in range(LINES)))
        os.utime(source / f"part-{n}.txt", (1_000_000 + n, 1_000_000 + n))  # file source order: by time
    args = [standalone.controller_uri, SCOPE, STREAM, str(source), str(checkpoint)]
    base_env = {k: v for k, v in os.environ.items() if k not in (CRASH_ENV, CRASH_PGID_ENV)}

    code, output = _run_driver(args, {**base_env, CRASH_ENV: "committed:1"})

    assert code == -signal.SIGKILL, output[-3000:]
    assert "DONE" not in output
    query = next(line.split()[1] for line in output.splitlines() if line.startswith("QUERY "))
    assert (checkpoint / "offsets" / "1").exists()
    assert (checkpoint / "commits" / "0").exists() and not (checkpoint / "commits" / "1").exists()
    before = _records(standalone, query)
    assert [r.state if r else None for r in before] == [DONE, DONE, None, None]
    assert _lines(standalone) == _expected(range(2))  # batches 0 and 1 are in the stream, once

    code, output = _run_driver(args, base_env)

    assert code == 0, output[-3000:]
    assert f"QUERY {query}" in output  # the same query, restarted from its checkpoint
    assert (checkpoint / "commits" / "3").exists()  # batch 1 was replayed, then 2 and 3 ran
    after = _records(standalone, query)
    assert [r.state if r else None for r in after] == [DONE] * FILES
    assert after[1] == before[1]  # the replay committed nothing: batch 1's record kept its transactions
    lines = _lines(standalone)
    assert lines == _expected(range(FILES))
    assert set(lines.values()) == {1}
