"""``segstore selftest`` as a user runs it: two minutes of overlapping faults on a real cluster end with no
violation, and a run that loses data on purpose is caught (so a clean report means something), and so is a run
that rolls back a majority of the NATS servers (as a detected rollback: the product refused it)."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from selftest_run import REPO_ROOT, run_selftest

from segstore_cli.main import main

pytestmark = pytest.mark.integration


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_two_minutes_of_faults_lose_nothing(tmp_path: Path) -> None:
    process, report = run_selftest(tmp_path, "--duration", "120", "--tier1", "jetstream", timeout_s=540)
    summary = f"seed {report['seed']}; {report['counts']}; faults {report['fault_log']}; failure {report['failure']}"
    assert process.returncode == 0 and report["ok"], f"{summary}\n{report['examples']}\n{report['crashes']}"
    counts = report["counts"]
    assert sum(report["faults"].values()) >= 6, summary
    assert report["most_faults_at_once"] >= 2, summary  # faults overlapped (default: at most 2 at once)
    assert set(report["fault_seconds"]) == set(report["faults"]), summary
    assert 0 < report["longest_write_stall_s"] < 120, summary
    assert counts["acked"] >= 5_000 and counts["lost"] == 0, summary
    assert counts["read"] >= counts["acked"], summary  # and events written, not acknowledged (a writer failed)
    assert counts["read_txn"] > 0 and report["load"]["tail_read"] > 0, summary
    assert "PASSED" in process.stdout and "longest write stall" in process.stdout


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_run_that_loses_acknowledged_events_fails(tmp_path: Path) -> None:
    process, report = run_selftest(
        tmp_path, "--duration", "25", "--tier2", "fs", "--faults", "lose_data", timeout_s=240
    )  # fmt: skip
    summary = f"seed {report['seed']}; {report['counts']}; faults {report['fault_log']}; failure {report['failure']}"
    assert process.returncode == 1, summary  # the sabotage must be seen
    assert not report["ok"] and report["counts"]["lost"] > 0, summary
    assert "FAILED" in process.stdout and "was acknowledged and is not in the stream" in process.stdout
    assert re.search(r"violations \d+ \(lost \d+", process.stdout), process.stdout  # the kind, while it runs


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_run_whose_nats_majority_is_rolled_back_fails_as_detected_not_lost(tmp_path: Path) -> None:
    """Sabotage: a majority of the NATS servers come back with their stores seconds old. The segment stores refuse
    the shortened Tier-1 logs (the containers stop); the run ends at the first refusal, failed, with the rollbacks
    counted as detected and nothing counted lost (a detected rollback is not a silent loss)."""
    process, report = run_selftest(
        tmp_path, "--duration", "15", "--tier1", "jetstream", "--tier2", "fs", "--faults", "nats_quorum_rollback",
        timeout_s=240,
    )  # fmt: skip
    summary = f"seed {report['seed']}; {report['counts']}; faults {report['fault_log']}; failure {report['failure']}"
    assert process.returncode == 1 and not report["ok"], summary
    assert report["tier1_rollbacks_detected"] > 0 and report["counts"]["lost"] == 0, summary
    assert report["faults"] == {"nats_quorum_rollback": 1}, summary
    assert "Tier-1 rollback detected (refused, not lost)" in report["failure"], summary
    assert all("was rolled back" in line for line in report["rollbacks"]), report["rollbacks"]
    assert "FAILED" in process.stdout and "Tier-1 rollbacks detected" in process.stdout


def test_an_unknown_fault_is_refused_by_name(capfd: pytest.CaptureFixture[str]) -> None:
    assert main(["selftest", "--faults", "kill_segmentstore,kill_everything"]) == 2
    assert "faults: unknown kill_everything" in capfd.readouterr().err


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_ctrl_c_ends_the_run_with_the_report_of_what_was_measured(tmp_path: Path) -> None:
    """An overnight run stopped by hand still says what it found: the report (printed and written) covers the run
    up to the interrupt, which is its failure."""
    report = tmp_path / "report.json"
    command = [sys.executable, "-m", "segstore_cli", "selftest", "--data-dir", str(tmp_path / "cluster"), "--report",
               str(report), "--duration", "120", "--tier2", "fs", "--faults", "kill_controller"]  # fmt: skip
    with subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as run:
        assert run.stdout is not None
        seen = []
        for line in run.stdout:  # the progress line every 10 s, once the faults began
            seen.append(line)
            if line.startswith("10/120 s"):
                break
        else:
            raise AssertionError("".join(seen))
        run.send_signal(signal.SIGINT)
        rest = run.stdout.read()
        assert run.wait(timeout=120) == 130, "".join(seen) + rest  # interrupted, as before: with its report
    written = json.loads(report.read_text())
    assert written["failure"] == "interrupted (Ctrl-C): the report covers the run up to then", written
    assert written["counts"]["acked"] > 0 and not written["ok"], written
    assert "segstore selftest: FAILED" in rest and "interrupted (Ctrl-C)" in rest, rest
