"""A child started by a segstore supervisor dies with it (segstore_shared.processes.die_with_parent_env /
honour_parent_death), without Python code between fork and exec: killed by SIGKILL, the supervisor takes its child
along; a child whose supervisor is gone before it starts exits at once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from segstore_shared.processes import PARENT_PID_ENV, die_with_parent_env

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
CHILD = (
    "from segstore_shared.processes import honour_parent_death\n"
    "honour_parent_death()\n"
    "print('child ready', flush=True)\n"
    "import sys; sys.stdin.read()\n"  # blocks until killed (stdin is a pipe nobody writes)
)
SUPERVISOR = (
    "import subprocess, sys\n"
    "from segstore_shared.processes import die_with_parent_env\n"
    f"child = subprocess.Popen([sys.executable, '-c', {CHILD!r}], env=die_with_parent_env(), stdin=subprocess.PIPE,"
    " stdout=subprocess.PIPE, text=True)\n"
    "print(child.stdout.readline().strip(), child.pid, flush=True)\n"
    "sys.stdin.read()\n"
)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split(")")[-1].split()[0] != "Z"


def test_a_supervisor_killed_with_sigkill_takes_its_child_along() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    supervisor = subprocess.Popen(
        [sys.executable, "-c", SUPERVISOR], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
    )
    assert supervisor.stdout is not None
    ready, pid = supervisor.stdout.readline().rsplit(" ", 1)
    child = int(pid)
    assert ready == "child ready" and alive(child)
    supervisor.send_signal(signal.SIGKILL)
    supervisor.wait(10)
    deadline = time.monotonic() + 10
    while alive(child):
        assert time.monotonic() < deadline, "the child outlived its supervisor"
        time.sleep(0.05)


def test_a_child_whose_supervisor_is_already_gone_exits_at_once() -> None:
    env = {**die_with_parent_env(), "PYTHONPATH": str(REPO), PARENT_PID_ENV: "1"}  # not its parent: "gone"
    done = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode != 0 and "is gone" in done.stderr and "child ready" not in done.stdout
