"""Contract of the coordination port, run against the in-process store and real ZooKeeper.

The in-process store emulates sessions: each ``connect()`` on one
``MemoryCoordinationServer`` is a session whose ephemeral nodes vanish when it closes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import pytest

from segstore_shared.coordination.kazoo_store import KazooCoordinationStore
from segstore_shared.coordination.memory_store import MemoryCoordinationServer
from segstore_shared.coordination.store import (
    BadVersionError,
    CoordinationClosedError,
    CoordinationStore,
    NodeExistsError,
    NodeNotFoundError,
    NotEmptyError,
    Versioned,
)

pytestmark = pytest.mark.contract

Connect = Callable[[], Awaitable[CoordinationStore]]
TEST_TIMEOUT_S = 30.0


def run(body: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(asyncio.wait_for(body(), TEST_TIMEOUT_S))


async def wait_until(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.01)


@pytest.fixture(params=["memory", "kazoo"])
def connect(request: pytest.FixtureRequest) -> Connect:
    """A function opening a new session on one shared store (per test)."""
    if request.param == "memory":
        server = MemoryCoordinationServer()

        async def connect_memory() -> CoordinationStore:
            return server.connect()

        return connect_memory
    hosts: str = request.getfixturevalue("zk_chroot")

    async def connect_kazoo() -> CoordinationStore:
        return await KazooCoordinationStore.connect(hosts)

    return connect_kazoo


def test_create_with_new_node_then_get(connect: Connect) -> None:
    async def body() -> None:
        store = await connect()
        assert await store.create("/a/b/c", b"one") == 0
        assert await store.get("/a/b/c") == Versioned(b"one", 0)
        assert await store.exists("/a/b")
        assert not await store.exists("/a/x")
        await store.close()

    run(body)


def test_create_with_existing_node(connect: Connect) -> None:
    async def body() -> None:
        store = await connect()
        await store.create("/n", b"first")
        with pytest.raises(NodeExistsError):
            await store.create("/n", b"second")
        assert await store.get("/n") == Versioned(b"first", 0)
        await store.close()

    run(body)


def test_create_with_missing_parent_and_no_make_parents(connect: Connect) -> None:
    async def body() -> None:
        store = await connect()
        with pytest.raises(NodeNotFoundError):
            await store.create("/missing/child", b"", make_parents=False)
        assert not await store.exists("/missing")
        await store.close()

    run(body)


def test_compare_and_set_with_current_version(connect: Connect) -> None:
    async def body() -> None:
        store = await connect()
        version = await store.create("/cas", b"v0")
        for i in range(1, 5):
            new_version = await store.compare_and_set("/cas", f"v{i}".encode(), version)
            assert new_version > version
            version = new_version
        assert await store.get("/cas") == Versioned(b"v4", version)
        await store.close()

    run(body)


def test_compare_and_set_with_stale_version(connect: Connect) -> None:
    async def body() -> None:
        store = await connect()
        v0 = await store.create("/cas", b"a")
        v1 = await store.compare_and_set("/cas", b"b", v0)
        with pytest.raises(BadVersionError):
            await store.compare_and_set("/cas", b"c", v0)
        assert await store.get("/cas") == Versioned(b"b", v1)
        await store.close()

    run(body)


def test_compare_and_set_with_missing_node(connect: Connect) -> None:
    async def body() -> None:
        store = await connect()
        with pytest.raises(NodeNotFoundError):
            await store.compare_and_set("/none", b"x", 0)
        with pytest.raises(NodeNotFoundError):
            await store.get("/none")
        await store.close()

    run(body)


def test_compare_and_set_with_racing_sessions(connect: Connect) -> None:
    async def body() -> None:
        first, second = await connect(), await connect()
        version = await first.create("/race", b"start")
        attempts = [
            store.compare_and_set("/race", f"w{i}".encode(), version) for i, store in enumerate([first, second] * 4)
        ]
        results = await asyncio.gather(*attempts, return_exceptions=True)
        winners = [r for r in results if isinstance(r, int)]
        assert len(winners) == 1
        assert all(isinstance(r, BadVersionError) for r in results if not isinstance(r, int))
        await second.sync("/race")
        assert (await second.get("/race")).version == winners[0]
        await first.close()
        await second.close()

    run(body)


def test_delete_with_version(connect: Connect) -> None:
    async def body() -> None:
        store = await connect()
        v0 = await store.create("/d", b"x")
        v1 = await store.compare_and_set("/d", b"y", v0)
        with pytest.raises(BadVersionError):
            await store.delete("/d", expected_version=v0)
        assert await store.get("/d") == Versioned(b"y", v1)
        await store.delete("/d", expected_version=v1)
        assert not await store.exists("/d")
        with pytest.raises(NodeNotFoundError):
            await store.delete("/d")
        await store.close()

    run(body)


def test_delete_with_children(connect: Connect) -> None:
    async def body() -> None:
        store = await connect()
        await store.create("/p/c", b"")
        with pytest.raises(NotEmptyError):
            await store.delete("/p")
        await store.delete("/p/c")
        await store.delete("/p")
        assert not await store.exists("/p")
        await store.close()

    run(body)


def test_children_with_nested_nodes(connect: Connect) -> None:
    async def body() -> None:
        store = await connect()
        for name in ["c", "a", "b"]:
            await store.create(f"/parent/{name}", b"")
        await store.create("/parent/a/deeper", b"")
        assert await store.children("/parent") == ["a", "b", "c"]
        assert await store.children("/parent/b") == []
        with pytest.raises(NodeNotFoundError):
            await store.children("/nothing")
        await store.close()

    run(body)


def test_ephemeral_with_session_close(connect: Connect) -> None:
    async def body() -> None:
        owner, observer = await connect(), await connect()
        await owner.create("/hosts/h1", b"me", ephemeral=True)
        await owner.create("/hosts/kept", b"", ephemeral=False)
        await observer.sync("/hosts/h1")
        assert await observer.get("/hosts/h1") == Versioned(b"me", 0)
        await owner.close()
        await observer.sync("/hosts")
        assert not await observer.exists("/hosts/h1")
        assert await observer.children("/hosts") == ["kept"]
        await observer.close()

    run(body)


def test_sync_then_get_with_write_from_other_session(connect: Connect) -> None:
    async def body() -> None:
        writer, reader = await connect(), await connect()
        version = await writer.create("/shared", b"0")
        for i in range(1, 20):
            version = await writer.compare_and_set("/shared", str(i).encode(), version)
            await reader.sync("/shared")
            assert await reader.get("/shared") == Versioned(str(i).encode(), version)
        await writer.close()
        await reader.close()

    run(body)


def test_read_linearized_sees_writes_of_another_session_and_absent_nodes(connect: Connect) -> None:
    async def body() -> None:
        writer, reader = await connect(), await connect()
        assert await reader.read_linearized("/lin/a") is None
        version = await writer.create("/lin/a", b"0")
        for i in range(1, 20):
            version = await writer.compare_and_set("/lin/a", str(i).encode(), version)
            assert await reader.read_linearized("/lin/a") == Versioned(str(i).encode(), version)
        await writer.delete("/lin/a")
        assert await reader.read_linearized("/lin/a") is None
        await writer.close()
        await reader.close()

    run(body)


def test_concurrent_linearized_reads_each_see_writes_completed_before_them(connect: Connect) -> None:
    """Reads of many paths at once (they may share one sync): each answers its own path, reflecting every
    write completed before it was asked, also while other reads are in flight."""

    async def body() -> None:
        writer, reader = await connect(), await connect()
        paths = [f"/lin/many/{i}" for i in range(8)]
        versions = {path: await writer.create(path, b"0") for path in paths}
        for round_ in range(1, 6):
            for path in paths:
                versions[path] = await writer.compare_and_set(path, f"{path}:{round_}".encode(), versions[path])
            reads = await asyncio.gather(*(reader.read_linearized(path) for path in [*paths, "/lin/many/none"]))
            assert reads == [*(Versioned(f"{p}:{round_}".encode(), versions[p]) for p in paths), None]
        await writer.close()
        await reader.close()

    run(body)


def test_read_asked_while_another_is_in_flight_sees_writes_completed_before_it(connect: Connect) -> None:
    """A read must not ride on a sync sent before it was asked: here the earlier read is still in flight
    when the write completes, and the later read must see that write."""

    async def body() -> None:
        writer, reader = await connect(), await connect()
        version = await writer.create("/lin/race", b"0")
        for i in range(1, 40):
            earlier = asyncio.create_task(reader.read_linearized("/lin/race"))
            await asyncio.sleep(0)  # the earlier read's round is sent
            version = await writer.compare_and_set("/lin/race", str(i).encode(), version)
            assert await reader.read_linearized("/lin/race") == Versioned(str(i).encode(), version)
            assert (await earlier) is not None
        await writer.close()
        await reader.close()

    run(body)


def test_read_linearized_after_close_raises_closed(connect: Connect) -> None:
    async def body() -> None:
        store = await connect()
        await store.close()
        with pytest.raises(CoordinationClosedError):
            await store.read_linearized("/lin/closed")

    run(body)


def test_watch_data_with_changes(connect: Connect) -> None:
    async def body() -> None:
        store = await connect()
        seen: list[Versioned | None] = []
        watch = await store.watch_data("/w", seen.append)
        await wait_until(lambda: seen == [None])
        version = await store.create("/w", b"v0")
        await wait_until(lambda: seen[-1] == Versioned(b"v0", version))
        version = await store.compare_and_set("/w", b"v1", version)
        await wait_until(lambda: seen[-1] == Versioned(b"v1", version))
        await store.delete("/w")
        await wait_until(lambda: seen[-1] is None)
        watch.cancel()
        count = len(seen)
        await store.create("/w", b"after")
        await asyncio.sleep(0.2)
        assert len(seen) == count
        await store.close()

    run(body)


def test_watch_children_with_new_children(connect: Connect) -> None:
    async def body() -> None:
        store, other = await connect(), await connect()
        await store.create("/members", b"")
        seen: list[list[str]] = []
        watch = await store.watch_children("/members", seen.append)
        await wait_until(lambda: seen == [[]])
        await other.create("/members/b", b"", ephemeral=True)
        await store.create("/members/a", b"")
        await wait_until(lambda: seen[-1] == ["a", "b"])
        await other.close()
        await wait_until(lambda: seen[-1] == ["a"])
        watch.cancel()
        with pytest.raises(NodeNotFoundError):
            await store.watch_children("/absent", seen.append)
        await store.close()

    run(body)


def test_calls_with_closed_store(connect: Connect) -> None:
    async def body() -> None:
        store = await connect()
        await store.close()
        await store.close()
        with pytest.raises(CoordinationClosedError):
            await store.get("/x")
        with pytest.raises(CoordinationClosedError):
            await store.create("/x", b"")

    run(body)


def test_calls_with_invalid_path(connect: Connect) -> None:
    async def body() -> None:
        store = await connect()
        for bad in ["relative", "/trailing/", "/double//slash", "/a/../b"]:
            with pytest.raises(ValueError):
                await store.get(bad)
        await store.close()

    run(body)
