"""Which faults the self-tester may have active at once (pure logic, no I/O: unit-tested alone).

A fault of some kind acts on *targets* (``ss1``, ``controller2``, ``nats0``, ...; none for ZooKeeper, Tier-2 and
stream operations) and *claims* what it takes away: its targets, plus a shared resource for some kinds (see
:func:`claims_of`). A new fault starts only if :meth:`OverlapRule.admits` it next to the active ones. The rule keeps
every combination inside what the cluster survives, so a run with overlapping faults must still end with 0
violations and recover:

- at most ``at_once`` faults are active together (``segstore selftest --faults-at-once``, default 2);
- no two active faults claim the same thing but ``needs-zookeeper`` (one fault per process; one Tier-2 fault, an
  outage or a full disk; one stream operation, a scale or a truncation, at a time);
- segment stores: at most all but one out (killed, paused or cut off ZooKeeper; with 3, two) - someone must take
  the containers over;
- controllers: at most all but one out (clients fail over to the other);
- NATS nodes (JetStream Tier-1, R3): at most a minority out (killed, paused or power lost), so the streams keep
  a quorum;
- ZooKeeper: one fault at a time (``zookeeper-member``: with the 3-member ensemble, one member out, a minority);
  while it is all down (``restart_zookeeper``, ``zookeeper-down``) nothing that needs it (``needs-zookeeper``) is
  started: a zombie or a kill during recovery, both waiting for a session to expire, or a kill of a segment store
  or controller, whose restart gives up when ZooKeeper does not answer in time (a ZooKeeper restart took 17 s on a
  loaded machine);
- the sabotage (``lose_data``, ``nats_quorum_rollback``) runs alone.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass

ZOOKEEPER_DOWN = "zookeeper-down"
"""Claimed by what takes all of ZooKeeper down."""
NEEDS_ZOOKEEPER = "needs-zookeeper"
"""Claimed by what needs ZooKeeper up: a session to expire, a process to restart. Several may hold it together,
never next to :data:`ZOOKEEPER_DOWN`."""
ALONE = "*"
"""Claimed by a fault that runs with no other."""

_SHARED = {
    "restart_zookeeper": (ZOOKEEPER_DOWN, "zookeeper-member"),
    "kill_zookeeper_leader": ("zookeeper-member",),
    "zombie_segmentstore": (NEEDS_ZOOKEEPER,),
    "kill_during_recovery": (NEEDS_ZOOKEEPER,),
    "kill_segmentstore": (NEEDS_ZOOKEEPER,),
    "kill_controller": (NEEDS_ZOOKEEPER,),
    "tier2_outage": ("tier2",),
    "tier2_disk_full": ("tier2",),
    "scale": ("stream-op",),
    "truncate": ("stream-op",),
    "lose_data": (ALONE,),
    "nats_quorum_rollback": (ALONE,),
}


def claims_of(kind: str, targets: Sequence[str]) -> frozenset[str]:
    """What a fault of ``kind`` on ``targets`` takes away while it is active."""
    return frozenset((*targets, *_SHARED.get(kind, ())))


def group_of(claim: str) -> str:
    """A target's group: its name without the trailing number (``ss2`` -> ``ss``, ``nats0`` -> ``nats``)."""
    return re.sub(r"\d+$", "", claim)


@dataclass(frozen=True)
class OverlapRule:
    at_once: int
    """Faults active together, at most."""
    out: dict[str, int]
    """Per group, how many of its members may be out together."""

    @classmethod
    def for_cluster(cls, at_once: int, *, segment_stores: int, controllers: int, nats_nodes: int) -> OverlapRule:
        """The rule of a cluster of this shape (module docstring)."""
        if at_once < 1:
            raise ValueError("faults_at_once: must be at least 1")
        return cls(
            at_once,
            {"ss": segment_stores - 1, "controller": controllers - 1, "nats": max(0, (nats_nodes - 1) // 2)},
        )

    def admits(self, claims: frozenset[str], active: Iterable[frozenset[str]]) -> bool:
        """Whether a fault claiming ``claims`` may start while faults claiming ``active`` are active."""
        active = list(active)
        if len(active) >= self.at_once:
            return False
        taken: set[str] = set().union(*active)
        if active and (ALONE in claims or ALONE in taken):
            return False
        if (claims & taken) - {NEEDS_ZOOKEEPER}:
            return False
        together = taken | claims
        if ZOOKEEPER_DOWN in together and NEEDS_ZOOKEEPER in together:
            return False
        return all(sum(1 for c in together if group_of(c) == group) <= limit for group, limit in self.out.items())


def pick_fault(
    rng: random.Random,
    weights: dict[str, int],
    targets: Callable[[str], list[tuple[str, ...]]],
    rule: OverlapRule,
    active: Sequence[frozenset[str]],
    first: Collection[str] = (),
) -> tuple[str, tuple[str, ...]] | None:
    """A fault to start now: a kind drawn by weight among those with a target the rule admits next to ``active``,
    and one of those targets, uniformly; None if no kind has one. ``targets(kind)``: every target tuple of a kind
    (``[()]`` for a kind without targets). Kinds in ``first`` (the schedule passes those it has not started yet, so
    that even a short run has every kind asked for) are drawn before the others whenever one of them is admitted."""
    possible: dict[str, list[tuple[str, ...]]] = {}
    for kind in weights:
        admitted = [t for t in targets(kind) if rule.admits(claims_of(kind, t), active)]
        if admitted:
            possible[kind] = admitted
    if not possible:
        return None
    kinds = [kind for kind in possible if kind in first] or list(possible)
    kind = rng.choices(kinds, [weights[k] for k in kinds])[0]
    return kind, rng.choice(possible[kind])
