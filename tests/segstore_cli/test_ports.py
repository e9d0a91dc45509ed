"""Ports as a user meets them ("The first hour", item 1): a second ``segstore standalone`` on a port the first one
holds stops at once, exit 2, with one line naming the flag and the port, starts nothing and leaves nothing running,
while the first serves on; a segment store process that cannot listen stops the start at once; the ready line names
the ports really bound (``--controller-port 0 --segmentstore-port 0 --metrics-port 0``); two ``segstore nats
--port 0`` run side by side, and a third on a taken port stops like the standalone; every command that listens does
the same on a taken port.

Every port is one a server or the test bound on port 0 and read back: "taken" means the test listens on it, or the
first standalone does."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

from segment_store.client import NoSuchSegmentError, SegmentClient
from segstore_cli.standalone import Standalone, StandaloneConfig, StandalonePortError
from segstore_shared.processes import port_is_free

pytestmark = [pytest.mark.integration, pytest.mark.slow]

QUICK_S = 10.0
"""A command on a taken port says so within this (the check runs before anything starts; Python's start-up is
most of it)."""

STANDALONE_READY = re.compile(
    r"segstore standalone ready: controller tcp://127\.0\.0\.1:(?P<controller>\d+), "
    r"segment store 127\.0\.0\.1:(?P<segmentstore>\d+), "
    r"metrics http://127\.0\.0\.1:(?P<metrics>\d+)/metrics \(controller\) and :(?P<segmentstore_metrics>\d+) "
    r"\(segment store\), zookeeper 127\.0\.0\.1:(?P<zookeeper>\d+)"
)
STANDALONE_READY_NO_METRICS = re.compile(
    r"segstore standalone ready: controller tcp://127\.0\.0\.1:(?P<controller>\d+), "
    r"segment store 127\.0\.0\.1:(?P<segmentstore>\d+), zookeeper 127\.0\.0\.1:(?P<zookeeper>\d+)"
)
NATS_READY = re.compile(
    r"segstore nats ready on nats://127\.0\.0\.1:(?P<client>\d+) \(JetStream, 1 node\(s\), "
    r"monitoring http://127\.0\.0\.1:(?P<monitor>\d+), pids (?P<pid>\d+)"
)


def segstore(*args: str) -> list[str]:
    return [sys.executable, "-m", "segstore_cli", *args]


@dataclass
class Server:
    """A ``segstore`` server command running until :meth:`stop`, its ready line matched."""

    process: subprocess.Popen[str]
    ready: re.Match[str]
    stderr: list[str] = field(default_factory=list)
    data: Path | None = None

    @property
    def ports(self) -> dict[str, int]:
        return {name: int(value) for name, value in self.ready.groupdict().items() if name != "pid"}

    def tree(self) -> list[psutil.Process]:
        me = psutil.Process(self.process.pid)
        return [me, *me.children(recursive=True)]

    def listening(self) -> set[int]:
        """The TCP ports this process and its children listen on."""
        ports = set()
        for process in self.tree():
            with contextlib.suppress(psutil.Error):
                for conn in process.net_connections(kind="tcp"):
                    if conn.status == psutil.CONN_LISTEN:
                        ports.add(conn.laddr.port)
        return ports

    def stop(self) -> int:
        return stop(self.process)


def stop(process: subprocess.Popen[str]) -> int:
    """SIGTERM, then after a minute SIGKILL to its process group; its exit code."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    return process.returncode


def start_server(args: list[str], ready: re.Pattern[str], timeout_s: float = 120.0) -> Server:
    """Run ``args`` until its ready line (stdout); its stderr kept (the logs)."""
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    lines: list[str] = []
    found: list[re.Match[str]] = []
    seen = threading.Event()

    def pump_out() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            match = ready.search(line)
            if match and not found:
                found.append(match)
                seen.set()

    def pump_err() -> None:
        assert process.stderr is not None
        lines.extend(line.rstrip() for line in process.stderr)

    threading.Thread(target=pump_out, daemon=True).start()
    threading.Thread(target=pump_err, daemon=True).start()
    deadline = time.monotonic() + timeout_s
    while not seen.wait(0.2):
        if process.poll() is not None or time.monotonic() > deadline:
            stop(process)
            raise AssertionError(f"{args} did not start:\n" + "\n".join(lines[-40:]))
    return Server(process, found[0], lines)


@dataclass(frozen=True)
class Finished:
    code: int
    out: str
    err: str
    seconds: float
    left: list[str]
    """Processes the command started that still run (or any process naming its data directory)."""


def run_to_end(args: list[str], data_dir: Path, timeout_s: float = 60.0) -> Finished:
    """Run a command to its end, watching the processes it starts (psutil) and timing it."""
    started = time.monotonic()
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    me = psutil.Process(process.pid)
    children: dict[int, psutil.Process] = {}
    while process.poll() is None and time.monotonic() - started < timeout_s:
        with contextlib.suppress(psutil.Error):
            children.update((child.pid, child) for child in me.children(recursive=True))
        time.sleep(0.02)
    if process.poll() is None:
        stop(process)
    out, err = process.communicate()
    seconds = time.monotonic() - started
    left = [f"{child.pid} {child.cmdline()}" for child in children.values() if _running(child)]
    for other in psutil.process_iter(["pid", "cmdline"]):
        if str(data_dir) in " ".join(other.info["cmdline"] or []):
            left.append(f"{other.pid} {other.info['cmdline']}")
    return Finished(process.returncode, out, err, seconds, left)


def _command_line(process: psutil.Process) -> list[str]:
    """The process's command line, or none for one that ended (or became a zombie) since it was listed."""
    try:
        return process.cmdline()
    except psutil.Error:
        return []


def _running(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def flat(flags: dict[str, str]) -> list[str]:
    return [part for flag_value in flags.items() for part in flag_value]


def admin(controller_port: int, *args: str) -> subprocess.CompletedProcess[str]:
    command = segstore("admin", "--controller", f"tcp://127.0.0.1:{controller_port}", *args)
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def first(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A standalone on ports it chose (0), every one of them read back from its ready line, with a scope."""
    data = tmp_path_factory.mktemp("first")
    args = segstore("standalone", "--data-dir", str(data), "--container-count", "2")
    args += ["--controller-port", "0", "--segmentstore-port", "0", "--metrics-port", "0"]
    server = start_server(args, STANDALONE_READY)
    server.data = data
    try:
        created = admin(server.ports["controller"], "scope", "create", "first")
        assert created.returncode == 0, created
        yield server
    finally:
        assert server.stop() == 0


def assert_serves(first: Server, pids: set[int]) -> None:
    """The first standalone runs on, the same processes, and answers an admin call and a segment store call."""
    assert {process.pid for process in first.tree()} == pids
    listed = admin(first.ports["controller"], "scope", "list")
    assert listed.returncode == 0 and "first" in listed.stdout, listed

    async def probe() -> None:
        async with SegmentClient(("127.0.0.1", first.ports["segmentstore"])) as client:
            with pytest.raises(NoSuchSegmentError):
                await client.get_segment_info("first/none/0.#epoch.0")

    asyncio.run(probe())


def test_ready_line_names_the_ports_really_bound(first: Server) -> None:
    ports = first.ports
    assert 0 not in ports.values() and len(set(ports.values())) == 5, ports
    assert first.listening() == set(ports.values())  # these and no other (no fixed auxiliary port)
    for name in ("metrics", "segmentstore_metrics"):
        with urllib.request.urlopen(f"http://127.0.0.1:{ports[name]}/healthz", timeout=10) as response:
            assert response.status == 200
    assert_serves(first, {process.pid for process in first.tree()})


@pytest.mark.parametrize(
    ("flag", "port_of"),
    [
        ("--controller-port", "controller"),
        ("--segmentstore-port", "segmentstore"),
        ("--metrics-port", "metrics"),
        ("--zookeeper-port", "zookeeper"),
    ],
)
def test_second_standalone_on_a_port_of_the_first_exits_2_naming_it(
    first: Server, tmp_path: Path, flag: str, port_of: str
) -> None:
    pids = {process.pid for process in first.tree()}
    port = first.ports[port_of]
    flags = {"--controller-port": "0", "--segmentstore-port": "0", flag: str(port)}
    data = tmp_path / "second"
    finished = run_to_end(segstore("standalone", "--data-dir", str(data), *flat(flags)), data)
    assert finished.code == 2, finished
    assert finished.err == f"segstore standalone: {flag} {port}: address already in use\n", finished
    assert finished.out == "" and finished.seconds < QUICK_S and finished.left == [], finished
    assert not data.exists()  # nothing started, not even its data directory
    assert_serves(first, pids)


@contextlib.contextmanager
def taken_after_a_free_one() -> Iterator[int]:
    """A port the test listens on, the one before it free (then ``--metrics-port`` names the free one)."""
    for _ in range(50):
        with socket.create_server(("127.0.0.1", 0)) as taken:
            port = taken.getsockname()[1]
            if port_is_free("127.0.0.1", port - 1):
                yield port
                return
    raise AssertionError("no listening port after a free one in 50 tries")


def test_second_standalone_on_the_data_dir_of_the_first_exits_2_and_kills_nothing(first: Server) -> None:
    """Its ZooKeeper server is not an orphan of a killed standalone: the second leaves it alone."""
    pids = {process.pid for process in first.tree()}
    assert first.data is not None
    args = segstore("standalone", "--data-dir", str(first.data), "--controller-port", "0", "--segmentstore-port", "0")
    finished = run_to_end(args, first.data / "none")
    assert finished.code == 2, finished
    assert finished.err == f"segstore standalone: --data-dir {first.data}: in use by another segstore standalone\n"
    assert finished.seconds < QUICK_S and finished.left == [], finished
    assert_serves(first, pids)


def test_second_standalone_whose_segment_store_metrics_port_is_taken_exits_2_naming_it(tmp_path: Path) -> None:
    with taken_after_a_free_one() as port:
        data = tmp_path / "second"
        args = segstore("standalone", "--data-dir", str(data), "--controller-port", "0", "--segmentstore-port", "0")
        finished = run_to_end([*args, "--metrics-port", str(port - 1)], data)
    expected = f"--metrics-port {port - 1}: port {port} (the segment store's metrics): address already in use"
    assert (finished.code, finished.err) == (2, f"segstore standalone: {expected}\n"), finished
    assert finished.seconds < QUICK_S and finished.left == [], finished


async def test_standalone_whose_segment_store_cannot_listen_stops_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race: the port was free at the standalone's check, then taken before its segment store process listens.
    The process exits (saying why); the standalone stops at once naming its own flag, no 120 s of restarts."""
    import segstore_cli.standalone as standalone_module

    monkeypatch.setattr(standalone_module, "unavailable", lambda claims: None)  # free at the check
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        config = StandaloneConfig(data_dir=tmp_path / "d", controller_port=0, segmentstore_port=port, container_count=1)
        system = Standalone(config)
        started = time.monotonic()
        with pytest.raises(StandalonePortError) as raised:
            await system.start()
        seconds = time.monotonic() - started
    assert str(raised.value) == f"--segmentstore-port {port}: address already in use"
    assert seconds < 60  # ZooKeeper and the controller start first; then the process's exit is noticed at once
    assert system.zookeeper is None and system.controller is None
    me = psutil.Process()
    # A zombie is dead (an earlier test's child not yet reaped); its command line cannot be read.
    running = [child for child in me.children(recursive=True) if _running(child)]
    assert [child for child in running if str(tmp_path) in " ".join(_command_line(child))] == []


def test_restart_after_kill_9_on_the_same_ports_starts(tmp_path: Path) -> None:
    """What a killed standalone left running on its data dir (its ZooKeeper server; its segment store process, still
    closing) holds its ports: a restart with the same flags ends those first instead of refusing the ports."""
    data = tmp_path / "data"
    args = segstore("standalone", "--data-dir", str(data), "--container-count", "1")
    crashed = start_server([*args, "--controller-port", "0", "--segmentstore-port", "0"], STANDALONE_READY_NO_METRICS)
    try:
        ports = crashed.ports
        assert admin(ports["controller"], "scope", "create", "kept").returncode == 0
        crashed.process.kill()  # kill -9 of the standalone alone: its children live on a while
        crashed.process.wait()
        flags = {f"--{name}-port": str(port) for name, port in ports.items()}
        restarted = start_server([*args, *flat(flags)], STANDALONE_READY_NO_METRICS)
        try:
            assert restarted.ports == ports
            listed = admin(ports["controller"], "scope", "list")
            assert listed.returncode == 0 and "kept" in listed.stdout, listed
        finally:
            assert restarted.stop() == 0
        assert using(data) == []
    finally:
        for process in using(data):  # the test's own leftovers, whatever failed
            with contextlib.suppress(psutil.Error):
                process.kill()


def using(data: Path) -> list[psutil.Process]:
    """The processes whose command line names ``data``."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        if str(data) in " ".join(process.info["cmdline"] or []):
            found.append(process)
    return found


def start_nats(data: Path) -> Server:
    return start_server(segstore("nats", "--data-dir", str(data), "--port", "0"), NATS_READY, timeout_s=60)


def test_two_nats_on_free_ports_side_by_side_and_a_third_on_a_taken_port(tmp_path: Path) -> None:
    one = start_nats(tmp_path / "one")
    try:
        two = start_nats(tmp_path / "two")
        try:
            for server in (one, two):  # each listens on the ports it names, and on no other
                assert psutil.Process(int(server.ready["pid"])).is_running()
                assert server.listening() == {server.ports["client"], server.ports["monitor"]}
            assert not set(one.ports.values()) & set(two.ports.values())
            for flag, port in (("--port", one.ports["client"]), ("--monitor-port", two.ports["monitor"])):
                data = tmp_path / "three"
                finished = run_to_end(
                    segstore("nats", "--data-dir", str(data), *flat({"--port": "0", flag: str(port)})), data
                )
                assert finished.code == 2, finished
                assert finished.err == f"segstore nats: {flag} {port}: address already in use\n", finished
                assert finished.seconds < QUICK_S and finished.left == [] and not data.exists(), finished
            assert one.process.poll() is None and two.process.poll() is None
        finally:
            assert two.stop() == 0
    finally:
        assert one.stop() == 0


@pytest.mark.parametrize(
    ("command", "flag"),
    [
        ("zookeeper", "--port"),
        ("controller", "--port"),
        ("controller", "--metrics-port"),
        ("segmentstore", "--port"),
        ("segmentstore", "--metrics-port"),
        ("nats", "--port"),
        ("nats", "--cluster-port"),
    ],
)
def test_every_server_command_on_a_taken_port_exits_2_naming_it(tmp_path: Path, command: str, flag: str) -> None:
    data = tmp_path / "data"
    args = {
        "zookeeper": ["--data-dir", str(data)],
        "controller": ["--zookeeper", "127.0.0.1:1", "--port", "0"],
        "segmentstore": ["--data-dir", str(data), "--port", "0"],
        "nats": ["--data-dir", str(data), "--port", "0", "--nodes", "2"],
    }[command]
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        finished = run_to_end(segstore(command, *args, flag, str(port)), data)
    assert finished.code == 2, finished
    assert finished.err == f"segstore {command}: {flag} {port}: address already in use\n", finished
    assert finished.out == "" and finished.seconds < QUICK_S and finished.left == [] and not data.exists(), finished
