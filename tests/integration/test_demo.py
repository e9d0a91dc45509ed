"""The README's main job runs end to end (real ZooKeeper, wire exchange) and says so."""

from __future__ import annotations

from pathlib import Path

import pytest

from segment_store.demo import run_demo


def test_demo_with_fresh_data_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_demo(tmp_path) == 0
    out = capsys.readouterr().out
    assert "registered ephemeral host node /segstore/hosts/demo-" in out
    assert "1 append of 1000 events" in out and "b'event-0'" in out
    assert "all steps passed" in out
