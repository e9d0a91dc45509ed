"""A shared-nothing segstore cluster of real processes, for tests that break it.

ZooKeeper (the session's server, a chroot per test), ``segstore controller``, three ``segstore segmentstore
--cluster`` processes each with its **own** data dir, Tier-1 on a 3-node NATS JetStream cluster (R3), Tier-2
on an S3 endpoint (moto, or SeaweedFS: a real S3-compatible server). Each process is started and stopped by
its pid; a segment store can be killed, have its disk wiped, be started again on the same address with an
empty disk, or be paused (SIGSTOP) and resumed. Logs (stderr) go to ``<base>/logs/<name>.log``, outside the
data dirs, so a wiped host keeps its log.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from s3_fixtures import CREDENTIALS, MotoServer
from seaweedfs_fixtures import SeaweedServer

from segment_store.tier1.jetstream.nats_server import NatsCluster
from segstore_shared.coordination.zookeeper_server import free_port

REPO_ROOT = Path(__file__).resolve().parents[1]
CONTAINERS = 4
SESSION_TIMEOUT_MS = 2_000


@dataclass
class SharedNothingCluster:
    base: Path
    zookeeper: str
    s3: MotoServer | SeaweedServer
    nats: NatsCluster
    bucket: str
    segment_stores: int = 3
    controller_port: int = field(default_factory=free_port)
    ports: dict[str, int] = field(default_factory=dict)
    processes: dict[str, subprocess.Popen[str]] = field(default_factory=dict)

    @property
    def controller_uri(self) -> str:
        return f"tcp://127.0.0.1:{self.controller_port}"

    def data_dir(self, name: str) -> Path:
        return self.base / name

    def _env(self) -> dict[str, str]:
        return {
            **os.environ,
            "PYTHONPATH": str(REPO_ROOT),
            "AWS_ACCESS_KEY_ID": CREDENTIALS["access_key_id"],
            "AWS_SECRET_ACCESS_KEY": CREDENTIALS["secret_access_key"],
            "AWS_DEFAULT_REGION": CREDENTIALS["region"],
        }

    def _spawn(self, name: str, *args: str, delay_s: float = 0.0) -> subprocess.Popen[str]:
        """A ``segstore`` process; with a delay, started by a shell after sleeping (so it starts on time even while
        this process is blocked: the official client holds the GIL while a write waits)."""
        logs = self.base / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "segstore_cli", *args, "--log-level", "warning"]
        if delay_s:
            command = ["sh", "-c", f"sleep {delay_s}; exec {shlex.join(command)}"]
        with open(logs / f"{name}.log", "a") as log:
            process = subprocess.Popen(
                command, stdout=subprocess.PIPE, stderr=log, text=True, cwd=REPO_ROOT, env=self._env()
            )
        self.processes[name] = process
        return process

    def wait_ready(self, name: str) -> None:
        self._ready(name, self.processes[name])

    @staticmethod
    def _ready(name: str, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert "ready" in line, f"{name} did not start: {line!r}"

    def start(self) -> None:
        self._spawn("controller", "controller", "--zookeeper", self.zookeeper, "--port", str(self.controller_port),
                    "--container-count", str(CONTAINERS))  # fmt: skip
        self._ready("controller", self.processes["controller"])
        names = [f"ss{i}" for i in range(1, self.segment_stores + 1)]
        for name in names:
            self.ports[name] = free_port()
            self.launch_segmentstore(name)
        for name in names:
            self._ready(name, self.processes[name])

    def launch_segmentstore(self, name: str, delay_s: float = 0.0) -> subprocess.Popen[str]:
        """Start segment store ``name`` on its address (its data dir as it is: maybe empty)."""
        return self._spawn(
            name, "segmentstore", "--cluster", "--zookeeper", self.zookeeper, "--data-dir", str(self.data_dir(name)),
            "--port", str(self.ports[name]), "--container-count", str(CONTAINERS),
            "--zookeeper-session-timeout-ms", str(SESSION_TIMEOUT_MS),
            "--tier1", "jetstream", "--nats", self.nats.servers,
            "--tier2", "s3", "--s3-endpoint", self.s3.endpoint, "--s3-bucket", self.bucket, "--s3-create-bucket",
            delay_s=delay_s,
        )  # fmt: skip

    def restart_segmentstore(self, name: str) -> None:
        self.launch_segmentstore(name)
        self._ready(name, self.processes[name])

    def kill(self, name: str) -> None:
        process = self.processes[name]
        process.send_signal(signal.SIGKILL)
        process.wait(10)

    def wipe(self, name: str) -> None:
        """Lose the host's disk: its data dir is gone."""
        shutil.rmtree(self.data_dir(name), ignore_errors=True)
        assert not self.data_dir(name).exists()

    def pause(self, name: str) -> None:
        self.processes[name].send_signal(signal.SIGSTOP)

    def resume(self, name: str) -> None:
        self.processes[name].send_signal(signal.SIGCONT)

    def log_tail(self, name: str, lines: int = 40) -> str:
        path = self.base / "logs" / f"{name}.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else "<no log>"

    def stop(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGCONT)
                process.send_signal(signal.SIGTERM)
        for process in self.processes.values():
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)
