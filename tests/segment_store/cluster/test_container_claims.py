"""The owner nodes behind the assignment follower (``segment_store.cluster.claims``), over the in-process
coordination store: a container waits for another host's node, an earlier process's node on this endpoint is
taken over, a container moved away gives its node up after it stopped."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest
from cluster_env import wait_until, write_assignment

from segment_store.cluster.follower import ContainerAssignmentFollower
from segstore_shared.cluster.layout import ContainerAssignment, owner_path
from segstore_shared.coordination.memory_store import MemoryCoordinationServer, MemoryCoordinationStore
from segstore_shared.coordination.store import NodeNotFoundError

ME = "me:1"
OTHER = "other:1"


class Runner:
    def __init__(self) -> None:
        self.running: set[int] = set()
        self.calls: list[tuple[str, int]] = []

    async def start_container(self, container_id: int) -> object:
        self.calls.append(("start", container_id))
        self.running.add(container_id)
        return None

    async def stop_container(self, container_id: int) -> None:
        self.calls.append(("stop", container_id))
        self.running.discard(container_id)

    def holds(self, container_id: int) -> bool:
        return container_id in self.running


def owner_data(host: str, token: str) -> bytes:
    return json.dumps({"host": host, "token": token}, sort_keys=True).encode()


async def holder(store: MemoryCoordinationStore, container_id: int) -> dict[str, str] | None:
    try:
        return dict(json.loads((await store.get(owner_path(container_id))).data))
    except NodeNotFoundError:
        return None


@pytest.fixture
async def zk() -> AsyncIterator[MemoryCoordinationServer]:
    yield MemoryCoordinationServer()


async def follow(zk: MemoryCoordinationServer, runner: Runner) -> ContainerAssignmentFollower:
    follower = ContainerAssignmentFollower(zk.connect(), runner, ME, 4, retry_delay_s=0.05, token="mine")
    await follower.start()
    return follower


async def test_a_container_another_host_still_holds_starts_when_that_host_lets_it_go(
    zk: MemoryCoordinationServer,
) -> None:
    admin, other = zk.connect(), zk.connect()
    await other.create(owner_path(2), owner_data(OTHER, "theirs"), ephemeral=True)
    await write_assignment(admin, ContainerAssignment.of(4, {ME: [1, 2], OTHER: [0, 3]}))
    runner = Runner()
    follower = await follow(zk, runner)
    await wait_until(lambda: runner.running == {1} and follower.waiting == {2: OTHER}, what="1 runs, 2 waits")
    assert follower.applied_version is None, "an assignment is applied only once every container in it runs"
    assert await holder(admin, 1) == {"host": ME, "token": "mine"}

    await other.close()  # the other host stopped (or its session ended): its node goes
    await wait_until(lambda: runner.running == {1, 2}, what="2 started once its node was free")
    await follower.wait_idle()
    assert follower.waiting == {} and follower.applied_version == 0
    assert await holder(admin, 2) == {"host": ME, "token": "mine"}
    await follower.stop()


async def test_the_node_an_earlier_process_on_this_endpoint_left_is_taken_over_at_once(
    zk: MemoryCoordinationServer,
) -> None:
    admin, earlier = zk.connect(), zk.connect()  # the earlier session lingers (kill -9, quick restart)
    await earlier.create(owner_path(0), owner_data(ME, "earlier"), ephemeral=True)
    await write_assignment(admin, ContainerAssignment.of(4, {ME: [0]}))
    runner = Runner()
    follower = await follow(zk, runner)
    await follower.wait_idle()
    assert runner.running == {0} and follower.waiting == {}
    assert await holder(admin, 0) == {"host": ME, "token": "mine"}
    await follower.stop()


async def test_a_container_moved_away_gives_its_node_up_after_it_stopped(zk: MemoryCoordinationServer) -> None:
    admin = zk.connect()
    await write_assignment(admin, ContainerAssignment.of(4, {ME: [0, 1]}))
    runner = Runner()
    follower = await follow(zk, runner)
    await follower.wait_idle()
    await write_assignment(admin, ContainerAssignment.of(4, {ME: [1], OTHER: [0]}))
    await wait_until(lambda: runner.running == {1})
    await follower.wait_idle()
    assert await holder(admin, 0) is None and await holder(admin, 1) == {"host": ME, "token": "mine"}
    assert runner.calls == [("start", 0), ("start", 1), ("stop", 0)]
    await follower.stop()


async def test_a_node_a_session_loss_took_is_claimed_again(zk: MemoryCoordinationServer) -> None:
    admin = zk.connect()
    await write_assignment(admin, ContainerAssignment.of(4, {ME: [3]}))
    runner = Runner()
    session = zk.connect()
    follower = ContainerAssignmentFollower(session, runner, ME, 4, retry_delay_s=0.05, token="mine")
    await follower.start()
    await follower.wait_idle()
    zk.expire(session, reconnect=True)
    await wait_until(lambda: runner.calls == [("start", 3), ("stop", 3), ("start", 3)], what="restarted")
    await follower.wait_idle()
    assert await holder(admin, 3) == {"host": ME, "token": "mine"}
    await follower.stop()
