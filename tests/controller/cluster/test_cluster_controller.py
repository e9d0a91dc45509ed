"""Controller side over the in-process coordination store: balancer, leader election, host store, manager."""

from __future__ import annotations

import asyncio
import logging

import pytest
from cluster_env import counts, read_assignment, register_host, wait_until, write_assignment

from controller.cluster.balancer import ContainerBalancer
from controller.cluster.cluster_manager import ClusterManager
from controller.cluster.election import LeaderElection
from controller.cluster.host_store import HostStore
from segstore_shared.cluster.container_mapping import container_of
from segstore_shared.cluster.layout import (
    ASSIGNMENT_PATH,
    LEADER_PATH,
    ContainerAssignment,
    ContainerCountMismatchError,
    NoOwnerError,
)
from segstore_shared.coordination.memory_store import MemoryCoordinationServer, MemoryCoordinationStore

pytestmark = pytest.mark.unit

SETTLE_S = 0.05


@pytest.fixture
def zk() -> MemoryCoordinationServer:
    return MemoryCoordinationServer()


# ---- balancer -------------------------------------------------------------------------------------------------


async def test_balancer_with_hosts_joining_and_leaving(zk: MemoryCoordinationServer) -> None:
    store = zk.connect()
    a = await register_host(zk, "a:1")
    balancer = ContainerBalancer(store, 4, settle_delay_s=SETTLE_S)
    await balancer.start()
    try:
        await wait_until(lambda: balancer.writes == 1)
        assert (await read_assignment(store)) == ContainerAssignment.of(4, {"a:1": [0, 1, 2, 3]})

        b = await register_host(zk, "b:1")
        await wait_until(lambda: balancer.writes == 2)
        second = await read_assignment(store)
        assert second is not None and counts(second) == {"a:1": 2, "b:1": 2}
        assert second.containers_of("a:1") < {0, 1, 2, 3}, "a kept two of its own containers"

        await a.close()  # a dies: only its containers move, to b
        await wait_until(lambda: balancer.writes == 3)
        third = await read_assignment(store)
        assert third == ContainerAssignment.of(4, {"b:1": [0, 1, 2, 3]})

        await b.close()  # nobody left: containers run nowhere
        await wait_until(lambda: balancer.writes == 4)
        assert (await read_assignment(store)) == ContainerAssignment(4, {})
    finally:
        await balancer.stop()


async def test_balancer_with_flapping_host_coalesces_changes(zk: MemoryCoordinationServer) -> None:
    store = zk.connect()
    await register_host(zk, "a:1")
    # the settle delay is far longer than the three flaps take, even on a loaded machine (0.3 s was not, in CI)
    balancer = ContainerBalancer(store, 4, settle_delay_s=2.0)
    await balancer.start()
    try:
        await wait_until(lambda: balancer.writes == 1 and balancer.rounds == 1, timeout_s=30)
        for _ in range(3):  # joins and leaves within the settle delay
            flapper = await register_host(zk, "b:1")
            await asyncio.sleep(0.02)
            await flapper.close()
        await wait_until(lambda: balancer.rounds == 2, timeout_s=30)  # the round the flaps caused
        assert balancer.writes == 1, "a host that came and went within the settle delay moved containers"
        assert (await read_assignment(store)) == ContainerAssignment.of(4, {"a:1": [0, 1, 2, 3]})
    finally:
        await balancer.stop()


class RacingStore:
    """Wraps a real store: just before the balancer's first compare-and-set, another writer changes the node."""

    def __init__(self, inner: MemoryCoordinationStore, rival: MemoryCoordinationStore, rival_value: bytes) -> None:
        self._inner = inner
        self._rival = rival
        self._rival_value = rival_value
        self.raced = False

    def __getattr__(self, name: str) -> object:
        return getattr(self._inner, name)

    async def compare_and_set(self, path: str, data: bytes, expected_version: int) -> int:
        if not self.raced and path == ASSIGNMENT_PATH:
            self.raced = True
            await self._rival.compare_and_set(path, self._rival_value, expected_version)
        return await self._inner.compare_and_set(path, data, expected_version)


async def test_balancer_with_racing_writer_recomputes_from_new_state(zk: MemoryCoordinationServer) -> None:
    setup = zk.connect()
    await register_host(zk, "a:1")
    await register_host(zk, "b:1")
    await write_assignment(setup, ContainerAssignment.of(4, {"a:1": [0, 1, 2, 3]}))
    rival = ContainerAssignment.of(4, {"a:1": [0, 1], "b:1": [2, 3]})  # what a stale leader might write
    store = RacingStore(zk.connect(), zk.connect(), rival.encode())
    balancer = ContainerBalancer(store, 4, settle_delay_s=SETTLE_S)  # type: ignore[arg-type]
    result = await balancer.balance_once()
    assert store.raced
    assert result == rival, "recomputed from the rival's state: balanced already, nothing more moves"
    assert (await read_assignment(setup)) == rival


async def test_balancer_with_other_container_count_refuses_to_start(zk: MemoryCoordinationServer) -> None:
    store = zk.connect()
    await write_assignment(store, ContainerAssignment.of(4, {}))
    with pytest.raises(ContainerCountMismatchError):
        await ContainerBalancer(store, 8, settle_delay_s=SETTLE_S).start()
    with pytest.raises(ContainerCountMismatchError):
        await HostStore(store, 8).start()
    with pytest.raises(ContainerCountMismatchError):
        await ClusterManager(store, 8, settle_delay_s=SETTLE_S).start()
    assert not await store.exists(LEADER_PATH), "a misconfigured controller took part in the election"


# ---- leader election ------------------------------------------------------------------------------------------


async def test_election_with_two_candidates_hands_over_when_leader_goes(zk: MemoryCoordinationServer) -> None:
    s1, s2 = zk.connect(), zk.connect()
    first, second = LeaderElection(s1, "c1"), LeaderElection(s2, "c2")
    losses: list[str] = []
    first.on_lost(lambda: losses.append("c1"))
    await first.start()
    await asyncio.wait_for(first.wait_elected(), 5)
    await second.start()
    await asyncio.sleep(0.1)
    assert first.is_leader and not second.is_leader

    await s1.close()  # the leader's session ends: its node goes
    await asyncio.wait_for(second.wait_elected(), 5)
    assert second.is_leader
    assert b'"identity": "c2"' in (await s2.get(LEADER_PATH)).data
    await second.stop()
    await first.stop()


async def test_election_with_resign_and_session_expiry(
    zk: MemoryCoordinationServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="controller.cluster.election")
    s1, s2 = zk.connect(), zk.connect()
    first, second = LeaderElection(s1, "c1"), LeaderElection(s2, "c2")
    lost: list[str] = []
    first.on_lost(lambda: lost.append("c1"))
    second.on_lost(lambda: lost.append("c2"))
    await first.start()
    await asyncio.wait_for(first.wait_elected(), 5)
    await second.start()

    await first.stop()  # resigns
    assert lost == ["c1"] and not first.is_leader
    resigned = [r for r in caplog.records if "lost leadership: resigned" in r.getMessage()]
    assert [r.levelno for r in resigned] == [logging.INFO]  # stopping is no warning
    await asyncio.wait_for(second.wait_elected(), 5)

    zk.expire(s2, reconnect=True)  # the leader's session expires; a new one opens
    await wait_until(lambda: lost == ["c1", "c2"])
    await asyncio.wait_for(second.wait_elected(), 5)  # nobody else runs: it wins again on its new session
    assert second.terms == 2
    await asyncio.wait_for(first.wait_lost(), 1)
    expired = [r for r in caplog.records if "lost leadership: ZooKeeper session lost" in r.getMessage()]
    assert [r.levelno for r in expired] == [logging.WARNING]  # losing it is one
    await second.stop()


async def test_election_with_many_candidates_never_has_two_leaders(zk: MemoryCoordinationServer) -> None:
    sessions = [zk.connect() for _ in range(4)]
    candidates = [LeaderElection(s, f"c{i}") for i, s in enumerate(sessions)]
    everyone = list(candidates)
    most_at_once = 0

    async def monitor() -> None:
        nonlocal most_at_once
        while True:
            most_at_once = max(most_at_once, sum(c.is_leader for c in candidates))
            await asyncio.sleep(0)

    watcher = asyncio.create_task(monitor())
    for candidate in candidates:
        await candidate.start()
    for round_ in range(4):
        await wait_until(lambda: sum(c.is_leader for c in candidates) == 1)
        terms = sum(c.terms for c in everyone)
        leader = next(i for i, c in enumerate(candidates) if c.is_leader)
        if round_ % 2:
            zk.expire(sessions[leader])  # gone for good
            gone = candidates.pop(leader)
            await wait_until(lambda: not gone.is_leader)  # noqa: B023 (awaited before the loop moves on)
            await gone.stop()
            sessions.pop(leader)
        else:
            zk.expire(sessions[leader], reconnect=True)  # back on a new session, as one candidate among others
        await wait_until(lambda: sum(c.terms for c in everyone) > terms, what="a new term")  # noqa: B023 (same)
    await wait_until(lambda: sum(c.is_leader for c in candidates) == 1)
    watcher.cancel()
    assert most_at_once == 1
    assert len(candidates) == 2
    for candidate in candidates:
        await candidate.stop()


# ---- host store and manager -----------------------------------------------------------------------------------


async def test_host_store_with_assignment_changes(zk: MemoryCoordinationServer) -> None:
    store = zk.connect()
    hosts = HostStore(store, 4)
    await hosts.start()
    ready = asyncio.create_task(hosts.wait_all_assigned())
    segment = "scope/stream/0.#epoch.0"
    assert hosts.endpoint_of_segment(segment) is None
    with pytest.raises(NoOwnerError):
        await hosts.resolve(segment)
    owner = container_of(segment, 4)
    await write_assignment(store, ContainerAssignment.of(4, {"10.0.0.1:12345": [owner], "h2:1": []}))
    await wait_until(lambda: hosts.assignment is not None)
    assert hosts.endpoint_of_container(owner) == ("10.0.0.1", 12345)
    assert await hosts.resolve(segment) == ("10.0.0.1", 12345)
    assert await hosts.resolve(segment.replace(".#epoch.0", ".#epoch.7")) == ("10.0.0.1", 12345)
    assert hosts.endpoint_of_container((owner + 1) % 4) is None
    with pytest.raises(ValueError):
        hosts.endpoint_of_container(4)
    await asyncio.sleep(0.05)
    assert not ready.done(), "ready while containers had no host"
    everything = ContainerAssignment.of(4, {"10.0.0.1:12345": [0, 1, 2, 3]})
    await write_assignment(store, everything)
    assert await asyncio.wait_for(ready, 5) == everything

    await write_assignment(store, ContainerAssignment.of(8, {"x:1": [0]}))  # a controller misconfigured later
    await wait_until(lambda: hosts.failure is not None)
    assert isinstance(hosts.failure, ContainerCountMismatchError)
    assert hosts.endpoint_of_container(owner) == ("10.0.0.1", 12345), "kept the last good assignment"
    await hosts.stop()


async def test_cluster_manager_with_leader_loss_hands_balancing_over(zk: MemoryCoordinationServer) -> None:
    s1, s2 = zk.connect(), zk.connect()
    m1 = ClusterManager(s1, 4, identity="c1", settle_delay_s=SETTLE_S)
    m2 = ClusterManager(s2, 4, identity="c2", settle_delay_s=SETTLE_S)
    await m1.start()
    await wait_until(lambda: m1.is_leader and m1.balancer is not None)
    await m2.start()
    await register_host(zk, "a:1")
    b = await register_host(zk, "b:1")
    await wait_until(lambda: m2.host_store.assignment is not None and len(m2.host_store.assignment.hosts) == 2)
    assert m2.balancer is None, "a follower controller balanced"

    zk.expire(s1)  # the leader controller's session dies for good
    await wait_until(lambda: m2.is_leader and m2.balancer is not None)
    await wait_until(lambda: m1.balancer is None)
    await b.close()
    await wait_until(
        lambda: m2.host_store.assignment == ContainerAssignment.of(4, {"a:1": [0, 1, 2, 3]}),
        what="the new leader moved the dead host's containers",
    )
    assert m2.host_store.endpoint_of_container(3) == ("a", 1)
    await m2.stop()
    await m1.stop()
    assert not await zk.connect().exists(LEADER_PATH), "stop() resigns"
