"""A cluster as users run it: ZooKeeper, ``segstore controller`` and two ``segstore segmentstore --cluster``
processes sharing one data dir. The official Pravega client writes; one segment store is killed with -9
midway and, as a supervisor would, started again on its address a few seconds later. Its containers move to
the other process when its ZooKeeper session expires (and some move back when it returns); the client
follows (reconnects, ``WrongHost``, ``getURI``) and every acknowledged event is read back exactly once, each
routing key in order.

The restart matters for the official client: it retries a segment store address it got from ``getURI``
until that address answers (as with Pravega, whose segment stores run under a supervisor with stable
addresses), so a process that never comes back would leave it retrying. Our own client library asks the
controller again instead (``tests/system/test_cluster_failover.py`` kills a process for good).
"""

from __future__ import annotations

import asyncio
import os
import shlex
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pravega_client  # the official Pravega client: a test dependency (pyproject), never skipped
import pytest

from segstore_shared.coordination.zookeeper_server import EmbeddedZooKeeper, free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CONTAINERS = 4
KEYS = 20


def _segmentstore(zookeeper: str, data_dir: Path, port: int, delay_s: float = 0.0) -> subprocess.Popen[str]:
    return _spawn(
        "segmentstore", "--cluster", "--zookeeper", zookeeper, "--data-dir", str(data_dir), "--port", str(port),
        "--container-count", str(CONTAINERS), "--zookeeper-session-timeout-ms", "2000", delay_s=delay_s,
    )  # fmt: skip


def _spawn(*args: str, delay_s: float = 0.0) -> subprocess.Popen[str]:
    """A ``segstore`` process; with a delay, started by a shell after sleeping (so it starts on time even
    while this process is blocked: the official client holds the GIL while a write waits)."""
    command = [sys.executable, "-m", "segstore_cli", *args, "--log-level", "warning", "--log-file", "-"]
    if delay_s:
        command = ["sh", "-c", f"sleep {delay_s}; exec {shlex.join(command)}"]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)


def _ready(process: subprocess.Popen[str]) -> str:
    assert process.stdout is not None
    line = process.stdout.readline()
    assert "ready" in line, f"process did not start: {line!r}"
    return line


@pytest.fixture
def cluster(zookeeper: EmbeddedZooKeeper, zk_chroot: str, tmp_path: Path) -> Iterator[dict[str, object]]:
    controller_port = free_port()
    processes: dict[str, subprocess.Popen[str]] = {}
    try:
        processes["controller"] = _spawn(
            "controller", "--zookeeper", zk_chroot, "--port", str(controller_port), "--container-count", str(CONTAINERS)
        )
        _ready(processes["controller"])
        ports = {"ss1": free_port(), "ss2": free_port()}
        for name, port in ports.items():
            processes[name] = _segmentstore(zk_chroot, tmp_path, port)
            _ready(processes[name])

        def restart_ss1() -> None:  # after its session expired and its containers moved
            processes["ss1"] = _segmentstore(zk_chroot, tmp_path, ports["ss1"], delay_s=4.0)

        yield {"uri": f"tcp://127.0.0.1:{controller_port}", "processes": processes, "restart_ss1": restart_ss1}
    finally:
        for process in processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in processes.values():
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def test_official_client_survives_kill_9_of_a_segment_store(cluster: dict[str, object]) -> None:
    uri = str(cluster["uri"])
    processes: dict[str, subprocess.Popen[str]] = cluster["processes"]  # type: ignore[assignment]
    restart: Callable[[], None] = cluster["restart_ss1"]  # type: ignore[assignment]
    manager = pravega_client.StreamManager(uri)
    manager.create_scope("ha")
    manager.create_stream("ha", "orders", 8)  # 8 segments over the 4 containers: both processes hold some
    writer = manager.create_writer("ha", "orders", 200)
    written: list[str] = []
    for i in range(6000):
        event = f"k{i % KEYS:02d}:{i // KEYS:05d}"
        writer.write_event(event, f"key-{i % KEYS}")
        written.append(event)
        if i == 3000:
            os.kill(processes["ss1"].pid, signal.SIGKILL)
            processes["ss1"].wait()
            restart()
    writer.flush()  # returns once every event is acknowledged
    assert "ready" in _ready(processes["ss1"])

    reader = manager.create_reader_group("audit", "ha", "orders").create_reader("r")
    events: list[str] = []

    async def consume() -> None:
        while len(events) < len(written):
            segment_slice = await reader.get_segment_slice_async()
            events.extend(e.data().decode() for e in segment_slice)
            reader.release_segment(segment_slice)

    try:
        asyncio.run(asyncio.wait_for(consume(), 120))
    finally:
        reader.reader_offline()
    assert sorted(events) == sorted(written)  # each acknowledged event exactly once
    last: dict[str, int] = {}
    for event in events:  # each routing key in order
        key, seq = event.split(":")
        assert int(seq) == last.get(key, -1) + 1
        last[key] = int(seq)
