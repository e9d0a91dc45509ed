"""The console script answers --help and --version without starting anything."""

from __future__ import annotations

import subprocess
import sys

import pytest

from segment_store import __version__
from segment_store.cli import main


def test_version_with_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"segstore {__version__}"


def test_help_with_no_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 0
    out = capsys.readouterr().out
    assert "usage: segstore" in out and "zookeeper" in out


def test_unknown_command_with_error_exit() -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["no-such-command"])
    assert exit_info.value.code == 2


def test_console_script_with_help() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "segment_store.cli", "--help"], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    assert "segstore" in out and "demo" in out
