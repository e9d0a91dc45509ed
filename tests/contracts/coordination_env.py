"""Sessions on one coordination store, in process or on the test's real ZooKeeper, and forced session expiry.

Expiry is forced the way kazoo's own tests do it for ZooKeeper (a second client attaches to the session and closes
it) and with ``MemoryCoordinationServer.expire(store, reconnect=True)`` in process.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import pytest
from kazoo.client import KazooClient

from segstore_shared.coordination.kazoo_store import KazooCoordinationStore
from segstore_shared.coordination.memory_store import MemoryCoordinationServer, MemoryCoordinationStore
from segstore_shared.coordination.store import CoordinationStore

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


def sessions_for(request: pytest.FixtureRequest) -> Sessions:
    """The sessions of a fixture parametrized with ``memory`` and ``kazoo`` (the latter on ``zk_chroot``)."""
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
