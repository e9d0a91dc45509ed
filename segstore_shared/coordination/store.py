"""The coordination port: a small versioned key-value store over ZooKeeper-style paths.

Used by the Tier-1 log metadata (:mod:`segment_store.tier1`), and later by the
controller's metadata store and cluster membership. Two implementations pass
one contract suite (``tests/segstore_shared/coordination/test_coordination_store.py``):

- :class:`segstore_shared.coordination.kazoo_store.KazooCoordinationStore` - real
  ZooKeeper through kazoo; every run mode uses it.
- :class:`segstore_shared.coordination.memory_store.MemoryCoordinationStore` -
  in-process, for unit tests only.

Data model (ZooKeeper's): a tree of nodes named by absolute paths
(``/a/b``); each node holds bytes and a version that is 0 at creation and grows
by one with every successful write of its data. Ephemeral nodes belong to the
session (the store instance) that created them and vanish when it ends.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from segstore_shared.errors import RetriableError, SegstoreError


@dataclass(frozen=True, slots=True)
class Versioned:
    """A node's data together with the version the data was read at."""

    data: bytes
    version: int


class CoordinationError(SegstoreError):
    """Base of coordination errors; ``path`` names the node concerned ('' when none)."""

    def __init__(self, message: str, path: str = "") -> None:
        super().__init__(f"{message}: {path}" if path else message)
        self.path = path


class NodeNotFoundError(CoordinationError):
    """The node (or, for a create without ``make_parents``, its parent) does not exist."""


class NodeExistsError(CoordinationError):
    """A create found the node already there."""


class BadVersionError(CoordinationError):
    """A compare-and-set or versioned delete found a different version; nothing was changed."""


class NotEmptyError(CoordinationError):
    """A delete found children under the node."""


class CoordinationUnavailableError(RetriableError, CoordinationError):
    """The coordination service cannot be reached now (connection loss, session expiry, timeout).

    The outcome of a *mutating* call that raised this is unknown: it may or may not have
    been applied. Callers re-read (and compare) before deciding; see the Tier-1 log's
    metadata reconciliation.
    """


class CoordinationClosedError(CoordinationError):
    """The store was closed; no further calls are possible on this instance."""


class WatchHandle(Protocol):
    """A registered watch; :meth:`cancel` stops further callbacks (idempotent)."""

    def cancel(self) -> None: ...


class SessionState(enum.Enum):
    """What a session listener is told about the store's ZooKeeper session.

    ``SUSPENDED``: the connection is lost; the session (and its ephemeral nodes) may still be alive,
    calls raise :class:`CoordinationUnavailableError` until it comes back.
    ``LOST``: the session expired; its ephemeral nodes are gone. The store keeps reconnecting and
    opens a *new* session (then ``CONNECTED``); data and children watches carry over to it.
    ``CONNECTED``: connected again (the same session after ``SUSPENDED``, a new one after ``LOST``).
    """

    CONNECTED = "connected"
    SUSPENDED = "suspended"
    LOST = "lost"


DataCallback = Callable[[Versioned | None], None]
ChildrenCallback = Callable[[list[str]], None]
SessionCallback = Callable[[SessionState], None]


def validate_path(path: str) -> str:
    """Check ``path`` is absolute, has no empty component and no trailing slash.

    Returns the path; raises ``ValueError`` otherwise (a programming error, not a
    coordination failure).
    """
    if not path.startswith("/"):
        raise ValueError(f"path must be absolute: {path!r}")
    if path != "/" and (path.endswith("/") or "//" in path):
        raise ValueError(f"path has an empty component: {path!r}")
    if any(part in (".", "..") for part in path.split("/")):
        raise ValueError(f"path has a relative component: {path!r}")
    return path


def parent_of(path: str) -> str:
    """The parent path of ``path`` ('/' for a top-level node)."""
    head = path.rsplit("/", 1)[0]
    return head or "/"


class CoordinationStore(Protocol):
    """A versioned key-value store over ZooKeeper-style paths.

    **Async API.** Every operation is a coroutine run on the caller's asyncio loop,
    because the Tier-1 log and the other users are asyncio services. The kazoo
    implementation bridges kazoo's own asynchronous requests (``*_async`` results,
    completed on kazoo's threads) to asyncio futures with ``call_soon_threadsafe``,
    so no thread is parked per call and requests are sent in call order; only the
    blocking connect/close and watch registration run in a worker thread.

    **Ordering.** Operations issued by one store instance are applied in the order they
    are issued (ZooKeeper's FIFO client order). A write is visible to every later read on
    any instance once the write returned. A plain :meth:`get` may return a value that is
    stale with respect to writes made through *other* instances (ZooKeeper serves reads
    from the connected server); :meth:`read_linearized` sees every write that completed before it
    was called (``sync`` then ``get`` alone does not when the session is on the ZooKeeper leader).

    **Errors.** All errors derive from :class:`CoordinationError` (a ``SegstoreError``).
    :class:`CoordinationUnavailableError` is retriable and leaves the outcome of a
    mutation unknown; the others are definite (nothing was changed). Invalid paths raise
    ``ValueError``. After :meth:`close`, calls raise :class:`CoordinationClosedError`.

    **Sessions.** One instance is one session at a time. Ephemeral nodes it created are deleted
    when it closes (or its ZooKeeper session expires; the instance then opens a new session and
    tells its session listeners, see :class:`SessionState`).
    """

    async def get(self, path: str) -> Versioned:
        """Data and version of ``path``; raises :class:`NodeNotFoundError`."""
        ...

    async def create(self, path: str, data: bytes, *, ephemeral: bool = False, make_parents: bool = True) -> int:
        """Create ``path`` holding ``data``; returns its version (0).

        Missing parents are created empty (persistent) when ``make_parents``, else
        :class:`NodeNotFoundError`. Raises :class:`NodeExistsError` when the node exists.
        """
        ...

    async def compare_and_set(self, path: str, data: bytes, expected_version: int) -> int:
        """Replace the data if the version is still ``expected_version``; returns the new version.

        Raises :class:`BadVersionError` (the data is left as it was) or
        :class:`NodeNotFoundError`.
        """
        ...

    async def delete(self, path: str, expected_version: int | None = None) -> None:
        """Delete ``path`` (only at ``expected_version`` when given).

        Raises :class:`NodeNotFoundError`, :class:`BadVersionError`, :class:`NotEmptyError`.
        """
        ...

    async def children(self, path: str) -> list[str]:
        """Names (not paths) of the children of ``path``, sorted; raises :class:`NodeNotFoundError`."""
        ...

    async def exists(self, path: str) -> bool:
        """Whether ``path`` exists now."""
        ...

    async def sync(self, path: str) -> None:
        """Make the next read through this instance see every write completed before this call."""
        ...

    async def read_linearized(self, path: str) -> Versioned | None:
        """The node as of some moment after this call: it reflects every write completed before the call
        (ZooKeeper: ``sync`` then ``get``, confirmed by a ``multi`` of version checks, which a ZooKeeper leader
        orders after every earlier write; concurrent calls share them). None if the node does not exist (as of
        the ``sync``)."""
        ...

    async def watch_data(self, path: str, callback: DataCallback) -> WatchHandle:
        """Call ``callback`` with the node's current state, then again after changes.

        The argument is the new :class:`Versioned` or ``None`` while the node does not
        exist. Callbacks run on the event loop that registered the watch, in change order;
        consecutive changes may be coalesced into one call (the last state is always
        delivered). The watch lasts until cancelled or the store closes.
        """
        ...

    async def watch_children(self, path: str, callback: ChildrenCallback) -> WatchHandle:
        """Call ``callback`` with the sorted child names now, then again after changes.

        ``path`` must exist (else :class:`NodeNotFoundError`); the watch ends when the node
        is deleted. Same delivery rules as :meth:`watch_data`.
        """
        ...

    async def add_session_listener(self, callback: SessionCallback) -> WatchHandle:
        """Call ``callback`` with every later change of the session's state (not the current one).

        Callbacks run on the event loop that registered the listener, in the order the changes
        happened; none after :meth:`close`. ``LOST`` is always followed by ``CONNECTED`` once a new
        session is open; users that own ephemeral nodes re-create them then.
        """
        ...

    async def close(self) -> None:
        """End the session (its ephemeral nodes go away); idempotent."""
        ...


def suspended_limit_s(session_timeout_s: float) -> float:
    """How long after the client reports SUSPENDED its session may still be alive, at most: ZooKeeper expires a
    session ``session_timeout_s`` after it last heard from the client, and kazoo notices a silent link up to its
    read timeout (2/3 of the session timeout) after the last packet it got. A process that holds something only
    while its session lives (a segment store its containers) lets go this long after SUSPENDED, not a whole
    session timeout later: then it never acts past a possible expiry (a new owner starts only after one)."""
    return session_timeout_s / 3
