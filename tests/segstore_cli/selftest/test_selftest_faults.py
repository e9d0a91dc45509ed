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


FAULT = re.compile(r"^\s*([\d.]+)s (.*) \(active ([\d.]+)s\)$")
"""A line of the fault log: when it began (s into the run), what it was, how long it was active."""


def faults_matching(report: dict, pattern: str) -> list[tuple[float, float, re.Match[str]]]:
    """``(start, end, match)`` of every fault whose description matches ``pattern``."""
    found = []
    for line in report["fault_log"]:
        fault = FAULT.match(line)
        if fault is not None and (match := re.search(pattern, fault.group(2))):
            start = float(fault.group(1))
            found.append((start, start + float(fault.group(3)), match))
    return found


def across_an_election(report: dict, start: float, end: float) -> bool:
    """Whether a ZooKeeper leader was killed while ``[start, end]`` lasted: the new leader gives every session a
    fresh timeout, so a store stopped or cut off across the election may keep its session (as ZooKeeper means)."""
    kills = faults_matching(report, r"kill -9 the ZooKeeper leader")
    return any(killed < end and start < back for killed, back, _ in kills)


def zombies_fenced(logs: Path, report: dict) -> None:
    """Woken up, each zombie found its session gone (its containers had moved), unless a ZooKeeper election came in
    between."""
    zombies = faults_matching(report, r"zombie (ss\d+)")
    assert zombies, summary(report)
    for name in {m.group(1) for _, _, m in zombies}:
        mine = [(start, end) for start, end, m in zombies if m.group(1) == name]
        expected = sum(1 for start, end in mine if not across_an_election(report, start, end))
        expired = (logs / f"{name}.log").read_text().count("ZooKeeper session lost")
        assert expired >= expected, f"{name}: {expired} session losses, {expected} expected; {summary(report)}"


def long_zookeeper_partitions_expire(logs: Path, report: dict) -> None:
    """A store cut off ZooKeeper well past its 4 s session lost it and stopped its containers (unless a ZooKeeper
    election came in between)."""
    cuts = faults_matching(report, r"partition (ss\d+) from ZooKeeper \((\w+)\) for ([\d.]+)s")
    assert cuts and all(m.group(2) in ("drop", "blackhole") for _, _, m in cuts), summary(report)
    for start, end, found in cuts:
        if float(found.group(3)) > 8 and not across_an_election(report, start, end):
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
