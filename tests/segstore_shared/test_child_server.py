"""The launch loop every embedded server shares (:class:`segstore_shared.processes.ChildServer`), with a small Python
child: ready once it wrote a file; start errors carry the log's tail and leave no process; stop is SIGTERM, then
SIGKILL; a cluster start stops every member when one fails."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from python_child import ChildConfig, ChildStartError, PythonChild

from segstore_shared.processes import free_port, port_is_free, start_together

pytestmark = pytest.mark.integration


SERVE = "import pathlib, sys, time; print('serving', flush=True); pathlib.Path(sys.argv[1]).touch(); time.sleep(60)"
STUBBORN = (
    "import pathlib, signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "pathlib.Path(sys.argv[1]).touch(); time.sleep(60)"
)
FAIL = "import sys; print('cannot bind', flush=True); sys.exit(3)"


def child(tmp_path: Path, name: str, script: str, **settings: float) -> PythonChild:
    return PythonChild(ChildConfig(tmp_path / name, script, free_port(), **settings))  # type: ignore[arg-type]


def test_start_with_ready_child_then_stop(tmp_path: Path) -> None:
    with child(tmp_path, "a", SERVE) as server:
        process = server._process
        assert process is not None and server.pid == process.pid
        assert (tmp_path / "a" / "child.pid").read_text() == str(server.pid)
        server.start()  # started already: nothing to do
        assert server._process is process
    assert server.pid is None and process.returncode is not None
    assert "serving" in server.log_path.read_text()
    server.stop()  # idempotent


def test_stop_with_child_ignoring_sigterm_kills_it(tmp_path: Path) -> None:
    server = child(tmp_path, "a", STUBBORN, stop_grace_s=0.5)
    server.start()
    process = server._process
    assert process is not None
    server.stop()
    assert process.returncode == -9


def test_start_with_child_that_exits_raises_with_log_tail_and_leaves_nothing(tmp_path: Path) -> None:
    server = child(tmp_path, "a", FAIL)
    with pytest.raises(ChildStartError, match=r"child in a did not start; log tail:\ncannot bind"):
        server.start()
    assert server.pid is None


def test_start_with_child_never_ready_raises_at_the_deadline(tmp_path: Path) -> None:
    server = child(tmp_path, "a", "import time; time.sleep(60)", start_timeout_s=0.5)
    with pytest.raises(ChildStartError, match="did not start"):
        server.start()
    assert server.pid is None


def test_wait_ready_without_launch_raises(tmp_path: Path) -> None:
    with pytest.raises(ChildStartError, match="child in a was not started"):
        child(tmp_path, "a", SERVE).wait_ready(0.0)


def test_launch_with_port_in_use_names_it(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert not port_is_free("127.0.0.1", port)
        server = PythonChild(ChildConfig(tmp_path / "a", SERVE, port))
        with pytest.raises(ChildStartError, match=f"port 127.0.0.1:{port} is already in use"):
            server.launch()
        assert server.pid is None


def test_start_together_with_one_failing_stops_them_all(tmp_path: Path) -> None:
    good, bad = child(tmp_path, "good", SERVE), child(tmp_path, "bad", FAIL)
    with pytest.raises(ChildStartError, match="child in bad"):
        start_together([good, bad])
    assert good.pid is None and bad.pid is None


def test_start_together_with_a_member_exiting_while_another_waits_names_the_one_that_exited(tmp_path: Path) -> None:
    """A member that never gets ready (a cluster node without its peers) is first in the list; the one that exited
    is named at once, not the waiting one at the deadline."""
    waiting = child(tmp_path, "waiting", "import time; time.sleep(60)", start_timeout_s=120)
    bad = child(tmp_path, "bad", FAIL)
    with pytest.raises(ChildStartError, match=r"child in bad did not start; log tail:\ncannot bind"):
        start_together([waiting, bad])
    assert waiting.pid is None and bad.pid is None


def test_kill_is_a_crash(tmp_path: Path) -> None:
    server = child(tmp_path, "a", SERVE)
    server.start()
    process = server._process
    assert process is not None
    server.kill()
    assert process.returncode == -9 and server.pid is None


def test_free_port_never_hands_out_the_same_port_twice_in_a_row() -> None:
    # The kernel may give a just-closed port to the next bind(0): CI once started a standalone with the same
    # port for --controller-port and --segmentstore-port.
    ports = [free_port() for _ in range(300)]
    assert len(set(ports)) == len(ports)
    assert all(port_is_free("127.0.0.1", port) for port in ports[-3:])
