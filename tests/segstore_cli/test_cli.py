"""The console script answers --help and --version without starting anything."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from segment_store import __version__
from segstore_cli.main import main

pytestmark = pytest.mark.integration


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
        [sys.executable, "-m", "segstore_cli", "--help"], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    assert "segstore" in out and "demo" in out


def test_segment_store_that_crashes_in_c_leaves_its_python_stacks_in_its_log(tmp_path: Path) -> None:
    from segstore_shared.coordination.zookeeper_server import free_port

    log = tmp_path / "segmentstore.log"
    with open(log, "wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "segstore_cli", "segmentstore", "--in-memory", "--port", str(free_port())],
            stdout=subprocess.PIPE, stderr=stderr, text=True, cwd=tmp_path,  # its log file: ./segstore-data/
        )  # fmt: skip
        try:
            assert process.stdout is not None
            assert "ready" in process.stdout.readline()
            process.send_signal(signal.SIGABRT)  # what a failed check in C code does
            assert process.wait(timeout=30) == -signal.SIGABRT
        finally:
            process.kill()
            process.wait()
    text = log.read_text()
    assert "Fatal Python error: Aborted" in text and 'File "' in text, text[-2000:]


def test_segment_store_cache_size_is_the_process_budget_and_must_be_positive(tmp_path: Path) -> None:
    from segstore_shared.coordination.zookeeper_server import free_port

    command = [sys.executable, "-m", "segstore_cli", "segmentstore", "--in-memory", "--port", str(free_port())]
    process = subprocess.Popen([*command, "--cache-size-mb", "64"], stdout=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert "ready" in line and "cache 64 MiB" in line, line
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    finally:
        process.kill()
        process.wait()
    refused = subprocess.run([*command, "--cache-size-mb", "0"], capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "--cache-size-mb: must be a positive integer, not 0" in refused.stderr


def test_standalone_refuses_a_cache_size_that_is_not_positive(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["standalone", "--cache-size-mb", "-5"])
    assert exit_info.value.code == 2
    assert "--cache-size-mb: must be a positive integer, not -5" in capsys.readouterr().err


def test_python_m_old_cli_path_runs_the_segstore_command() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "segment_store.cli", "--version"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("segstore ")


@pytest.mark.parametrize("value", ["-1", "soon", "nan"])
def test_standalone_refuses_a_cache_idle_eviction_that_is_not_seconds(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["standalone", "--cache-idle-evict-s", value])
    assert exit_info.value.code == 2
    assert "--cache-idle-evict-s: must be a number of seconds" in capsys.readouterr().err


def test_every_segstore_process_allocates_arrow_memory_with_malloc_so_that_an_idle_server_shrinks() -> None:
    # the entry point chooses the allocator before the commands load pyarrow (pyarrow reads it once, at load), so
    # pyarrow's own C++ allocations go through malloc too and malloc_trim returns them (segstore_shared.memory_release)
    script = (
        "import contextlib, os, sys\nfrom segstore_cli.entry import main\nsys.argv = ['segstore', '--help']\n"
        "with contextlib.suppress(SystemExit):\n    main()\n"
        "import pyarrow\nprint(os.environ['ARROW_DEFAULT_MEMORY_POOL'], pyarrow.default_memory_pool().backend_name)"
    )
    env = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "system system"
