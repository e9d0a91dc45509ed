"""Stopping a streaming query prints no traceback from Spark's Python streaming runner.

Spark runs a streaming source's reader in a Python process of its own
(``pyspark.sql.streaming.python_streaming_source_runner``) and talks to it over a socket. A query stopped while
Spark waits for that process (it is starting the reader, or answering a call) has its thread interrupted, which
closes the socket; when the reader is not set up yet Spark never stops the process either. The runner then reads
EOF, calls the reader's ``stop()`` and fails to report the EOF to the closed socket: a ``BrokenPipeError``
traceback on stderr. The source's ``stop()`` ends such a runner quietly.

The test holds the runner inside ``streamReader`` at a gate (two FIFOs) until the query is stopped, then lets it
go on, and reads the runner's own stderr (sent to a file at the gate).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import psutil
import pytest
from pyspark.sql.datasource import DataSourceStreamReader
from pyspark.sql.types import StructType
from spark_fixtures import Streams

from pravega_spark.read.source import SegstoreDataSource

pytestmark = pytest.mark.spark

SCOPE = "stopquiet"
RUNNER_EXIT_S = 60


def _gated_source() -> type[SegstoreDataSource]:
    """``segstore`` whose first stream reader waits at the gate named by option ``gate`` (a local class, so
    that Spark pickles it by value: the runner cannot import this test module)."""

    class GatedSegstoreDataSource(SegstoreDataSource):
        @classmethod
        def name(cls) -> str:
            return "segstore-gated"

        def streamReader(self, schema: StructType) -> DataSourceStreamReader:
            gate = Path(self.options["gate"])
            self.options = {k: v for k, v in self.options.items() if k.lower() != "gate"}
            try:
                os.rename(gate / "armed", gate / "taken")  # only the first reader (the runner's) waits
            except FileNotFoundError:
                return super().streamReader(schema)
            stderr = os.open(gate / "runner-stderr.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(stderr, 2)
            (gate / "pid").write_text(str(os.getpid()))
            with open(gate / "entered", "w"):  # a FIFO: returns once the test opens it
                pass
            with open(gate / "release") as release:  # a FIFO: returns once the test has opened and closed it
                release.read()
            return super().streamReader(schema)

    return GatedSegstoreDataSource


@pytest.mark.slow
def test_stop_while_the_runner_starts_the_reader_prints_no_traceback(
    spark: Any, streams: Streams, tmp_path: Path
) -> None:
    streams.create(SCOPE, "events", 1)
    streams.write(SCOPE, "events", [(b"event %d" % n, None) for n in range(10)])
    gate = tmp_path / "gate"
    gate.mkdir()
    (gate / "armed").touch()
    os.mkfifo(gate / "entered")
    os.mkfifo(gate / "release")
    source = _gated_source()
    spark.dataSource.register(source)
    query = (
        spark.readStream.format(source.name())
        .options(**streams.options(SCOPE, "events"), gate=str(gate), startingOffsets="earliest")
        .load()
        .writeStream.format("memory")
        .queryName("stop_quiet")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    with open(gate / "entered"):  # the runner is in streamReader, Spark waits for it
        pass
    runner = psutil.Process(int((gate / "pid").read_text()))
    query.stop()
    with open(gate / "release", "w"):
        pass
    runner.wait(RUNNER_EXIT_S)
    output = (gate / "runner-stderr.txt").read_text()
    assert "Traceback" not in output, output
