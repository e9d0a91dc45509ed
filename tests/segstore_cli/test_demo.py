"""The README's main job runs end to end (standalone, Spark write exactly-once, streaming and batch read) and
says so."""

from __future__ import annotations

from pathlib import Path

import pytest

from segstore_cli.demo import ORDERS, run_demo

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_demo_with_fresh_data_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_demo(tmp_path) == 0
    out = capsys.readouterr().out
    assert "segstore standalone ready" in out
    assert f"wrote {ORDERS:,} orders" in out
    assert f"streaming read {ORDERS:,} rows" in out
    assert f"batch read {ORDERS:,} rows" in out
    assert "every order exactly once: True; each customer's orders in order: True" in out
    assert "all steps passed" in out
