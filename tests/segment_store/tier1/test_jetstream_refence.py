"""Fencing again in place against real NATS servers: a paused server and a killed stream leader cost writers a
wait, not the log; every acknowledged entry is read once, in order, by the next owner."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import nats
import pytest

from segment_store.tier1.jetstream.config import JetStreamLogConfig
from segment_store.tier1.jetstream.factory import JetStreamLogFactory
from segment_store.tier1.jetstream.nats_server import NatsCluster
from segment_store.tier1.log import DataLogNotAvailableError, LogAddress
from segstore_shared.coordination.memory_store import MemoryCoordinationServer, MemoryCoordinationStore

pytestmark = [pytest.mark.integration, pytest.mark.slow]


async def until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():
        if loop.time() > deadline:
            raise AssertionError(f"{what} not within {timeout_s} s")
        await asyncio.sleep(0.02)


async def read_all(factory: JetStreamLogFactory) -> list[bytes]:
    """What the next owner of log 0 reads (it takes the log over, reads it, and closes)."""
    log = factory.create_log(0)
    await log.initialize(timeout=60)
    try:
        return [item.payload async for item in log.read()]
    finally:
        await log.close()


@asynccontextmanager
async def opened_factory(config: JetStreamLogConfig) -> AsyncIterator[JetStreamLogFactory]:
    factory = JetStreamLogFactory(config, MemoryCoordinationServer().connect())
    await factory.initialize()
    try:
        yield factory
    finally:
        await factory.close()


def run_on_cluster(
    tmp_path: Path, size: int, name: str, body: Callable[[NatsCluster], Awaitable[None]], timeout_s: float
) -> None:
    """``body`` on a NATS cluster of ``size`` servers of its own (tests here pause and kill them)."""
    cluster = NatsCluster.on_free_ports(tmp_path, size, name=name)
    cluster.start()
    try:
        asyncio.run(asyncio.wait_for(body(cluster), timeout_s))
    finally:
        cluster.stop()


@pytest.mark.timeout(120)
def test_a_paused_server_costs_appends_a_refence_not_the_log(tmp_path: Path) -> None:
    """The only server stops (SIGSTOP) with appends in flight: after ``refence_after_s`` the owner fences again;
    once the server runs on, the entries it stored are acknowledged where they are, nothing fails."""

    async def body(cluster: NatsCluster) -> None:
        config = JetStreamLogConfig(servers=tuple(cluster.urls), replicas=1, refence_after_s=1.0, ack_timeout_s=20.0)
        async with opened_factory(config) as factory:
            await paused(cluster, factory)

    async def paused(cluster: NatsCluster, factory: JetStreamLogFactory) -> None:
        log = factory.create_log(0)
        await log.initialize(timeout=30)
        before = [await log.append(b"before %d" % i) for i in range(20)]
        pid = cluster.nodes[0].pid
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        try:
            during = [log.append(b"during %d" % i) for i in range(20)]
            await until(lambda: log.refencing, 10, "a re-fence")
        finally:
            os.kill(pid, signal.SIGCONT)
        addresses = await asyncio.gather(*during)
        assert log.refences == 1 and log.epoch == 2
        assert addresses == sorted(addresses) and addresses[0] > before[-1]
        assert log.metadata.epoch == 2
        after = await log.append(b"after")
        assert after.epoch == 2 and after > addresses[-1]
        await log.close()
        expected = [b"before %d" % i for i in range(20)] + [b"during %d" % i for i in range(20)] + [b"after"]
        assert await read_all(factory) == expected

    run_on_cluster(tmp_path, 1, "paused", body, 100)


@pytest.mark.timeout(240)
def test_killing_the_stream_leader_costs_writers_the_election(tmp_path: Path) -> None:
    """A writer keeps 32 appends in flight on a 3-replica log; the stream's leader is killed (kill -9). No append
    fails (the log fences again instead of failing), and the next owner reads every acknowledged entry once, in
    order. The longest wait of an append is printed (the benchmark ``bench/tier1.py --leader-loss`` measures it)."""

    async def body(cluster: NatsCluster) -> None:
        async with opened_factory(JetStreamLogConfig(servers=tuple(cluster.urls), replicas=3)) as factory:
            await killed(cluster, factory)

    async def killed(cluster: NatsCluster, factory: JetStreamLogFactory) -> None:
        log = factory.create_log(0)
        await log.initialize(timeout=60)
        loop = asyncio.get_running_loop()
        acked: list[tuple[LogAddress, bytes]] = []
        waits: list[float] = []
        window = asyncio.Semaphore(32)
        stop = asyncio.Event()

        async def one(payload: bytes) -> None:
            started = loop.time()
            try:
                address = await log.append(payload)
            finally:
                window.release()
            waits.append(loop.time() - started)
            acked.append((address, payload))

        async def writer() -> None:
            tasks = []
            index = 0
            while not stop.is_set():
                await window.acquire()
                tasks.append(asyncio.create_task(one(b"entry %d" % index)))
                index += 1
            await asyncio.gather(*tasks)  # any failed append fails the test here

        writing = asyncio.create_task(writer())
        await until(lambda: len(acked) >= 500, 60, "500 acknowledged appends")
        connection = await nats.connect(cluster.urls)
        info = (await connection.jsm().stream_info(log.stream)).cluster
        await connection.close()
        assert info is not None
        leader = info.leader
        victim = next(node for node in cluster.nodes if node.config.server_name == leader)
        killed_at = len(acked)
        victim.kill()
        await until(lambda: len(acked) >= killed_at + 2000, 90, "2,000 appends after the kill")
        stop.set()
        await writing
        print(f"longest append wait {max(waits):.2f} s, re-fences {log.refences}, {len(acked)} acknowledged")
        assert [payload for _, payload in acked] == [b"entry %d" % i for i in range(len(acked))]  # call order
        assert [address for address, _ in acked] == sorted(address for address, _ in acked)
        await log.close()
        assert await read_all(factory) == [payload for _, payload in acked]

    run_on_cluster(tmp_path, 3, "leaderloss", body, 220)


class UnansweredStore:
    """A coordination store whose metadata updates, once ``hang`` is set, are never answered (not even with an
    error: a ZooKeeper request lost without the session noticing); everything else is the memory store's."""

    def __init__(self, store: MemoryCoordinationStore) -> None:
        self._store = store
        self.hang = asyncio.Event()
        self.never = asyncio.Event()

    def __getattr__(self, name: str) -> object:
        return getattr(self._store, name)

    async def compare_and_set(self, path: str, data: bytes, expected_version: int) -> int:
        if self.hang.is_set():
            await self.never.wait()
        return await self._store.compare_and_set(path, data, expected_version)


@pytest.mark.timeout(120)
def test_a_refence_that_hangs_fails_the_log_within_its_timeout(tmp_path: Path) -> None:
    """The server stops (SIGSTOP), so the owner fences again; the re-fence's metadata update is never answered.
    After ``refence_timeout_s`` the log fails with a clear error and the waiting append gets it (its container then
    restarts on a new log instance), instead of waiting for ever."""

    async def body(cluster: NatsCluster) -> None:
        store = UnansweredStore(MemoryCoordinationServer().connect())
        config = JetStreamLogConfig(servers=tuple(cluster.urls), replicas=1, refence_after_s=0.5,
                                    ack_timeout_s=5.0, refence_timeout_s=2.0)  # fmt: skip
        factory = JetStreamLogFactory(config, store)  # type: ignore[arg-type]
        await factory.initialize()
        log = factory.create_log(0)
        await log.initialize(timeout=30)
        await log.append(b"before")
        store.hang.set()
        pid = cluster.nodes[0].pid
        assert pid is not None
        loop = asyncio.get_running_loop()
        os.kill(pid, signal.SIGSTOP)
        try:
            started = loop.time()
            with pytest.raises(
                DataLogNotAvailableError, match=r"log container-0: fencing again did not finish within 2\.0s"
            ):
                await log.append(b"during")
            waited = loop.time() - started
        finally:
            os.kill(pid, signal.SIGCONT)
        assert log.refences == 0 and 2.0 <= waited < 10.0, waited
        store.never.set()
        await log.close()
        await factory.close()

    run_on_cluster(tmp_path, 1, "unanswered", body, 100)
