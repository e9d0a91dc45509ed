"""The self-tester's rollback watch: the segment stores' logs scanned for refused Tier-1 logs (no cluster)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from segstore_cli.selftest.detections import RollbackDetected, RollbackWatch

pytestmark = pytest.mark.unit

REFUSED = (
    "2026-11-29 09:20:31,155 WARNING segment_store.tier1.jetstream.log: log container-{n} stops at epoch 1: log "
    "container-{n}: stream segstore-tier1-container-{n} ends at sequence 125, but sequence 322 was acknowledged "
    "(recorded in the coordination store); the stream was rolled back\n"
)
RESTART = (
    "2026-11-29 09:20:33,001 ERROR segment_store.containers.registry: container 1: restart failed, retrying in 1.0s: "
    "DataLogCorruptedError('log container-{n}: stream segstore-tier1-container-{n} stored our fence right after "
    "sequence 126, but sequence 322 was acknowledged')\n"
)


def test_each_refused_log_counts_once_and_a_line_being_written_waits(tmp_path: Path) -> None:
    ss1, ss2 = tmp_path / "ss1.log", tmp_path / "ss2.log"
    watch = RollbackWatch({"ss1": ss1, "ss2": ss2, "ss3": tmp_path / "missing.log"})
    ss1.write_text("==== start 1\nlog container-1 initialized at epoch 1\n")
    assert watch.scan() == []
    line = REFUSED.format(n=1)
    with open(ss1, "a") as log:
        log.write(line[:60])  # half written
    assert watch.scan() == []
    with open(ss1, "a") as log:
        log.write(line[60:] + RESTART.format(n=1))
    assert watch.scan() == ["container-1"]
    ss2.write_text(RESTART.format(n=1) + RESTART.format(n=3))  # container-1 again (another store): counted once
    assert watch.scan() == ["container-3"]
    assert watch.scan() == []
    assert sorted(watch.detected) == ["container-1", "container-3"]
    assert watch.detected["container-1"].startswith("ss1: ") and "ends at sequence 125" in watch.detected["container-1"]


def test_the_watch_stops_at_the_first_refusal_and_says_what_ends_the_run(tmp_path: Path) -> None:
    log = tmp_path / "ss1.log"
    log.write_text("nothing yet\n")
    watch = RollbackWatch({"ss1": log})

    async def run() -> None:
        task = asyncio.create_task(watch.run(asyncio.Event(), interval_s=0.01))
        await asyncio.sleep(0.05)
        assert not task.done() and not watch.found.is_set()
        with open(log, "a") as out:
            out.write(REFUSED.format(n=2))
        await asyncio.wait_for(task, 5)
        assert watch.found.is_set()

    asyncio.run(run())
    error = watch.error()
    assert isinstance(error, RollbackDetected)
    assert "Tier-1 rollback detected (refused, not lost): ss1: " in str(error)
    assert "container-2: stream segstore-tier1-container-2 ends at sequence 125" in str(error)
