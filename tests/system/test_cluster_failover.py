"""kill -9 of segment store processes in cluster mode, under load: their containers move, every acknowledged event
is there exactly once, in order, byte for byte, and the writers were sent on by ``WrongHost`` and followed it.

Real ZooKeeper (the session's server, a chroot per test). A ``ClusterManager`` in this process elects itself
leader and assigns the containers; the ``segstore segmentstore --cluster`` processes share one data dir (file
Tier-1 fenced through ZooKeeper, filesystem Tier-2; see ``tests/fixtures/segmentstore_cluster.py``). Writers
(``SegmentWriter``, one writer id per segment, one segment per container) find their segment store through the
``HostStore``; after a kill they see lost connections, then ``WrongHost`` (the new owner is still recovering) or no
owner while the containers move, ask the host store again and resend what was not acknowledged (the server
deduplicates by writer id).

Two tests: one kill of one of two processes; and three processes killed in turn, one of them while it is taking
over (it has fenced a dead process's Tier-1 log and not yet recovered it), with restarts in between so the
cluster always comes back to serving.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from segmentstore_cluster import (
    TIER1_LOGS,
    StoreProcess,
    balanced,
    check_stored,
    create_with_retry,
    progressed,
    segment_per_container,
    stop_all,
    wait_for,
    write_events,
)

from controller.cluster.cluster_manager import ClusterManager
from controller.cluster.host_store import HostStore
from segment_store.client import SegmentClient, SegmentWriter, WrongHostError
from segment_store.client.config import ClientConfig, WriterConfig
from segment_store.client.retry import RetryPolicy
from segment_store.tier1.log_metadata import LogMetadata
from segstore_shared.coordination.kazoo_store import KazooCoordinationStore
from segstore_shared.coordination.store import CoordinationStore
from segstore_shared.coordination.zookeeper_server import free_port

pytestmark = pytest.mark.integration

SESSION_TIMEOUT_MS = 2_000
CLIENT_CONFIG = ClientConfig(
    writer=WriterConfig(retry=RetryPolicy(max_attempts=400, max_delay_ms=250)),
    read_retry=RetryPolicy(max_attempts=20, max_delay_ms=500),
)


async def start_writers(client: SegmentClient, segments: list[str]) -> list[SegmentWriter]:
    for segment in segments:
        await create_with_retry(client, segment)
    writers = [client.writer(segment, uuid.uuid4()) for segment in segments]
    for writer in writers:
        await writer.open()
    return writers


# ---- one kill of one of two processes ----------------------------------------------------------------------------

SEGMENTS = segment_per_container("failover/stream", 4)


async def test_kill_9_of_one_segment_store_moves_its_containers_and_loses_nothing(
    zk_chroot: str, tmp_path: Path
) -> None:
    async with asyncio.timeout(90):
        await run_failover(zk_chroot, tmp_path)


async def run_failover(zk_chroot: str, tmp_path: Path) -> None:
    store = await KazooCoordinationStore.connect(zk_chroot)
    manager = ClusterManager(store, 4, identity="test-controller", settle_delay_s=0.5)
    await manager.start()
    nodes = [StoreProcess(tmp_path, zk_chroot, free_port(), 4, SESSION_TIMEOUT_MS) for _ in range(2)]
    hosts = manager.host_store
    try:
        await asyncio.gather(*(node.start() for node in nodes))
        await wait_for(lambda: balanced(hosts.assignment, [n.host_id for n in nodes], 2), "2 containers each", 30)

        async with SegmentClient(hosts.resolve, CLIENT_CONFIG) as client:
            writers = await start_writers(client, SEGMENTS)
            stop = asyncio.Event()
            loads = [asyncio.create_task(write_events(w, stop)) for w in writers]
            await wait_for(lambda: progressed(writers, dict.fromkeys(SEGMENTS, 0)), "acks before the kill", 30)

            victim = next(n for n in nodes if n.endpoint == hosts.endpoint_of_segment(SEGMENTS[0]))
            survivor = next(n for n in nodes if n is not victim)
            victims_segments = {s for s in SEGMENTS if hosts.endpoint_of_segment(s) == victim.endpoint}
            assert len(victims_segments) == 2
            written_at_kill = {w.segment: w.last_event_number for w in writers}
            victim.kill()
            victim.reap()

            await wait_for(lambda: balanced(hosts.assignment, [survivor.host_id], 4), "containers moved", 30)
            # the moved segments take writes again, beyond what was in flight
            await wait_for(lambda: progressed(writers, written_at_kill), "writers' progress after the move", 30)
            stop.set()
            assert await asyncio.gather(*loads, return_exceptions=True) == [None] * len(loads)
            for writer in writers:
                async with asyncio.timeout(30):
                    await writer.close()  # flushes: everything written is acknowledged
            for writer in writers:
                if writer.segment in victims_segments:
                    assert writer.setups >= 2, f"{writer.segment}: the writer never reconnected"
                await check_stored(client, writer)
    finally:
        await stop_all(nodes)
        await manager.stop()
        await store.close()


# ---- three processes, killed in turn, one while it takes over ----------------------------------------------------

CONTAINERS = 6
SEGMENTS_6 = segment_per_container("failover3/stream", CONTAINERS)


@pytest.mark.slow
async def test_kill_9_in_turn_and_of_a_survivor_recovering_a_dead_ones_container_loses_nothing(
    zk_chroot: str, tmp_path: Path
) -> None:
    async with asyncio.timeout(110):
        await run_kills_in_turn(zk_chroot, tmp_path)


async def run_kills_in_turn(zk_chroot: str, tmp_path: Path) -> None:
    store = await KazooCoordinationStore.connect(zk_chroot)
    manager = ClusterManager(store, CONTAINERS, identity="test-controller", settle_delay_s=0.5)
    await manager.start()
    hosts = manager.host_store
    nodes = [StoreProcess(tmp_path, zk_chroot, free_port(), CONTAINERS, SESSION_TIMEOUT_MS) for _ in range(3)]
    try:
        await asyncio.gather(*(node.start() for node in nodes))
        await wait_for(lambda: balanced(hosts.assignment, [n.host_id for n in nodes], 2), "2 containers each", 30)

        async with SegmentClient(hosts.resolve, CLIENT_CONFIG) as client:
            writers = await start_writers(client, SEGMENTS_6)
            stop = asyncio.Event()
            loads = [asyncio.create_task(write_events(w, stop)) for w in writers]
            try:
                await wait_for(lambda: progressed(writers, dict.fromkeys(SEGMENTS_6, 0)), "acks before the kills", 30)
                never_killed = await kill_one_and_the_one_taking_over(store, hosts, nodes, writers)
                await kill_one_and_restart_it_after_the_move(hosts, nodes, never_killed, writers)
            finally:
                stop.set()
                outcomes = await asyncio.gather(*loads, return_exceptions=True)
            assert outcomes == [None] * len(loads), f"a write failed: {outcomes}"

            for writer in writers:
                async with asyncio.timeout(30):
                    await writer.flush()
                assert writer.connection is not None
                assert writer.connection.endpoint == hosts.endpoint_of_segment(writer.segment), (
                    f"{writer.segment}: the writer is set up on {writer.connection.endpoint}, not where the "
                    f"assignment says ({hosts.endpoint_of_segment(writer.segment)})"
                )
                await writer.close()
            wrong_hosts = {w.segment: w.wrong_hosts for w in writers}
            assert sum(wrong_hosts.values()) > 0, f"no writer was answered WrongHost: {wrong_hosts}"
            for writer in writers:
                await check_stored(client, writer)
    finally:
        await stop_all(nodes)
        await manager.stop()
        await store.close()


def owner_pid(metadata: LogMetadata) -> int:
    """The pid in a Tier-1 log's owner id (``machine:pid:random``)."""
    return int(metadata.owner.split(":")[1])


async def kill_one_and_the_one_taking_over(
    store: CoordinationStore, hosts: HostStore, nodes: list[StoreProcess], writers: list[SegmentWriter]
) -> StoreProcess:
    """kill -9 the owner of the first segment; as soon as a survivor has fenced the Tier-1 log of one of its
    containers, and before it serves it (it answers ``WrongHost``), kill -9 that survivor too. Restart both on their
    ports and wait until the cluster is balanced and every writer makes progress. Returns the process not killed.

    The first victim is reaped only after the second kill: until then its pid is taken, so the survivors cannot
    tell that it is dead (as when it ran on another machine) and wait out its ownership lease (1 s) after fencing
    its logs, before they read them. That is the window of the second kill.
    """
    victim = next(n for n in nodes if n.endpoint == hosts.endpoint_of_segment(SEGMENTS_6[0]))
    assert hosts.assignment is not None
    moved = sorted(hosts.assignment.containers_of(victim.host_id))
    survivors = {n.pid: n for n in nodes if n is not victim}
    written = {w.segment: w.last_event_number for w in writers}
    victim.kill()

    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    taken: tuple[StoreProcess, int] | None = None
    while taken is None:
        assert loop.time() < deadline, f"no survivor fenced the Tier-1 log of container {moved}"
        for container in moved:
            metadata = LogMetadata.parse((await store.get(f"{TIER1_LOGS}/container-{container}")).data)
            if owner_pid(metadata) in survivors:
                taken = survivors[owner_pid(metadata)], container
                break
        else:
            await asyncio.sleep(0.01)
    taker, container = taken
    probe_config = ClientConfig(read_retry=RetryPolicy(max_attempts=1))
    async with SegmentClient(taker.endpoint, probe_config) as probe:
        with pytest.raises(WrongHostError):  # fenced, not serving yet: it is recovering the container
            await probe.get_segment_info(SEGMENTS_6[container])
    taker.kill()
    victim.reap()
    taker.reap()

    await asyncio.gather(victim.start(), taker.start())
    await wait_for(lambda: balanced(hosts.assignment, [n.host_id for n in nodes], 2), "balanced after restarts", 45)
    await wait_for(lambda: progressed(writers, written), "writers' progress after two kills and restarts", 30)
    return next(n for n in nodes if n is not victim and n is not taker)


async def kill_one_and_restart_it_after_the_move(
    hosts: HostStore, nodes: list[StoreProcess], victim: StoreProcess, writers: list[SegmentWriter]
) -> None:
    """kill -9 ``victim`` (reaped at once: no lease to wait out); once its containers moved to the other two and
    the writers progress there, restart it and wait until it has its share back and the writers progress again."""
    others = [n.host_id for n in nodes if n is not victim]
    written = {w.segment: w.last_event_number for w in writers}
    victim.kill()
    victim.reap()
    await wait_for(lambda: balanced(hosts.assignment, others, 3), "containers moved to the other two", 30)
    await wait_for(lambda: progressed(writers, written), "writers' progress after the third kill", 30)

    await victim.start()
    await wait_for(lambda: balanced(hosts.assignment, [n.host_id for n in nodes], 2), "balanced after restart", 30)
    written = {w.segment: w.last_event_number for w in writers}
    await wait_for(lambda: progressed(writers, written), "writers' progress after the restart", 30)
