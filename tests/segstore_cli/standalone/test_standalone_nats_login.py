"""A user protects NATS with logins and points the standalone at it: ``segstore nats --auth-config`` (operator
JWTs: users log in with credentials files) and ``segstore standalone --tier1 jetstream --nats URL --nats-creds
FILE`` writes and reads through it; with credentials NATS refuses, the standalone stops at once with one line
that says so."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from nats_credentials import OperatorLogin, operator_login
from official_client import official_read
from standalone_process import StandaloneProcess, stop_process

from controller_client import BlockingStreamManager, ScalingPolicy, StreamConfiguration

pytestmark = [pytest.mark.integration, pytest.mark.slow]

NATS_READY = re.compile(r"segstore nats ready on (?P<url>nats://127\.0\.0\.1:\d+) ")


@pytest.fixture(scope="module")
def login(tmp_path_factory: pytest.TempPathFactory) -> OperatorLogin:
    return operator_login(tmp_path_factory.mktemp("login"))


@pytest.fixture(scope="module")
def nats_url(tmp_path_factory: pytest.TempPathFactory, login: OperatorLogin) -> Iterator[str]:
    data = tmp_path_factory.mktemp("nats")
    command = [sys.executable, "-m", "segstore_cli", "nats", "--data-dir", str(data), "--port", "0",
               "--auth-config", str(login.auth_config)]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               start_new_session=True)  # fmt: skip
    found: list[str] = []
    ready = threading.Event()

    def pump() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            match = NATS_READY.search(line)
            if match and not found:
                found.append(match["url"])
                ready.set()

    threading.Thread(target=pump, daemon=True).start()
    try:
        assert ready.wait(60), "segstore nats did not start"
        yield found[0]
    finally:
        stop_process(process, 30)


def test_the_standalone_writes_and_reads_through_a_nats_that_requires_credentials(
    tmp_path: Path, login: OperatorLogin, nats_url: str
) -> None:
    flags = ("--tier1", "jetstream", "--nats", nats_url, "--nats-creds", str(login.creds))
    with StandaloneProcess(tmp_path / "data", extra_args=flags) as standalone:
        manager = BlockingStreamManager.connect(standalone.controller_uri)
        try:
            manager.create_scope("login")
            manager.create_stream("login", "st", StreamConfiguration(ScalingPolicy.fixed(2)))
            events = [(f"event-{i}".encode(), f"key-{i % 5}") for i in range(500)]
            with manager.create_writer("login", "st") as writer:
                writer.write_events(events).result(60)
        finally:
            manager.close()
        read = official_read(standalone.controller_uri, "login", "st", "reader", len(events))
        assert sorted(read) == sorted(e.decode() for e, _ in events)


def test_credentials_nats_refuses_stop_the_standalone_with_one_line(
    tmp_path: Path, login: OperatorLogin, nats_url: str
) -> None:
    command = [sys.executable, "-m", "segstore_cli", "standalone", "--data-dir", str(tmp_path / "data"),
               "--controller-port", "0", "--segmentstore-port", "0", "--tier1", "jetstream", "--nats", nats_url,
               "--nats-creds", str(login.other_creds)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=240)
    assert done.returncode != 0
    errors = [line for line in done.stderr.splitlines() if line.startswith("segstore standalone:")]
    assert len(errors) == 1, done.stderr
    assert f"NATS at {nats_url} refused the login: nats: 'Authorization Violation'" in errors[0]
    assert "Traceback" not in done.stderr
