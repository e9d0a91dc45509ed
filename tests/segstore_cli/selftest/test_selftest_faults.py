"""Each new fault kind alone, as a user runs ``segstore selftest --faults KIND``: every acknowledged event read once,
in order, and the fault did what it says (a zombie's ZooKeeper session expired while it was stopped)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from selftest_run import run_selftest, summary

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def passed(process_returncode: int, report: dict, kind: str, at_least: int) -> None:
    assert process_returncode == 0 and report["ok"], f"{summary(report)}\n{report['examples']}\n{report['crashes']}"
    assert report["faults"].get(kind, 0) >= at_least, summary(report)
    counts = report["counts"]
    assert counts["acked"] > 0 and counts["lost"] == 0 and counts["read"] >= counts["acked"], summary(report)


@pytest.mark.timeout(420)
def test_paused_nats_nodes_lose_nothing(tmp_path: Path) -> None:
    process, report = run_selftest(
        tmp_path, "--duration", "35", "--tier1", "jetstream", "--tier2", "fs", "--faults", "pause_nats_node",
        timeout_s=360,
    )  # fmt: skip
    passed(process.returncode, report, "pause_nats_node", 2)
    assert any("SIGSTOP NATS node" in line for line in report["fault_log"]), summary(report)


@pytest.mark.timeout(420)
@pytest.mark.parametrize("tier1", ["file", "jetstream"])
def test_zombie_segment_stores_are_fenced_and_lose_nothing(tmp_path: Path, tier1: str) -> None:
    process, report = run_selftest(
        tmp_path, "--duration", "35", "--tier1", tier1, "--tier2", "fs", "--faults", "zombie_segmentstore",
        timeout_s=360,
    )  # fmt: skip
    passed(process.returncode, report, "zombie_segmentstore", 2)
    zombies = [m.group(1) for line in report["fault_log"] if (m := re.search(r"zombie (ss\d+)", line))]
    logs = tmp_path / "cluster" / "logs"
    for name in set(zombies):  # woken up, each zombie found its session gone (its containers had moved)
        expired = (logs / f"{name}.log").read_text().count("ZooKeeper session lost")
        assert expired >= zombies.count(name), f"{name}: {expired} session losses; {summary(report)}"


@pytest.mark.timeout(420)
def test_zookeeper_leader_kills_lose_nothing(tmp_path: Path) -> None:
    process, report = run_selftest(
        tmp_path, "--duration", "45", "--zookeeper", "ensemble", "--tier2", "fs", "--faults", "kill_zookeeper_leader",
        timeout_s=360,
    )  # fmt: skip
    passed(process.returncode, report, "kill_zookeeper_leader", 1)  # a member's restart (a JVM) may take 20 s
    assert report["zookeeper"] == "ensemble" and "ZooKeeper ensemble" in process.stdout, summary(report)
    assert all("kill -9 the ZooKeeper leader (server " in line for line in report["fault_log"]), summary(report)


@pytest.mark.timeout(420)
def test_segment_stores_cut_off_zookeeper_are_fenced_and_lose_nothing(tmp_path: Path) -> None:
    process, report = run_selftest(
        tmp_path, "--duration", "40", "--tier1", "file", "--tier2", "fs", "--faults", "partition_zookeeper",
        timeout_s=360,
    )  # fmt: skip
    passed(process.returncode, report, "partition_zookeeper", 2)
    logs = tmp_path / "cluster" / "logs"
    for line in report["fault_log"]:
        found = re.search(r"partition (ss\d+) from ZooKeeper \((drop|blackhole)\) for ([\d.]+)s", line)
        assert found, line
        if float(found.group(3)) > 8:  # well past the 4 s session: it expired, the store stopped its containers
            assert "ZooKeeper session lost" in (logs / f"{found.group(1)}.log").read_text(), summary(report)


@pytest.mark.timeout(420)
def test_segment_stores_cut_off_nats_or_their_clients_lose_nothing(tmp_path: Path) -> None:
    process, report = run_selftest(
        tmp_path, "--duration", "40", "--tier1", "jetstream", "--tier2", "fs", "--faults",
        "partition_nats,partition_clients", timeout_s=360,
    )  # fmt: skip
    assert process.returncode == 0 and report["ok"], f"{summary(report)}\n{report['examples']}\n{report['crashes']}"
    assert sum(report["faults"].values()) >= 3, summary(report)
    for name in ("ss1", "ss2", "ss3"):  # clients reach each store through its proxy: it advertises the proxy's port
        ready = re.search(rb"ready on 127.0.0.1:(\d+) \(cluster mode, registered as 127.0.0.1:(\d+)",
                          (tmp_path / "cluster" / "logs" / f"{name}.log").read_bytes())  # fmt: skip
        assert ready and ready.group(1) != ready.group(2), name
