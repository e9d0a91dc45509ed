"""kill -9 of one of two segment store processes in cluster mode, under load: its containers move to the survivor
and every acknowledged event is there exactly once, in order, per segment.

Real ZooKeeper (the session's server, a chroot per test). A ``ClusterManager`` in this process elects itself
leader and assigns the 4 containers; two ``segstore segmentstore --cluster`` processes share one data dir (file
Tier-1 fenced through ZooKeeper, filesystem Tier-2). Writers (``SegmentWriter``, one writer id per segment, one
segment per container) find their segment store through the ``HostStore``; after the kill they see lost
connections, then ``WrongHost`` or no owner while the containers move, ask the host store again and resend what
was not acknowledged (the server deduplicates by writer id).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

from controller.cluster.cluster_manager import ClusterManager
from segment_store.client import SegmentAlreadyExistsError, SegmentClient, SegmentWriter
from segment_store.client.config import ClientConfig
from segment_store.client.retry import RetryPolicy
from segment_store.cluster.assignment import host_id
from segment_store.containers.mapping import container_of
from segment_store.coordination.kazoo_store import KazooCoordinationStore
from segment_store.coordination.zookeeper_server import free_port
from segment_store.protocol import parse_events

REPO_ROOT = Path(__file__).resolve().parents[2]
CONTAINERS = 4
SESSION_TIMEOUT_MS = 2_000
SEGMENTS = [
    next(f"failover/stream/{i}.#epoch.0" for i in range(1000) if container_of(f"failover/stream/{i}.#epoch.0", 4) == c)
    for c in range(CONTAINERS)
]


def start_segmentstore(data_dir: Path, zookeeper: str, port: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "segment_store.cli", "segmentstore", "--cluster", "--data-dir", str(data_dir),
         "--zookeeper", zookeeper, "--port", str(port), "--container-count", str(CONTAINERS),
         "--zookeeper-session-timeout-ms", str(SESSION_TIMEOUT_MS), "--log-level", "warning"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )  # fmt: skip


def wait_ready(process: subprocess.Popen[str]) -> None:
    assert process.stdout is not None
    line = process.stdout.readline()
    assert "ready" in line and "cluster mode" in line, f"segment store did not start: {line!r}"


async def create_with_retry(client: SegmentClient, segment: str) -> None:
    """Create ``segment`` on whichever process owns it once the assignment is there (repeat-safe)."""
    policy = RetryPolicy(max_attempts=60, initial_delay_ms=50, max_delay_ms=250)

    async def create() -> None:
        with contextlib.suppress(SegmentAlreadyExistsError):
            await client.create_segment(segment)

    await policy.call(create)


async def write_events(writer: SegmentWriter, stop: asyncio.Event) -> None:
    """Numbered events as fast as the window allows, with a short pause so the load stays bounded."""
    number = writer.last_event_number
    while not stop.is_set():
        number += 1
        await writer.write(f"{writer.segment}:{number}|".encode() + b"x" * 100)
        await asyncio.sleep(0.003)


async def read_all(client: SegmentClient, segment: str) -> bytes:
    length = (await client.get_segment_info(segment)).write_offset
    data = bytearray()
    while len(data) < length:
        data += (await client.read_segment(segment, len(data), 1 << 20)).data
    return bytes(data)


async def test_kill_9_of_one_segment_store_moves_its_containers_and_loses_nothing(
    zk_chroot: str, tmp_path: Path
) -> None:
    async with asyncio.timeout(90):
        await run_failover(zk_chroot, tmp_path)


async def run_failover(zk_chroot: str, tmp_path: Path) -> None:
    store = await KazooCoordinationStore.connect(zk_chroot)
    manager = ClusterManager(store, CONTAINERS, identity="test-controller", settle_delay_s=0.5)
    await manager.start()
    ports = [free_port(), free_port()]
    processes = [start_segmentstore(tmp_path, zk_chroot, port) for port in ports]
    hosts = manager.host_store
    try:
        await asyncio.gather(*(asyncio.to_thread(wait_ready, p) for p in processes))
        ids = [host_id("127.0.0.1", port) for port in ports]
        while not (hosts.assignment is not None and all(len(hosts.assignment.containers_of(h)) == 2 for h in ids)):
            await asyncio.sleep(0.05)

        config = ClientConfig(read_retry=RetryPolicy(max_attempts=20, max_delay_ms=500))
        async with SegmentClient(hosts.resolve, config) as client:
            for segment in SEGMENTS:
                await create_with_retry(client, segment)
            writers = [client.writer(segment, uuid.uuid4()) for segment in SEGMENTS]
            for writer in writers:
                await writer.open()
            stop = asyncio.Event()
            loads = [asyncio.create_task(write_events(w, stop)) for w in writers]
            await asyncio.sleep(2.0)

            victim_port = hosts.endpoint_of_segment(SEGMENTS[0])[1]  # type: ignore[index]
            victim = processes[ports.index(victim_port)]
            survivor_id = ids[1 - ports.index(victim_port)]
            victims_segments = {s for s in SEGMENTS if hosts.endpoint_of_segment(s) == ("127.0.0.1", victim_port)}
            assert len(victims_segments) == 2
            acked_at_kill = {w.segment: w.acked_event_number for w in writers}
            written_at_kill = {w.segment: w.last_event_number for w in writers}
            victim.send_signal(signal.SIGKILL)
            victim.wait(10)

            while hosts.assignment is None or hosts.assignment.containers_of(survivor_id) != set(range(CONTAINERS)):
                await asyncio.sleep(0.05)
            moved_at = asyncio.get_running_loop().time()
            while not all(w.acked_event_number > written_at_kill[w.segment] + 50 for w in writers):
                await asyncio.sleep(0.05)  # the moved segments take writes again, beyond what was in flight
                assert asyncio.get_running_loop().time() - moved_at < 30, "writers made no progress after the move"
            stop.set()
            await asyncio.gather(*loads)
            for writer in writers:
                async with asyncio.timeout(30):
                    await writer.close()  # flushes: everything written is acknowledged

            for writer in writers:
                assert writer.failure is None
                assert writer.acked_event_number == writer.last_event_number
                assert acked_at_kill[writer.segment] > 0, "nothing was acknowledged before the kill"
                if writer.segment in victims_segments:
                    assert writer.setups >= 2, f"{writer.segment}: the writer never reconnected"
                events = parse_events(await read_all(client, writer.segment))
                numbers = [int(e.data.split(b"|", 1)[0].rsplit(b":", 1)[1]) for e in events]
                assert numbers == list(range(1, writer.last_event_number + 1)), (
                    f"{writer.segment}: stored events are not 1..{writer.last_event_number} exactly once, in order"
                )
    finally:
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in processes:
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)
        await manager.stop()
        await store.close()
