"""The warning of NATS servers that acknowledge before they fsync, against real servers started here: the JetStream
log factory (what a segment store connects with at start-up) logs one WARNING naming a lazily syncing server, none
for a server that syncs always, one naming a monitoring endpoint that does not answer, and only an INFO line when
it is given no endpoint (a NATS connection cannot tell the policy). ``segstore nats --sync default`` runs such a
server, says so on stderr, and a standalone connecting to it writes the warning into its segment store's log."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from segment_store.tier1.jetstream.config import JetStreamLogConfig
from segment_store.tier1.jetstream.factory import JetStreamLogFactory
from segment_store.tier1.jetstream.nats_server import SYNC_DEFAULT, NatsCluster
from segstore_shared.coordination.memory_store import MemoryCoordinationServer
from segstore_shared.coordination.zookeeper_server import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]
CHECK_LOGGER = "segment_store.tier1.jetstream.sync_check"


def connect(servers: list[str], monitors: tuple[str, ...], caplog: pytest.LogCaptureFixture) -> list[str]:
    """Initialize and close a factory over ``servers``; the sync check's WARNING messages."""
    config = JetStreamLogConfig(servers=tuple(servers), monitors=monitors, replicas=1)
    factory = JetStreamLogFactory(config, MemoryCoordinationServer().connect())
    caplog.clear()
    with caplog.at_level(logging.INFO, logger=CHECK_LOGGER):

        async def body() -> None:
            await factory.initialize()
            await factory.close()

        asyncio.run(asyncio.wait_for(body(), 30))
    return [r.getMessage() for r in caplog.records if r.name == CHECK_LOGGER and r.levelno == logging.WARNING]


@pytest.fixture(scope="module")
def lazy_nats(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsCluster]:
    cluster = NatsCluster.on_free_ports(tmp_path_factory.mktemp("lazy"), 1, sync_interval=SYNC_DEFAULT, name="lazy")
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def test_a_lazily_syncing_server_is_named_in_one_warning(
    lazy_nats: NatsCluster, caplog: pytest.LogCaptureFixture
) -> None:
    monitor = lazy_nats.nodes[0].config.monitor_url
    warnings = connect(lazy_nats.urls, (monitor,), caplog)
    assert len(warnings) == 1, warnings
    assert f"lazy-n0 ({monitor}: fsync every 120 s)" in warnings[0]
    assert "acknowledge JetStream appends before they fsync" in warnings[0]
    assert "Jepsen" in warnings[0] and "sync_interval: always" in warnings[0]


def test_an_always_syncing_server_gives_no_warning(nats_single: NatsCluster, caplog: pytest.LogCaptureFixture) -> None:
    assert connect(nats_single.urls, (nats_single.monitors,), caplog) == []


def test_an_endpoint_that_does_not_answer_is_named(nats_single: NatsCluster, caplog: pytest.LogCaptureFixture) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    warnings = connect(nats_single.urls, (nats_single.monitors, dead), caplog)
    assert len(warnings) == 1 and warnings[0].startswith("cannot learn the fsync policy") and dead in warnings[0]


def test_without_endpoints_nothing_is_checked_and_it_says_so(
    lazy_nats: NatsCluster, caplog: pytest.LogCaptureFixture
) -> None:
    assert connect(lazy_nats.urls, (), caplog) == []
    infos = [r.getMessage() for r in caplog.records if r.name == CHECK_LOGGER and r.levelno == logging.INFO]
    assert len(infos) == 1 and "not checked" in infos[0] and "--nats-monitor" in infos[0]


def test_segstore_nats_sync_default_runs_lazy_and_a_standalone_warns(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "segstore_cli", "nats", "--data-dir", str(tmp_path / "nats"), "--port", "0",
               "--sync", "default"]  # fmt: skip
    nats = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert nats.stdout is not None and nats.stderr is not None
        ready = nats.stdout.readline()
        found = re.search(r"ready on (\S+) .*monitoring (\S+), .*sync default\)", ready)
        assert found, ready
        warning = nats.stderr.readline()
        assert warning.startswith("segstore nats: warning: --sync default: JetStream acknowledges before fsync")
        with urllib.request.urlopen(f"{found[2]}/varz", timeout=5) as response:
            config = json.loads(response.read())["jetstream"]["config"]
        assert "sync_always" not in config and config["sync_interval"] == 120 * 10**9
        log = standalone_log(tmp_path / "data", found[1], found[2])
        lines = [line for line in log.splitlines() if "before they fsync" in line]
        assert len(lines) == 1 and "WARNING" in lines[0] and found[2] in lines[0], log[-2000:]
    finally:
        nats.terminate()
        nats.wait(30)


def standalone_log(data: Path, servers: str, monitor: str) -> str:
    """Start a standalone on JetStream Tier-1 over ``servers``, stop it once ready; its segment store's log."""
    command = [sys.executable, "-m", "segstore_cli", "standalone", "--data-dir", str(data), "--controller-port", "0",
               "--segmentstore-port", "0", "--tier1", "jetstream", "--nats", servers,
               "--nats-monitor", monitor]  # fmt: skip
    standalone = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert standalone.stdout is not None
        began = time.monotonic()
        line = standalone.stdout.readline()
        assert "ready" in line, line
        assert time.monotonic() - began < 120
    finally:
        standalone.terminate()
        standalone.wait(60)
    return (data / "segmentstore.log").read_text()
