"""Three ``segstore controller`` processes on one ZooKeeper share the periodic work by buckets: each stream's work
runs on exactly one of them (counted in their logs), and when that controller is killed with -9 it goes on, on
another one; ``getControllerServerList`` and ``getControllerToBucketMapping`` tell who is there and who owns what.

One segment store process (cluster mode) serves the segments; the controllers run the periodic work every 0.3 s and
log each stream's run at DEBUG (``controller.background``: ``periodic retention of <scope>/<stream>``).
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from segmentstore_cluster import REPO_ROOT, StoreProcess, stop_all

from controller.cluster.buckets import BUCKET_OWNERS_PATH
from controller_client.controller.api import ControllerClient, ControllerClientConfig
from controller_client.model import ScalingPolicy, StreamConfiguration
from segstore_shared.cluster.layout import HostInfo
from segstore_shared.coordination.kazoo_store import KazooCoordinationStore
from segstore_shared.coordination.zookeeper_server import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]
SCOPE = "buckets"
STREAMS = [f"s{i}" for i in range(8)]
SESSION_TIMEOUT_MS = 2_000
RUN = re.compile(rf"periodic retention of {SCOPE}/(?P<stream>\S+)")


class ControllerProcess:
    def __init__(self, zookeeper: str, log: Path) -> None:
        self.port = free_port()
        self.log = log
        self.offset = 0
        with log.open("w") as stderr:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "segstore_cli", "controller", "--zookeeper", zookeeper,
                 "--port", str(self.port), "--log-level", "debug", "--log-file", "-", "--bucket-count", "6",
                 "--zookeeper-session-timeout-ms", str(SESSION_TIMEOUT_MS), "--retention-period-s", "0.3",
                 "--auto-scale-period-s", "0.3", "--watermark-period-s", "0.3", "--txn-timeout-check-s", "0.3"],
                stdout=subprocess.PIPE, stderr=stderr, text=True, cwd=REPO_ROOT,
                env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
            )  # fmt: skip

    @property
    def identity(self) -> str:
        return f"127.0.0.1:{self.port}"

    def wait_ready(self) -> None:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert "ready" in line, f"controller on {self.port} did not start: {line!r}"

    def mark(self) -> None:
        """Count runs only from here on."""
        self.offset = self.log.stat().st_size

    def runs(self) -> Counter[str]:
        with self.log.open() as text:
            text.seek(self.offset)
            return Counter(match["stream"] for match in RUN.finditer(text.read()))

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)


async def wait_for(condition, what: str, timeout_s: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not await condition():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting until {what}"
        await asyncio.sleep(0.2)


def owners(controllers: list[ControllerProcess], stream: str) -> list[ControllerProcess]:
    return [c for c in controllers if c.runs()[stream] > 0]


async def each_stream_on_one(controllers: list[ControllerProcess], rounds: int) -> bool:
    """Every stream has run ``rounds`` times since the marks, all of them on one controller."""
    counts = [c.runs() for c in controllers]
    return all(sum(1 for n in counts if n[s]) == 1 and max(n[s] for n in counts) >= rounds for s in STREAMS)


async def test_each_streams_periodic_work_runs_on_one_controller_and_survives_its_kill(
    zk_chroot: str, tmp_path: Path
) -> None:
    store = StoreProcess(tmp_path / "store", zk_chroot, free_port(), 4, SESSION_TIMEOUT_MS)
    controllers = [ControllerProcess(zk_chroot, tmp_path / f"controller-{i}.log") for i in range(3)]
    await store.start()
    zk = await KazooCoordinationStore.connect(zk_chroot)
    for controller in controllers:
        await asyncio.to_thread(controller.wait_ready)
    config = ControllerClientConfig(retry_timeout_s=30)
    client = await ControllerClient.connect(f"tcp://127.0.0.1:{controllers[0].port}", config)
    try:
        async with asyncio.timeout(150):
            await client.create_scope(SCOPE)
            for stream in STREAMS:
                await client.create_stream(SCOPE, stream, StreamConfiguration(ScalingPolicy.fixed(1)))

            async def three_own_buckets() -> bool:
                mapping = await client.get_controller_to_bucket_mapping()
                owned = sorted(b for ids in mapping.values() for b in ids)
                return set(mapping) == {c.identity for c in controllers} and owned == list(range(6))

            await wait_for(three_own_buckets, "the six buckets are spread over the three controllers")
            servers = await client.get_controller_server_list()
            assert sorted(servers) == sorted(("127.0.0.1", c.port) for c in controllers)
            mapping = await client.get_controller_to_bucket_mapping()

            async def claimed_as_mapped() -> bool:  # the owner nodes follow the mapping: count from then on
                held = {}
                for bucket in range(6):
                    node = await zk.read_linearized(f"{BUCKET_OWNERS_PATH}/{bucket}")
                    held[bucket] = None if node is None else HostInfo.decode(node.data).port
                return all(held[b] == int(c.rpartition(":")[2]) for c, ids in mapping.items() for b in ids)

            await wait_for(claimed_as_mapped, "each bucket is held by the controller it is mapped to")
            for controller in controllers:
                controller.mark()
            await wait_for(lambda: each_stream_on_one(controllers, 3), "every stream runs on exactly one")
            assert all(c.runs() for c in controllers), "every controller does some of the work"

            victim = next(c for c in controllers if c is not controllers[0] and c.runs())
            orphans = [s for s in STREAMS if victim.runs()[s]]
            victim.process.send_signal(signal.SIGKILL)
            victim.process.wait(10)
            survivors = [c for c in controllers if c is not victim]
            for controller in survivors:
                controller.mark()
            await wait_for(lambda: each_stream_on_one(survivors, 3), "the dead one's streams run on a survivor")
            assert all(owners(survivors, s) for s in orphans)
            servers = await client.get_controller_server_list()
            assert sorted(servers) == sorted(("127.0.0.1", c.port) for c in survivors)
    finally:
        await client.close()
        await zk.close()
        await asyncio.gather(*(asyncio.to_thread(c.stop) for c in controllers))
        await stop_all([store])
