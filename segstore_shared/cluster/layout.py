"""The cluster's shared records in ZooKeeper: paths, the container assignment, host ids, errors.

Layout (all under the coordination store's root, a chroot per cluster):

- ``/cluster/segmentstores/<host>:<port>`` - one *ephemeral* node per live segment store process
  (:class:`~segstore_shared.cluster.registration.HostRegistration`), data :class:`HostInfo` as JSON.
- ``/cluster/container-assignment`` - the mapping written by the leader controller's balancer, JSON
  ``{"version": 1, "container_count": N, "assignment": {"host:port": [ids...]}}`` (:class:`ContainerAssignment`).
- ``/cluster/container-owners/<id>`` - one *ephemeral* node per container, held by the segment store that runs it
  (:class:`~segment_store.cluster.claims.ContainerClaims`), data ``{"host": "host:port", "token": ...}``: the
  assignment says where a container should run, this node where it may run now (a move waits for the old owner).
- ``/cluster/controller-leader`` - the ephemeral node of the elected controller.

The number of containers is fixed for the life of a cluster's data (it decides where every segment
lives); it is recorded in the assignment, and a process configured with another number refuses to
run (:class:`ContainerCountMismatchError`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from segstore_shared.errors import RetriableError, SegstoreError

CLUSTER_ROOT = "/cluster"
SEGMENT_STORES_PATH = "/cluster/segmentstores"
ASSIGNMENT_PATH = "/cluster/container-assignment"
LEADER_PATH = "/cluster/controller-leader"
CONTAINER_OWNERS_PATH = "/cluster/container-owners"
FORMAT_VERSION = 1


class ClusterError(SegstoreError):
    """Base of cluster membership and placement errors."""


class ContainerCountMismatchError(ClusterError):
    """This process is configured with a container count other than the cluster's."""

    def __init__(self, configured: int, cluster: int, path: str = ASSIGNMENT_PATH, what: str = "container") -> None:
        super().__init__(
            f"{what}_count: this process is configured with {configured} {what}s but the cluster "
            f"({path}) has {cluster}; the count is fixed for the life of the data"
        )
        self.configured = configured
        self.cluster = cluster


class AssignmentFormatError(ClusterError):
    """The assignment node holds something this version cannot read."""


class NoOwnerError(RetriableError, ClusterError):
    """No live segment store owns the container now (it is moving, or no host is up); retry later."""

    def __init__(self, container_id: int) -> None:
        super().__init__(f"container {container_id} has no segment store now")
        self.container_id = container_id


def host_id(host: str, port: int) -> str:
    """The id of a segment store in the cluster: its advertised ``host:port``."""
    if not host or "/" in host:
        raise ValueError(f"advertised host must be a non-empty name without '/': {host!r}")
    if not 0 < port < 65536:
        raise ValueError(f"port must be within 1..65535, not {port}")
    return f"{host}:{port}"


def owner_path(container_id: int) -> str:
    """The owner node of a container (see the module docstring)."""
    return f"{CONTAINER_OWNERS_PATH}/{container_id}"


def parse_host_id(value: str) -> tuple[str, int]:
    """``(host, port)`` of a host id (the port follows the last ':'); raises ``ValueError``."""
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"not a host:port id: {value!r}")
    return host, int(port)


@dataclass(frozen=True, slots=True)
class HostInfo:
    """What a segment store writes into its registration node."""

    host: str
    port: int
    pid: int
    start_time: float
    """Seconds since the epoch when the process registered."""
    token: str
    """Unique per registration, so a process recognises its own node (after a reconnect) from a stale one."""

    def encode(self) -> bytes:
        return json.dumps(
            {"host": self.host, "port": self.port, "pid": self.pid, "start_time": self.start_time, "token": self.token},
            sort_keys=True,
        ).encode()

    @classmethod
    def decode(cls, data: bytes) -> HostInfo:
        try:
            raw = json.loads(data)
            return cls(str(raw["host"]), int(raw["port"]), int(raw["pid"]), float(raw["start_time"]), str(raw["token"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise AssignmentFormatError(f"unreadable host registration: {data[:200]!r}") from exc


@dataclass(frozen=True, slots=True)
class ContainerAssignment:
    """Which segment store runs which container; a container missing from every host runs nowhere.

    Invariants (checked at construction): ids within ``[0, container_count)``, no id under two hosts,
    id lists sorted. ``hosts`` maps a host id to its containers; do not mutate it.
    """

    container_count: int
    hosts: Mapping[str, tuple[int, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.container_count <= 0:
            raise ValueError(f"container_count must be positive, not {self.container_count}")
        seen: set[int] = set()
        for host, ids in self.hosts.items():
            if list(ids) != sorted(set(ids)):
                raise ValueError(f"containers of {host} must be sorted and unique: {ids}")
            for cid in ids:
                if not 0 <= cid < self.container_count:
                    raise ValueError(f"container {cid} of {host} is outside [0, {self.container_count})")
                if cid in seen:
                    raise ValueError(f"container {cid} is assigned to more than one host")
                seen.add(cid)

    @classmethod
    def of(cls, container_count: int, hosts: Mapping[str, Iterable[int]]) -> ContainerAssignment:
        """Build from unsorted id collections."""
        return cls(container_count, {host: tuple(sorted(set(ids))) for host, ids in hosts.items()})

    def containers_of(self, host: str) -> frozenset[int]:
        return frozenset(self.hosts.get(host, ()))

    def owner_of(self, container_id: int) -> str | None:
        for host, ids in self.hosts.items():
            if container_id in ids:
                return host
        return None

    def owners(self) -> dict[int, str]:
        """Container id -> host id, for every assigned container."""
        return {cid: host for host, ids in self.hosts.items() for cid in ids}

    def check_container_count(self, configured: int, path: str = ASSIGNMENT_PATH, what: str = "container") -> None:
        """Raise :class:`ContainerCountMismatchError` unless ``configured`` is this cluster's count."""
        if configured != self.container_count:
            raise ContainerCountMismatchError(configured, self.container_count, path, what)

    def encode(self) -> bytes:
        body: dict[str, Any] = {
            "version": FORMAT_VERSION,
            "container_count": self.container_count,
            "assignment": {host: list(ids) for host, ids in sorted(self.hosts.items())},
        }
        return json.dumps(body, sort_keys=True).encode()

    @classmethod
    def decode(cls, data: bytes) -> ContainerAssignment:
        """Parse the node's data; raises :class:`AssignmentFormatError`."""
        try:
            raw = json.loads(data)
            if raw.get("version") != FORMAT_VERSION:
                raise AssignmentFormatError(f"unknown container assignment version {raw.get('version')!r}")
            hosts = {str(host): [int(cid) for cid in ids] for host, ids in dict(raw["assignment"]).items()}
            return cls.of(int(raw["container_count"]), hosts)
        except AssignmentFormatError:
            raise
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise AssignmentFormatError(f"unreadable container assignment: {data[:200]!r}") from exc
