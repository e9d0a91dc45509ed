"""The new fault kinds together, as a user runs ``segstore selftest --faults KIND,...``: two runs (JetStream Tier-1
with the ZooKeeper ensemble, and file Tier-1) in which every kind asked for happens (the schedule starts each kind
once before repeating any), overlapping, and every acknowledged event is read once, in order; each fault did what it
says (a zombie's ZooKeeper session expired while it was stopped, a NATS node was stopped, a NATS node's store was
rolled back and Raft repaired it (no rollback detected), the ZooKeeper leader was killed, clients reached the stores
through the proxies a partition cuts, Tier-2 writes failed with ENOSPC and were retried)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from selftest_run import run_selftest, summary

pytestmark = [pytest.mark.integration, pytest.mark.slow]

JETSTREAM_KINDS = (
    "pause_nats_node", "nats_power_loss", "zombie_segmentstore", "kill_zookeeper_leader", "partition_zookeeper",
    "partition_nats", "partition_clients",
)  # fmt: skip
FILE_KINDS = ("zombie_segmentstore", "partition_zookeeper", "tier2_disk_full")


def passed(returncode: int, report: dict, kinds: tuple[str, ...]) -> None:
    assert returncode == 0 and report["ok"], f"{summary(report)}\n{report['examples']}\n{report['crashes']}"
    assert set(report["faults"]) == set(kinds), summary(report)  # each kind at least once, no other
    counts = report["counts"]
    assert counts["acked"] > 0 and counts["lost"] == 0 and counts["read"] >= counts["acked"], summary(report)
    assert report["load"]["tail_read"] > 0, summary(report)
    assert report["tier1_rollbacks_detected"] == 0, report["rollbacks"]  # a minority's rollback is repaired


def zombies_fenced(logs: Path, report: dict) -> None:
    """Woken up, each zombie found its session gone (its containers had moved)."""
    zombies = [m.group(1) for line in report["fault_log"] if (m := re.search(r"zombie (ss\d+)", line))]
    assert zombies, summary(report)
    for name in set(zombies):
        expired = (logs / f"{name}.log").read_text().count("ZooKeeper session lost")
        assert expired >= zombies.count(name), f"{name}: {expired} session losses; {summary(report)}"


def long_zookeeper_partitions_expire(logs: Path, report: dict) -> None:
    """A store cut off ZooKeeper well past its 4 s session lost it and stopped its containers."""
    cuts = [
        m
        for line in report["fault_log"]
        if (m := re.search(r"partition (ss\d+) from ZooKeeper \((\w+)\) for ([\d.]+)s", line))
    ]
    assert cuts and all(m.group(2) in ("drop", "blackhole") for m in cuts), summary(report)
    for found in cuts:
        if float(found.group(3)) > 8:
            assert "ZooKeeper session lost" in (logs / f"{found.group(1)}.log").read_text(), summary(report)


@pytest.mark.timeout(600)
def test_new_faults_with_jetstream_and_a_zookeeper_ensemble_lose_nothing(tmp_path: Path) -> None:
    process, report = run_selftest(
        tmp_path, "--duration", "55", "--tier1", "jetstream", "--tier2", "fs", "--zookeeper", "ensemble",
        "--faults", ",".join(JETSTREAM_KINDS), timeout_s=540,
    )  # fmt: skip
    passed(process.returncode, report, JETSTREAM_KINDS)
    logs = tmp_path / "cluster" / "logs"
    assert report["zookeeper"] == "ensemble" and "ZooKeeper ensemble" in process.stdout, summary(report)
    log = report["fault_log"]
    assert any("kill -9 the ZooKeeper leader (server " in line for line in log), summary(report)
    assert any("SIGSTOP NATS node" in line for line in log), summary(report)
    assert any(re.search(r"power loss of NATS node \d: kill -9, its store rolled back", line) for line in log), summary(
        report
    )
    assert any(re.search(r"partition ss\d from NATS \((drop|blackhole)\)", line) for line in log), summary(report)
    assert any(re.search(r"partition ss\d from its clients \((drop|blackhole)\)", line) for line in log), summary(
        report
    )
    zombies_fenced(logs, report)
    long_zookeeper_partitions_expire(logs, report)
    for name in ("ss1", "ss2", "ss3"):  # clients reach each store through its proxy: it advertises the proxy's port
        ready = re.search(rb"ready on 127.0.0.1:(\d+) \(cluster mode, registered as 127.0.0.1:(\d+)",
                          (logs / f"{name}.log").read_bytes())  # fmt: skip
        assert ready and ready.group(1) != ready.group(2), name


@pytest.mark.timeout(420)
def test_zombies_and_zookeeper_partitions_with_file_tier1_lose_nothing(tmp_path: Path) -> None:
    process, report = run_selftest(
        tmp_path, "--duration", "30", "--tier1", "file", "--tier2", "fs", "--faults", ",".join(FILE_KINDS),
        timeout_s=360,
    )  # fmt: skip
    passed(process.returncode, report, FILE_KINDS)
    logs = tmp_path / "cluster" / "logs"
    zombies_fenced(logs, report)
    long_zookeeper_partitions_expire(logs, report)
    assert any("Tier-2 disk full (chunk writes fail with ENOSPC)" in line for line in report["fault_log"])
    refused = sum((logs / f"{name}.log").read_text().count("No space left on device") for name in ("ss1", "ss2", "ss3"))
    assert refused > 0, summary(report)  # the stores did try Tier-2 while it was full, and retried
