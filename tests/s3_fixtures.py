"""A moto S3 server on 127.0.0.1 for tests: a child process that can be paused (an S3 outage) and resumed.

Import the fixture into a test module (``from s3_fixtures import s3_server_fixture  # noqa: F401``)
and ask for ``s3_server``; each module gets its own server, killed at the end. ``new_s3_storage`` makes an
``S3ChunkStorage`` over a fresh bucket, so tests never see each other's chunks.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from segment_store.storage.backends.s3 import S3ChunkStorage, make_s3_client
from segstore_shared.coordination.zookeeper_server import free_port
from segstore_shared.processes import Freezable

CREDENTIALS = {"access_key_id": "testing", "secret_access_key": "testing", "region": "us-east-1"}
_buckets = itertools.count()


class MotoServer(Freezable):
    """``moto.server`` in a child process on a free loopback port."""

    def __init__(self) -> None:
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None
        self.paused = False
        self._session: Any = None

    def start(self, timeout_s: float = 30.0) -> None:
        command = [
            sys.executable,
            "-c",
            "from moto.server import main; main()",
            "-H",
            "127.0.0.1",
            "-p",
            str(self.port),
        ]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                with urllib.request.urlopen(f"{self.endpoint}/moto-api/", timeout=1):
                    return
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("the moto S3 server did not start") from None
                time.sleep(0.05)

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        process.kill()  # works on a stopped process too
        process.wait(10)

    def client(self, **overrides: Any) -> Any:
        import boto3

        if self._session is None:
            self._session = boto3.session.Session()
        settings: dict[str, Any] = {**CREDENTIALS, "endpoint_url": self.endpoint, "max_attempts": 1}
        settings.setdefault("session", self._session)
        settings.update(overrides)
        return make_s3_client(**settings)


@pytest.fixture(scope="module", name="s3_server")
def s3_server_fixture() -> Iterator[MotoServer]:
    server = MotoServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


def new_s3_storage(
    server: MotoServer, *, client: Any = None, prefix: str = "segstore/", **options: Any
) -> S3ChunkStorage:
    """An S3ChunkStorage over a new, empty bucket of ``server``."""
    storage = S3ChunkStorage(
        client or server.client(),
        f"test-{os.getpid()}-{next(_buckets)}",
        prefix,
        endpoint_url=server.endpoint,
        **options,
    )
    storage.check_bucket(create=True, region=CREDENTIALS["region"])
    return storage
