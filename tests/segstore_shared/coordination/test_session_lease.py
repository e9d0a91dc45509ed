"""The session lease: valid while ZooKeeper answered a heartbeat sent less than a session timeout (minus a margin)
ago, refused after that (a process frozen past its session), valid again once ZooKeeper answers."""

from __future__ import annotations

import pytest
from container_env import ContainerEnv

from segment_store.containers.registry import ContainerRegistry
from segstore_shared.contracts import ContainerNotOwnedError
from segstore_shared.coordination.memory_store import MemoryCoordinationServer
from segstore_shared.coordination.session_lease import SessionLease


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def test_the_lease_lasts_a_session_from_the_last_answered_heartbeat_and_not_longer() -> None:
    server = MemoryCoordinationServer()
    clock = Clock()
    lease = SessionLease(server.connect(), 4.0, margin_s=0.4, clock=clock)
    assert lease.refusal() == "no answer from ZooKeeper yet"
    assert await lease.beat()
    clock.now += 3.5  # frozen, or no answer, for 3.5 s: the session surely lives (it expires 4 s after)
    assert lease.refusal() is None
    clock.now += 0.2
    assert lease.refusal() == "no answer from ZooKeeper for 3.7 s: the session may have expired"
    assert await lease.beat()  # ZooKeeper answers again (the same session, or a new one)
    assert lease.refusal() is None


async def test_a_heartbeat_that_fails_renews_nothing() -> None:
    server = MemoryCoordinationServer()
    clock = Clock()
    store = server.connect()
    lease = SessionLease(store, 4.0, clock=clock)
    assert await lease.beat()
    server.expire(store)  # the session is gone: every request fails
    clock.now += 3.0
    assert not await lease.beat()
    clock.now += 1.0
    assert lease.refusal() is not None


async def test_a_registry_answers_for_no_container_while_the_lease_refuses() -> None:
    """What a segment store frozen past its session does when it runs again: a request for one of its containers
    gets WrongHost (the client asks the controller for the owner), never an answer from its stale state."""
    env = ContainerEnv()
    registry = ContainerRegistry(4, env.tier1, env.storage, env.config)
    refused: list[str | None] = [None]
    registry.refusal = lambda: refused[0]
    try:
        await registry.start_container(0)
        assert registry.get(0).container_id == 0
        refused[0] = "no answer from ZooKeeper for 4.2 s: the session may have expired"
        with pytest.raises(ContainerNotOwnedError):
            registry.get(0)
        assert registry.running == [0]  # stopping it is the follower's job (the session's loss): only silence here
        refused[0] = None
        assert registry.get(0).container_id == 0
    finally:
        await registry.close()
        await env.close()


def test_a_session_timeout_must_be_positive() -> None:
    with pytest.raises(ValueError, match="session_timeout_s: must be positive"):
        SessionLease(MemoryCoordinationServer().connect(), 0.0)
