"""Fixtures of the controller tests: ``env`` (a controller core over in-memory parts, ``controller_env``), and for
the metadata store contract tests a store over the in-memory or the ZooKeeper coordination store (both must
behave identically) and a manual clock."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from controller_env import ControllerEnv
from metadata_contract_env import Clock, Connect

from controller.metadata import StreamMetadataStore
from segstore_shared.coordination.kazoo_store import KazooCoordinationStore
from segstore_shared.coordination.memory_store import MemoryCoordinationServer
from segstore_shared.coordination.store import CoordinationStore


@pytest.fixture
async def env() -> AsyncIterator[ControllerEnv]:
    environment = await ControllerEnv.start()
    try:
        yield environment
    finally:
        await environment.close()


@pytest.fixture(params=["memory", "zookeeper"])
async def connect(request: pytest.FixtureRequest) -> AsyncIterator[Connect]:
    sessions: list[CoordinationStore] = []
    if request.param == "memory":
        server = MemoryCoordinationServer()

        async def open_session() -> CoordinationStore:
            sessions.append(server.connect())
            return sessions[-1]
    else:
        hosts: str = request.getfixturevalue("zk_chroot")

        async def open_session() -> CoordinationStore:
            sessions.append(await KazooCoordinationStore.connect(hosts))
            return sessions[-1]

    yield open_session
    for session in sessions:
        await session.close()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def store(connect: Connect, clock: Clock) -> StreamMetadataStore:
    return StreamMetadataStore(await connect(), clock_ms=clock)
