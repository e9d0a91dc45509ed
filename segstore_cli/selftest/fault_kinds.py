"""The kinds of fault ``segstore selftest`` injects and how often each is drawn (no imports: ``segstore selftest
--help`` names them without loading the self-tester)."""

from __future__ import annotations

WEIGHTS = {
    "kill_segmentstore": 4,
    "kill_during_recovery": 2,
    "pause_segmentstore": 3,
    "zombie_segmentstore": 2,
    "partition_zookeeper": 2,
    "partition_nats": 1,
    "partition_clients": 2,
    "kill_controller": 1,
    "pause_controller": 1,
    "restart_zookeeper": 1,
    "kill_zookeeper_leader": 2,
    "kill_nats_node": 1,
    "pause_nats_node": 1,
    "tier2_outage": 2,
    "scale": 3,
    "truncate": 1,
}
SABOTAGE = {"lose_data": 1}
"""Faults that break the guarantees on purpose (never in the default schedule): a run with one must fail, which
shows that the checks see a loss end to end."""
ALL_FAULTS = tuple(WEIGHTS)
"""The default schedule's kinds."""


def fault_possible(kind: str, tier1: str, tier2: str, zookeeper: str = "standalone") -> bool:
    """Whether a fault of ``kind`` can happen in a cluster with these tiers (NATS nodes to kill or pause need Tier-1
    ``jetstream``; a Tier-2 outage needs Tier-2 ``s3``, the server the run freezes) and this ZooKeeper (a leader to
    kill needs the ``ensemble``)."""
    if kind == "kill_zookeeper_leader":
        return zookeeper == "ensemble"
    if kind in ("kill_nats_node", "pause_nats_node", "partition_nats"):
        return tier1 == "jetstream"
    if kind == "tier2_outage":
        return tier2 == "s3"
    return True
