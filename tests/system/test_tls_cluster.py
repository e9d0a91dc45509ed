"""TLS in cluster mode: ``segstore controller`` and ``segstore segmentstore --cluster`` as separate processes.

Each is given the certificate for ``localhost`` and ``--advertise-host localhost`` (the controller trusts the
segment stores through ``--tls-trust-store``). Our client reaches the controller at ``tls://localhost:PORT``,
``getURI`` answers ``localhost``, and a stream is written and read back over TLS on both planes. A segment
store advertised by an IP address with TLS warns that Pravega's clients refuse it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tls_fixtures import TlsFiles, make_tls_files

from controller_client import (
    ControllerClient,
    ControllerClientConfig,
    ScalingPolicy,
    StreamConfiguration,
    StreamManager,
)
from segstore_shared.coordination.zookeeper_server import EmbeddedZooKeeper, free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]
CONTAINERS = 2


def _launch(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "segstore_cli", *args, "--log-level", "warning", "--log-file", "-"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def _ready(process: subprocess.Popen[str]) -> str:
    assert process.stdout is not None
    line = process.stdout.readline()  # the ready line, or "" if the process ended
    if "ready" not in line:
        process.kill()
        _, errors = process.communicate(timeout=30)
        raise AssertionError(f"not ready: {line!r}\n{errors[-3000:]}")
    return line


def _stop(*processes: subprocess.Popen[str]) -> list[str]:
    """SIGTERM each (SIGKILL after 30 s); their standard error."""
    for process in processes:
        if process.poll() is None:
            process.terminate()
    errors = []
    for process in processes:
        try:
            errors.append(process.communicate(timeout=30)[1])
        except subprocess.TimeoutExpired:
            process.kill()
            errors.append(process.communicate(timeout=10)[1])
    return errors


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_tls_files(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def cluster(
    zookeeper: EmbeddedZooKeeper, zk_chroot: str, tmp_path: Path, files: TlsFiles
) -> Iterator[tuple[int, int, str]]:
    tls = ["--tls-cert", str(files.cert), "--tls-key", str(files.key), "--advertise-host", "localhost"]
    controller_port, store_port = free_port(), free_port()
    common = ["--zookeeper", zk_chroot, "--container-count", str(CONTAINERS), *tls]
    controller = _launch("controller", "--port", str(controller_port), "--tls-trust-store", str(files.ca), *common)
    store = _launch("segmentstore", "--cluster", "--port", str(store_port), "--data-dir", str(tmp_path), *common)
    try:
        controller_line = _ready(controller)
        _ready(store)
        yield controller_port, store_port, controller_line
    finally:
        _stop(controller, store)


async def test_controller_and_segment_store_processes_serve_tls_by_host_name(
    cluster: tuple[int, int, str], files: TlsFiles
) -> None:
    controller_port, store_port, controller_line = cluster
    assert f"tls://localhost:{controller_port}" in controller_line and f"segment stores: {files.ca}" in controller_line
    config = ControllerClientConfig(trust_store=str(files.ca))
    async with (
        await ControllerClient.connect(f"tls://localhost:{controller_port}", config, wait_ready=True) as controller,
        StreamManager(controller) as manager,
    ):
        await manager.create_scope("tlscluster")
        await manager.create_stream("tlscluster", "events", StreamConfiguration(ScalingPolicy.fixed(2)))
        assert await controller.get_uri("tlscluster", "events", 0) == ("localhost", store_port)
        async with await manager.create_writer("tlscluster", "events") as writer:
            for i in range(300):
                await writer.write_event(b"cluster %d" % i, routing_key=f"k{i % 3}")
        end = await manager.tail_cut("tlscluster", "events")
        async with manager.create_reader("tlscluster", "events", end=end) as reader:
            events = [event.data async for event in reader]
    assert sorted(events) == sorted(b"cluster %d" % i for i in range(300))


def test_segment_store_advertised_by_an_ip_address_with_tls_warns(
    zookeeper: EmbeddedZooKeeper, zk_chroot: str, tmp_path: Path, files: TlsFiles
) -> None:
    store = _launch(
        "segmentstore", "--cluster", "--port", str(free_port()), "--data-dir", str(tmp_path), "--zookeeper",
        zk_chroot, "--container-count", str(CONTAINERS), "--tls-cert", str(files.cert), "--tls-key", str(files.key),
    )  # fmt: skip
    try:
        _ready(store)
    finally:
        (errors,) = _stop(store)
    assert "warning: with TLS, clients reach this process as 127.0.0.1, an IP address" in errors
    assert "give --advertise-host a host name" in errors
