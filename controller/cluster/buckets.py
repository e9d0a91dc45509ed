"""Several controllers share the periodic background work through buckets (Pravega's periodic background job
framework and controller cluster listener, seed 003).

Every stream hashes into one of ``bucket_count`` buckets (:func:`bucket_of`, Pravega's ``BucketStore.getBucket``;
the count is fixed for the life of the cluster's metadata, like the container count). ZooKeeper holds:

- ``/cluster/controllers/<host:port>``: one ephemeral node per live controller (its advertised endpoint;
  ``getControllerServerList`` lists them);
- ``/cluster/bucket-assignment``: which controller should own which buckets, written by the leader
  controller's balancer (the container balancer's code and format, over the controllers: balanced, minimal
  movement, rewritten when a controller joins or leaves);
- ``/cluster/bucket-owners/<bucket>``: an ephemeral node held by the controller that owns the bucket now.

:class:`BucketOwnership` follows the assignment: it claims the buckets assigned to its controller (waiting, for
each, until a previous owner's node is gone) and releases those assigned elsewhere. A controller runs a
stream's periodic work (retention, watermarks, auto-scaling, transaction timeouts, resuming workflows left
midway) only while it holds the owner node of the stream's bucket, so at most one controller runs it at any
time; when a controller dies its session ends, its nodes vanish, the leader gives its buckets to the others
and they claim them. A controller whose session is lost stops at once (its claims are void) and claims again
on a new session. Pravega keeps two bucket sets (retention, watermarking); here one set serves all the
periodic work, and ``getControllerToBucketMapping`` answers it for either service type.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Protocol

from segstore_shared.cluster.layout import (
    AssignmentFormatError,
    ContainerAssignment,
    ContainerCountMismatchError,
    HostInfo,
    host_id,
)
from segstore_shared.cluster.registration import HostRegistration
from segstore_shared.coordination.store import (
    CoordinationError,
    CoordinationStore,
    NodeNotFoundError,
    Versioned,
)
from segstore_shared.coordination.watches import StoreWatches

log = logging.getLogger(__name__)

CONTROLLERS_PATH = "/cluster/controllers"
BUCKET_ASSIGNMENT_PATH = "/cluster/bucket-assignment"
BUCKET_OWNERS_PATH = "/cluster/bucket-owners"


def bucket_of(scope: str, stream: str, bucket_count: int) -> int:
    """The bucket of a stream: Java's ``String.hashCode`` of ``scope/stream``, made non-negative, modulo the count
    (as Pravega's ``BucketStore.getBucket``)."""
    code = 0
    data = f"{scope}/{stream}".encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        code = (31 * code + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return (code & 0x7FFFFFFF) % bucket_count


class WorkScope(Protocol):
    """What one controller's periodic work covers, and what it knows of the other controllers."""

    def owns(self, scope: str, stream: str) -> bool:
        """Whether this controller runs the stream's periodic work now."""
        ...

    def owned_buckets(self) -> frozenset[int]: ...

    def bucket_of(self, scope: str, stream: str) -> int: ...

    @property
    def departures(self) -> int:
        """How many times a controller has left the cluster since this one started (work to sweep)."""
        ...

    async def members(self) -> list[tuple[str, int]]:
        """``(host, port)`` of every live controller."""
        ...

    async def assignment(self) -> dict[str, list[int]]:
        """Controller id -> the buckets it should own (``getControllerToBucketMapping``)."""
        ...


class SoleController:
    """The whole work for one controller alone (tests of the core without a cluster): one bucket, always owned."""

    def __init__(self, host: str = "127.0.0.1", port: int = 9090) -> None:
        self._endpoint = (host, port)

    def owns(self, scope: str, stream: str) -> bool:
        return True

    def owned_buckets(self) -> frozenset[int]:
        return frozenset({0})

    def bucket_of(self, scope: str, stream: str) -> int:
        return 0

    @property
    def departures(self) -> int:
        return 0

    async def members(self) -> list[tuple[str, int]]:
        return [self._endpoint]

    async def assignment(self) -> dict[str, list[int]]:
        return {f"{self._endpoint[0]}:{self._endpoint[1]}": [0]}


class BucketOwnership:
    """One controller's membership and bucket claims; see the module docstring. Use from one event loop."""

    def __init__(
        self, store: CoordinationStore, host: str, port: int, bucket_count: int, *, retry_delay_s: float = 0.5
    ) -> None:
        if bucket_count <= 0:
            raise ValueError(f"bucket_count must be positive, not {bucket_count}")
        self.identity = host_id(host, port)
        self.bucket_count = bucket_count
        self._store = store
        self._host, self._port = host, port
        self._retry_delay_s = retry_delay_s
        self.membership = HostRegistration(
            store, host, port, retry_delay_s=retry_delay_s, root=CONTROLLERS_PATH, role="controller"
        )
        self._claims: dict[int, HostRegistration] = {}
        self._wanted: frozenset[int] = frozenset()
        self._members: set[str] = set()
        self._departures = 0
        self._watches = StoreWatches(store)
        self._wake = asyncio.Event()

    # ---- WorkScope ------------------------------------------------------------------------------------------
    def owns(self, scope: str, stream: str) -> bool:
        claim = self._claims.get(self.bucket_of(scope, stream))
        return claim is not None and claim.registered

    def owned_buckets(self) -> frozenset[int]:
        return frozenset(b for b, claim in self._claims.items() if claim.registered)

    def bucket_of(self, scope: str, stream: str) -> int:
        return bucket_of(scope, stream, self.bucket_count)

    @property
    def departures(self) -> int:
        return self._departures

    async def members(self) -> list[tuple[str, int]]:
        try:
            names = await self._store.children(CONTROLLERS_PATH)
        except NodeNotFoundError:
            return []
        found: list[tuple[str, int]] = []
        for name in sorted(names):
            with contextlib.suppress(NodeNotFoundError, AssignmentFormatError):
                info = HostInfo.decode((await self._store.get(f"{CONTROLLERS_PATH}/{name}")).data)
                found.append((info.host, info.port))
        return found

    async def assignment(self) -> dict[str, list[int]]:
        try:
            node = await self._store.get(BUCKET_ASSIGNMENT_PATH)
        except NodeNotFoundError:
            return {}
        return {host: list(ids) for host, ids in ContainerAssignment.decode(node.data).hosts.items()}

    # ---- lifecycle ------------------------------------------------------------------------------------------
    async def start(self) -> None:
        """Join the cluster and follow the assignment (returns at once; claims follow as the leader assigns)."""
        if self._watches.running:
            raise RuntimeError("BucketOwnership.start() called twice")
        await self.membership.start()
        await self._watches.data(BUCKET_ASSIGNMENT_PATH, self._on_assignment)
        with contextlib.suppress(CoordinationError):
            await self._store.create(CONTROLLERS_PATH, b"", make_parents=True)
        await self._watches.children(CONTROLLERS_PATH, self._on_members)
        self._watches.run(self._run(), name=f"buckets of {self.identity}")

    async def stop(self) -> None:
        """Release every bucket (their owner nodes go at once, so others take over without waiting for the
        session to expire) and leave the cluster; idempotent."""
        await self._watches.stop()
        await asyncio.gather(*(claim.stop() for claim in self._claims.values()))
        self._claims.clear()
        await self.membership.stop()

    # ---- events ---------------------------------------------------------------------------------------------
    def _on_assignment(self, node: Versioned | None) -> None:
        wanted: frozenset[int] = frozenset()
        if node is not None:
            try:
                assignment = ContainerAssignment.decode(node.data)
                assignment.check_container_count(self.bucket_count, BUCKET_ASSIGNMENT_PATH, "bucket")
                wanted = assignment.containers_of(self.identity)
            except (AssignmentFormatError, ContainerCountMismatchError) as error:
                log.error("controller %s: not taking buckets: %s", self.identity, error)
        self._wanted = wanted
        self._wake.set()

    def _on_members(self, names: list[str]) -> None:
        now = set(names)
        if self._members - now:
            self._departures += 1
            log.info("controllers left the cluster: %s", sorted(self._members - now))
        self._members = now

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            wanted = self._wanted
            for bucket in sorted(set(self._claims) - wanted):
                claim = self._claims.pop(bucket)
                await claim.stop()
                log.info("controller %s released bucket %d", self.identity, bucket)
            for bucket in sorted(wanted - set(self._claims)):
                claim = HostRegistration(
                    self._store, self._host, self._port, retry_delay_s=self._retry_delay_s,
                    root=BUCKET_OWNERS_PATH, name=str(bucket), role="bucket owner",
                )  # fmt: skip
                await claim.start()
                self._claims[bucket] = claim
