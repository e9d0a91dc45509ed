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
    "nats_power_loss": 1,
    "tier2_outage": 2,
    "tier2_disk_full": 2,
    "scale": 3,
    "truncate": 1,
}
SABOTAGE = {"lose_data": 1, "nats_quorum_rollback": 1}
"""Faults that break the guarantees on purpose (never in the default schedule): a run with one must fail, which
shows that the checks see a loss end to end (``lose_data``: the verifier counts it lost) or that the product refuses
what it cannot vouch for (``nats_quorum_rollback``: a majority of the NATS servers rolled back to an earlier copy of
their stores; the segment stores must refuse the shortened Tier-1 logs, which the report counts as detected
rollbacks, not as silent loss)."""
ALL_FAULTS = tuple(WEIGHTS)
"""The default schedule's kinds."""
NATS_FAULTS = ("kill_nats_node", "pause_nats_node", "nats_power_loss", "partition_nats", "nats_quorum_rollback")
"""The kinds that need Tier-1 ``jetstream``."""


def fault_possible(kind: str, tier1: str, tier2: str, zookeeper: str = "standalone") -> bool:
    """Whether a fault of ``kind`` can happen in a cluster with these tiers (NATS nodes to kill, pause or roll back
    need Tier-1 ``jetstream``; a Tier-2 outage needs Tier-2 ``s3``, the server the run freezes; a full Tier-2 disk
    happens on both) and this ZooKeeper (a leader to kill needs the ``ensemble``)."""
    if kind == "kill_zookeeper_leader":
        return zookeeper == "ensemble"
    if kind in NATS_FAULTS:
        return tier1 == "jetstream"
    if kind == "tier2_outage":
        return tier2 == "s3"
    return True
