"""The self-tester's overlap rule: which faults may be active at once (pure logic, no cluster)."""

from __future__ import annotations

import random
from itertools import permutations

import pytest

from segstore_cli.selftest.fault_kinds import WEIGHTS
from segstore_cli.selftest.overlap import (
    ALONE,
    NEEDS_ZOOKEEPER,
    ZOOKEEPER_DOWN,
    OverlapRule,
    claims_of,
    group_of,
    pick_fault,
)

pytestmark = pytest.mark.unit

STORES = ("ss1", "ss2", "ss3")
CONTROLLERS = ("controller1", "controller2")
NATS = ("nats0", "nats1", "nats2")


def rule(at_once: int = 3) -> OverlapRule:
    return OverlapRule.for_cluster(at_once, segment_stores=3, controllers=2, nats_nodes=3)


def targets(kind: str) -> list[tuple[str, ...]]:
    """The targets of a 3-store, 2-controller, 3-node NATS cluster (as ``FaultSchedule._targets`` lists them)."""
    if kind == "kill_during_recovery":
        return list(permutations(STORES, 2))
    if kind.endswith("segmentstore") or kind.startswith("partition_"):
        return [(s,) for s in STORES]
    if kind.endswith("controller"):
        return [(c,) for c in CONTROLLERS]
    if kind.endswith("nats_node") or kind == "nats_power_loss":
        return [(n,) for n in NATS]
    return [()]


def test_claims_name_the_targets_and_what_a_kind_shares() -> None:
    assert claims_of("kill_segmentstore", ("ss2",)) == {"ss2", NEEDS_ZOOKEEPER}
    assert claims_of("pause_segmentstore", ("ss2",)) == {"ss2"}
    assert claims_of("zombie_segmentstore", ("ss1",)) == {"ss1", NEEDS_ZOOKEEPER}
    assert claims_of("kill_during_recovery", ("ss1", "ss3")) == {"ss1", "ss3", NEEDS_ZOOKEEPER}
    assert claims_of("restart_zookeeper", ()) == {ZOOKEEPER_DOWN, "zookeeper-member"}
    assert claims_of("kill_zookeeper_leader", ()) == {"zookeeper-member"}
    assert claims_of("scale", ()) == claims_of("truncate", ()) == {"stream-op"}
    assert claims_of("lose_data", ()) == claims_of("nats_quorum_rollback", ()) == {ALONE}
    assert claims_of("nats_power_loss", ("nats1",)) == {"nats1"}
    assert claims_of("tier2_disk_full", ()) == claims_of("tier2_outage", ()) == {"tier2"}
    assert [group_of(c) for c in ("ss12", "controller2", "nats0", "tier2")] == ["ss", "controller", "nats", "tier"]


def test_at_most_at_once_faults_are_active() -> None:
    active = [claims_of("kill_segmentstore", ("ss1",)), claims_of("tier2_outage", ())]
    assert rule(3).admits(claims_of("kill_controller", ("controller1",)), active)
    assert not rule(2).admits(claims_of("kill_controller", ("controller1",)), active)
    assert not rule(1).admits(claims_of("scale", ()), active[:1])
    with pytest.raises(ValueError, match="faults_at_once"):
        OverlapRule.for_cluster(0, segment_stores=3, controllers=2, nats_nodes=3)


def test_faults_that_need_zookeeper_overlap_each_other() -> None:
    zombie = [claims_of("zombie_segmentstore", ("ss1",))]
    assert rule().admits(claims_of("kill_segmentstore", ("ss2",)), zombie)
    assert rule().admits(claims_of("kill_controller", ("controller1",)), zombie)


def test_a_process_has_one_fault_at_a_time() -> None:
    paused = [claims_of("pause_segmentstore", ("ss2",))]
    assert not rule().admits(claims_of("kill_segmentstore", ("ss2",)), paused)
    assert rule().admits(claims_of("kill_segmentstore", ("ss3",)), paused)


def test_one_segment_store_always_runs() -> None:
    two_down = [claims_of("kill_segmentstore", ("ss1",)), claims_of("zombie_segmentstore", ("ss2",))]
    assert not rule().admits(claims_of("pause_segmentstore", ("ss3",)), two_down)
    recovery = [claims_of("kill_during_recovery", ("ss1", "ss2"))]
    assert not rule().admits(claims_of("kill_segmentstore", ("ss3",)), recovery)
    assert rule().admits(claims_of("kill_nats_node", ("nats1",)), recovery)


def test_one_controller_always_runs() -> None:
    killed = [claims_of("kill_controller", ("controller1",))]
    assert not rule().admits(claims_of("pause_controller", ("controller2",)), killed)


def test_a_nats_majority_always_runs() -> None:
    one = [claims_of("pause_nats_node", ("nats0",))]
    assert not rule().admits(claims_of("kill_nats_node", ("nats1",)), one)
    assert not rule().admits(claims_of("nats_power_loss", ("nats2",)), one)  # a second store rolled back: a quorum
    assert rule().admits(claims_of("kill_segmentstore", ("ss1",)), one)


def test_a_cluster_without_nats_admits_every_other_fault() -> None:
    """File Tier-1: no NATS node, which must not block the faults of the other processes."""
    no_nats = OverlapRule.for_cluster(2, segment_stores=3, controllers=2, nats_nodes=0)
    assert no_nats.admits(claims_of("zombie_segmentstore", ("ss1",)), [])
    assert no_nats.admits(claims_of("kill_controller", ("controller1",)), [claims_of("scale", ())])


def test_nothing_waiting_for_a_session_to_expire_starts_while_zookeeper_is_down() -> None:
    down = [claims_of("restart_zookeeper", ())]
    assert not rule().admits(claims_of("zombie_segmentstore", ("ss1",)), down)
    assert not rule().admits(claims_of("kill_during_recovery", ("ss1", "ss2")), down)
    assert not rule().admits(claims_of("kill_segmentstore", ("ss1",)), down)  # its restart needs ZooKeeper
    assert not rule().admits(claims_of("kill_controller", ("controller1",)), down)
    assert rule().admits(claims_of("pause_segmentstore", ("ss1",)), down)
    assert rule().admits(claims_of("partition_zookeeper", ("ss1",)), down)


def test_one_stream_operation_and_one_tier2_outage_at_a_time() -> None:
    assert not rule().admits(claims_of("truncate", ()), [claims_of("scale", ())])
    assert not rule().admits(claims_of("tier2_outage", ()), [claims_of("tier2_outage", ())])
    assert not rule().admits(claims_of("tier2_disk_full", ()), [claims_of("tier2_outage", ())])


def test_the_sabotage_runs_alone() -> None:
    assert not rule().admits(claims_of("lose_data", ()), [claims_of("scale", ())])
    assert not rule().admits(claims_of("scale", ()), [claims_of("lose_data", ())])
    assert rule().admits(claims_of("lose_data", ()), [])


def test_picked_faults_never_break_the_rule() -> None:
    """A long random schedule (faults starting and ending in any order) never holds a combination the rule
    refuses, and it does overlap."""
    rng = random.Random(7)
    limits = rule(3)
    active: list[frozenset[str]] = []
    most = 0
    for _ in range(5_000):
        if active and rng.random() < 0.4:
            active.pop(rng.randrange(len(active)))
            continue
        picked = pick_fault(rng, dict(WEIGHTS), targets, limits, active)
        if picked is None:
            assert active  # with nothing active every kind fits
            continue
        claims = claims_of(*picked)
        assert limits.admits(claims, active)
        active.append(claims)
        most = max(most, len(active))
        taken = [c for a in active for c in a]
        shared = [c for c in taken if c != NEEDS_ZOOKEEPER]
        assert len(shared) == len(set(shared))  # nothing claimed twice but the need of ZooKeeper
        assert sum(group_of(c) == "ss" for c in taken) <= 2
        assert sum(group_of(c) == "controller" for c in taken) <= 1
        assert sum(group_of(c) == "nats" for c in taken) <= 1
        assert taken.count("zookeeper-member") <= 1
        assert not (ZOOKEEPER_DOWN in taken and NEEDS_ZOOKEEPER in taken)
    assert most == 3


def test_pick_fault_is_none_when_nothing_fits_and_repeats_with_a_seed() -> None:
    full = [claims_of("lose_data", ())]
    assert pick_fault(random.Random(1), dict(WEIGHTS), targets, rule(), full) is None
    draws = [pick_fault(random.Random(5), dict(WEIGHTS), targets, rule(), []) for _ in range(2)]
    assert draws[0] == draws[1] and draws[0] is not None


def test_kinds_not_started_yet_come_first_so_a_short_run_has_every_kind() -> None:
    """Passing the kinds not started yet as ``first`` (as the schedule does), every kind comes once before any
    kind comes twice, rare ones included; among admitted kinds only (one already active is skipped for now)."""
    rng = random.Random(3)
    started: list[str] = []
    for _ in range(len(WEIGHTS)):
        picked = pick_fault(rng, dict(WEIGHTS), targets, rule(), [], first=set(WEIGHTS) - set(started))
        assert picked is not None
        started.append(picked[0])
    assert sorted(started) == sorted(WEIGHTS)
    zk_down = [claims_of("restart_zookeeper", ())]
    picked = pick_fault(rng, dict(WEIGHTS), targets, rule(), zk_down, first={"kill_segmentstore", "scale"})
    assert picked is not None and picked[0] == "scale"  # a kill needs ZooKeeper up: not admitted now
    draws = [pick_fault(random.Random(seed), dict(WEIGHTS), targets, rule(), []) for seed in range(40)]
    assert len({draw[0] for draw in draws if draw is not None}) > 2  # by weight otherwise
