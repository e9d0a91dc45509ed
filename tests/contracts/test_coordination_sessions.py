"""Contract of the coordination port's session listeners, against the in-process store and real ZooKeeper.

Expiry is forced the way kazoo's own tests do it for ZooKeeper (a second client attaches to the session
and closes it) and with ``MemoryCoordinationServer.expire(store, reconnect=True)`` in process.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import pytest
from kazoo.client import KazooClient

from segstore_shared.coordination.kazoo_store import KazooCoordinationStore
from segstore_shared.coordination.memory_store import MemoryCoordinationServer, MemoryCoordinationStore
from segstore_shared.coordination.store import (
    CoordinationClosedError,
    CoordinationStore,
    CoordinationUnavailableError,
    SessionState,
    Versioned,
)

TEST_TIMEOUT_S = 40.0


class Sessions:
    """Opens sessions on one shared store and expires them."""

    def __init__(self, connect: Callable[[], Awaitable[CoordinationStore]], expire: Callable[[Any], None]) -> None:
        self.connect = connect
        self.expire = expire


def run(body: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(asyncio.wait_for(body(), TEST_TIMEOUT_S))


async def wait_until(condition: Callable[[], bool], timeout_s: float = 20.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.02)


def _expire_kazoo(store: KazooCoordinationStore, hosts: str) -> None:
    """Attach a second client to the store's session and close it: the server expires the session."""
    session_id, password = store.client.client_id
    other = KazooClient(hosts=hosts, client_id=(session_id, password), timeout=5)
    other.start(timeout=15)
    other.stop()
    other.close()


@pytest.fixture(params=["memory", "kazoo"])
def sessions(request: pytest.FixtureRequest) -> Sessions:
    if request.param == "memory":
        server = MemoryCoordinationServer()

        async def connect_memory() -> CoordinationStore:
            return server.connect()

        def expire_memory(store: MemoryCoordinationStore) -> None:
            server.expire(store, reconnect=True)

        return Sessions(connect_memory, expire_memory)
    hosts: str = request.getfixturevalue("zk_chroot")

    async def connect_kazoo() -> CoordinationStore:
        return await KazooCoordinationStore.connect(hosts, session_timeout_s=4.0)

    return Sessions(connect_kazoo, lambda store: _expire_kazoo(store, hosts))


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
