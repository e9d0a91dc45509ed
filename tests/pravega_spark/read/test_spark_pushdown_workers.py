"""Filter pushdown whichever way pyspark runs its Python planners: a read works with
``spark.sql.python.filterPushdown.enabled`` on (pruned) and off (everything read, the same rows), with pyspark's
worker daemon (``spark.python.use.daemon``, the default) and without it (each planner its own
``python -m pyspark.sql.worker...`` process). pyspark fails a read without pushdown whose reader takes filters, so
``pravega_spark.read.pushdown_readers`` must tell its planner apart in both process layouts.

The daemon setting is fixed for a Spark session's life: each layout runs in a Spark of its own
(``tests/fixtures/spark_pushdown_scenario.py``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from spark_fixtures import Streams

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SCENARIO = Path(__file__).parents[2] / "fixtures" / "spark_pushdown_scenario.py"
SCOPE, STREAM = "pushdown-workers", "events"
EVENTS = 200


@pytest.fixture(scope="module")
def written(streams: Streams) -> int:
    """``EVENTS`` events in one segment; the offset of the event three quarters in."""
    streams.create(SCOPE, STREAM, segments=1)
    streams.write(SCOPE, STREAM, [(f"event-{i:04d}".encode(), "k") for i in range(EVENTS)])
    offsets = sorted(offset for _, offset, _ in streams.events(SCOPE, STREAM))
    return offsets[3 * EVENTS // 4]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("use_daemon", ["true", "false"])
def test_a_read_works_with_pushdown_on_and_off_with_and_without_the_worker_daemon(
    streams: Streams, written: int, use_daemon: str, tmp_path: Path
) -> None:
    path = os.pathsep.join([str(Path(__file__).parents[3]), os.environ.get("PYTHONPATH", "")])  # this checkout first
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYTHONPATH": path}
    where = f"offset >= {written}"
    args = [sys.executable, str(SCENARIO), streams.controller_uri, SCOPE, STREAM, use_daemon, where]
    result = subprocess.run(args, capture_output=True, text=True, env=env, timeout=540, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    answer = json.loads(result.stdout.splitlines()[-1])
    assert answer["true"]["rows"] == answer["false"]["rows"]
    assert len(answer["true"]["rows"]) == EVENTS // 4
    assert answer["true"]["partitions"] < answer["false"]["partitions"]  # pruned only with pushdown on
