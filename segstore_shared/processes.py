"""Child server processes started by segstore itself (ZooKeeper, NATS, SeaweedFS): stop them by pid, find orphans,
read logs, freeze them (:class:`Freezable`).

Invariants: :func:`stop_child` sends SIGTERM, then SIGKILL after ``grace_s``, and returns once the process is
gone (or was already); :func:`kill_child` is a crash (SIGKILL) and also waits; :func:`kill_orphan` kills only a
live process whose command line holds every given marker (a server a crashed owner left running on the same
data directory), never another process that reused the pid.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

PARENT_PID_ENV = "SEGSTORE_DIE_WITH_PARENT"
"""Set by a supervisor (standalone, selftest) in a child's environment: its own pid (:func:`die_with_parent_env`)."""


def die_with_parent_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's environment) for a child that must not outlive this process: the child's
    ``segstore`` command line then calls :func:`honour_parent_death` first thing.

    This replaces a ``preexec_fn``: running Python between fork and exec in a process with threads (gRPC's,
    kazoo's) can deadlock or crash the child (a held malloc or import lock), which a selftest run hit as a
    segmentation fault of the forked child."""
    return {**(os.environ if env is None else env), PARENT_PID_ENV: str(os.getpid())}


def honour_parent_death() -> None:
    """In a child started with :func:`die_with_parent_env`: ask Linux to SIGTERM this process when its parent dies
    (even by kill -9), and exit at once if the parent is gone already (it died before this ran)."""
    expected = os.environ.pop(PARENT_PID_ENV, None)
    if not expected:
        return
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM)
    if str(os.getppid()) != expected:
        raise SystemExit(f"segstore: the process that started this one ({expected}) is gone")


class Freezable:
    """A server in ``self.process`` that can be frozen (SIGSTOP: the kernel still accepts connections, nothing
    answers them: an outage as a client sees a hung server) and thawed."""

    process: subprocess.Popen[bytes] | None
    paused: bool = False

    def pause(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGCONT)
        self.paused = False

    @contextlib.contextmanager
    def outage(self) -> Iterator[None]:
        """Frozen inside the ``with`` block."""
        self.pause()
        try:
            yield
        finally:
            self.resume()


def stop_child(process: subprocess.Popen[bytes] | None, grace_s: float) -> None:
    """SIGTERM, then SIGKILL after ``grace_s``; waits for the process to end. None or ended: nothing to do."""
    if process is None or process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=grace_s)


def kill_child(process: subprocess.Popen[bytes] | None, grace_s: float) -> None:
    """SIGKILL (a crash) and wait for the process to end."""
    if process is not None and process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=grace_s)


def kill_orphan(pid_path: Path, is_ours: Callable[[Sequence[bytes]], bool], grace_s: float) -> None:
    """Kill the process named in ``pid_path`` if it still runs and ``is_ours(its command line)``; wait for it."""
    try:
        pid = int(pid_path.read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError):
        return
    if not is_ours(cmdline):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + grace_s
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)


def log_tail(path: Path, lines: int = 30) -> str:
    """The last ``lines`` lines of a log file, or ``<no log>``."""
    with contextlib.suppress(OSError):
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    return "<no log>"
