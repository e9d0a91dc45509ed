"""The coordination port over real ZooKeeper, through kazoo.

kazoo is thread based: requests are queued to its connection thread and completed on
its callback thread. Each operation here issues kazoo's ``*_async`` request and bridges
the result to an asyncio future with ``loop.call_soon_threadsafe``; nothing blocks the
event loop and no worker thread is held per request. Requests are handed to kazoo in
call order, so ZooKeeper's FIFO client order carries over (``sync`` then ``get`` is a
linearized read). Connecting, closing and registering watches block in kazoo and run in
a worker thread (``asyncio.to_thread``). Session listeners are kazoo connection-state listeners
(``CONNECTED``/``SUSPENDED``/``LOST``) forwarded to the registering loop; after an expiry kazoo
opens a new session by itself and its watch recipes re-arm on it.

Error mapping (kazoo -> :mod:`segstore_shared.coordination.store`): ``NoNodeError`` ->
``NodeNotFoundError``, ``NodeExistsError`` -> ``NodeExistsError``, ``BadVersionError`` ->
``BadVersionError``, ``NotEmptyError`` -> ``NotEmptyError``; connection loss, session
expiry, timeouts and a closed connection -> ``CoordinationUnavailableError`` (retriable;
the outcome of a mutation is then unknown); any other kazoo error -> ``CoordinationError``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Callable
from typing import Any

from kazoo import exceptions as kz
from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KazooState, ZnodeStat
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

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
    validate_path,
)

RECONNECT_MAX_DELAY_S = 1.0
"""The longest wait between two attempts to reach ZooKeeper again (see :meth:`KazooCoordinationStore.connect`)."""

_UNAVAILABLE: tuple[type[BaseException], ...] = (
    kz.ConnectionLoss,
    kz.SessionExpiredError,
    kz.OperationTimeoutError,
    kz.ConnectionClosedError,
    kz.SessionMovedError,
    KazooTimeoutError,
)


def map_kazoo_error(exc: BaseException, path: str) -> BaseException:
    """The store error for a kazoo exception (non-kazoo exceptions come back unchanged)."""
    if isinstance(exc, kz.NoNodeError):
        return NodeNotFoundError("no node", path)
    if isinstance(exc, kz.NodeExistsError):
        return NodeExistsError("node exists", path)
    if isinstance(exc, kz.BadVersionError):
        return BadVersionError("version mismatch", path)
    if isinstance(exc, kz.NotEmptyError):
        return NotEmptyError("node has children", path)
    if isinstance(exc, _UNAVAILABLE):
        return CoordinationUnavailableError(f"ZooKeeper unavailable ({type(exc).__name__})", path)
    if isinstance(exc, kz.KazooException):
        return CoordinationError(f"ZooKeeper error {type(exc).__name__}", path)
    return exc


def _settle(future: asyncio.Future[Any], ok: bool, value: Any) -> None:
    if future.done():  # the awaiting caller was cancelled (timeout); nothing to deliver
        return
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)


def _bridge(loop: asyncio.AbstractEventLoop, start: Callable[[], Any]) -> asyncio.Future[Any]:
    """Issue one kazoo async request now; its outcome (kazoo's thread) settles the returned future on ``loop``."""
    future: asyncio.Future[Any] = loop.create_future()

    def done(result: Any) -> None:
        ok = result.successful()
        value = result.value if ok else result.exception
        with contextlib.suppress(RuntimeError):  # the loop is gone; nobody is waiting
            loop.call_soon_threadsafe(_settle, future, ok, value)

    try:
        start().rawlink(done)
    except Exception as exc:  # refused before it was sent (the client is stopping)
        future.set_exception(exc)
    return future


class _LinearizedReads:
    """Linearized reads of one store, coalesced into rounds.

    A round serves every read asked for before it started: one ``sync``, then the ``get`` of each path,
    all sent back to back without waiting (ZooKeeper answers one session's requests in order, so each get
    is served after the sync), then one ``multi`` of a version ``check`` per node read. ``sync`` alone is
    not enough: on the leader it does nothing, and the leader applies a commit after its followers may
    have acknowledged it, so a session on the leader can miss a completed write (seen about once in 400
    rounds under load); a deposed leader that has not noticed yet (ZOOKEEPER-1675) serves stale data
    too. The ``multi`` is a write: it is ordered by the leader after every write proposed before it and
    commits only with a quorum, so when its checks pass, each node still had the version read at a moment
    after the call began; when one fails, those reads go to the next round. A node read as absent cannot
    be checked that way: its absence is as of the ``sync`` (good enough for every caller: absence is
    never proof of ownership).

    A read asked for while a round is in flight waits for the next round, since that round's sync may
    predate it. So N concurrent readers (the Tier-1 logs of one segment store confirming their ownership)
    cost one sync, N gets and one multi per round, instead of N of each.
    """

    def __init__(self, client: KazooClient) -> None:
        self._client = client
        self._waiting: dict[str, list[asyncio.Future[Versioned | None]]] = {}
        self._task: asyncio.Task[None] | None = None

    async def read(self, path: str) -> Versioned | None:
        future: asyncio.Future[Versioned | None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(path, []).append(future)
        if self._task is None:
            self._task = asyncio.create_task(self._rounds(), name="zookeeper-linearized-reads")
        return await future

    def close(self, error: BaseException) -> None:
        if self._task is not None:
            self._task.cancel()
        self._fail(self._waiting, error)
        self._waiting = {}

    async def _rounds(self) -> None:
        batch: dict[str, list[asyncio.Future[Versioned | None]]] = {}
        try:
            while self._waiting:
                batch, self._waiting = self._waiting, {}
                await self._round(batch)
        except asyncio.CancelledError:
            self._fail(batch, CoordinationClosedError("store closed during a read", next(iter(batch), "/")))
            raise
        finally:
            self._task = None

    async def _round(self, batch: dict[str, list[asyncio.Future[Versioned | None]]]) -> None:
        loop = asyncio.get_running_loop()
        paths = list(batch)
        sync = _bridge(loop, lambda: self._client.sync_async(paths[0]))
        gets = [_bridge(loop, functools.partial(self._client.get_async, path)) for path in paths]
        outcomes = await asyncio.gather(sync, *gets, return_exceptions=True)
        failed_sync = outcomes[0] if isinstance(outcomes[0], BaseException) else None
        found: dict[str, Versioned] = {}
        for path, outcome in zip(paths, outcomes[1:], strict=True):
            error = failed_sync if failed_sync is not None else outcome
            if isinstance(error, kz.NoNodeError):
                self._settle(batch[path], None)
            elif isinstance(error, BaseException):
                self._settle(batch[path], map_kazoo_error(error, path))
            elif not isinstance(outcome, BaseException):
                data, stat = outcome
                found[path] = Versioned(data or b"", stat.version)
        if found:
            await self._confirm(found, batch)

    async def _confirm(
        self, found: dict[str, Versioned], batch: dict[str, list[asyncio.Future[Versioned | None]]]
    ) -> None:
        """Settle the reads of ``found`` if a multi of version checks commits; else retry them next round."""
        transaction = self._client.transaction()
        for path, versioned in found.items():
            transaction.check(path, versioned.version)
        try:
            results = await _bridge(asyncio.get_running_loop(), transaction.commit_async)
        except (kz.KazooException, KazooTimeoutError) as error:  # each reader gets it, mapped
            for path in found:
                self._settle(batch[path], map_kazoo_error(error, path))
            return
        for path, result in zip(found, results, strict=True):
            if result is True:
                self._settle(batch[path], found[path])
            else:  # BadVersion (it changed since the get) or rolled back with another check: read it again
                self._waiting.setdefault(path, []).extend(f for f in batch[path] if not f.done())

    @staticmethod
    def _settle(futures: list[asyncio.Future[Versioned | None]], outcome: Versioned | BaseException | None) -> None:
        for future in futures:
            if future.done():  # the reader gave up (cancelled)
                continue
            if isinstance(outcome, BaseException):
                future.set_exception(outcome)
            else:
                future.set_result(outcome)

    @staticmethod
    def _fail(batch: dict[str, list[asyncio.Future[Versioned | None]]], error: BaseException) -> None:
        for futures in batch.values():
            for future in futures:
                if not future.done():
                    future.set_exception(error)


class _KazooWatch:
    """Forwards kazoo watch callbacks (kazoo's thread) to the registering event loop."""

    def __init__(self, callback: Callable[[Any], None]) -> None:
        self._callback = callback
        self._loop = asyncio.get_running_loop()
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True

    def _post(self, value: object) -> bool | None:
        if self.cancelled or self._loop.is_closed():
            return False  # tells the kazoo recipe to stop watching
        with contextlib.suppress(RuntimeError):  # loop closed between the check and the call
            self._loop.call_soon_threadsafe(self._deliver, value)
        return None

    def _deliver(self, value: object) -> None:
        if not self.cancelled:
            self._callback(value)

    def on_data(self, data: bytes | None, stat: ZnodeStat | None) -> bool | None:
        return self._post(None if stat is None else Versioned(data or b"", stat.version))

    def on_children(self, children: list[str]) -> bool | None:
        return self._post(sorted(children))


_SESSION_STATES = {
    KazooState.CONNECTED: SessionState.CONNECTED,
    KazooState.SUSPENDED: SessionState.SUSPENDED,
    KazooState.LOST: SessionState.LOST,
}


class _KazooSessionListener:
    """A kazoo connection-state listener (called on kazoo's thread) forwarding to the event loop."""

    def __init__(self, store: KazooCoordinationStore, callback: SessionCallback) -> None:
        self._store = store
        self._callback = callback
        self._loop = asyncio.get_running_loop()
        self.cancelled = False

    def cancel(self) -> None:
        if not self.cancelled:
            self.cancelled = True
            self._store.client.remove_listener(self.on_state)

    def on_state(self, state: str) -> None:
        mapped = _SESSION_STATES.get(state)
        if mapped is None or self.cancelled or self._loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):  # loop closed between the check and the call
            self._loop.call_soon_threadsafe(self._deliver, mapped)

    def _deliver(self, state: SessionState) -> None:
        if not self.cancelled and not self._store.closed:
            self._callback(state)


class KazooCoordinationStore:
    """``CoordinationStore`` over a kazoo client; one instance is one ZooKeeper session."""

    def __init__(self, client: KazooClient, *, owns_client: bool = True) -> None:
        """Wrap a *started* client; :meth:`close` stops it when ``owns_client``."""
        self._client = client
        self._owns_client = owns_client
        self._closed = False
        self._linearized = _LinearizedReads(client)

    @classmethod
    async def connect(
        cls, hosts: str, *, session_timeout_s: float = 10.0, connect_timeout_s: float = 15.0
    ) -> KazooCoordinationStore:
        """Connect to ``hosts`` (a ZooKeeper connect string, optionally with a chroot).

        Once connected, a lost connection is retried for ever, at most :data:`RECONNECT_MAX_DELAY_S` apart (kazoo's
        default doubles the wait up to an hour: after an outage of T seconds ZooKeeper was found back about T seconds
        late, the session expired meanwhile, and a segment store went on serving containers moved elsewhere).
        Raises :class:`CoordinationUnavailableError` when no server answers in time.
        """
        reconnect = {"max_tries": -1, "delay": 0.1, "backoff": 2, "max_delay": RECONNECT_MAX_DELAY_S}
        client = KazooClient(hosts=hosts, timeout=session_timeout_s, connection_retry=reconnect)
        try:
            await asyncio.to_thread(client.start, connect_timeout_s)
        except (KazooTimeoutError, kz.KazooException) as exc:
            await asyncio.to_thread(client.close)
            raise CoordinationUnavailableError(f"cannot connect to ZooKeeper at {hosts}") from exc
        return cls(client)

    @property
    def client(self) -> KazooClient:
        """The underlying kazoo client (for recipes this port does not cover)."""
        return self._client

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def _open(self, path: str) -> str:
        if self._closed:
            raise CoordinationClosedError("store is closed", path)
        return validate_path(path)

    async def _call(self, path: str, start: Callable[[], Any]) -> Any:
        """Issue one kazoo async request and await its result on this loop."""
        try:
            return await _bridge(asyncio.get_running_loop(), start)
        except Exception as exc:
            mapped = map_kazoo_error(exc, path)
            if mapped is exc:
                raise
            raise mapped from exc

    async def get(self, path: str) -> Versioned:
        path = self._open(path)
        data, stat = await self._call(path, lambda: self._client.get_async(path))
        return Versioned(data or b"", stat.version)

    async def create(self, path: str, data: bytes, *, ephemeral: bool = False, make_parents: bool = True) -> int:
        path = self._open(path)
        _, stat = await self._call(
            path,
            lambda: self._client.create_async(
                path, bytes(data), ephemeral=ephemeral, makepath=make_parents, include_data=True
            ),
        )
        return int(stat.version)

    async def compare_and_set(self, path: str, data: bytes, expected_version: int) -> int:
        path = self._open(path)
        if expected_version < 0:
            raise ValueError(f"expected_version must be >= 0, got {expected_version}")
        stat = await self._call(path, lambda: self._client.set_async(path, bytes(data), expected_version))
        return int(stat.version)

    async def delete(self, path: str, expected_version: int | None = None) -> None:
        path = self._open(path)
        version = -1 if expected_version is None else expected_version
        await self._call(path, lambda: self._client.delete_async(path, version))

    async def children(self, path: str) -> list[str]:
        path = self._open(path)
        return sorted(await self._call(path, lambda: self._client.get_children_async(path)))

    async def exists(self, path: str) -> bool:
        path = self._open(path)
        return await self._call(path, lambda: self._client.exists_async(path)) is not None

    async def sync(self, path: str) -> None:
        path = self._open(path)
        await self._call(path, lambda: self._client.sync_async(path))

    async def read_linearized(self, path: str) -> Versioned | None:
        return await self._linearized.read(self._open(path))

    async def watch_data(self, path: str, callback: DataCallback) -> WatchHandle:
        path = self._open(path)
        watch = _KazooWatch(callback)
        try:
            await asyncio.to_thread(DataWatch, self._client, path, watch.on_data)
        except Exception as exc:
            mapped = map_kazoo_error(exc, path)
            if mapped is exc:
                raise
            raise mapped from exc
        return watch

    async def watch_children(self, path: str, callback: ChildrenCallback) -> WatchHandle:
        path = self._open(path)
        if not await self.exists(path):
            raise NodeNotFoundError("no node", path)
        watch = _KazooWatch(callback)
        try:
            await asyncio.to_thread(ChildrenWatch, self._client, path, watch.on_children)
        except Exception as exc:
            mapped = map_kazoo_error(exc, path)
            if mapped is exc:
                raise
            raise mapped from exc
        return watch

    async def add_session_listener(self, callback: SessionCallback) -> WatchHandle:
        if self._closed:
            raise CoordinationClosedError("store is closed")
        listener = _KazooSessionListener(self, callback)
        self._client.add_listener(listener.on_state)
        return listener

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._linearized.close(CoordinationClosedError("store is closed", "/"))
        if self._owns_client:
            await asyncio.to_thread(self._client.stop)
            await asyncio.to_thread(self._client.close)
