"""A container moves between two live segment stores over real ZooKeeper: the new owner starts it only once the old
one has stopped answering for it, also when the old one is cut off ZooKeeper while the balancer moves it (the case
an hour-long self-test caught: a tail cut built from the old owner's stale segment length left acknowledged events
out)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from dataclasses import dataclass, field

import pytest
from cluster_env import wait_until
from tcp_proxy import FreezableProxy

from controller.cluster.cluster_manager import ClusterManager
from segment_store.cluster.follower import ContainerAssignmentFollower
from segstore_shared.cluster.layout import owner_path
from segstore_shared.cluster.registration import HostRegistration
from segstore_shared.coordination.kazoo_store import KazooCoordinationStore
from segstore_shared.coordination.session_lease import SessionLease
from segstore_shared.coordination.store import CoordinationStore, NodeNotFoundError, suspended_limit_s

pytestmark = pytest.mark.integration

SESSION_S = 4.0
COUNT = 4


@dataclass
class Host:
    """A segment store as far as ownership goes: it answers for a container while it runs it and its session lease
    holds (the service refuses every request otherwise)."""

    name: str
    lease: SessionLease
    peers: list[Host]
    running: set[int] = field(default_factory=set)
    overlaps: list[str] = field(default_factory=list)
    follower: ContainerAssignmentFollower | None = None

    def answers_for(self, container_id: int) -> bool:
        return container_id in self.running and self.lease.refusal() is None

    async def start_container(self, container_id: int) -> object:
        for peer in self.peers:
            if peer is not self and peer.answers_for(container_id):
                self.overlaps.append(f"{self.name} started container {container_id} while {peer.name} answers for it")
        self.running.add(container_id)
        return None

    async def stop_container(self, container_id: int) -> None:
        self.running.discard(container_id)

    def holds(self, container_id: int) -> bool:
        return container_id in self.running


async def join(stack: AsyncExitStack, connect: str, port: int, peers: list[Host]) -> Host:
    """A host on ``connect`` the way the service joins: lease, follower (with the cut-off limit), registration."""
    store = await KazooCoordinationStore.connect(connect, session_timeout_s=SESSION_S)
    stack.push_async_callback(store.close)
    lease = SessionLease(store, SESSION_S)
    await lease.start()
    stack.push_async_callback(lease.stop)
    registration = HostRegistration(store, "127.0.0.1", port)
    host = Host(registration.host_id, lease, peers)
    peers.append(host)
    follower = ContainerAssignmentFollower(
        store, host, registration.host_id, COUNT, disconnected_limit_s=suspended_limit_s(SESSION_S),
        token=registration.info.token, retry_delay_s=0.05,
    )  # fmt: skip
    host.follower = follower
    await follower.start()
    stack.push_async_callback(follower.stop)
    await registration.start()
    stack.push_async_callback(registration.stop)
    return host


@pytest.fixture
async def cluster(zk_chroot: str) -> AsyncIterator[tuple[AsyncExitStack, CoordinationStore]]:
    async with AsyncExitStack() as stack:
        controller_store = await KazooCoordinationStore.connect(zk_chroot)
        stack.push_async_callback(controller_store.close)
        manager = ClusterManager(controller_store, COUNT, identity="c", settle_delay_s=0.5)
        await manager.start()
        stack.push_async_callback(manager.stop)
        yield stack, controller_store


async def owner_of(store: CoordinationStore, container_id: int) -> str | None:
    try:
        return (await store.get(owner_path(container_id))).data.decode()
    except NodeNotFoundError:
        return None


async def test_a_container_moving_off_a_host_cut_off_zookeeper_starts_only_once_that_host_stopped_answering(
    cluster: tuple[AsyncExitStack, CoordinationStore], zk_chroot: str
) -> None:
    stack, controller_store = cluster
    hosts_, chroot = zk_chroot.split("/", 1)
    zk_host, zk_port = hosts_.rsplit(":", 1)
    proxy = FreezableProxy(zk_host, int(zk_port)).start()
    stack.callback(proxy.stop)
    try:
        peers: list[Host] = []
        a = await join(stack, f"{proxy.address}/{chroot}", 4101, peers)
        await wait_until(lambda: a.running == {0, 1, 2, 3}, timeout_s=20, what="A runs every container")

        proxy.freeze()  # A is cut off ZooKeeper; its session lives on for up to SESSION_S
        b = await join(stack, zk_chroot, 4102, peers)  # a host comes back: the balancer moves half of A's containers
        assert b.follower is not None
        await wait_until(lambda: bool(b.follower and (b.follower.waiting or b.running)), timeout_s=SESSION_S,
                         what="containers moved to B while A's session lives")  # fmt: skip
        assert b.overlaps == []
        assert set(b.follower.waiting.values()) == {a.name} and not b.running & set(b.follower.waiting)
        await wait_until(lambda: b.running == {0, 1, 2, 3}, timeout_s=4 * SESSION_S, what="B runs every container")
        assert a.running == set(), "A stopped its containers when cut off for as long as its session may live"
        assert not b.follower.waiting

        proxy.thaw()  # A comes back on a new session: the balancer moves half back, from a host hearing of it at once
        await wait_until(lambda: len(a.running) == 2 and len(b.running) == 2, timeout_s=6 * SESSION_S,
                         what="the containers shared again")  # fmt: skip
        assert a.overlaps == [] and b.overlaps == []
    finally:
        proxy.thaw()  # before the hosts close: a closing client waits on a frozen link
    owners = {c: await owner_of(controller_store, c) for c in range(COUNT)}
    for host in (a, b):
        for container_id in host.running:
            assert f'"{host.name}"' in (owners[container_id] or ""), (container_id, owners)
