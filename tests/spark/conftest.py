"""Fixtures of the Spark tests: one ``segstore standalone`` and one SparkSession for the whole session.

Python workers must import ``pravega_spark`` (installed editable in the venv), so PYSPARK_PYTHON points at
this interpreter before pytest-spark starts the session.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from standalone_process import StandaloneProcess

from controller_client import BlockingStreamManager, ScalingPolicy, StreamConfiguration, StreamCut
from pravega_spark.connection import StreamConnection

os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable


@pytest.fixture(scope="session")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    """``segstore standalone`` in a child process (its own ZooKeeper, file Tier-1, filesystem Tier-2 under
    ``data_dir/tier2``), stopped at the end of the session."""
    data_dir: Path = tmp_path_factory.mktemp("spark-standalone")
    with StandaloneProcess(data_dir) as process:
        yield process


@pytest.fixture(scope="session")
def spark(spark_session: Any) -> Any:
    """pytest-spark's session with the ``segstore`` data source registered."""
    import pravega_spark

    pravega_spark.register(spark_session)
    return spark_session


class Streams:
    """Test-side access to the standalone: create streams, write events, scale, truncate, look up cuts."""

    def __init__(self, standalone: StandaloneProcess) -> None:
        self.controller_uri = standalone.controller_uri
        self.manager = BlockingStreamManager.connect(standalone.controller_uri)
        self.connection = StreamConnection(standalone.controller_uri)

    def close(self) -> None:
        self.manager.close()
        self.connection.close()

    def options(self, scope: str, stream: str) -> dict[str, str]:
        return {"controller": self.controller_uri, "scope": scope, "stream": stream}

    def create(self, scope: str, stream: str, segments: int = 1) -> None:
        self.manager.create_scope(scope)
        self.manager.create_stream(scope, stream, StreamConfiguration(ScalingPolicy.fixed(segments)))

    def write(self, scope: str, stream: str, events: Sequence[tuple[bytes, str | None]]) -> None:
        with self.manager.create_writer(scope, stream) as writer:
            writer.write_events(list(events)).result(60)

    def scale(self, scope: str, stream: str, sealed: Sequence[int], ranges: Sequence[tuple[float, float]]) -> None:
        controller = self.connection.controller
        started = self.connection.run(
            controller.scale(scope, stream, list(sealed), list(ranges), int(time.time() * 1000))
        )
        deadline = time.monotonic() + 30
        while not self.connection.run(controller.check_scale(scope, stream, started.epoch)):
            assert time.monotonic() < deadline, "scale did not complete"
            time.sleep(0.02)

    def split_first(self, scope: str, stream: str) -> None:
        """Split the first current segment in two."""
        first = self.manager.current_segments(scope, stream)[0]
        middle = (first.key_start + first.key_end) / 2
        self.scale(scope, stream, [first.segment_id], [(first.key_start, middle), (middle, first.key_end)])

    def merge_first_two(self, scope: str, stream: str) -> None:
        """Merge the first two current segments into one."""
        a, b = self.manager.current_segments(scope, stream)[:2]
        self.scale(scope, stream, [a.segment_id, b.segment_id], [(a.key_start, b.key_end)])

    def tail(self, scope: str, stream: str) -> StreamCut:
        return self.manager.tail_cut(scope, stream)

    def events(self, scope: str, stream: str) -> list[tuple[int, int, bytes]]:
        """Every event from the head to the tail as ``(segment_id, offset, data)`` (our reader)."""
        end = self.manager.tail_cut(scope, stream)
        with self.manager.create_reader(scope, stream, end=end) as reader:
            return [(e.segment_id, e.offset, bytes(e.data)) for e in reader]


@pytest.fixture(scope="session")
def streams(standalone: StandaloneProcess, spark_session: Any) -> Iterator[Streams]:
    """Made after Spark's JVM is up: pyspark starts it with a preexec_fn, and a fork while this helper's
    event-loop threads run can deadlock in the child."""
    helper = Streams(standalone)
    try:
        yield helper
    finally:
        helper.close()
