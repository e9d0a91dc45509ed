"""The kinds of fault ``segstore selftest`` injects and how often each is drawn (no imports: ``segstore selftest
--help`` names them without loading the self-tester)."""

from __future__ import annotations

WEIGHTS = {
    "kill_segmentstore": 4,
    "kill_during_recovery": 2,
    "pause_segmentstore": 3,
    "kill_controller": 1,
    "pause_controller": 1,
    "restart_zookeeper": 1,
    "kill_nats_node": 1,
    "tier2_outage": 2,
    "scale": 3,
    "truncate": 1,
}
SABOTAGE = {"lose_data": 1}
"""Faults that break the guarantees on purpose (never in the default schedule): a run with one must fail, which
shows that the checks see a loss end to end."""
ALL_FAULTS = tuple(WEIGHTS)
"""The default schedule's kinds."""
