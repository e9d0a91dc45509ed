"""The watch helper (:class:`StoreWatches`) keeps its guarantees on the in-process store and on real ZooKeeper:
callbacks with the state at registration and after changes, on the registering loop's thread, carried over a
session loss, and none once ``stop`` has begun; the task they wake ends with ``stop``."""

from __future__ import annotations

import asyncio
import threading

import pytest
from coordination_env import Sessions, run, sessions_for, wait_until

from segstore_shared.coordination.store import NodeNotFoundError, SessionState, Versioned
from segstore_shared.coordination.watches import StoreWatches

pytestmark = pytest.mark.contract


@pytest.fixture(params=["memory", "kazoo"])
def sessions(request: pytest.FixtureRequest) -> Sessions:
    return sessions_for(request)


def test_watches_with_changes_call_back_on_the_loop_and_wake_the_task(sessions: Sessions) -> None:
    async def body() -> None:
        store = await sessions.connect()
        await store.create("/w/members", b"")
        loop_thread = threading.get_ident()
        threads: set[int] = set()
        seen: list[Versioned | None] = []
        members: list[list[str]] = []
        wake = asyncio.Event()
        rounds: list[Versioned | None] = []

        def on_data(node: Versioned | None) -> None:
            threads.add(threading.get_ident())
            seen.append(node)
            wake.set()

        def on_members(names: list[str]) -> None:
            threads.add(threading.get_ident())
            members.append(names)

        async def react() -> None:
            while True:
                await wake.wait()
                wake.clear()
                rounds.append(seen[-1])

        watches = StoreWatches(store)
        assert not watches.running
        await watches.data("/w/node", on_data)
        await watches.children("/w/members", on_members)
        watches.run(react(), name="react")
        assert watches.running
        await wait_until(lambda: seen == [None] and members == [[]] and rounds == [None])

        await store.create("/w/node", b"one")
        await store.create("/w/members/a", b"", ephemeral=True)
        await wait_until(lambda: seen[-1] == Versioned(b"one", 0) and members[-1] == ["a"])
        await store.compare_and_set("/w/node", b"two", 0)
        await wait_until(lambda: rounds[-1] == Versioned(b"two", 1))
        await store.delete("/w/node")
        await wait_until(lambda: seen[-1] is None and rounds[-1] is None)
        assert threads == {loop_thread}, "a callback ran off the event loop's thread"

        with pytest.raises(RuntimeError):
            watches.run(react(), name="react again")
        await watches.stop()
        await store.close()

    run(body)


def test_watches_with_stop_call_back_no_more_and_end_the_task(sessions: Sessions) -> None:
    async def body() -> None:
        store = await sessions.connect()
        other = await sessions.connect()
        await store.create("/w/node", b"0")
        seen: list[Versioned | None] = []
        states: list[SessionState] = []
        ended = asyncio.Event()

        async def react() -> None:
            try:
                await asyncio.Event().wait()
            finally:
                ended.set()

        watches = StoreWatches(store)
        await watches.stop()  # before anything: nothing to do
        await watches.session(states.append)
        await watches.data("/w/node", seen.append)
        watches.run(react(), name="react")
        await wait_until(lambda: seen == [Versioned(b"0", 0)])

        await other.compare_and_set("/w/node", b"1", 0)  # its delivery may be under way when stop begins
        await watches.stop()
        assert ended.is_set() and not watches.running
        after_stop = list(seen)
        await other.compare_and_set("/w/node", b"2", 1)
        await asyncio.to_thread(sessions.expire, store)
        await asyncio.sleep(0.5)
        assert seen == after_stop and states == [], "a callback ran after stop"
        await watches.stop()  # idempotent

        # started again on the same object
        await watches.data("/w/node", seen.append)
        watches.run(react(), name="react")
        await wait_until(lambda: seen[-1] == Versioned(b"2", 2))
        await watches.stop()
        await other.close()
        await store.close()

    run(body)


def test_watches_with_session_loss_hear_lost_then_connected_and_keep_watching(sessions: Sessions) -> None:
    async def body() -> None:
        store = await sessions.connect()
        other = await sessions.connect()
        await store.create("/w/node", b"0")
        await store.create("/w/members/mine", b"", ephemeral=True)
        seen: list[Versioned | None] = []
        members: list[list[str]] = []
        states: list[SessionState] = []
        watches = StoreWatches(store)
        await watches.session(states.append)
        await watches.data("/w/node", seen.append)
        await watches.children("/w/members", members.append)
        await wait_until(lambda: seen == [Versioned(b"0", 0)] and members == [["mine"]])

        await asyncio.to_thread(sessions.expire, store)
        await wait_until(lambda: SessionState.LOST in states and states[-1] is SessionState.CONNECTED)
        await wait_until(lambda: members[-1] == [])  # the old session's ephemeral node is gone
        # no registration again: the watches carried over to the new session
        await other.compare_and_set("/w/node", b"1", 0)
        await other.create("/w/members/theirs", b"", ephemeral=True)
        await wait_until(lambda: seen[-1] == Versioned(b"1", 1) and members[-1] == ["theirs"])
        await watches.stop()
        await other.close()
        await store.close()

    run(body)


def test_watches_with_missing_children_path_raise_and_stop_cleans_up(sessions: Sessions) -> None:
    async def body() -> None:
        store = await sessions.connect()
        seen: list[Versioned | None] = []
        watches = StoreWatches(store)
        await watches.data("/w/node", seen.append)
        with pytest.raises(NodeNotFoundError):
            await watches.children("/w/missing", lambda names: None)
        assert not watches.running
        await wait_until(lambda: seen == [None])
        await watches.stop()  # cancels the data watch registered before the failure
        await store.create("/w/node", b"x")
        await asyncio.sleep(0.3)
        assert seen == [None]
        await store.close()

    run(body)
