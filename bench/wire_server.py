"""The segment store process of ``bench/wire.py``: started, profiled, stopped, and metered (CPU, disk)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from benchlib import mb_per_s, reset_peak_rss
from wire_stalls import rss_mb

from segstore_shared.coordination.zookeeper_server import free_port
from segstore_shared.processes import die_with_parent_env

CONTAINERS = 4
REPO = Path(__file__).resolve().parent.parent


# ---- the server process ----------------------------------------------------------------------------------
class ServerProcess:
    """``segstore segmentstore`` in a child process on ``root/data``, optionally under a profiler, optionally
    after ``prelude`` (Python run first in the process, importing from ``extra_path`` too: ``bench/wire_ab.py``)."""

    def __init__(
        self,
        root: Path,
        in_memory: bool,
        prelude: str | None = None,
        extra_path: list[str] | None = None,
        extra_args: list[str] | None = None,
    ) -> None:
        """``extra_args``: more ``segstore segmentstore`` flags (``--server-arg``: ``--cache-idle-evict-s=0``)."""
        self.root = root
        self.extra_args = extra_args or []
        self.prelude = prelude
        self.extra_path = extra_path or []
        self.data_dir = root / "data"
        self.in_memory = in_memory
        self.port = free_port()
        self.metrics_port = free_port()
        self.log_path = root / "server.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.children: list[int] = []
        self.starts = 0

    def start(self, cprofile_out: Path | None = None, timeout_s: float = 180.0) -> float:
        """Start and wait for the "ready" line; returns the seconds it took."""
        args = [sys.executable]
        if cprofile_out is not None:
            args += ["-m", "cProfile", "-o", str(cprofile_out)]
        if self.prelude is not None:
            args += ["-c", f"{self.prelude}\nimport runpy\nrunpy.run_module('segstore_cli', run_name='__main__')"]
        else:
            args += ["-m", "segstore_cli"]
        args += ["segmentstore", "--port", str(self.port), "--log-level", "warning"]
        args += ["--container-count", str(CONTAINERS), "--data-dir", str(self.data_dir)]
        args += ["--metrics-port", str(self.metrics_port)]  # /stalls: its event loop's stalls (bench/wire_stalls.py)
        if self.in_memory:
            args.append("--in-memory")
        args += self.extra_args
        path = [str(REPO), *self.extra_path, os.environ.get("PYTHONPATH")]
        env = die_with_parent_env({**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, path))})
        started = time.perf_counter()
        log = self.log_path.open("ab")
        log.write(f"---- start {self.starts}: {' '.join(args)}\n".encode())
        log.flush()
        self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=self.root, env=env)
        log.close()
        self.starts += 1
        while True:
            text = self.log_path.read_text(errors="replace").rsplit("---- start", 1)[-1]
            if "segmentstore ready" in text:
                self.children = [pid for pid in self._child_pids() if not _is_multiprocessing(pid)]
                return time.perf_counter() - started
            if self.proc.poll() is not None or time.perf_counter() - started > timeout_s:
                self.stop()
                raise RuntimeError(f"segment store did not start; its output:\n{text[-3000:]}")
            time.sleep(0.05)

    def stop(self, timeout_s: float = 120.0) -> None:
        """SIGTERM (the server stops cleanly and a profiler writes its file), SIGKILL after ``timeout_s``."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            print(f"warning: segment store pid {proc.pid} ignored SIGTERM for {timeout_s} s; killed", file=sys.stderr)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def _child_pids(self) -> list[int]:
        return [pid for pid in _pids() if _stat(pid) and int(_stat(pid)[1]) == self.pid]

    def helpers(self) -> list[int]:
        """The server's multiprocessing children now: Parquet encoder workers (``SEGSTORE_SLTS_ENCODE_PROCESSES``)
        and their resource tracker."""
        return [pid for pid in self._child_pids() if _is_multiprocessing(pid)]

    def cpu_s(self) -> float:
        """User + system CPU seconds of the server process, all its threads, and of its encoder workers (not
        ZooKeeper's JVM)."""
        return _cpu_s(self.pid) + sum(_cpu_s(pid) for pid in self.helpers())

    def thread_times(self) -> tuple[float, float, float]:
        """``(user, system, waiting)`` seconds so far over the server process's threads now alive: CPU time in user
        and in kernel mode (``stat``), and time runnable but waiting for a CPU (``schedstat``: the run queue)."""
        user = system = waiting = 0.0
        tick = os.sysconf("SC_CLK_TCK")
        for task in Path(f"/proc/{self.pid}/task").iterdir():
            fields = _stat(self.pid, f"{self.pid}/task/{task.name}")
            try:
                waited = int((task / "schedstat").read_text().split()[1])
            except OSError:
                continue  # the thread ended meanwhile
            if not fields:
                continue
            user += int(fields[11]) / tick
            system += int(fields[12]) / tick
            waiting += waited / 1e9
        return user, system, waiting

    def loop_cpu_s(self) -> float:
        """CPU seconds of the server's main thread, which runs its event loop."""
        return _cpu_s(self.pid, f"{self.pid}/task/{self.pid}")

    def memory(self) -> dict[str, float]:
        """RSS now and peak (``VmHWM``) of the server process and of the bench client (this process), the RSS of
        the server's children (the embedded ZooKeeper's JVM) and of its encoder workers (now and peak), in MB."""
        server, client = rss_mb(self.pid), rss_mb(os.getpid())
        return {
            "srv_rss_mb": server.get("rss_mb", 0.0),
            "srv_peak_rss_mb": server.get("peak_rss_mb", 0.0),
            "cli_peak_rss_mb": client.get("peak_rss_mb", 0.0),
            "zk_rss_mb": round(sum(rss_mb(pid).get("rss_mb", 0.0) for pid in self.children), 1),
            "enc_rss_mb": round(sum(rss_mb(pid).get("rss_mb", 0.0) for pid in self.helpers()), 1),
            "enc_peak_rss_mb": round(sum(rss_mb(pid).get("peak_rss_mb", 0.0) for pid in self.helpers()), 1),
        }

    def children_cpu_s(self) -> float:
        """CPU seconds of the server's child processes (the embedded ZooKeeper's JVM)."""
        return sum(_cpu_s(pid) for pid in self.children)

    def io(self, field: str) -> int:
        """A counter of ``/proc/<pid>/io``: ``rchar`` (bytes from read()-like calls, files and sockets),
        ``write_bytes`` (bytes this process sent towards the disk), ..."""
        for line in Path(f"/proc/{self.pid}/io").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
        raise KeyError(field)

    def tier2_disk_bytes(self) -> int:
        return sum(p.stat().st_size for p in (self.data_dir / "tier2").rglob("*") if p.is_file())

    def drop_tier2_page_cache(self) -> None:
        for path in (self.data_dir / "tier2").rglob("*"):
            if path.is_file():
                fd = os.open(path, os.O_RDONLY)
                try:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                finally:
                    os.close(fd)


def _pids() -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]


def _is_multiprocessing(pid: int) -> bool:
    try:
        return b"multiprocessing" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def _stat(pid: int, path: str | None = None) -> list[str]:
    """Fields 3.. of ``/proc/<path or pid>/stat`` (state, ppid, ...), or [] if it is gone."""
    try:
        return Path(f"/proc/{path or pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return []


def _cpu_s(pid: int, path: str | None = None) -> float:
    """User + system CPU seconds of a process (all its threads) or of one thread (``pid/task/tid``)."""
    fields = _stat(pid, path)
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK") if fields else 0.0


def _machine_busy_s() -> float:
    """CPU seconds all processes of the machine spent busy so far (``/proc/stat``, every CPU)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    guest = sum(fields[8:10]) if len(fields) > 9 else 0  # already counted in user and nice
    return (sum(fields) - idle - guest) / os.sysconf("SC_CLK_TCK")


class Meter:
    """Wall time, the CPU time of both processes and the server's disk writes over a span, and the peak RSS of
    the server, its encoder workers and this client within it (each peak is reset when the span begins)."""

    def __init__(self, server: ServerProcess) -> None:
        self._server = server
        for pid in (server.pid, os.getpid(), *server.helpers()):
            reset_peak_rss(pid)
        self.wall = time.perf_counter()
        self.client = time.process_time()
        self.srv = server.cpu_s()
        self.loop = server.loop_cpu_s()
        self.zk = server.children_cpu_s()
        self.machine = _machine_busy_s()
        self.disk = server.io("write_bytes")

    def done(self) -> dict[str, float]:
        wall = time.perf_counter() - self.wall
        server = self._server.cpu_s() - self.srv
        client = time.process_time() - self.client
        zookeeper = self._server.children_cpu_s() - self.zk
        other = _machine_busy_s() - self.machine - server - client - zookeeper
        return {
            "seconds": round(wall, 2),
            "cpu_server": round(server / wall, 2),
            "cpu_server_loop": round((self._server.loop_cpu_s() - self.loop) / wall, 2),
            "cpu_client": round(client / wall, 2),
            "cpu_zookeeper": round(zookeeper / wall, 2),
            "cpu_other": round(max(0.0, other) / wall, 2),
            "disk_write_mb_per_s": mb_per_s(self._server.io("write_bytes") - self.disk, wall),
            **self._server.memory(),
        }
