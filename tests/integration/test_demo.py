"""The README's main job runs end to end (real ZooKeeper, wire exchange, durable segment store) and says so."""

from __future__ import annotations

from pathlib import Path

import pytest

from segment_store.demo import run_demo


def test_demo_with_fresh_data_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_demo(tmp_path) == 0
    out = capsys.readouterr().out
    assert "registered ephemeral host node /segstore/hosts/demo-" in out
    assert "1 append of 1000 events" in out and "b'event-0'" in out
    assert "100,000 events acknowledged" in out
    assert "read back 100000 events over the wire, first b'event-000000'" in out
    assert "has 100000 rows (one per event)" in out
    assert "all steps passed" in out
