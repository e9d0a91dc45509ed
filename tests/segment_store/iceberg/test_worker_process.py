"""The table maintainer's worker process (``segment_store.iceberg.worker_process``), a real spawned process: a pass
registers chunk files with the pins held in this process (the segment store's) and its log records arriving
here; a process that dies in the middle of a pass or hangs (a catalog that never answers) fails that pass, is
gone, and the next pass starts a new one that finds the table as it was."""

from __future__ import annotations

import logging
import os
import signal
import socket
from collections.abc import Iterable, Iterator
from pathlib import Path

import psutil
import pytest
from iceberg_chunks import Chunks
from spark_fixtures import Streams
from standalone_process import StandaloneProcess

from segment_store.iceberg.config import IcebergConfig
from segment_store.iceberg.maintainer import Snapshot
from segment_store.iceberg.stream_table import ChunkFile, open_catalog
from segment_store.iceberg.sync import PIN_ID
from segment_store.iceberg.worker_process import WorkerFailedError, WorkerProcess
from segment_store.storage.chunk_pins import ChunkPins, Pin

pytestmark = pytest.mark.integration
KEY = ("lake", "clicks")


def snapshot_of(*chunks: ChunkFile, incarnation: int | None = None) -> Snapshot:
    taken = Snapshot({KEY: {c.location: c for c in chunks}}, {KEY: {c.coordinates.segment_id for c in chunks}})
    if incarnation is not None:
        taken.incarnations[KEY] = incarnation
    return taken


def table_events(config: IcebergConfig) -> list[bytes]:
    table = open_catalog(config).load_table(KEY).scan().to_arrow()
    ordered = table.sort_by([("chunk_start", "ascending"), ("chunk_offset", "ascending")])
    return [bytes(e) for e in ordered.column("event").to_pylist()]


@pytest.fixture
def config(tmp_path: Path) -> IcebergConfig:
    return IcebergConfig(tables=("lake/*",), data_dir=tmp_path)


@pytest.fixture
def worker(config: IcebergConfig) -> Iterator[WorkerProcess]:
    process = WorkerProcess(config, {}, pass_timeout_s=120)
    try:
        yield process
    finally:
        process.stop()


def gone(pid: int) -> bool:
    return not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_a_pass_in_the_worker_registers_chunks_pinned_here_and_logs_here(
    tmp_path: Path, config: IcebergConfig, worker: WorkerProcess, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    chunks = Chunks(tmp_path)
    first, second = chunks.write([b"a", b"b"]), chunks.write([b"c"])
    results, statuses = worker.run_pass(snapshot_of(first, second, incarnation=1), {0: chunks.pins}, {})
    assert worker.pid is not None and worker.pid != os.getpid()
    assert [(r.table, r.added, r.files) for r in results] == [("lake.clicks", 2, 2)]
    status = statuses[KEY]
    assert (status.lag_chunks, status.data_files, status.failures) == (0, 2, 0) and status.snapshot_id is not None
    (pin,) = chunks.pins.live()  # held by this process's pins: what its garbage collector asks
    assert (pin.pin_id, pin.chunks) == (PIN_ID, frozenset({first.chunk, second.chunk}))
    assert table_events(config) == [b"a", b"b", b"c"]
    assert any("created table lake.clicks" in r.getMessage() and r.processName != "MainProcess"
               for r in caplog.records)  # fmt: skip
    nothing, again = worker.run_pass(snapshot_of(first, second, incarnation=1), {0: chunks.pins}, statuses)
    assert nothing[0].added == 0 and again[KEY].snapshot_id == status.snapshot_id and worker.starts == 1
    pid = worker.pid
    worker.stop()
    assert gone(pid)


class KillingPins:
    """Pins that kill the worker process while it waits for a pin, then grant the pin: the pass cannot finish."""

    def __init__(self, pins: ChunkPins, worker: WorkerProcess) -> None:
        self._pins = pins
        self._worker = worker
        self.killed: int | None = None

    def pin(self, pin_id: str, segment: str, chunks: Iterable[str], ttl_ms: int) -> Pin:
        self.killed = self._worker.pid
        assert self.killed is not None
        os.kill(self.killed, signal.SIGKILL)
        psutil.Process(self.killed).wait(30)
        return self._pins.pin(pin_id, segment, chunks, ttl_ms)

    def release(self, pin_id: str, segment: str) -> bool:
        return self._pins.release(pin_id, segment)

    def live(self) -> list[Pin]:
        return self._pins.live()


def test_a_worker_killed_in_a_pass_fails_it_and_the_next_pass_catches_up(
    tmp_path: Path, config: IcebergConfig, worker: WorkerProcess
) -> None:
    chunks = Chunks(tmp_path)
    first = chunks.write([b"a"])
    worker.run_pass(snapshot_of(first), {0: chunks.pins}, {})
    second = chunks.write([b"b"])
    killing = KillingPins(chunks.pins, worker)
    with pytest.raises(WorkerFailedError, match="the table worker process failed: the process ended"):
        worker.run_pass(snapshot_of(first, second), {0: killing}, {})  # type: ignore[dict-item]
    assert killing.killed is not None and gone(killing.killed) and worker.pid is None
    assert table_events(config) == [b"a"]  # the commit needing the pin never happened
    results, statuses = worker.run_pass(snapshot_of(first, second), {0: chunks.pins}, {})
    assert worker.starts == 2 and results[0].added == 1 and statuses[KEY].lag_chunks == 0
    assert table_events(config) == [b"a", b"b"]
    (pin,) = chunks.pins.live()
    assert pin.chunks == {first.chunk, second.chunk}


def test_a_pass_on_a_catalog_that_never_answers_is_killed_at_its_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A REST catalog whose server accepts connections and never answers: the pass hangs in the worker, which is
    killed after ``pass_timeout_s``; the segment store's side is back with a clear error."""
    with socket.create_server(("127.0.0.1", 0)) as silent:  # never accepts: connections wait in its backlog
        monkeypatch.setenv("PYICEBERG_CATALOG__SILENT__URI", f"http://127.0.0.1:{silent.getsockname()[1]}")
        config = IcebergConfig(tables=("lake/*",), data_dir=tmp_path, catalog="silent")
        worker = WorkerProcess(config, {}, pass_timeout_s=3)
        chunks = Chunks(tmp_path)
        try:
            with pytest.raises(WorkerFailedError, match="a pass took longer than 3 s: killed"):
                worker.run_pass(snapshot_of(chunks.write([b"a"])), {0: chunks.pins}, {})
            assert worker.pid is None and worker.starts == 1 and chunks.pins.live() == []
        finally:
            worker.stop()


def test_ctrl_c_stops_a_standalone_with_tables_and_its_worker_with_it(tmp_path: Path) -> None:
    """Ctrl-C (SIGINT to the terminal's process group) while a table is kept, the worker still starting: the worker
    ignores it (SIGINT blocked from its start: no KeyboardInterrupt traceback from pyiceberg's imports), the segment
    store stops it (its pass cut short), exit 0, no worker process left."""
    with StandaloneProcess(tmp_path / "data", extra_args=("--iceberg-tables", "lake/*")) as standalone:
        streams = Streams(standalone)
        try:
            streams.create("lake", "clicks")
            streams.write("lake", "clicks", [(f"e{i}".encode(), "k") for i in range(100)])
            assert standalone.process is not None
            workers = [p for p in psutil.Process(standalone.process.pid).children(recursive=True)
                       if "spawn_main" in " ".join(p.cmdline())]  # fmt: skip
            assert workers, "the segment store runs a table worker process"
        finally:
            streams.close()
        process = standalone.process
        os.killpg(process.pid, signal.SIGINT)
        assert process.wait(60) == 0
        standalone.process = None
    log = (tmp_path / "data" / "segmentstore.log").read_text()
    assert "Traceback" not in log and "KeyboardInterrupt" not in log, log[-2000:]
    assert all(gone(worker.pid) for worker in workers)


def test_a_worker_that_cannot_be_started_fails_the_pass_and_the_next_one_starts_it(
    tmp_path: Path, config: IcebergConfig, worker: WorkerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The machine out of processes or memory when the worker starts: the pass fails with a clear error (the
    maintainer counts it and tries again later), not an exception that would end the maintainer's passes."""
    chunks = Chunks(tmp_path)
    first = chunks.write([b"a"])

    def refuse(self: object) -> None:
        raise BlockingIOError(11, "Resource temporarily unavailable")

    with monkeypatch.context() as patched:
        patched.setattr("multiprocessing.process.BaseProcess.start", refuse)
        with pytest.raises(WorkerFailedError, match=r"it could not be started \(BlockingIOError"):
            worker.run_pass(snapshot_of(first), {0: chunks.pins}, {})
    results, _ = worker.run_pass(snapshot_of(first), {0: chunks.pins}, {})
    assert results[0].added == 1 and table_events(config) == [b"a"]
