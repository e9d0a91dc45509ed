"""``trustStore`` on a cluster: a path with a file is used as it is; else the file of that name Spark shipped to a
Python worker (``SparkFiles``); else the path as given, so that reading it fails naming it."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark import SparkFiles

from pravega_spark.connection import shipped_file
from pravega_spark.options.common import StreamTarget

pytestmark = pytest.mark.unit


@pytest.fixture
def shipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A Python worker's SparkFiles directory holding ``ca.pem``."""
    root = tmp_path / "spark-files"
    root.mkdir()
    (root / "ca.pem").write_text("shipped")
    monkeypatch.setattr(SparkFiles, "_is_running_on_worker", True)
    monkeypatch.setattr(SparkFiles, "_root_directory", str(root))
    return root


def test_shipped_file_with_a_file_at_the_path_is_the_path(tmp_path: Path, shipped: Path) -> None:
    here = tmp_path / "ca.pem"
    here.write_text("here")
    assert shipped_file(str(here)) == str(here)


def test_shipped_file_with_no_file_there_is_the_one_spark_shipped(tmp_path: Path, shipped: Path) -> None:
    assert shipped_file("ca.pem") == str(shipped / "ca.pem")
    assert shipped_file(str(tmp_path / "elsewhere" / "ca.pem")) == str(shipped / "ca.pem")  # the driver's path
    target = StreamTarget("tls://localhost:9090", "s", "t", trust_store="ca.pem")
    assert target.controller_config().trust_store == str(shipped / "ca.pem")


def test_shipped_file_with_nothing_shipped_is_the_path_as_given(tmp_path: Path, shipped: Path) -> None:
    assert shipped_file("absent.pem") == "absent.pem"
    assert shipped_file(None) is None


def test_shipped_file_outside_a_python_worker_is_the_path_as_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(SparkFiles, "_is_running_on_worker", False)
    assert shipped_file("ca.pem") == "ca.pem"
