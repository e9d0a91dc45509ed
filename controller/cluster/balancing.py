"""Placing containers on live segment stores (Pravega's ``UniformContainerBalancer``), as a pure function.

:func:`rebalance` gives the next assignment from the current one and the live hosts:

- every container is on exactly one live host (none when no host is alive);
- balanced: the per-host counts differ by at most one;
- minimal movement: a container stays where it is while its host lives; the hosts allowed one container
  above the floor are the ones already holding most, so only the excess of over-loaded hosts moves,
  together with the containers of hosts that are gone. Among a host's containers the highest ids move.

The result is deterministic (it depends only on the inputs), so two controllers that briefly both
think they lead write the same thing.
"""

from __future__ import annotations

from collections.abc import Iterable

from segstore_shared.cluster.layout import ContainerAssignment


def rebalance(
    current: ContainerAssignment | None, live_hosts: Iterable[str], container_count: int
) -> ContainerAssignment:
    """The assignment to write next; ``current`` may be None (no assignment yet).

    ``current`` must be for ``container_count`` containers (checked by the caller; see
    :meth:`ContainerAssignment.check_container_count`), else ``ValueError``.
    """
    if current is not None and current.container_count != container_count:
        raise ValueError(f"assignment is for {current.container_count} containers, not {container_count}")
    live = sorted(set(live_hosts))
    if not live:
        return ContainerAssignment(container_count, {})
    kept: dict[str, list[int]] = {host: [] for host in live}
    if current is not None:
        for host, ids in current.hosts.items():
            if host in kept:
                kept[host] = sorted(ids)
    owned = {cid for ids in kept.values() for cid in ids}
    free = [cid for cid in range(container_count) if cid not in owned]

    base, extra = divmod(container_count, len(live))
    by_load = sorted(live, key=lambda host: (-len(kept[host]), host))
    target = {host: base + (1 if rank < extra else 0) for rank, host in enumerate(by_load)}

    for host in live:
        excess = len(kept[host]) - target[host]
        if excess > 0:
            free.extend(kept[host][-excess:])
            del kept[host][-excess:]
    free.sort()
    for host in sorted(live, key=lambda host: (len(kept[host]), host)):
        need = target[host] - len(kept[host])
        kept[host].extend(free[:need])
        del free[:need]
    assert not free, "every container is placed"
    return ContainerAssignment.of(container_count, kept)


def moved_containers(
    before: ContainerAssignment | None, after: ContainerAssignment
) -> dict[int, tuple[str | None, str]]:
    """Containers whose owner changes: ``{id: (old host or None, new host)}`` (for logs and tests)."""
    old = {} if before is None else before.owners()
    return {cid: (old.get(cid), host) for cid, host in after.owners().items() if old.get(cid) != host}
