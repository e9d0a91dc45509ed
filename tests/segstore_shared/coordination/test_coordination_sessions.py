"""Contract of the coordination port's session listeners, against the in-process store and real ZooKeeper.

Expiry is forced the way kazoo's own tests do it for ZooKeeper (a second client attaches to the session
and closes it) and with ``MemoryCoordinationServer.expire(store, reconnect=True)`` in process
(:mod:`coordination_env`).
"""

from __future__ import annotations

import asyncio

import pytest
from coordination_env import Sessions, run, sessions_for, wait_until

from segstore_shared.coordination.memory_store import MemoryCoordinationServer
from segstore_shared.coordination.store import (
    CoordinationClosedError,
    CoordinationUnavailableError,
    SessionState,
    Versioned,
)

pytestmark = pytest.mark.contract


@pytest.fixture(params=["memory", "kazoo"])
def sessions(request: pytest.FixtureRequest) -> Sessions:
    return sessions_for(request)


def test_session_listener_with_expiry_hears_lost_then_connected_and_store_works_again(sessions: Sessions) -> None:
    async def body() -> None:
        store = await sessions.connect()
        observer = await sessions.connect()
        await store.create("/cluster/mine", b"e", ephemeral=True)
        await store.create("/cluster/data", b"0")
        states: list[SessionState] = []
        await store.add_session_listener(states.append)
        seen: list[Versioned | None] = []
        await store.watch_data("/cluster/data", seen.append)
        await wait_until(lambda: len(seen) == 1)

        await asyncio.to_thread(sessions.expire, store)
        await wait_until(lambda: SessionState.LOST in states and states[-1] is SessionState.CONNECTED)
        assert states.index(SessionState.LOST) < len(states) - 1
        assert not await observer.exists("/cluster/mine"), "the expired session's ephemeral node survived"
        # The store works on its new session, and its watches carried over.
        await store.create("/cluster/mine", b"again", ephemeral=True)
        assert (await observer.get("/cluster/mine")).data == b"again"
        await observer.compare_and_set("/cluster/data", b"1", 0)
        await wait_until(lambda: seen[-1] == Versioned(b"1", 1))
        await store.close()
        assert not await observer.exists("/cluster/mine")
        await observer.close()

    run(body)


def test_session_listener_cancelled_hears_nothing(sessions: Sessions) -> None:
    async def body() -> None:
        store = await sessions.connect()
        kept: list[SessionState] = []
        dropped: list[SessionState] = []
        await store.add_session_listener(kept.append)
        handle = await store.add_session_listener(dropped.append)
        handle.cancel()
        handle.cancel()  # idempotent
        await asyncio.to_thread(sessions.expire, store)
        await wait_until(lambda: bool(kept) and kept[-1] is SessionState.CONNECTED)
        assert dropped == []
        await store.close()

    run(body)


def test_session_listener_with_closed_store(sessions: Sessions) -> None:
    async def body() -> None:
        store = await sessions.connect()
        states: list[SessionState] = []
        await store.add_session_listener(states.append)
        await store.close()
        await asyncio.sleep(0.3)
        assert states == [], "close() is not a session event for listeners"
        with pytest.raises(CoordinationClosedError):
            await store.add_session_listener(states.append)

    run(body)


def test_expire_without_reconnect_ends_the_memory_session() -> None:
    async def body() -> None:
        server = MemoryCoordinationServer()
        store = server.connect()
        states: list[SessionState] = []
        await store.add_session_listener(states.append)
        server.expire(store)
        await wait_until(lambda: states == [SessionState.LOST])
        with pytest.raises(CoordinationUnavailableError):
            await store.exists("/")
        await store.close()

    run(body)
