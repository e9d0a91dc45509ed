"""The system under test of ``bench/e2e.py``: ``segstore standalone`` in a child process, and a meter of
the wall time and the CPU time of every process of a run (client, controller, segment store and its event
loop thread, ZooKeeper, everything else on the machine)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchlib import reset_peak_rss

from controller_client import ControllerClientConfig
from segment_store.client import ClientConfig, ConnectionConfig, SegmentClient
from segment_store.client.tokens import SignedTokens
from segstore_shared.auth.settings import SIGNING_KEY_ENV
from segstore_shared.auth.tls import TrustConfig
from segstore_shared.auth.tokens import TokenSigner
from segstore_shared.coordination.zookeeper_server import free_port
from segstore_shared.processes import die_with_parent_env

READY = "segstore standalone ready"
REPO = Path(__file__).resolve().parent.parent


# ---- the system under test: segstore standalone in a child process ----------------------------------------
def _stat(path: str) -> list[str]:
    """Fields 3.. of ``/proc/<path>/stat`` (state, ppid, ...), or [] if it is gone."""
    try:
        return Path(f"/proc/{path}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return []


def cpu_s(path: str) -> float:
    """User + system CPU seconds of a process (``pid``: all its threads) or a thread (``pid/task/tid``)."""
    fields = _stat(path)
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK") if fields else 0.0


def machine_busy_s() -> float:
    """CPU seconds all processes of the machine spent busy so far (``/proc/stat``, every CPU)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    guest = sum(fields[8:10]) if len(fields) > 9 else 0  # already counted in user and nice
    return (sum(fields) - idle - guest) / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Auth:
    """A user of a standalone with authentication on, and the key its tokens are signed with."""

    user: str
    password: str
    signing_key: str

    def official_client_environment(self) -> dict[str, str]:
        return {
            "pravega_client_auth_method": "Basic",
            "pravega_client_auth_username": self.user,
            "pravega_client_auth_password": self.password,
        }


class Standalone:
    """``segstore standalone`` on ``data_dir`` and free ports; ``start`` waits for its ready line."""

    def __init__(
        self,
        data_dir: Path,
        extra_args: tuple[str, ...] = (),
        trust_store: Path | None = None,
        auth: Auth | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.auth = auth
        """Authentication (its ``--auth-password-file`` is in ``extra_args``): who the clients log in as."""
        self.extra_args = extra_args
        """More ``segstore standalone`` flags (``--tier1 jetstream --nats ...``, ``--tls-cert ... --tls-key ...``)."""
        self.trust_store = trust_store
        """TLS (its flags are in ``extra_args``): the CA file every client trusts; None = plain text."""
        self.controller_port = free_port()
        self.segmentstore_port = free_port()
        self.proc: subprocess.Popen[str] | None = None
        self.output: list[str] = []
        self.segmentstore_pid = 0
        self.container_count = 4  # the standalone's default (segstore_cli/standalone.py)
        self.zookeeper_pid = 0
        self._stop_marks = (0, 0)  # output lines and segment store log bytes when SIGTERM was sent

    @property
    def uri(self) -> str:
        """``tcp://127.0.0.1:PORT``, or with TLS ``tls://localhost:PORT`` (the name the certificate holds)."""
        if self.trust_store is not None:
            return f"tls://localhost:{self.controller_port}"
        return f"tcp://127.0.0.1:{self.controller_port}"

    @property
    def client_config(self) -> ControllerClientConfig | None:
        """Our controller client's settings: the trust store with TLS, the user with authentication, else the
        defaults (None)."""
        if self.trust_store is None and self.auth is None:
            return None
        user, password = (self.auth.user, self.auth.password) if self.auth is not None else (None, None)
        trust_store = str(self.trust_store) if self.trust_store is not None else None
        return ControllerClientConfig(trust_store=trust_store, username=user, password=password)

    def official_manager(self) -> Any:
        """The official client's StreamManager for this system (TLS and credentials from the environment that
        :meth:`start` set)."""
        import pravega_client

        return pravega_client.StreamManager(self.uri, auth_enabled=self.auth is not None)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, timeout_s: float = 180.0) -> float:
        command = [sys.executable, "-m", "segstore_cli", "standalone", "--data-dir", str(self.data_dir),
                   "--controller-port", str(self.controller_port),
                   "--segmentstore-port", str(self.segmentstore_port), *self.extra_args]  # fmt: skip
        path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
        env = die_with_parent_env({**os.environ, "PYTHONPATH": path})  # a bench that crashes leaves nothing running
        if self.trust_store is not None:  # the official client reads its CA file from here when it is made
            os.environ["pravega_client_tls_cert_path"] = str(self.trust_store)  # noqa: SIM112 (its exact name)
        if self.auth is not None:  # the official client's credentials; the standalone's signing key
            os.environ.update(self.auth.official_client_environment())
            env[SIGNING_KEY_ENV] = self.auth.signing_key
        started = time.perf_counter()
        self.proc = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True, env=env
        )
        ready = threading.Event()

        def pump(stdout: Any) -> None:
            for line in stdout:
                self.output.append(line.rstrip())
                if READY in line:
                    ready.set()

        threading.Thread(target=pump, args=(self.proc.stdout,), daemon=True).start()
        while not ready.wait(0.1):
            if self.proc.poll() is not None or time.perf_counter() - started > timeout_s:
                self.stop()
                raise RuntimeError("segstore standalone did not start:\n" + "\n".join(self.output[-40:]))
        self.find_children()
        return time.perf_counter() - started

    def find_children(self) -> None:
        """The segment store (python) and ZooKeeper (java) processes, children of the standalone process."""
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or (fields := _stat(entry.name)) == [] or int(fields[1]) != self.pid:
                continue
            with contextlib.suppress(OSError):
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                if "segmentstore" in cmdline:
                    self.segmentstore_pid = int(entry.name)
                elif "java" in cmdline or "zookeeper" in cmdline.lower():
                    self.zookeeper_pid = int(entry.name)

    def pin(self, cpus: set[int]) -> None:
        """Run every thread of the standalone, the segment store and ZooKeeper on ``cpus`` (threads started
        later inherit it)."""
        for pid in (self.pid, self.segmentstore_pid, self.zookeeper_pid):
            pin_process(pid, cpus)

    async def flush_tier2(self) -> float:
        """Flush every container to Tier-2 (``FlushToStorage``), so the next case does not pay for the backlog
        the one before it left; seconds taken."""
        started = time.perf_counter()
        if self.trust_store is not None:
            endpoint = ("localhost", self.segmentstore_port)
            config = ClientConfig(connection=ConnectionConfig(tls=TrustConfig(self.trust_store)))
        else:
            endpoint, config = ("127.0.0.1", self.segmentstore_port), ClientConfig()
        tokens = SignedTokens(TokenSigner(self.auth.signing_key)) if self.auth is not None else None
        async with SegmentClient(endpoint, config, tokens=tokens) as client:
            for container in range(self.container_count):
                await client.flush_to_storage(container, endpoint)
        return time.perf_counter() - started

    def stop(self, timeout_s: float = 60.0) -> None:
        """SIGTERM (the standalone stops the segment store and ZooKeeper), SIGKILL of its group after ``timeout_s``."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(OSError):
            self._stop_marks = (len(self.output), (self.data_dir / "segmentstore.log").stat().st_size)
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            print(f"warning: standalone pid {proc.pid} ignored SIGTERM for {timeout_s} s; killed", file=sys.stderr)

    def problems(self) -> dict[str, Any]:
        """Warning and error lines of the standalone's output and of the segment store's log, before the
        SIGTERM that ends the run and after it (shutdown)."""
        lines, log_bytes = self._stop_marks
        log = b""
        with contextlib.suppress(OSError):
            log = (self.data_dir / "segmentstore.log").read_bytes()
        texts = {
            "standalone": (self.output[:lines], self.output[lines:]),
            "segmentstore.log": (
                log[:log_bytes].decode(errors="replace").splitlines(),
                log[log_bytes:].decode(errors="replace").splitlines(),
            ),
        }
        found: dict[str, Any] = {}
        for source, (run, shutdown) in texts.items():
            for when, text in (("run", run), ("shutdown", shutdown)):
                bad = [line for line in text if any(w in line for w in _PROBLEM_WORDS)]
                found[f"{source} ({when})"] = {"count": len(bad), "first": bad[:6], "traceback": _first_traceback(text)}
        return found


_PROBLEM_WORDS = (" WARNING ", " ERROR ", "CRITICAL", "Traceback", "Fatal Python error")


def pin_process(pid: int, cpus: set[int]) -> None:
    """Set the CPU affinity of every current thread of ``pid`` (0: this process)."""
    for task in Path(f"/proc/{pid or os.getpid()}/task").iterdir():
        with contextlib.suppress(ProcessLookupError):  # a thread that ended meanwhile
            os.sched_setaffinity(int(task.name), cpus)


def _first_traceback(lines: list[str], limit: int = 80) -> list[str]:
    """The first traceback in ``lines`` (up to the next timestamped log line), so its exception is on record."""
    for start, line in enumerate(lines):
        if line.startswith("Traceback"):
            end = start + 1
            while end < len(lines) and end - start < limit and not lines[end][:4].isdigit():
                end += 1
            return lines[start:end]
    return []


def peak_rss_mb(pid: int) -> float:
    """The peak resident memory (``VmHWM``) of process ``pid`` in MB (0.0 if it is gone)."""
    try:
        for line in Path(f"/proc/{pid or os.getpid()}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return 0.0


class Meter:
    """Wall time and the CPU time of every process of the run over a span, and their peak RSS within it (each
    process's peak is reset when the span begins)."""

    def __init__(self, system: Standalone) -> None:
        self.system = system
        for pid in (os.getpid(), system.pid, system.segmentstore_pid, system.zookeeper_pid):
            reset_peak_rss(pid)
        self.start = self._sample()

    def _sample(self) -> dict[str, float]:
        ss = self.system.segmentstore_pid
        return {
            "wall": time.perf_counter(),
            "client": time.process_time(),
            "controller": cpu_s(str(self.system.pid)),
            "segmentstore": cpu_s(str(ss)),
            "segmentstore_loop": cpu_s(f"{ss}/task/{ss}"),
            "zookeeper": cpu_s(str(self.system.zookeeper_pid)),
            "machine": machine_busy_s(),
        }

    def done(self) -> dict[str, float]:
        end = self._sample()
        d = {k: end[k] - self.start[k] for k in end}
        wall = d.pop("wall")
        other = d.pop("machine") - d["client"] - d["controller"] - d["segmentstore"] - d["zookeeper"]
        system = self.system
        peaks = {"client": 0, "controller": system.pid, "segmentstore": system.segmentstore_pid,
                 "zookeeper": system.zookeeper_pid}  # fmt: skip
        return {"seconds": round(wall, 2), **{f"cpu_{k}": round(v / wall, 2) for k, v in d.items()},
                "cpu_other": round(max(0.0, other) / wall, 2),
                **{f"peak_rss_mb_{k}": peak_rss_mb(pid) for k, pid in peaks.items()}}  # fmt: skip
