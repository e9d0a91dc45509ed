"""kill -9 of the ZooKeeper leader of a three-member ensemble, under load: the segment stores ride out the
election, nothing acknowledged is lost, and linearized reads stay linearized.

Every other test runs one ZooKeeper server, where ``sync`` has nothing to wait for and no session ever outlives
its server. Here three servers from the same jars run as one ensemble (``ZooKeeperEnsemble``) and everything
connects with a connect string naming all three: a ``ClusterManager`` in this process (leader election,
balancing, the host store) and two ``segstore segmentstore --cluster`` processes (membership, the assignment
watch, and file Tier-1, whose every acknowledgement waits for a linearized read of the log's metadata and whose
takeover fences by compare-and-set). The leader is the member whose ``srvr`` says ``Mode: leader``.

Linearized reads are checked where they can be told from plain ones: a session on one follower reads what a
session on another member wrote, right after the reader's follower was paused (SIGSTOP) while the rest of the
quorum committed the writes without it; a plain read there misses the last write about half the time.

After the leader's kill: a follower becomes leader; the writers get acknowledgements again within a deadline;
no session was lost (the probes' session ids are unchanged, the assignment is as before: no segment store lost
its registration); linearized reads go on. Then one segment store is killed: its containers move to the other,
which fences their logs through the new leader; the killed ZooKeeper member rejoins as a follower, and the
paused-follower reads are checked again. At the end every acknowledged event is read back exactly once, in
order, byte for byte.

On the leader ``sync`` is a no-op (ZooKeeper's leader does not queue syncs behind commits), and the leader sends
a commit to its followers before it applies it itself, so a ``sync`` then ``get`` there could miss a write a
follower has already acknowledged (seen here under load, about once in 400 rounds, before reads were confirmed
by a version check): 200 rounds read through the new leader while writing through a follower.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import uuid
from pathlib import Path

import pytest
from segmentstore_cluster import (
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
from segment_store.client import SegmentClient
from segment_store.client.config import ClientConfig, WriterConfig
from segment_store.client.retry import RetryPolicy
from segment_store.tier1.file.config import FileLedgerLogConfig
from segstore_shared.coordination.kazoo_store import KazooCoordinationStore
from segstore_shared.coordination.store import CoordinationUnavailableError, Versioned
from segstore_shared.coordination.zookeeper_server import (
    EmbeddedZooKeeper,
    ZooKeeperEnsemble,
    four_letter_word,
    free_port,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CONTAINERS = 4
SESSION_TIMEOUT_MS = 4_000  # the segment stores' sessions: an election must not cost them (ZooKeeper keeps them)
SEGMENTS = segment_per_container("ensemble/stream", CONTAINERS)
PROBE_PATH = "/ensemble-probe"
LEASE_S = FileLedgerLogConfig(root_dir=Path("unused")).ownership_lease_s  # the segment stores run the default


async def test_kill_9_of_the_zookeeper_leader_under_load_with_three_member_ensemble(tmp_path: Path) -> None:
    ensemble = ZooKeeperEnsemble.on_free_ports(tmp_path / "zookeeper", 3)
    await asyncio.to_thread(ensemble.start)
    try:
        async with asyncio.timeout(110):
            await run_leader_kill(ensemble, tmp_path)
    finally:
        await asyncio.to_thread(ensemble.stop)


async def leader_of(ensemble: ZooKeeperEnsemble) -> EmbeddedZooKeeper | None:
    return await asyncio.to_thread(ensemble.leader)


async def epoch_of(member: EmbeddedZooKeeper) -> int:
    """The epoch of the latest transaction ``member`` has seen (the upper half of its zxid): a leader elected later
    has a higher one."""
    reply = await asyncio.to_thread(four_letter_word, member.config.host, member.config.port, "srvr")
    found = re.search(r"^Zxid: 0x([0-9a-f]+)", reply, re.MULTILINE)
    assert found is not None, f"srvr of {member.connect_string}: {reply!r}"
    return int(found.group(1), 16) >> 32


async def write_probe(writer: KazooCoordinationStore, number: int) -> int:
    """Write ``number`` to the probe node through ``writer``; returns the version written. Repeated (on the fresh
    version) if the connection drops meanwhile."""
    while True:
        try:
            current = await writer.get(PROBE_PATH)
            return await writer.compare_and_set(PROBE_PATH, str(number).encode(), current.version)
        except CoordinationUnavailableError:
            await asyncio.sleep(0.05)


async def read_probe(reader: KazooCoordinationStore) -> Versioned:
    """A linearized read of the probe node; repeated if the connection drops meanwhile."""
    while True:
        try:
            seen = await reader.read_linearized(PROBE_PATH)
        except CoordinationUnavailableError:
            await asyncio.sleep(0.05)
            continue
        assert seen is not None
        return seen


async def linearized_rounds(writer: KazooCoordinationStore, reader: KazooCoordinationStore, rounds: int) -> None:
    """Write through ``writer``, then read linearized through ``reader`` (connected to another server): the read
    shows that write (nothing else writes the node)."""
    for number in range(rounds):
        version = await write_probe(writer, number)
        seen = await read_probe(reader)
        assert (seen.version, seen.data) == (version, str(number).encode()), f"wrote {number} as {version}: {seen}"


async def paused_follower_rounds(
    writer: KazooCoordinationStore, reader: KazooCoordinationStore, follower: EmbeddedZooKeeper, rounds: int = 8
) -> None:
    """``reader`` is connected to ``follower``, ``writer`` to another member. The follower is paused (SIGSTOP, as
    in a long GC pause) while writes go through: the rest of the quorum commits them without it. Right after it
    runs again, a linearized read through it must show the last of them (a plain read there misses it about half
    the time: ``sync`` is what makes it wait for the writes it has not applied)."""
    assert follower.pid is not None
    for number in range(rounds):
        os.kill(follower.pid, signal.SIGSTOP)
        try:
            for _ in range(5):
                version = await write_probe(writer, number)
        finally:
            os.kill(follower.pid, signal.SIGCONT)
        seen = await read_probe(reader)
        assert seen.version == version, f"round {number}: wrote version {version}, a linearized read gave {seen}"


async def run_leader_kill(ensemble: ZooKeeperEnsemble, tmp_path: Path) -> None:
    loop = asyncio.get_running_loop()
    store = await KazooCoordinationStore.connect(ensemble.connect_string)
    manager = ClusterManager(store, CONTAINERS, identity="test-controller", settle_delay_s=0.5)
    await manager.start()
    hosts = manager.host_store
    nodes = [
        StoreProcess(tmp_path / "data", ensemble.connect_string, free_port(), CONTAINERS, SESSION_TIMEOUT_MS)
        for _ in range(2)
    ]
    probes: dict[EmbeddedZooKeeper, KazooCoordinationStore] = {}
    try:
        await asyncio.gather(*(node.start() for node in nodes))
        await wait_for(lambda: balanced(hosts.assignment, [n.host_id for n in nodes], 2), "2 containers each", 30)
        config = ClientConfig(writer=WriterConfig(retry=RetryPolicy(max_attempts=400, max_delay_ms=250)))
        async with SegmentClient(hosts.resolve, config) as client:
            for segment in SEGMENTS:
                await create_with_retry(client, segment)
            writers = [client.writer(segment, uuid.uuid4()) for segment in SEGMENTS]
            for writer in writers:
                await writer.open()
            stop = asyncio.Event()
            loads = [asyncio.create_task(write_events(w, stop)) for w in writers]
            try:
                await wait_for(lambda: progressed(writers, dict.fromkeys(SEGMENTS, 0)), "acks before the kill", 30)
                leader = await leader_of(ensemble)
                assert leader is not None, "no ZooKeeper member reports itself leader"
                followers = [m for m in ensemble.members if m is not leader]
                for follower in followers:  # one session on each follower, for the linearized reads
                    probes[follower] = await KazooCoordinationStore.connect(follower.connect_string)
                await probes[followers[0]].create(PROBE_PATH, b"")
                await paused_follower_rounds(probes[followers[0]], probes[followers[1]], followers[1])
                sessions = {m: probe.client.client_id for m, probe in probes.items()}
                epoch = await epoch_of(leader)

                assignment = hosts.assignment
                await asyncio.to_thread(leader.kill)
                killed_at = loop.time()
                deadline = killed_at + 30
                while (new_leader := await leader_of(ensemble)) is None:
                    assert loop.time() < deadline, "no new ZooKeeper leader within 30 s"
                    await asyncio.sleep(0.05)
                assert new_leader in followers
                assert await epoch_of(new_leader) > epoch, "no election: the member killed was not the leader"
                follower = next(m for m in followers if m is not new_leader)
                # A file Tier-1 log acknowledges for half its ownership lease after its last check: events written
                # once the ensemble serves again and that much later need checks made through the new quorum.
                await linearized_rounds(probes[new_leader], probes[follower], 1)
                await wait_for(lambda: loop.time() > killed_at + LEASE_S / 2, "half a lease after the kill", 5)
                written = {w.segment: w.last_event_number for w in writers}
                await wait_for(lambda: progressed(writers, written), "acks after the leader's kill", 30)
                await linearized_rounds(probes[new_leader], probes[follower], 20)
                # and through the leader, where ``sync`` alone is not enough (the version check makes it linearized)
                await linearized_rounds(probes[follower], probes[new_leader], 200)
                assert {m: probe.client.client_id for m, probe in probes.items()} == sessions, "a session was lost"
                assert hosts.assignment == assignment, "a segment store lost its session (its containers moved)"

                # fencing through the new leader: one segment store dies, the other takes its containers over
                victim, survivor = nodes
                written = {w.segment: w.last_event_number for w in writers}
                victim.kill()
                victim.reap()
                rejoin = asyncio.create_task(asyncio.to_thread(ensemble.start, [leader]))
                await wait_for(lambda: balanced(hosts.assignment, [survivor.host_id], 4), "containers moved", 30)
                await wait_for(lambda: progressed(writers, written), "acks after the takeover", 30)
                await rejoin
                assert await asyncio.to_thread(leader.mode) == "follower"
                # three members again: a paused follower is no longer needed for a quorum
                await paused_follower_rounds(probes[new_leader], probes[follower], follower)
            finally:
                stop.set()
                outcomes = await asyncio.gather(*loads, return_exceptions=True)
            assert outcomes == [None] * len(loads), f"a write failed: {outcomes}"
            for writer in writers:
                async with asyncio.timeout(30):
                    await writer.close()  # flushes: everything written is acknowledged
            for writer in writers:
                await check_stored(client, writer)
    finally:
        for probe in probes.values():
            await probe.close()
        await stop_all(nodes)
        await manager.stop()
        await store.close()
