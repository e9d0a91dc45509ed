"""Segment store side over the in-process coordination store: the assignment follower driving a real container
registry, host registration, the registry's restart predicate, and the service in cluster mode."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
from cluster_env import register_host, wait_until, write_assignment
from container_env import ContainerEnv

from controller.cluster.cluster_manager import ClusterManager
from segment_store.client import SegmentClient, WrongHostError
from segment_store.cluster.follower import ContainerAssignmentFollower
from segment_store.containers.registry import ContainerRegistry
from segment_store.server.config import ServerConfig
from segment_store.server.service import SegmentStoreService, ServiceConfig
from segment_store.storage.backends.memory import MemoryChunkStorage
from segment_store.tier1.log import DataLogWriterNotPrimaryError
from segment_store.tier1.memory_log import InMemoryDurableDataLogFactory
from segstore_shared.cluster.container_mapping import container_of
from segstore_shared.cluster.layout import (
    SEGMENT_STORES_PATH,
    ContainerAssignment,
    ContainerCountMismatchError,
    HostInfo,
)
from segstore_shared.cluster.registration import HostRegistration
from segstore_shared.contracts import ContainerOfflineError
from segstore_shared.coordination.memory_store import MemoryCoordinationServer

pytestmark = pytest.mark.integration

ME = "me:1"


class RecordingRunner:
    """Wraps a real registry: records calls, measures overlap, injects start failures and delays."""

    def __init__(self, registry: ContainerRegistry, start_delay_s: float = 0.0) -> None:
        self.registry = registry
        self.start_delay_s = start_delay_s
        self.fail_starts: dict[int, int] = {}
        self.calls: list[tuple[str, int]] = []
        self.active = 0
        self.max_active = 0

    async def start_container(self, container_id: int) -> object:
        self._enter("start", container_id)
        try:
            await asyncio.sleep(self.start_delay_s)
            if self.fail_starts.get(container_id, 0) > 0:
                self.fail_starts[container_id] -= 1
                raise RuntimeError(f"injected start failure of container {container_id}")
            return await self.registry.start_container(container_id)
        finally:
            self.active -= 1

    async def stop_container(self, container_id: int) -> None:
        self._enter("stop", container_id)
        try:
            await self.registry.stop_container(container_id)
        finally:
            self.active -= 1

    def holds(self, container_id: int) -> bool:
        return self.registry.holds(container_id)

    def _enter(self, what: str, container_id: int) -> None:
        self.calls.append((what, container_id))
        self.active += 1
        self.max_active = max(self.max_active, self.active)


@pytest.fixture
def zk() -> MemoryCoordinationServer:
    return MemoryCoordinationServer()


@pytest.fixture
async def env() -> AsyncIterator[ContainerEnv]:
    env = ContainerEnv()
    yield env
    await env.close()


def assign(mine: list[int], count: int = 4) -> ContainerAssignment:
    return ContainerAssignment.of(count, {ME: mine, "other:1": [c for c in range(count) if c not in mine]})


async def start_follower(
    zk: MemoryCoordinationServer, runner: RecordingRunner, count: int = 4
) -> ContainerAssignmentFollower:
    follower = ContainerAssignmentFollower(zk.connect(), runner, ME, count, retry_delay_s=0.05)
    await follower.start()
    return follower


async def test_follower_with_changes_stops_before_starting(zk: MemoryCoordinationServer, env: ContainerEnv) -> None:
    registry = ContainerRegistry(4, env.tier1, env.storage, env.config)
    runner = RecordingRunner(registry)
    admin = zk.connect()
    await write_assignment(admin, assign([0, 1]))
    follower = await start_follower(zk, runner)
    await wait_until(lambda: registry.running == [0, 1])
    runner.calls.clear()
    await write_assignment(admin, assign([1, 2]))
    await wait_until(lambda: registry.running == [1, 2])
    assert runner.calls == [("stop", 0), ("start", 2)]
    await write_assignment(admin, assign([]))
    await wait_until(lambda: registry.running == [])
    await follower.wait_idle()
    assert follower.applied_version == 2 and follower.running == frozenset()
    assert runner.max_active == 1, "registry calls overlapped"
    await follower.stop()
    await registry.close()


async def test_follower_with_changes_during_slow_start_applies_only_the_latest(
    zk: MemoryCoordinationServer, env: ContainerEnv
) -> None:
    registry = ContainerRegistry(4, env.tier1, env.storage, env.config)
    runner = RecordingRunner(registry, start_delay_s=0.3)
    admin = zk.connect()
    follower = await start_follower(zk, runner)
    await write_assignment(admin, assign([0]))
    await wait_until(lambda: runner.calls == [("start", 0)])
    await write_assignment(admin, assign([0, 1]))  # superseded before it could be applied
    await write_assignment(admin, assign([0, 2]))
    await wait_until(lambda: registry.running == [0, 2])
    await follower.wait_idle()
    assert runner.calls == [("start", 0), ("start", 2)]
    assert runner.max_active == 1
    await follower.stop()
    await registry.close()


async def test_follower_with_container_failed_while_briefly_unassigned_starts_it_again(
    zk: MemoryCoordinationServer, env: ContainerEnv
) -> None:
    follower: ContainerAssignmentFollower | None = None
    registry = ContainerRegistry(4, env.tier1, env.storage, env.config, restart_delay_s=0.05,
                                 should_run=lambda c: follower is not None and follower.should_run(c))  # fmt: skip
    runner = RecordingRunner(registry, start_delay_s=0.4)
    admin = zk.connect()
    await write_assignment(admin, assign([0]))
    follower = await start_follower(zk, runner)
    await wait_until(lambda: registry.running == [0])
    await write_assignment(admin, assign([0, 1]))
    await wait_until(lambda: ("start", 1) in runner.calls)  # busy starting 1 (slowly) ...
    await write_assignment(admin, assign([1]))  # ... while 0 goes elsewhere, fails there (fenced) ...
    await env.tier1.create_log(0).initialize()
    with pytest.raises(ContainerOfflineError):
        await registry.get(0).create_segment("x")
    await wait_until(lambda: not registry.holds(0))  # ... and is dropped, not restarted
    await write_assignment(admin, assign([0, 1]))  # ... and comes back
    await wait_until(lambda: registry.running == [0, 1], what="container 0 running again")
    await follower.stop()
    await registry.close()


async def test_follower_with_failed_start_retries_while_assigned(
    zk: MemoryCoordinationServer, env: ContainerEnv
) -> None:
    registry = ContainerRegistry(4, env.tier1, env.storage, env.config)
    runner = RecordingRunner(registry)
    runner.fail_starts[1] = 2
    admin = zk.connect()
    await write_assignment(admin, assign([0, 1]))
    follower = await start_follower(zk, runner)
    await wait_until(lambda: registry.running == [0, 1])
    assert runner.calls.count(("start", 1)) == 3
    assert runner.calls.count(("start", 0)) == 1, "a running container was started again"
    await follower.stop()
    await registry.close()


async def test_follower_with_session_expiry_stops_everything_then_resumes(
    zk: MemoryCoordinationServer, env: ContainerEnv
) -> None:
    registry = ContainerRegistry(4, env.tier1, env.storage, env.config)
    runner = RecordingRunner(registry)
    admin = zk.connect()
    await write_assignment(admin, assign([0, 1]))
    session = zk.connect()
    follower = ContainerAssignmentFollower(session, runner, ME, 4, retry_delay_s=0.05)
    await follower.start()
    await wait_until(lambda: registry.running == [0, 1])
    runner.calls.clear()
    zk.expire(session, reconnect=True)
    # a call is recorded when it begins: wait for the second start to have finished too
    await wait_until(lambda: len(runner.calls) == 4 and registry.running == [0, 1])
    assert runner.calls == [("stop", 0), ("stop", 1), ("start", 0), ("start", 1)]

    runner.calls.clear()
    zk.expire(session)  # gone for good: nothing runs, and nothing is started again
    await wait_until(lambda: registry.running == [])
    await write_assignment(admin, assign([0, 1, 2]))
    await asyncio.sleep(0.2)
    assert runner.calls == [("stop", 0), ("stop", 1)]
    assert not follower.should_run(0)
    await follower.stop()
    await registry.close()


async def test_follower_with_other_container_count_refuses(zk: MemoryCoordinationServer, env: ContainerEnv) -> None:
    registry = ContainerRegistry(4, env.tier1, env.storage, env.config)
    runner = RecordingRunner(registry)
    admin = zk.connect()
    await write_assignment(admin, ContainerAssignment.of(8, {ME: [0]}))
    with pytest.raises(ContainerCountMismatchError):
        await start_follower(zk, runner)

    await write_assignment(admin, assign([0]))
    follower = await start_follower(zk, runner)
    await wait_until(lambda: registry.running == [0])
    await write_assignment(admin, ContainerAssignment.of(8, {ME: [1, 2]}))
    await wait_until(lambda: follower.failure is not None)
    await asyncio.sleep(0.1)
    assert isinstance(follower.failure, ContainerCountMismatchError)
    assert registry.running == [0], "a mismatching assignment was applied"
    await follower.stop()
    await registry.close()


@pytest.mark.parametrize("assigned_after_failure", [True, False])
async def test_registry_with_failed_container_restarts_only_if_still_assigned(
    env: ContainerEnv, assigned_after_failure: bool
) -> None:
    assigned = {0}
    registry = ContainerRegistry(4, env.tier1, env.storage, env.config, restart_delay_s=0.05,
                                 should_run=assigned.__contains__)  # fmt: skip
    container = await registry.start_container(0)
    await container.create_segment("s")
    await container.append("s", b"before")
    if not assigned_after_failure:
        assigned.clear()  # moved to another host, which fences this one:
    new_owner = env.tier1.create_log(0)
    await new_owner.initialize()
    with pytest.raises(ContainerOfflineError):
        await container.append("s", b"after")
    if assigned_after_failure:
        await wait_until(lambda: registry.running == [0])
        assert registry.get(0) is not container
        with pytest.raises(DataLogWriterNotPrimaryError):  # the restart fenced the other instance
            await new_owner.append(b"x")
    else:
        await asyncio.sleep(0.3)
        assert registry.running == [] and 0 not in registry._containers
        await new_owner.append(b"x")  # the new owner was not fenced by a restart here
    await registry.close()


async def test_registration_with_expiry_and_stale_node(zk: MemoryCoordinationServer) -> None:
    observer = zk.connect()
    stale = await register_host(zk, "me:1")  # a killed predecessor whose session has not timed out yet
    session = zk.connect()
    registration = HostRegistration(session, "me", 1, retry_delay_s=0.05)
    await registration.start()
    await asyncio.sleep(0.2)
    assert not registration.registered
    assert HostInfo.decode((await observer.get(registration.path)).data).token == "me:1", "the stale node was taken"
    await stale.close()
    await asyncio.wait_for(registration.wait_registered(), 5)
    info = HostInfo.decode((await observer.get(registration.path)).data)
    assert info == registration.info and info.host == "me" and info.port == 1

    zk.expire(session, reconnect=True)
    await wait_until(lambda: registration.registrations == 2)
    assert HostInfo.decode((await observer.get(registration.path)).data) == registration.info

    await observer.delete(registration.path)  # an operator removes it: it comes back
    await wait_until(lambda: registration.registrations == 3)
    await registration.stop()
    assert await observer.children(SEGMENT_STORES_PATH) == []


async def test_service_in_cluster_mode_runs_assigned_containers_and_takes_over(zk: MemoryCoordinationServer) -> None:
    tier1, chunks = InMemoryDurableDataLogFactory(), MemoryChunkStorage()  # shared, as a shared data dir is

    async def start_service(name: str) -> SegmentStoreService:
        config = ServiceConfig(server=ServerConfig(host="127.0.0.1", port=0), container_count=4, cluster=True,
                               advertise_host=name)  # fmt: skip
        service = SegmentStoreService(config, tier1, chunks, zk.connect())
        await service.start()
        return service

    manager = ClusterManager(zk.connect(), 4, settle_delay_s=0.05)
    await manager.start()
    first = await start_service("127.0.0.1")
    second = await start_service("localhost")
    try:
        await wait_until(lambda: len(first.registry.running) == 2 and len(second.registry.running) == 2)
        assert sorted(first.registry.running + second.registry.running) == [0, 1, 2, 3]
        segment = next(f"s/t/{i}.#epoch.0" for i in range(100) if container_of(f"s/t/{i}.#epoch.0", 4)
                       in second.registry.running)  # fmt: skip
        async with SegmentClient(first.endpoint) as wrong, SegmentClient(second.endpoint) as right:
            with pytest.raises(WrongHostError):
                await wrong.create_segment(segment)
            await right.create_segment(segment)
            writer = right.writer(segment, uuid.uuid4())
            await writer.append(b"event")
            await writer.close()
        await second.stop()  # deregisters: its containers move to the first
        await wait_until(lambda: first.registry.running == [0, 1, 2, 3], timeout_s=15)
        async with SegmentClient(first.endpoint) as client:
            assert (await client.get_segment_info(segment)).write_offset == 8 + len(b"event")
    finally:
        await second.stop()
        await first.stop()
        await manager.stop()


async def test_service_in_cluster_mode_with_other_container_count_fails_to_start(
    zk: MemoryCoordinationServer,
) -> None:
    await write_assignment(zk.connect(), ContainerAssignment.of(4, {}))
    config = ServiceConfig(server=ServerConfig(host="127.0.0.1", port=0), container_count=8, cluster=True)
    service = SegmentStoreService(config, InMemoryDurableDataLogFactory(), MemoryChunkStorage(), zk.connect())
    with pytest.raises(ContainerCountMismatchError):
        await service.start()
    assert not await zk.connect().exists(SEGMENT_STORES_PATH), "a misconfigured process registered"
    with pytest.raises(ValueError, match="containers"):
        ServiceConfig(cluster=True, containers=(0,))
    with pytest.raises(ValueError, match="coordination"):
        SegmentStoreService(ServiceConfig(cluster=True), InMemoryDurableDataLogFactory(), MemoryChunkStorage())
