"""Controller failover as users run it: two ``segstore controller`` processes on one ZooKeeper, one
``segstore segmentstore --cluster``, and every client given both controllers, ``tcp://c1,c2`` (the first one first).

A writer of our client library writes numbered events under several routing keys; a Spark streaming query
(``controller`` option the same list, ``startingOffsets`` earliest) reads them into a ``foreachBatch`` sink, and a
reader group's reader (client library, same list) reads them too.
Midway the first controller of the list is killed with -9, the one every client was talking to; then the
stream is split through the same list, so the writer and the query must ask the controllers for the successors.
The writer, the query and the reader go on, and ``segstore admin --controller tcp://dead,live scope list`` works. At the
end every acknowledged event arrived exactly once at the query and at the reader, each routing key in order, and
nothing else did.
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from spark_fixtures import spark  # noqa: F401 (a fixture)

from controller_client import BlockingStreamManager, ScalingPolicy, StreamConfiguration
from pravega_spark.connection import StreamConnection
from segstore_shared.coordination.zookeeper_server import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.spark]

REPO_ROOT = Path(__file__).resolve().parents[2]
CONTAINERS = 4
SCOPE, STREAM = "failover", "orders"
KEYS = 8
RATE = 400  # events/s


class Cluster:
    """ZooKeeper (the session's, a chroot), two controllers and one segment store, each a ``segstore`` process."""

    def __init__(self, zookeeper: str, base: Path) -> None:
        self.zookeeper = zookeeper
        self.base = base
        self.ports = {"c1": free_port(), "c2": free_port(), "ss": free_port()}
        self.processes: dict[str, subprocess.Popen[str]] = {}

    @property
    def uri(self) -> str:
        return f"tcp://127.0.0.1:{self.ports['c1']},127.0.0.1:{self.ports['c2']}"

    def _spawn(self, name: str, *args: str) -> None:
        (self.base / "logs").mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "segstore_cli", *args, "--log-level", "warning", "--log-file", "-"]
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
        with open(self.base / "logs" / f"{name}.log", "a") as log:
            self.processes[name] = subprocess.Popen(
                command, stdout=subprocess.PIPE, stderr=log, text=True, cwd=REPO_ROOT, env=env
            )

    def _ready(self, name: str) -> None:
        stdout = self.processes[name].stdout
        assert stdout is not None
        line = stdout.readline()
        assert "ready" in line, f"{name} did not start: {line!r}\n{self.log(name)}"

    def start(self) -> None:
        for name in ("c1", "c2"):
            self._spawn(name, "controller", "--zookeeper", self.zookeeper, "--port", str(self.ports[name]),
                        "--container-count", str(CONTAINERS), "--zookeeper-session-timeout-ms", "2000")  # fmt: skip
        for name in ("c1", "c2"):
            self._ready(name)
        self._spawn("ss", "segmentstore", "--cluster", "--zookeeper", self.zookeeper,
                    "--data-dir", str(self.base / "ss"), "--port", str(self.ports["ss"]),
                    "--container-count", str(CONTAINERS), "--zookeeper-session-timeout-ms", "2000")  # fmt: skip
        self._ready("ss")

    def kill(self, name: str) -> None:
        self.processes[name].send_signal(signal.SIGKILL)
        self.processes[name].wait(10)

    def log(self, name: str) -> str:
        path = self.base / "logs" / f"{name}.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else "<no log>"

    def stop(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes.values():
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)


@pytest.fixture
def cluster(zk_chroot: str, tmp_path: Path) -> Iterator[Cluster]:
    system = Cluster(zk_chroot, tmp_path / "cluster")
    try:
        system.start()
        yield system
    finally:
        system.stop()


class Writer(threading.Thread):
    """Writes ``RATE`` numbered events/s under ``KEYS`` routing keys until stopped; remembers what was acked."""

    def __init__(self, manager: BlockingStreamManager) -> None:
        super().__init__(daemon=True, name="failover-writer")
        self.manager = manager
        self.stopping = threading.Event()
        self.acked: set[bytes] = set()
        self.lock = threading.Lock()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with self.manager.create_writer(SCOPE, STREAM) as writer:
                started, written, pending = time.monotonic(), 0, []
                while not self.stopping.is_set():
                    due = int((time.monotonic() - started) * RATE) - written
                    if due > 0:
                        events: list[tuple[bytes, str | None]] = [
                            (f"{n % KEYS}|{n // KEYS:07d}".encode(), f"key-{n % KEYS}")
                            for n in range(written, written + due)
                        ]
                        future = writer.write_events(events)
                        future.add_done_callback(functools.partial(self._acked, events=events))
                        pending.append(future)
                        written += due
                    self.stopping.wait(0.01)
                for future in pending:
                    future.result(60)
        except BaseException as error:
            self.error = error

    def _acked(self, future: Any, *, events: list[tuple[bytes, str | None]]) -> None:
        if not future.cancelled() and future.exception() is None:
            with self.lock:
                self.acked.update(event for event, _ in events)

    def acked_now(self) -> set[bytes]:
        with self.lock:
            return set(self.acked)


class Sink:
    """``foreachBatch``: every event of every micro-batch, in stream order within the batch (by segment, whose
    successors have higher ids, then offset); a micro-batch run again replaces its rows."""

    def __init__(self) -> None:
        self.batches: dict[int, list[bytes]] = {}
        self.lock = threading.Lock()

    def __call__(self, frame: Any, batch_id: int) -> None:
        rows = sorted((row.segment_id, row.offset, bytes(row.event)) for row in frame.collect())
        with self.lock:
            self.batches[batch_id] = [event for _, _, event in rows]

    def events(self) -> list[bytes]:
        with self.lock:
            return [event for batch_id in sorted(self.batches) for event in self.batches[batch_id]]


class GroupReader(threading.Thread):
    """One reader of a reader group (made through the controller list) reading from the head until stopped and
    drained: it keeps every event it got, in order."""

    def __init__(self, manager: BlockingStreamManager) -> None:
        super().__init__(daemon=True, name="failover-group-reader")
        self.group = manager.create_reader_group(SCOPE, "audit", [manager.head_cut(SCOPE, STREAM)], refresh_ms=500)
        self.stopping = threading.Event()
        self.events: list[bytes] = []
        self.lock = threading.Lock()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with self.group.create_reader("r1") as reader:
                while True:
                    read = reader.next_event(timeout_s=1.0)
                    if read is None:
                        if self.stopping.is_set():
                            return
                        continue
                    if read.data is not None:
                        with self.lock:
                            self.events.append(read.data)
        except BaseException as error:
            self.error = error

    def read_now(self) -> set[bytes]:
        with self.lock:
            return set(self.events)


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = 300.0) -> None:
    """Poll ``condition`` until it holds (generous: Spark's first micro-batches are slow on a loaded machine)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"no {what} within {timeout_s:g} s"
        time.sleep(0.1)


def split_first(connection: StreamConnection) -> None:
    """Split the first current segment in two, through the controllers of the connection, and wait for it."""
    controller = connection.controller
    first = connection.run(controller.get_current_segments(SCOPE, STREAM))[0]
    middle = (first.key_start + first.key_end) / 2
    ranges = [(first.key_start, middle), (middle, first.key_end)]
    started = connection.run(controller.scale(SCOPE, STREAM, [first.segment_id], ranges, int(time.time() * 1000)))
    wait_until(lambda: connection.run(controller.check_scale(SCOPE, STREAM, started.epoch)), "scale", 30)


def in_key_order(events: list[bytes]) -> bool:
    last: dict[bytes, bytes] = {}
    for event in events:
        key, number = event.split(b"|")
        if key in last and number <= last[key]:
            return False
        last[key] = number
    return True


@pytest.mark.timeout(1200)
def test_writer_streaming_query_and_group_reader_go_on_when_the_first_controller_of_the_list_is_killed(
    spark: Any,  # noqa: F811 (the fixture)
    cluster: Cluster,
    tmp_path: Path,
) -> None:
    manager = BlockingStreamManager.connect(cluster.uri)
    connection = StreamConnection(cluster.uri, timeout_s=30.0)
    query = None
    writer = Writer(manager)
    group_reader: GroupReader | None = None
    try:
        manager.create_scope(SCOPE)
        manager.create_stream(SCOPE, STREAM, StreamConfiguration(ScalingPolicy.fixed(2)))
        writer.start()
        group_reader = GroupReader(manager)
        group_reader.start()
        options = {"controller": cluster.uri, "scope": SCOPE, "stream": STREAM, "startingOffsets": "earliest"}
        sink = Sink()
        query = (
            spark.readStream.format("segstore").options(**options).load()
            .writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(processingTime="500 milliseconds").start()
        )  # fmt: skip
        wait_until(lambda: len(sink.events()) >= RATE, "events through the query before the kill")

        cluster.kill("c1")  # the first of the list: where every client has been talking so far
        acked_at_kill = writer.acked_now()
        split_first(connection)  # through c2: the writer and the query must find the successors there
        admin = subprocess.run(
            [sys.executable, "-m", "segstore_cli", "admin", "--controller", cluster.uri, "scope", "list", "--json"],
            capture_output=True, text=True, timeout=60, cwd=REPO_ROOT, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        )  # fmt: skip
        assert admin.returncode == 0 and SCOPE in admin.stdout, admin

        def went_on() -> bool:  # events acked after the kill, into the new segments, came through query and reader
            assert query.exception() is None, query.exception()
            assert writer.error is None, writer.error
            assert group_reader.error is None, group_reader.error
            newer = writer.acked_now() - acked_at_kill
            through = len(newer & set(sink.events())), len(newer & group_reader.read_now())
            return len(newer) >= 2 * RATE and min(through) >= RATE

        wait_until(went_on, "progress of the writer and the query after the kill")
        writer.stopping.set()
        writer.join(120)
        assert writer.error is None, f"the writer failed: {writer.error!r}"
        query.processAllAvailable()
        assert query.exception() is None, query.exception()
        wait_until(lambda: group_reader.read_now() >= writer.acked, "every acknowledged event at the group's reader")
        group_reader.stopping.set()
        group_reader.join(60)
        assert group_reader.error is None, f"the group's reader failed: {group_reader.error!r}"
    finally:
        writer.stopping.set()
        if group_reader is not None:
            group_reader.stopping.set()
            group_reader.join(60)
        if query is not None:
            query.stop()
        connection.close()
        manager.close()

    arrived = sink.events()
    duplicates = [event for event, count in Counter(arrived).items() if count > 1]
    assert not duplicates, f"{len(duplicates)} events arrived twice, e.g. {duplicates[:3]}"
    assert set(arrived) == writer.acked, f"{len(arrived)} arrived, {len(writer.acked)} acknowledged"
    assert in_key_order(arrived), "a routing key's events arrived out of order"
    assert group_reader is not None
    read = group_reader.events
    assert len(read) == len(set(read)) and set(read) == writer.acked, f"{len(read)} read by the group's reader"
    assert in_key_order(read), "the group's reader got a routing key's events out of order"
