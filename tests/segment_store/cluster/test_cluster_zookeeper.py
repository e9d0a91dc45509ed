"""Cluster membership over real ZooKeeper: a segment store's session expires (forced the way kazoo's own tests
do it), it stops its containers, registers again on its new session and resumes following the assignment."""

from __future__ import annotations

import asyncio

import pytest
from cluster_env import wait_until
from container_env import ContainerEnv
from coordination_env import expire_zookeeper_session
from tcp_proxy import FreezableProxy

from controller.cluster.cluster_manager import ClusterManager
from segment_store.cluster.follower import ContainerAssignmentFollower
from segment_store.containers.registry import ContainerRegistry
from segstore_shared.cluster.layout import HostInfo
from segstore_shared.cluster.registration import HostRegistration
from segstore_shared.coordination.kazoo_store import KazooCoordinationStore
from segstore_shared.coordination.store import suspended_limit_s

pytestmark = pytest.mark.integration


async def test_segment_store_with_expired_session_stops_reregisters_and_resumes(zk_chroot: str) -> None:
    controller_store = await KazooCoordinationStore.connect(zk_chroot)
    store = await KazooCoordinationStore.connect(zk_chroot, session_timeout_s=4.0)
    manager = ClusterManager(controller_store, 4, identity="c", settle_delay_s=1.0)
    env = ContainerEnv()
    stopped: list[int] = []
    follower: ContainerAssignmentFollower | None = None

    async def stop_container(container_id: int) -> None:
        stopped.append(container_id)
        await ContainerRegistry.stop_container(registry, container_id)

    registry = ContainerRegistry(4, env.tier1, env.storage, env.config, should_run=lambda c: follower is not None
                                 and follower.should_run(c))  # fmt: skip
    registry.stop_container = stop_container  # type: ignore[method-assign]
    registration = HostRegistration(store, "127.0.0.1", 4000)
    follower = ContainerAssignmentFollower(store, registry, registration.host_id, 4)
    try:
        await manager.start()
        await follower.start()
        await registration.start()
        await wait_until(lambda: registry.running == [0, 1, 2, 3], timeout_s=20)
        first = HostInfo.decode((await controller_store.get(registration.path)).data)
        assert first == registration.info

        await asyncio.to_thread(expire_zookeeper_session, store, zk_chroot)
        await wait_until(lambda: sorted(stopped) == [0, 1, 2, 3], timeout_s=20, what="containers stopped on expiry")
        await wait_until(lambda: registration.registrations == 2, timeout_s=20, what="registered again")
        assert HostInfo.decode((await controller_store.get(registration.path)).data) == registration.info
        await wait_until(lambda: registry.running == [0, 1, 2, 3], timeout_s=20, what="containers running again")
        assert manager.host_store.endpoint_of_container(2) == ("127.0.0.1", 4000)
    finally:
        await follower.stop()
        await registration.stop()
        await registry.close()
        await manager.stop()
        await store.close()
        await controller_store.close()
        await env.close()


async def test_segment_store_cut_off_zookeeper_past_its_session_stops_its_containers_while_cut_off(
    zk_chroot: str,
) -> None:
    """kazoo hears of an expiry only once it reaches ZooKeeper again: without the limit a store cut off ZooKeeper
    served its containers (moved elsewhere meanwhile) for as long as the cut lasted. With the limit the service
    uses (:func:`suspended_limit_s`) it stops them no later than ZooKeeper may expire its session (a session
    timeout after the last packet that got through), so no stale answer overlaps a new owner; and not on a blip
    shorter than a third of it."""
    hosts, chroot = zk_chroot.split("/", 1)
    host, port = hosts.rsplit(":", 1)
    proxy = FreezableProxy(host, int(port)).start()
    controller_store = await KazooCoordinationStore.connect(zk_chroot)
    store = await KazooCoordinationStore.connect(f"{proxy.address}/{chroot}", session_timeout_s=4.0)
    manager = ClusterManager(controller_store, 4, identity="c", settle_delay_s=1.0)
    env = ContainerEnv()
    follower: ContainerAssignmentFollower | None = None
    registry = ContainerRegistry(4, env.tier1, env.storage, env.config, should_run=lambda c: follower is not None
                                 and follower.should_run(c))  # fmt: skip
    registration = HostRegistration(store, "127.0.0.1", 4001)
    follower = ContainerAssignmentFollower(
        store, registry, registration.host_id, 4, disconnected_limit_s=suspended_limit_s(4.0)
    )
    try:
        await manager.start()
        await follower.start()
        await registration.start()
        await wait_until(lambda: registry.running == [0, 1, 2, 3], timeout_s=20)

        proxy.freeze()
        frozen = asyncio.get_running_loop().time()
        await wait_until(lambda: registry.running == [], timeout_s=15, what="containers stopped while cut off")
        stopped_after_s = asyncio.get_running_loop().time() - frozen
        assert 4.0 / 3 <= stopped_after_s <= 4.0 + 1.0, stopped_after_s  # by the session's end (+ scheduling)
        assert not follower.should_run(0)
        proxy.thaw()
        await wait_until(lambda: registry.running == [0, 1, 2, 3], timeout_s=30, what="containers running again")
    finally:
        proxy.thaw()
        await follower.stop()
        await registration.stop()
        await registry.close()
        await manager.stop()
        await store.close()
        await controller_store.close()
        await env.close()
        proxy.stop()
