"""``segstore admin`` against a controller that is not there, as a user runs it: one line on standard error naming the
URI and what to check, exit code 3, no traceback, within the budget (``--retry-timeout``, 5 s by default)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

from segstore_cli.admin.connection import ADMIN_RETRY_TIMEOUT_S, Connection

pytestmark = pytest.mark.integration

BUDGET_S = 2.0


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_default_budget_answers_a_prompt_in_seconds() -> None:
    assert Connection().retry_timeout_s == ADMIN_RETRY_TIMEOUT_S == 5.0
    assert Connection().client_config().retry_timeout_s == 5.0


def test_scope_list_against_a_closed_port_prints_one_line_and_exits_3() -> None:
    uri = f"tcp://127.0.0.1:{closed_port()}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEGSTORE_")}
    argv = [sys.executable, "-m", "segstore_cli", "admin", "scope", "list", "--controller", uri, "--retry-timeout", "2"]
    started = time.monotonic()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    elapsed = time.monotonic() - started
    assert done.returncode == 3, done
    assert done.stdout == ""
    assert "Traceback" not in done.stderr
    assert done.stderr == (
        f"segstore admin: controller {uri} unreachable after {BUDGET_S:.1f} s: connection refused "
        "(is the controller running, and is the URI right?)\n"
    )
    assert elapsed < 20  # the budget (the message says it was kept), and starting Python on a busy machine
