"""A Spark batch read of history in Tier-2 reads the Parquet chunks straight from where the segment store says they
are (segstore's ``ListStorageChunkLocations``), without ``tier2Location``; a ``tier2Location`` where the chunks are
not overrides that and everything comes through the segment store.

The proof is the segment store's own count of the bytes it answered reads with (``segstore_read_bytes_total``, on
its ``--metrics-port``): history read directly never passes through it, the Tier-1 tail does.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from spark_fixtures import Streams
from standalone_process import StandaloneProcess

from segment_store.client import BlockingClient

pytestmark = [pytest.mark.spark, pytest.mark.slow]


class _Measured:
    def __init__(self, process: StandaloneProcess, metrics_port: int, streams: Streams) -> None:
        self.process = process
        self.metrics_port = metrics_port
        self.streams = streams

    def read_bytes(self) -> float:
        """Bytes the segment store has answered reads with so far (from cache and from Tier-2)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=30) as response:
            text = response.read().decode()
        return sum(
            sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if sample.name == "segstore_read_bytes_total"
        )

    def flush(self) -> None:
        with BlockingClient(self.process.segmentstore_endpoint) as client:
            for container in range(self.process.container_count):
                client.flush_to_storage(container)


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory, spark_session: Any) -> Iterator[_Measured]:
    """A standalone of its own with metrics on (both ports read from its banner)."""
    data_dir: Path = tmp_path_factory.mktemp("tier2-direct")
    with StandaloneProcess(data_dir, extra_args=("--metrics-port", "0")) as process:
        streams = Streams(process)
        try:
            yield _Measured(process, process.metrics_ports[1], streams)
        finally:
            streams.close()


def _events(prefix: str, count: int) -> list[tuple[bytes, str | None]]:
    return [(f"{prefix}-{i:05d}".encode() + b"." * (i % 300), f"key-{i % 8}") for i in range(count)]


def _read(spark: Any, measured: _Measured, stream: str, **options: str) -> tuple[list[tuple[int, int, bytes]], float]:
    """The rows of a batch read and the bytes the segment store served for it."""
    before = measured.read_bytes()
    df = spark.read.format("segstore").options(**measured.streams.options("t2", stream), **options).load()
    rows = sorted((r.segment_id, r.offset, bytes(r.event)) for r in df.collect())
    return rows, measured.read_bytes() - before


def test_history_in_tier2_is_read_by_executors_without_tier2_location(spark: Any, measured: _Measured) -> None:
    streams = measured.streams
    streams.create("t2", "direct", segments=2)
    streams.write("t2", "direct", _events("old", 6000))
    measured.flush()
    history = sum(streams.tail("t2", "direct").positions.values())
    streams.write("t2", "direct", _events("new", 300))  # the tail: in Tier-1 (and the cache) only
    tail = sum(streams.tail("t2", "direct").positions.values()) - history
    assert history > 500_000

    rows, served = _read(spark, measured, "direct")
    expected = sorted(streams.events("t2", "direct"))
    assert rows == expected and len(rows) == 6300
    assert served <= tail  # the history came straight from the chunks; without the extension served >= history

    elsewhere = measured.process.data_dir / "not-tier2"
    elsewhere.mkdir()
    rows, served = _read(spark, measured, "direct", tier2Location=str(elsewhere))  # overrides: nothing there
    assert rows == expected
    assert served >= history + tail  # so everything came through the segment store

    rows, served = _read(spark, measured, "direct", tier2Location=str(measured.process.data_dir / "tier2"))
    assert rows == expected and served <= tail  # the right root given: read directly as before
