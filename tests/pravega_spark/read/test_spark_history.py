"""``pravega_spark.history``: a stream's Tier-2 history read by Spark's own Parquet reader, the rest by the
``segstore`` source, gives exactly the rows of ``spark.read.format("segstore")``; its chunk files are pinned while
the read runs, so compaction and truncation underneath it lose nothing, and they are collected once the pin ends.

Each test has a standalone of its own, with a short garbage collection delay and compaction every second, so
that what a pin prevents would happen within the test.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from spark_fixtures import Streams
from standalone_process import StandaloneProcess

import pravega_spark
from controller_client import StreamCut
from controller_client.model import qualified_segment_name
from pravega_spark.read.history_rows import joined_rows
from segment_store.client import BlockingClient

pytestmark = [pytest.mark.spark, pytest.mark.slow]

FAST_GC = {
    "SEGSTORE_SLTS_GC_DELAY_S": "0.2",
    "SEGSTORE_SLTS_COMPACTION_INTERVAL_S": "1",
    "SEGSTORE_SLTS_COMPACTION_MIN_CHUNKS": "2",
}


class _System:
    def __init__(self, process: StandaloneProcess) -> None:
        self.process = process
        self.streams = Streams(process)

    def flush(self) -> None:
        with BlockingClient(self.process.segmentstore_endpoint) as client:
            for container in range(self.process.container_count):
                client.flush_to_storage(container)

    def write_flushed(self, scope: str, stream: str, prefix: str, count: int) -> None:
        self.streams.write(scope, stream, _events(prefix, count))
        self.flush()

    def chunk_names(self, scope: str, stream: str, segment_id: int) -> set[str]:
        with BlockingClient(self.process.segmentstore_endpoint) as client:
            name = qualified_segment_name(scope, stream, segment_id)
            return {c.chunk_name for c in client.list_storage_chunks(name)}

    def pin_ids(self) -> list[str]:
        """The live pins' ids, as the segment store lists them (``ListChunkPins``; what ``admin pins`` shows)."""
        with BlockingClient(self.process.segmentstore_endpoint) as client:
            return [p.pin_id for c in range(self.process.container_count) for p in client.list_chunk_pins(c)]

    def admin_pins(self) -> list[dict[str, Any]]:
        command = [sys.executable, "-m", "segstore_cli", "admin", "--controller", self.process.controller_uri]
        done = subprocess.run([*command, "pins", "--json"], capture_output=True, text=True, timeout=120, check=True)
        found: list[dict[str, Any]] = json.loads(done.stdout)
        return found


@pytest.fixture
def system(tmp_path: Path, spark_session: Any) -> Iterator[_System]:
    with StandaloneProcess(tmp_path / "data", env=FAST_GC) as process:
        made = _System(process)
        try:
            yield made
        finally:
            made.streams.close()


def _events(prefix: str, count: int) -> list[tuple[bytes, str | None]]:
    return [(f"{prefix}-{i:05d}".encode() + b"." * (i % 200), f"key-{i % 16}") for i in range(count)]


def _rows(df: Any) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in df.collect())


def _plain(spark: Any, system: _System, scope: str, stream: str) -> list[tuple[Any, ...]]:
    return _rows(spark.read.format("segstore").options(**system.streams.options(scope, stream)).load())


def _until(condition: Callable[[], bool], what: str, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.1)


def _local(uri: str) -> Path:
    return Path(urllib.request.url2pathname(urllib.parse.urlsplit(uri).path) if "://" in uri else uri)


def test_history_equals_the_plain_read_after_scale_transaction_and_truncation(spark: Any, system: _System) -> None:
    streams = system.streams
    streams.create("h", "mixed", segments=2)
    system.write_flushed("h", "mixed", "first", 1500)
    cut = streams.tail("h", "mixed")
    system.write_flushed("h", "mixed", "second", 1500)
    streams.split_first("h", "mixed")
    system.write_flushed("h", "mixed", "third", 1500)
    writer = streams.manager.create_txn_writer("h", "mixed")
    try:
        txn = writer.begin()
        for data, key in _events("txn", 700):
            txn.write_event(data, key)
        txn.flush()
        txn.commit()
    finally:
        writer.close()
    _until(lambda: len(streams.events("h", "mixed")) == 5200, "the transaction is merged")
    system.flush()
    streams.manager.truncate(cut)
    streams.write("h", "mixed", _events("tail", 400))  # not flushed: above the storage length

    with pravega_spark.history(spark, **streams.options("h", "mixed")) as read:
        columns = [(f.name, f.dataType.simpleString()) for f in read.df.schema.fields]
        rows = _rows(read.df)
        assert read.files  # (the tail is flushed by itself 10 s after it was written: both parts or one)
        assert read.links is not None and read.links.is_dir()  # local mode: the files are read through links
        # The other way to read the files (S3, Spark on other hosts): a join on each row's path, the same rows.
        tier2 = _rows(joined_rows(spark, read.plan.files, "h", "mixed"))
        rest = []
        if read.plan.frontier != read.tail:
            cut = {"startingOffsets": read.plan.frontier.to_json(), "endingOffsets": read.tail.to_json()}
            rest = _rows(spark.read.format("segstore").options(**streams.options("h", "mixed"), **cut).load())
        assert sorted(tier2 + rest) == rows and tier2
    assert not read.links.exists()  # removed with the pins; the chunk files stay
    plain_df = spark.read.format("segstore").options(**streams.options("h", "mixed")).load()
    assert columns == [(f.name, f.dataType.simpleString()) for f in plain_df.schema.fields]
    assert rows == _rows(plain_df)
    assert len(rows) == 3700 + 400 and len(set(rows)) == len(rows)
    assert sorted((r[3], r[4], bytes(r[0])) for r in rows) == sorted(streams.events("h", "mixed"))


def test_history_options_are_checked(spark: Any, system: _System) -> None:
    options = system.streams.options("h", "absent")
    with pytest.raises(ValueError, match=r"option 'pinTtlMz': unknown option of pravega_spark\.history; did you mean"):
        pravega_spark.history(spark, pinTtlMz="5000", **options)
    with pytest.raises(ValueError, match="option 'pinTtlMs': must be at least 1000"):
        pravega_spark.history(spark, pinTtlMs="10", **options)
    with pytest.raises(ValueError, match="option 'linkDir': must be an existing directory, got '/nonexistent/links'"):
        pravega_spark.history(spark, linkDir="/nonexistent/links", **options)


@pytest.mark.timeout(600)  # a segment store restart and a Spark read on a shared machine
def test_pinned_files_outlive_compaction_truncation_and_restart_then_are_collected(spark: Any, system: _System) -> None:
    streams = system.streams
    streams.create("h", "pinned", segments=1)
    for batch in range(6):
        system.write_flushed("h", "pinned", f"b{batch}", 400)
    expected = _plain(spark, system, "h", "pinned")
    segment = next(iter(streams.tail("h", "pinned").positions))
    middle = sorted(r[4] for r in expected)[len(expected) // 2]

    read = pravega_spark.history(spark, pinTtlMs="120000", **streams.options("h", "pinned"))  # outlives a restart
    assert read.pins is not None
    pin_id = read.pins.pin_id
    pinned = {f.name for f in read.plan.files}
    files = [_local(uri) for uri in read.files]
    first = read.plan.files[0]
    root = str(_local(first.uri))[: -len(first.name)]
    assert pinned and all(path.exists() for path in files)
    # underneath the read: the stream is truncated in the middle, more small chunks come and are compacted
    streams.manager.truncate(StreamCut("h", "pinned", {segment: middle}))
    for batch in range(3):
        system.write_flushed("h", "pinned", f"later{batch}", 300)
    later = system.chunk_names("h", "pinned", segment) - pinned
    assert later

    def collected(names: set[str]) -> bool:
        return not names & system.chunk_names("h", "pinned", segment) and not any(
            Path(root + name).exists() for name in names
        )

    # compaction merged the later chunks and the collector deleted them: it passed the pinned ones by
    _until(lambda: collected(later), "the later unpinned chunks are compacted and collected")
    _until(lambda: not pinned & system.chunk_names("h", "pinned", segment), "no pinned chunk is referenced")
    assert all(path.exists() for path in files)
    assert [p["pin_id"] for p in system.admin_pins()] == [pin_id]

    system.process.stop()  # a restart: the pins are read back, the sweep leaves pinned orphans to the collector
    system.process.start()
    _until(lambda: system.pin_ids() == [pin_id], "the pin is back after the restart")
    assert all(path.exists() for path in files)

    rows = _rows(read.df)  # the long read: history as it was when it began, every row once
    assert [r for r in rows if r[4] < middle] and rows == expected and len(set(rows)) == len(rows)

    read.pins.ttl_ms = 2000
    read.pins.pin_all()  # renewed for 2 s only
    read.pins.abandon()  # and the driver goes away without releasing: the pins expire
    _until(lambda: not any(path.exists() for path in files), "the files are collected after the pin expired")
    assert system.pin_ids() == []
