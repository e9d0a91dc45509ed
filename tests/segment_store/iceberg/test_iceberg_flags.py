"""The ``--iceberg-*`` flags refuse bad values at start, in one line naming the flag (exit 2), as a user sees it:
``segmentstore``, and ``standalone`` before it starts anything."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--iceberg-tables", "shop"], "--iceberg-tables: 'shop' is not a scope/stream pattern"),
        (["--iceberg-tables", " , "], "--iceberg-tables: give at least one scope/stream pattern"),
        (["--iceberg-catalog", "lake"], "--iceberg-catalog: needs --iceberg-tables"),
        (["--iceberg-tables", "shop/*", "--iceberg-commit-interval-ms", "0"], "commit_interval_ms: must be at least 1"),
        (["--iceberg-tables", "shop/*", "--in-memory"], "--iceberg-tables needs chunk files readers can open"),
    ],
)
def test_segmentstore_with_bad_iceberg_flag_names_it(flags: list[str], message: str, tmp_path: Path) -> None:
    command = [sys.executable, "-m", "segstore_cli", "segmentstore", "--data-dir", str(tmp_path), "--port", "0"]
    refused = subprocess.run([*command, *flags], capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2, refused.stderr
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], refused.stderr


def test_standalone_with_a_bad_iceberg_flag_names_it_before_starting_anything(tmp_path: Path) -> None:
    """``standalone`` checks the ``--iceberg-*`` flags it passes on before it starts ZooKeeper: one line, exit 2,
    nothing started (the data directory holds no ZooKeeper data)."""
    command = [sys.executable, "-m", "segstore_cli", "standalone", "--data-dir", str(tmp_path / "data"),
               "--controller-port", "0", "--segmentstore-port", "0", "--iceberg-tables", "shop"]  # fmt: skip
    refused = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2, refused.stderr
    lines = refused.stderr.strip().splitlines()
    assert lines == ["segstore standalone: --iceberg-tables: 'shop' is not a scope/stream pattern (like 'sales/*' or "
                     "'sales/orders')"], refused.stderr  # fmt: skip
    assert not (tmp_path / "data" / "zookeeper").exists()
