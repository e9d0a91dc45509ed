"""Quiet by default, as a user meets it ("The first hour", item 3): a server's stderr holds what needs a person's eye
and nothing else.

A ``segstore standalone`` started and stopped cleanly prints its ready line on stdout and nothing on stderr; its
INFO lines are in its log files. A plain-text client on a TLS port is not an error: the controller's gRPC core says
nothing about it (no ``Handshake failed``), the segment store's wire port one WARNING naming the peer.
"""

from __future__ import annotations

import contextlib
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from tls_fixtures import TlsFiles, make_tls_files

from segstore_shared.coordination.zookeeper_server import free_port

pytestmark = pytest.mark.integration

READY_TIMEOUT_S = 120.0
GRPC_CORE_LINE = re.compile(r"^[IWEF]\d{4} ")
"""A line gRPC core (absl) writes: ``I1128 16:07:51.544088 24214 ssl_transport_security.cc:2563] ...``."""


def segstore(*args: str) -> list[str]:
    return [sys.executable, "-m", "segstore_cli", *args]


@dataclass
class Run:
    """A ``segstore`` server process: its stdout read line by line, its stderr in a file."""

    process: subprocess.Popen[str]
    stderr_path: Path

    @classmethod
    def start(cls, args: list[str], directory: Path) -> Run:
        stderr_path = directory / "stderr.txt"
        with open(stderr_path, "w") as stderr:
            process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=stderr, text=True, cwd=directory)
        return cls(process, stderr_path)

    def ready_line(self) -> str:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()  # the ready line, or "" if the process ended
        assert "ready" in line, f"not ready: {line!r}; stderr: {self.stderr()[-3000:]}"
        return line

    def stop(self) -> tuple[int, str]:
        """SIGTERM, then its exit code and what it printed on stdout after its ready line."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            out, _ = self.process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            out, _ = self.process.communicate(timeout=10)
        return self.process.returncode, out

    def stderr(self) -> str:
        return self.stderr_path.read_text()


@pytest.fixture
def running() -> Iterator[list[Run]]:
    """The processes a test starts (append them), killed at its end whatever happened."""
    runs: list[Run] = []
    yield runs
    for run in runs:
        if run.process.poll() is None:
            run.process.kill()
            run.process.communicate(timeout=10)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_tls_files(tmp_path_factory.mktemp("tls"))


def test_standalone_says_its_ready_line_and_nothing_else_its_log_files_hold_the_rest(
    tmp_path: Path, running: list[Run]
) -> None:
    data = tmp_path / "data"
    args = segstore("standalone", "--data-dir", str(data), "--controller-port", "0", "--segmentstore-port", "0")
    run = Run.start([*args, "--container-count", "2"], tmp_path)
    running.append(run)
    ready = run.ready_line()
    assert ready.startswith("segstore standalone ready: controller tcp://127.0.0.1:"), ready
    assert run.stderr() == "", "a clean start prints nothing on stderr"
    code, out = run.stop()
    assert (code, out, run.stderr()) == (0, "", ""), "a clean stop prints nothing either"
    controller_log = (data / "controller.log").read_text()
    assert " INFO controller.service: controller serving plain text on 127.0.0.1:" in controller_log
    assert " INFO segstore_shared.cluster.registration: registered bucket owner " in controller_log
    segmentstore_log = (data / "segmentstore.log").read_text()
    assert " INFO segment_store.cluster.follower: " in segmentstore_log and "container 1 started" in segmentstore_log
    assert "segstore segmentstore ready on 127.0.0.1:" in segmentstore_log  # its stdout too
    assert (data / "zookeeper" / "zookeeper.log").is_file()


def test_controller_logs_to_its_log_file_at_the_log_level_in_any_case(
    zk_chroot: str, tmp_path: Path, running: list[Run]
) -> None:
    """The default log file is in the current directory, named in the ready line; ``--log-level DEBUG`` works."""
    args = segstore("controller", "--zookeeper", zk_chroot, "--port", "0", "--log-level", "DEBUG")
    run = Run.start(args, tmp_path)
    running.append(run)
    ready = run.ready_line()
    log_file = tmp_path / "segstore-controller.log"
    assert ready.rstrip().endswith(f", log {log_file})"), ready
    code, out = run.stop()
    assert (code, out, run.stderr()) == (0, "", "")
    text = log_file.read_text()
    assert " INFO controller.service: controller serving plain text on 127.0.0.1:" in text
    assert " DEBUG " in text, "--log-level DEBUG: the file gets debug lines too"


def test_log_file_dash_is_the_whole_log_on_stderr(zk_chroot: str, tmp_path: Path, running: list[Run]) -> None:
    run = Run.start(segstore("controller", "--zookeeper", zk_chroot, "--port", "0", "--log-file", "-"), tmp_path)
    running.append(run)
    ready = run.ready_line()
    assert ", log " not in ready, ready
    run.stop()
    assert " INFO controller.service: controller serving plain text on " in run.stderr()
    assert list(tmp_path.glob("*.log")) == []


def _plain_text_clients(port: int) -> None:
    """What a misconfigured user does: a plain-text gRPC channel (it retries its handshake), an HTTP request."""
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        with pytest.raises(grpc.FutureTimeoutError):
            grpc.channel_ready_future(channel).result(timeout=3)
    finally:
        channel.close()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, contextlib.suppress(OSError):
        raw.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
        raw.recv(4096)  # until the server closes it (a reset is fine too)
    time.sleep(1.0)  # what the server logs about them comes now


def test_plain_text_client_on_the_tls_controller_port_is_no_error(
    zk_chroot: str, tmp_path: Path, files: TlsFiles, running: list[Run]
) -> None:
    tls = ["--tls-cert", str(files.cert), "--tls-key", str(files.key), "--advertise-host", "localhost"]
    port = free_port()
    run = Run.start(segstore("controller", "--zookeeper", zk_chroot, "--port", str(port), *tls), tmp_path)
    running.append(run)
    assert f"tls://localhost:{port}" in run.ready_line()
    _plain_text_clients(port)
    code, _ = run.stop()
    assert code == 0
    lines = run.stderr().splitlines()
    assert not [line for line in lines if "Handshake failed" in line or GRPC_CORE_LINE.match(line)], lines
    assert not [line for line in lines if " ERROR " in line or "Traceback" in line], lines
    warnings = [line for line in lines if " WARNING " in line]
    assert len(warnings) <= 1 and all("127.0.0.1" in line for line in warnings), lines
    assert len(lines) == len(warnings), lines


def test_plain_text_client_on_the_tls_segment_store_port_is_one_warning_naming_it(
    tmp_path: Path, files: TlsFiles, running: list[Run]
) -> None:
    port = free_port()
    args = segstore("segmentstore", "--in-memory", "--port", str(port), "--container-count", "1")
    run = Run.start([*args, "--tls-cert", str(files.cert), "--tls-key", str(files.key)], tmp_path)
    running.append(run)
    run.ready_line()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        raw.sendall(b"\x00\x00\x00\x01\x00\x00\x00\x08hello!!!")  # a wire command frame, in plain text
        raw.settimeout(10)
        assert raw.recv(4096) == b"", "the server closes it"
    time.sleep(1.0)
    code, _ = run.stop()
    assert code == 0
    lines = run.stderr().splitlines()
    assert len(lines) == 1, lines
    assert " WARNING segment_store.server.tls_accept: connection ('127.0.0.1', " in lines[0], lines
    assert "TLS handshake failed" in lines[0] and "plain-text client" in lines[0], lines


def test_standalone_with_tls_and_a_plain_text_client_stays_quiet(
    tmp_path: Path, files: TlsFiles, running: list[Run]
) -> None:
    """Both of its TLS ports: nothing on the standalone's stderr; its segment store's one WARNING is in its log."""
    data = tmp_path / "data"
    args = segstore("standalone", "--data-dir", str(data), "--controller-port", "0", "--segmentstore-port", "0")
    run = Run.start([*args, "--container-count", "1", "--tls-cert", str(files.cert), "--tls-key", str(files.key)],
                    tmp_path)  # fmt: skip
    running.append(run)
    ready = run.ready_line()
    found = re.search(r"controller tls://localhost:(\d+), segment store localhost:(\d+)", ready)
    assert found is not None, ready
    _plain_text_clients(int(found[1]))
    with socket.create_connection(("127.0.0.1", int(found[2])), timeout=10) as raw:
        raw.sendall(b"plain text")
        raw.settimeout(10)
        assert raw.recv(4096) == b""
    time.sleep(1.0)
    code, _ = run.stop()
    assert (code, run.stderr()) == (0, "")
    segmentstore_log = (data / "segmentstore.log").read_text()
    assert segmentstore_log.count("TLS handshake failed") == 1, segmentstore_log[-3000:]
