"""Stopping a ``foreachBatch`` query whose function waits in a Spark job: quiet with the driver setting the docs use.

Spark matches the interrupted function's Py4J message against ``StreamExecution.PROXY_ERROR``, a regular expression
that recurses once per character; the JVM's default 1 MiB thread stack overflows at ~2,300 characters and the stream
execution thread prints a ~1,000-line ``java.lang.StackOverflowError``. ``-Xss64m`` for the driver (README,
docs/spark.md, the demo, the notebooks) makes room. Both runs are real: the one without the setting pins Spark's
behaviour (when it stops overflowing, the setting can leave the docs).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SCENARIO = Path(__file__).parents[1] / "fixtures" / "spark_stop_scenario.py"
DOCUMENTED_SETTING = "-Xss64m"


def _stop_a_blocked_query(tmp_path: Path, java_options: str | None) -> subprocess.CompletedProcess[str]:
    marker = tmp_path / f"batch-started-{java_options or 'default'}"
    args = [sys.executable, str(SCENARIO), str(marker)] + ([java_options] if java_options else [])
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    result = subprocess.run(args, capture_output=True, text=True, env=env, timeout=420, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines() == ["stopped"]
    return result


def test_the_documented_driver_stack_keeps_a_stop_free_of_stack_overflows(tmp_path: Path) -> None:
    result = _stop_a_blocked_query(tmp_path, DOCUMENTED_SETTING)
    assert "StackOverflowError" not in result.stderr
    assert "Traceback" not in result.stderr


def test_without_it_spark_prints_a_stack_overflow_on_stop(tmp_path: Path) -> None:
    result = _stop_a_blocked_query(tmp_path, None)
    assert "java.lang.StackOverflowError" in result.stderr  # if this stops, Spark fixed it: drop the setting
    assert "java.util.regex.Pattern" in result.stderr


def test_the_docs_and_the_demo_use_the_setting() -> None:
    root = Path(__file__).parents[2]
    setting = f'"spark.driver.extraJavaOptions", "{DOCUMENTED_SETTING}"'
    for page in ("README.md", "docs/spark.md", "segstore_cli/demo.py"):
        assert setting in (root / page).read_text(), page
    for notebook in sorted((root / "notebooks").glob("*.ipynb")):
        assert setting in notebook.read_text().replace('\\"', '"'), notebook.name
