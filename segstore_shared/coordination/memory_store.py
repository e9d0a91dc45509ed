"""In-process coordination store, for unit tests only.

A :class:`MemoryCoordinationServer` holds one shared tree; each
:class:`MemoryCoordinationStore` obtained from :meth:`MemoryCoordinationServer.connect`
is one *session* on it, so tests can model several processes: ephemeral nodes belong to
the session that created them and vanish when it closes (or the test calls
:meth:`MemoryCoordinationServer.expire`, optionally with ``reconnect=True`` to model kazoo
opening a new session after an expiry). Every operation is applied atomically under
one lock, so the store is trivially linearizable and :meth:`MemoryCoordinationStore.sync`
is a no-op. Versions follow ZooKeeper: 0 at creation, +1 per data write.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from segstore_shared.coordination.store import (
    BadVersionError,
    ChildrenCallback,
    CoordinationClosedError,
    CoordinationError,
    CoordinationUnavailableError,
    DataCallback,
    NodeExistsError,
    NodeNotFoundError,
    NotEmptyError,
    SessionCallback,
    SessionState,
    Versioned,
    WatchHandle,
    parent_of,
    validate_path,
)


@dataclass(slots=True)
class _Node:
    data: bytes
    version: int
    owner: int | None  # session id of an ephemeral node
    children: set[str] = field(default_factory=set)


class _MemoryWatch:
    """One registered watch; delivers on the loop that registered it, in change order."""

    def __init__(
        self,
        server: MemoryCoordinationServer,
        session: int,
        callback: Callable[[Any], None],
    ) -> None:
        self._server = server
        self.session = session
        self._callback = callback
        self._loop = asyncio.get_running_loop()
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True
        self._server._drop_watch(self)

    def post(self, value: object) -> None:
        if self.cancelled or self._loop.is_closed():
            return
        self._loop.call_soon_threadsafe(self._deliver, value)

    def _deliver(self, value: object) -> None:
        if not self.cancelled:
            self._callback(value)


class _MemoryListener:
    """One session listener; delivers on the loop that registered it, in change order."""

    def __init__(self, store: MemoryCoordinationStore, callback: SessionCallback) -> None:
        self._store = store
        self._callback = callback
        self._loop = asyncio.get_running_loop()
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True
        with contextlib.suppress(ValueError):
            self._store._listeners.remove(self)

    def post(self, state: SessionState) -> None:
        if self.cancelled or self._loop.is_closed():
            return
        self._loop.call_soon_threadsafe(self._deliver, state)

    def _deliver(self, state: SessionState) -> None:
        if not self.cancelled:
            self._callback(state)


class MemoryCoordinationServer:
    """The shared tree behind any number of in-process sessions."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._nodes: dict[str, _Node] = {"/": _Node(b"", 0, None)}
        self._sessions = itertools.count(1)
        self._live: set[int] = set()
        self._data_watches: dict[str, list[_MemoryWatch]] = {}
        self._child_watches: dict[str, list[_MemoryWatch]] = {}

    def connect(self) -> MemoryCoordinationStore:
        """Open a new session on this tree."""
        with self._lock:
            session = next(self._sessions)
            self._live.add(session)
        return MemoryCoordinationStore(self, session)

    def snapshot(self) -> dict[str, tuple[bytes, int]]:
        """Every node's data and version (a test compares the tree before and after a request)."""
        with self._lock:
            return {path: (node.data, node.version) for path, node in self._nodes.items()}

    def expire(self, store: MemoryCoordinationStore, *, reconnect: bool = False) -> None:
        """Simulate session expiry: the session's ephemeral nodes go and its listeners hear ``LOST``.

        Without ``reconnect`` the store's calls then raise :class:`CoordinationUnavailableError`.
        With it the store continues on a new session, as kazoo does: its watches carry over and its
        listeners then hear ``CONNECTED``.
        """
        if not reconnect:
            self._end_session(store.session)
            store._notify(SessionState.LOST)
            return
        with self._lock:
            old = store.session
            if old not in self._live:
                return
            new = next(self._sessions)
            self._live.add(new)
            for path in [path for path, node in self._nodes.items() if node.owner == old]:
                self._remove(path)
            self._live.discard(old)
            for table in (self._data_watches, self._child_watches):
                for watches in table.values():
                    for watch in watches:
                        if watch.session == old:
                            watch.session = new
            store.session = new
        store._notify(SessionState.LOST)
        store._notify(SessionState.CONNECTED)

    # -- operations, all under the lock -------------------------------------------------

    def _check(self, session: int) -> None:
        if session not in self._live:
            raise CoordinationUnavailableError("memory session expired")

    def _node(self, path: str) -> _Node:
        node = self._nodes.get(path)
        if node is None:
            raise NodeNotFoundError("no node", path)
        return node

    def get(self, session: int, path: str) -> Versioned:
        with self._lock:
            self._check(session)
            node = self._node(path)
            return Versioned(node.data, node.version)

    def create(self, session: int, path: str, data: bytes, ephemeral: bool, make_parents: bool) -> int:
        if path == "/":
            raise NodeExistsError("node exists", path)
        with self._lock:
            self._check(session)
            if path in self._nodes:
                raise NodeExistsError("node exists", path)
            parent = parent_of(path)
            missing: list[str] = []
            while parent not in self._nodes:
                if not make_parents:
                    raise NodeNotFoundError("no parent node", parent)
                missing.append(parent)
                parent = parent_of(parent)
            if self._nodes[parent].owner is not None:
                raise CoordinationError("ephemeral nodes cannot have children", parent)
            for created in reversed(missing):
                self._insert(created, _Node(b"", 0, None))
            self._insert(path, _Node(bytes(data), 0, session if ephemeral else None))
            return 0

    def _insert(self, path: str, node: _Node) -> None:
        self._nodes[path] = node
        parent = parent_of(path)
        self._nodes[parent].children.add(path.rsplit("/", 1)[1])
        self._fire_data(path)
        self._fire_children(parent)

    def compare_and_set(self, session: int, path: str, data: bytes, expected_version: int) -> int:
        with self._lock:
            self._check(session)
            node = self._node(path)
            if node.version != expected_version:
                raise BadVersionError(f"version is {node.version}, expected {expected_version}", path)
            node.data = bytes(data)
            node.version += 1
            self._fire_data(path)
            return node.version

    def delete(self, session: int, path: str, expected_version: int | None) -> None:
        if path == "/":
            raise ValueError("the root cannot be deleted")
        with self._lock:
            self._check(session)
            node = self._node(path)
            if expected_version is not None and node.version != expected_version:
                raise BadVersionError(f"version is {node.version}, expected {expected_version}", path)
            if node.children:
                raise NotEmptyError("node has children", path)
            self._remove(path)

    def _remove(self, path: str) -> None:
        del self._nodes[path]
        parent = parent_of(path)
        self._nodes[parent].children.discard(path.rsplit("/", 1)[1])
        self._fire_data(path)
        for watch in self._child_watches.pop(path, []):
            watch.cancelled = True
        self._fire_children(parent)

    def children(self, session: int, path: str) -> list[str]:
        with self._lock:
            self._check(session)
            return sorted(self._node(path).children)

    def exists(self, session: int, path: str) -> bool:
        with self._lock:
            self._check(session)
            return path in self._nodes

    def sync(self, session: int) -> None:
        with self._lock:
            self._check(session)

    # -- watches ------------------------------------------------------------------------

    def watch_data(self, session: int, path: str, callback: DataCallback) -> WatchHandle:
        with self._lock:
            self._check(session)
            watch = _MemoryWatch(self, session, callback)
            self._data_watches.setdefault(path, []).append(watch)
            node = self._nodes.get(path)
            watch.post(None if node is None else Versioned(node.data, node.version))
            return watch

    def watch_children(self, session: int, path: str, callback: ChildrenCallback) -> WatchHandle:
        with self._lock:
            self._check(session)
            node = self._node(path)
            watch = _MemoryWatch(self, session, callback)
            self._child_watches.setdefault(path, []).append(watch)
            watch.post(sorted(node.children))
            return watch

    def _fire_data(self, path: str) -> None:
        node = self._nodes.get(path)
        value = None if node is None else Versioned(node.data, node.version)
        for watch in self._data_watches.get(path, []):
            watch.post(value)

    def _fire_children(self, path: str) -> None:
        node = self._nodes.get(path)
        if node is None:
            return
        names = sorted(node.children)
        for watch in self._child_watches.get(path, []):
            watch.post(names)

    def _drop_watches(self, keep: Callable[[_MemoryWatch], bool]) -> None:
        for table in (self._data_watches, self._child_watches):
            for path, watches in list(table.items()):
                kept = [watch for watch in watches if keep(watch)]
                if kept:
                    table[path] = kept
                else:
                    del table[path]

    def _drop_watch(self, watch: _MemoryWatch) -> None:
        with self._lock:
            self._drop_watches(lambda other: other is not watch)

    def _end_session(self, session: int) -> None:
        with self._lock:
            if session not in self._live:
                return
            self._live.discard(session)
            owned = [path for path, node in self._nodes.items() if node.owner == session]
            for path in owned:
                self._remove(path)
            self._drop_watches(lambda watch: watch.session != session)


class MemoryCoordinationStore:
    """One session on a :class:`MemoryCoordinationServer`; implements ``CoordinationStore``."""

    def __init__(self, server: MemoryCoordinationServer, session: int) -> None:
        self._server = server
        self.session = session
        self._closed = False
        self._listeners: list[_MemoryListener] = []

    def _notify(self, state: SessionState) -> None:
        if self._closed:
            return
        for listener in list(self._listeners):
            listener.post(state)

    def _open(self, path: str) -> str:
        if self._closed:
            raise CoordinationClosedError("store is closed", path)
        return validate_path(path)

    async def get(self, path: str) -> Versioned:
        return self._server.get(self.session, self._open(path))

    async def create(self, path: str, data: bytes, *, ephemeral: bool = False, make_parents: bool = True) -> int:
        return self._server.create(self.session, self._open(path), data, ephemeral, make_parents)

    async def compare_and_set(self, path: str, data: bytes, expected_version: int) -> int:
        return self._server.compare_and_set(self.session, self._open(path), data, expected_version)

    async def delete(self, path: str, expected_version: int | None = None) -> None:
        self._server.delete(self.session, self._open(path), expected_version)

    async def children(self, path: str) -> list[str]:
        return self._server.children(self.session, self._open(path))

    async def exists(self, path: str) -> bool:
        return self._server.exists(self.session, self._open(path))

    async def sync(self, path: str) -> None:
        self._open(path)
        self._server.sync(self.session)

    async def read_linearized(self, path: str) -> Versioned | None:
        await self.sync(path)
        try:
            return await self.get(path)
        except NodeNotFoundError:
            return None

    async def watch_data(self, path: str, callback: DataCallback) -> WatchHandle:
        return self._server.watch_data(self.session, self._open(path), callback)

    async def watch_children(self, path: str, callback: ChildrenCallback) -> WatchHandle:
        return self._server.watch_children(self.session, self._open(path), callback)

    async def add_session_listener(self, callback: SessionCallback) -> WatchHandle:
        if self._closed:
            raise CoordinationClosedError("store is closed")
        listener = _MemoryListener(self, callback)
        self._listeners.append(listener)
        return listener

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._server._end_session(self.session)
