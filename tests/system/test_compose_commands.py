"""``docker-compose.yml`` run without Docker: its services' own command lines, configurations and environments, as
processes on this machine, with the secrets ``segstore dev-secrets`` makes; then the services' health checks, the
commands Docker would run in each container, must pass, Prometheus's scrape targets must serve metrics, and the
password ``segstore dev-secrets`` printed must log in over TLS.

What differs from the containers, and only that: each service host name is mapped to 127.0.0.1 and each
(service, port) to a free port of this machine (every NATS node listens on 4222 in its own container; here on
three ports), ``0.0.0.0`` binds 127.0.0.1, the segment stores advertise ``localhost`` (their certificate names it
too), ``/run/secrets`` is the directory ``segstore dev-secrets`` wrote and ``/data`` a directory per service. The
images' own programs stand in where the compose file runs none of ours: ``segstore zookeeper`` (the release of the
ZooKeeper image, test_docker_compose checks) for ``zookeeper``, the ``nats-server`` the tests run for ``nats-N``,
SeaweedFS (a real S3 server, with MinIO's credentials) for ``minio``. Prometheus and Grafana are not run; their
targets are fetched. ZooKeeper's probe needs ``nc``; without it, the same ``ruok`` is asked from Python.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from segment_store.storage.backends.seaweedfs_server import SeaweedServer
from segment_store.tier1.jetstream.nats_server import find_nats_server
from segstore_shared.coordination.zookeeper_server import four_letter_word, free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
SEGSTORE = ("controller", "segmentstore-1", "segmentstore-2", "segmentstore-3")
HEALTHY_WITHIN_S = 120.0
"""How long a service may take to pass its health check: Docker's interval times retries (5 s x 24), at most."""


@dataclass
class Compose:
    """The compose file's services mapped onto this machine: ports, directories, processes (stopped by pid)."""

    document: dict[str, Any]
    base: Path
    ports: dict[tuple[str, int], int] = field(default_factory=dict)
    processes: dict[str, subprocess.Popen[str]] = field(default_factory=dict)

    @property
    def services(self) -> dict[str, Any]:
        return dict(self.document["services"])

    def port(self, service: str, port: int) -> int:
        """The free port of this machine standing for ``service``'s ``port``."""
        return self.ports.setdefault((service, port), free_port())

    def local(self, text: str, service: str) -> str:
        """``text`` as it reads on this machine: ``host:port`` of a service (or of ``service`` itself, for
        0.0.0.0, 127.0.0.1 and localhost) becomes 127.0.0.1 and its port; the secrets and data are directories."""

        def address(found: re.Match[str]) -> str:
            owner = found["host"] if found["host"] in self.services else service
            return f"127.0.0.1:{self.port(owner, int(found['port']))}"

        names = "|".join(re.escape(name) for name in (*self.services, "0.0.0.0", "127.0.0.1", "localhost"))
        text = re.sub(rf"(?<![\w.-])(?P<host>{names}):(?P<port>\d+)\b", address, text)
        text = text.replace("/run/secrets/", f"{self.base / 'secrets'}/")
        return text.replace('"/data"', f'"{self.data(service)}"')

    def data(self, service: str) -> Path:
        path = self.base / "data" / service
        path.mkdir(parents=True, exist_ok=True)
        return path

    def argv(self, service: str) -> list[str]:
        """The service's command line here (see the module docstring)."""
        command = [str(part) for part in self.services[service]["command"]]
        local: list[str] = []
        for flag, value in zip(["", *command[:-1]], command, strict=True):
            if flag in ("--port", "--metrics-port"):
                value = str(self.port(service, int(value)))
            elif flag in ("--host", "--metrics-host") and value == "0.0.0.0":
                value = "127.0.0.1"
            elif flag == "--advertise-host" and value in self.services:
                value = "localhost"
            elif flag == "--data-dir":
                value = str(self.data(service))
            local.append(self.local(value, service))
        return local

    def environment(self, service: str) -> dict[str, str]:
        given = self.services[service].get("environment", {})
        return {name: self.local(str(value), service) for name, value in given.items()}

    def spawn(self, service: str, argv: list[str], environment: dict[str, str] | None = None) -> None:
        logs = self.base / "logs"
        logs.mkdir(exist_ok=True)
        env = {**os.environ, "PYTHONPATH": str(ROOT), **(environment or {})}
        with open(logs / f"{service}.log", "w") as log:
            self.processes[service] = subprocess.Popen(
                argv, stdout=subprocess.PIPE, stderr=log, text=True, cwd=self.base, env=env
            )

    def segstore(self, service: str) -> None:
        """Start a segstore service (its command line, its environment) and wait for its ready line."""
        argv = [sys.executable, "-m", "segstore_cli", *self.argv(service)]
        self.spawn(service, argv, self.environment(service))
        process = self.processes[service]
        assert process.stdout is not None
        line = process.stdout.readline()
        assert "ready" in line, f"{service} did not start: {line!r}\n{self.log(service)}"

    def log(self, service: str) -> str:
        path = self.base / "logs" / f"{service}.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else "<no log>"

    def probe(self, service: str) -> list[str]:
        """The service's health check as this machine runs it (CMD: the argv; CMD-SHELL: sh -c)."""
        kind, *test = [self.local(str(part), service) for part in self.services[service]["healthcheck"]["test"]]
        if kind == "CMD-SHELL":
            return ["sh", "-c", *test]
        assert kind == "CMD", f"{service}: health check {kind}"
        return [sys.executable if test[0] == "python" else test[0], *test[1:]]

    def wait_healthy(self, service: str, probe: list[str]) -> None:
        """Run the probe as Docker does, again until it passes (Docker's retries; a deadline here)."""
        deadline = time.monotonic() + HEALTHY_WITHIN_S
        while True:
            process = self.processes.get(service)
            assert process is None or process.poll() is None, f"{service} exited:\n{self.log(service)}"
            checked = subprocess.run(probe, capture_output=True, text=True, timeout=30, cwd=self.base)
            if checked.returncode == 0:
                return
            assert time.monotonic() < deadline, f"{service}: {probe} fails: {checked.stderr}\n{self.log(service)}"
            time.sleep(0.5)  # Docker's interval (5 s), shortened: polling a condition, not waiting for one

    def stop(self) -> None:
        """The segstore servers first, then what they use (stopped while they run, it would keep them waiting)."""
        servers = [process for name, process in self.processes.items() if name in SEGSTORE]
        others = [process for name, process in self.processes.items() if name not in SEGSTORE]
        for group in (servers, others):
            for process in group:
                if process.poll() is None:
                    process.send_signal(signal.SIGTERM)
            for process in group:
                try:
                    process.wait(30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(10)


@pytest.fixture
def compose(tmp_path: Path) -> Iterator[Compose]:
    running = Compose(yaml.safe_load((ROOT / "docker-compose.yml").read_text()), tmp_path)
    try:
        yield running
    finally:
        running.stop()


def dev_secrets(directory: Path) -> str:
    """Run ``segstore dev-secrets DIR`` as a user would; the admin password it printed."""
    made = subprocess.run([sys.executable, "-m", "segstore_cli", "dev-secrets", str(directory)], capture_output=True,
                          text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60)  # fmt: skip
    assert made.returncode == 0, made.stderr
    password = re.search(r"^user admin, password: (\S+)$", made.stdout, re.MULTILINE)
    assert password, made.stdout
    return password[1]


def start_zookeeper(compose: Compose) -> None:
    """``segstore zookeeper`` on the port standing for the image's 2181; its health check, or the same question."""
    port = compose.port("zookeeper", 2181)
    data = str(compose.data("zookeeper"))
    compose.spawn("zookeeper", [sys.executable, "-m", "segstore_cli", "zookeeper", "--port", str(port), "--data-dir",
                                data])  # fmt: skip
    if shutil.which("nc"):
        compose.wait_healthy("zookeeper", compose.probe("zookeeper"))
    else:
        ruok = [
            sys.executable,
            "-c",
            "import sys; from segstore_shared.coordination.zookeeper_server import "
            f"four_letter_word as ask; sys.exit(ask('127.0.0.1', {port}, 'ruok', timeout_s=2.0) != 'imok')",
        ]
        compose.wait_healthy("zookeeper", ruok)
    assert four_letter_word("127.0.0.1", port, "ruok", timeout_s=2.0) == "imok"


def start_nats(compose: Compose) -> None:
    """Each node's configuration from the compose file, as its container reads it, on this machine's ports."""
    for name, config in compose.document["configs"].items():
        path = compose.base / f"{name}.conf"
        path.write_text(compose.local(config["content"], name))
        compose.spawn(name, [find_nats_server(), "-c", str(path)])
    for name in compose.document["configs"]:
        compose.wait_healthy(name, compose.probe(name))


def start_s3(compose: Compose) -> SeaweedServer:
    """A real S3 server for ``minio``, with the credentials the compose file gives MinIO (and the segment stores)."""
    environment = compose.services["minio"]["environment"]
    credentials = {"access_key_id": environment["MINIO_ROOT_USER"],
                   "secret_access_key": environment["MINIO_ROOT_PASSWORD"], "region": "us-east-1"}  # fmt: skip
    server = SeaweedServer(compose.data("minio"), credentials)
    server.start()
    compose.ports[("minio", 9000)] = int(server.endpoint.rsplit(":", 1)[1])
    return server


@pytest.mark.timeout(600)  # nine servers: half a minute on an idle 2-core machine, minutes on a busy one
def test_compose_services_run_healthy_with_dev_secrets(compose: Compose) -> None:
    password = dev_secrets(compose.base / "secrets")
    start_zookeeper(compose)
    start_nats(compose)
    s3 = start_s3(compose)
    try:
        for service in SEGSTORE:
            compose.segstore(service)
        for service in SEGSTORE:
            compose.wait_healthy(service, compose.probe(service))
        prometheus = yaml.safe_load((ROOT / "prometheus.yml").read_text())
        for job in prometheus["scrape_configs"]:
            for target in (t for config in job["static_configs"] for t in config["targets"]):
                url = f"http://{compose.local(target, 'prometheus')}/metrics"
                with urllib.request.urlopen(url, timeout=10) as response:
                    assert "segstore_" in response.read().decode(), f"{job['job_name']}: {url}"
        controller = f"tls://localhost:{compose.port('controller', 9090)}"
        admin = [sys.executable, "-m", "segstore_cli", "admin", "--controller", controller, "--trust-store",
                 str(compose.base / "secrets" / "ca.pem"), "--username", "admin", "--password-stdin"]  # fmt: skip
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        created = subprocess.run([*admin, "scope", "create", "compose"], input=password + "\n", capture_output=True,
                                 text=True, cwd=compose.base, env=env, timeout=120)  # fmt: skip
        assert created.returncode == 0, created.stderr
        listed = subprocess.run([*admin, "scope", "list"], input=password + "\n", capture_output=True, text=True,
                                cwd=compose.base, env=env, timeout=120)  # fmt: skip
        assert listed.returncode == 0 and "compose" in listed.stdout, listed.stderr
        refused = subprocess.run([*admin, "scope", "list"], input="wrong\n", capture_output=True, text=True,
                                 cwd=compose.base, env=env, timeout=120)  # fmt: skip
        assert refused.returncode != 0
    finally:
        s3.stop()
