"""Child server processes started by segstore itself (ZooKeeper, NATS, SeaweedFS): free ports, the launch loop
(:class:`ChildServer`: start, wait until ready, stop), stopping by pid, orphans, logs, freezing (:class:`Freezable`),
and children that die with their parent.

Invariants: :func:`stop_child` sends SIGTERM, then SIGKILL after ``grace_s``, and returns once the process is
gone (or was already); :func:`kill_child` is a crash (SIGKILL) and also waits; :func:`kill_orphan` kills only a
live process whose command line holds every given marker (a server a crashed owner left running on the same
data directory), never another process that reused the pid. :func:`spawn` starts a child in its own session
(a Ctrl-C to this process's group does not reach it), its stdout and stderr appended to a log file.
:meth:`ChildServer.start` returns only once the server is ready, or raises its start error with the log's tail and
leaves no process behind; :meth:`ChildServer.stop` is :func:`stop_child` by the pid it started, idempotent.
"""

from __future__ import annotations

import abc
import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Generic, Protocol, Self, TypeVar

from segstore_shared.ports import PortInUseError, bind_error

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


STATUS_FILE_ENV = "SEGSTORE_STATUS_FILE"
"""Set by a supervisor (standalone) in a child's environment: where the child says how its start went
(:func:`report_status`): the ports it listens on once it serves, or why it stops."""


def status_file_env(path: Path, env: Mapping[str, str]) -> dict[str, str]:
    """``env`` for a child that reports its start to ``path`` (removed now: a status there is the child's)."""
    path.unlink(missing_ok=True)
    return {**env, STATUS_FILE_ENV: str(path)}


def report_status(status: Mapping[str, object]) -> None:
    """In a child started with :func:`status_file_env`: write ``status`` there as JSON, whole (written aside,
    then renamed); elsewhere nothing."""
    path = os.environ.get(STATUS_FILE_ENV)
    if not path:
        return
    aside = f"{path}.{os.getpid()}.tmp"
    with open(aside, "w") as file:
        json.dump(dict(status), file)
    os.replace(aside, path)


def read_status(path: Path) -> dict[str, Any] | None:
    """What the child last reported to ``path`` (None: nothing yet)."""
    try:
        status = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return status if isinstance(status, dict) else None


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


_HANDED_OUT: deque[int] = deque(maxlen=512)
"""The ports :func:`free_port` returned last in this process: the one piece of module state here, because the
kernel may give a just-closed port to the very next ``bind(0)``, and two calls for one command line then collide."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on ``host`` a moment ago and that this process was not given among its last 512
    calls (two calls in a row never return the same port, which the kernel alone does not promise)."""
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            port = int(sock.getsockname()[1])
        if port not in _HANDED_OUT:
            _HANDED_OUT.append(port)
            return port
    raise RuntimeError(f"no free port on {host} that this process was not given already")


def port_is_free(host: str, port: int) -> bool:
    """True when nothing listens on ``host:port`` (so a ``ruok`` answer would be from our server); TIME_WAIT
    leftovers do not count (:func:`segstore_shared.ports.bind_error`)."""
    return bind_error(host, port) is None


def spawn(
    command: Sequence[str],
    log_path: Path,
    *,
    pid_path: Path | None = None,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``command`` in a new session, stdin from /dev/null, stdout and stderr appended to ``log_path``; write
    its pid to ``pid_path`` (for :func:`kill_orphan` after a crash of this process)."""
    log = open(log_path, "ab")  # noqa: SIM115 - handed to the child process
    try:
        process = subprocess.Popen(
            list(command),
            cwd=cwd,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    finally:
        log.close()
    if pid_path is not None:
        pid_path.write_text(str(process.pid))
    return process


class ServerSettings(Protocol):
    """What :class:`ChildServer` reads of its server's settings."""

    @property
    def data_dir(self) -> Path: ...

    @property
    def host(self) -> str: ...

    @property
    def start_timeout_s(self) -> float: ...

    @property
    def stop_grace_s(self) -> float: ...


SettingsT = TypeVar("SettingsT", bound=ServerSettings)


class ChildServer(abc.ABC, Generic[SettingsT]):
    """A server process owned by this object: launched, waited for until ready, stopped by its pid.

    A subclass names its files (``log_name``, ``pid_name``, under ``config.data_dir``), its ``start_error`` (and
    ``port_in_use_error``: both that and a :class:`~segstore_shared.ports.PortInUseError`), and gives
    :meth:`_prepare` (check and write what the server needs, its ports with :meth:`_check_ports_free`; return its
    command line), :meth:`is_ready` and :meth:`describe`. Use from one thread.

    A taken port raises ``port_in_use_error`` before the process starts; if the process exits before it is ready
    and one of its ports is taken then (another process bound it in between), the same.
    """

    log_name: ClassVar[str]
    pid_name: ClassVar[str]
    start_error: ClassVar[type[Exception]]
    port_in_use_error: ClassVar[type[PortInUseError] | None] = None
    """A subclass of ``start_error`` and :class:`PortInUseError`; None: ``start_error`` with the same words."""
    poll_interval_s: ClassVar[float] = 0.1
    """How often :meth:`wait_ready` asks :meth:`is_ready`."""

    def __init__(self, config: SettingsT) -> None:
        self.config = config
        self._process: subprocess.Popen[bytes] | None = None
        self._ports: list[tuple[str, int]] = []

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    @property
    def log_path(self) -> Path:
        return self.config.data_dir / self.log_name

    @property
    def _pid_path(self) -> Path:
        return self.config.data_dir / self.pid_name

    @abc.abstractmethod
    def describe(self) -> str:
        """The server in messages (``ZooKeeper on host:port``)."""

    @abc.abstractmethod
    def is_ready(self) -> bool:
        """True once the server serves."""

    @abc.abstractmethod
    def _prepare(self) -> list[str]:
        """Check and write what the server needs (ports, configuration, an orphan to kill); its command line."""

    def _check_ports_free(self, ports: Iterable[tuple[str, int]]) -> None:
        """Raise the port error naming the first ``(what, port)`` something already listens on; remember the ports
        (a process that exits before it is ready is checked for a port taken in between)."""
        self._ports = list(ports)
        for what, port in self._ports:
            if not port_is_free(self.config.host, port):
                raise self._port_in_use(what, port)

    def _port_in_use(self, what: str, port: int) -> Exception:
        if self.port_in_use_error is not None:
            return self.port_in_use_error(what, self.config.host, port)
        return self.start_error(f"{what} {self.config.host}:{port} is already in use")

    def _kill_orphan(self, is_ours: Callable[[Sequence[bytes]], bool]) -> None:
        """Kill the server a crashed owner left running on this data dir, if ``is_ours(its command line)``."""
        kill_orphan(self._pid_path, is_ours, self.config.stop_grace_s)

    def _is_our_server(self, cmdline: Sequence[bytes]) -> bool:
        """Whether the process a crashed owner left running on this data dir (its pid file) is this server's, to be
        killed before a start (two servers on one data dir corrupt it). Default: never."""
        return False

    def kill_orphan(self) -> None:
        """Kill the server a crashed owner left running on this data dir, if any: it holds the data dir and the
        ports (a command checking its ports first calls this before). :meth:`launch` does it too."""
        if self._process is None:
            self._kill_orphan(self._is_our_server)

    def start(self) -> None:
        """Start the server and wait until it is ready."""
        self.launch()
        self.wait_ready(time.monotonic() + self.config.start_timeout_s)

    def launch(self) -> None:
        """Start the process without waiting for it to be ready (see :meth:`wait_ready`)."""
        if self._process is not None:
            return
        command = self._prepare()
        self._process = spawn(command, self.log_path, pid_path=self._pid_path)

    def wait_ready(self, deadline: float) -> None:
        """Wait (until the ``time.monotonic()`` ``deadline``) until the server is ready; on failure stop and raise."""
        process = self._process
        if process is None:
            raise self.start_error(f"{self.describe()} was not started")
        while time.monotonic() < deadline:
            if process.poll() is not None:
                break
            if self.is_ready():
                return
            time.sleep(self.poll_interval_s)
        exited = process.poll() is not None
        tail = self._log_tail()
        self.stop()
        if exited:  # before it was ready: a port taken since the check is the likely cause
            taken = next(((what, port) for what, port in self._ports if not port_is_free(self.config.host, port)), None)
            if taken is not None:
                raise self._port_in_use(*taken)
        raise self.start_error(f"{self.describe()} did not start; log tail:\n{tail}")

    @property
    def exited(self) -> bool:
        """The process was launched and has exited."""
        return self._process is not None and self._process.poll() is not None

    def _log_tail(self, lines: int = 30) -> str:
        return log_tail(self.log_path, lines)

    def stop(self) -> None:
        """Stop the server process by its pid (SIGTERM, then SIGKILL after a grace period); idempotent."""
        process, self._process = self._process, None
        stop_child(process, self.config.stop_grace_s)

    def kill(self) -> None:
        """SIGKILL the server (crash simulation); its data dir stays as it was."""
        process, self._process = self._process, None
        kill_child(process, self.config.stop_grace_s)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_together(servers: Sequence[ChildServer[Any]]) -> None:
    """Launch every server (members of a cluster serve only once enough of them run), then wait for each, with one
    deadline (the longest start timeout from now); on failure stop every one of them and raise."""
    try:
        for server in servers:
            server.launch()
        deadline = time.monotonic() + max(server.config.start_timeout_s for server in servers)
        pending = list(servers)
        while pending:
            # A member that exits fails the start at once, under its own name (its log, a port taken in between),
            # not as the others' "did not start" when the deadline passes.
            exited = next((server for server in pending if server.exited), None)
            if exited is not None:
                exited.wait_ready(deadline)  # raises: it exited before it was ready
            pending = [server for server in pending if not server.is_ready()]
            if pending and time.monotonic() >= deadline:
                pending[0].wait_ready(deadline)  # raises: the deadline passed
            if pending:
                time.sleep(min(server.poll_interval_s for server in pending))
    except BaseException:
        for server in servers:
            server.stop()
        raise
