"""Run a real ZooKeeper server as a child process.

segstore uses ZooKeeper in every run mode. Standalone mode and the tests start
their own server from the ZooKeeper jars that ship inside pyspark
(``<pyspark>/jars/zookeeper-*.jar``), or from Debian's ``zookeeper`` package
when pyspark is absent.

Invariants:
- :meth:`EmbeddedZooKeeper.start` returns only once the server answers the
  ``ruok`` four-letter command with ``imok`` and ``srvr`` reports its mode (it
  serves requests) on its client port, or raises
  :class:`ZooKeeperStartError` (the server's log tail is in the message) and
  leaves no process behind.
- :meth:`EmbeddedZooKeeper.stop` stops the process it started, by its pid
  (SIGTERM, then SIGKILL after a grace period); it is idempotent.
- The server binds the given host only (127.0.0.1 by default) and keeps all of
  its state under ``data_dir``, so a restart on the same directory finds it.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from segment_store.child_process import kill_child, kill_orphan, log_tail, stop_child
from segment_store.errors import SegstoreError

_DEBIAN_ZK_JARS = "/usr/share/java"


class ZooKeeperStartError(SegstoreError):
    """The ZooKeeper server did not come up."""


def find_zookeeper_classpath() -> str:
    """Return a Java classpath holding the ZooKeeper server and its dependencies.

    Raises :class:`ZooKeeperStartError` when no jars are found.
    """
    try:
        import pyspark

        jars = Path(pyspark.__file__).parent / "jars"
        if glob.glob(str(jars / "zookeeper-*.jar")):
            return str(jars / "*")
    except ImportError:
        pass
    if glob.glob(os.path.join(_DEBIAN_ZK_JARS, "zookeeper*.jar")):
        return os.path.join(_DEBIAN_ZK_JARS, "*")
    raise ZooKeeperStartError("no ZooKeeper jars found: install pyspark (pip) or Debian's 'zookeeper' package")


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on ``host`` a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_is_free(host: str, port: int) -> bool:
    """True when nothing listens on ``host:port`` (so a ``ruok`` answer would be from our server)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # ignore TIME_WAIT leftovers
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def four_letter_word(host: str, port: int, word: str, timeout_s: float = 2.0) -> str:
    """Send a ZooKeeper four-letter command and return the reply ('' on connection errors)."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            sock.sendall(word.encode("ascii"))
            chunks = []
            while True:
                data = sock.recv(4096)
                if not data:
                    break
                chunks.append(data)
            return b"".join(chunks).decode("utf-8", "replace")
    except OSError:
        return ""


@dataclass(frozen=True, slots=True)
class ZooKeeperConfig:
    """Settings of an embedded ZooKeeper server."""

    data_dir: Path
    host: str = "127.0.0.1"
    port: int = 2181
    tick_time_ms: int = 500
    max_client_connections: int = 200
    start_timeout_s: float = 60.0
    stop_grace_s: float = 10.0
    java: str = "java"
    heap_mb: int = 256

    def __post_init__(self) -> None:
        if not 0 < self.port < 65536:
            raise ValueError(f"port: {self.port} is not a TCP port")
        if self.start_timeout_s <= 0:
            raise ValueError("start_timeout_s: must be positive")


class EmbeddedZooKeeper:
    """A ZooKeeper server process owned by this object (see module docstring)."""

    def __init__(self, config: ZooKeeperConfig) -> None:
        self.config = config
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def connect_string(self) -> str:
        return f"{self.config.host}:{self.config.port}"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    @property
    def log_path(self) -> Path:
        return self.config.data_dir / "zookeeper.log"

    def _write_config(self) -> Path:
        cfg = self.config
        snapshots = cfg.data_dir / "data"
        snapshots.mkdir(parents=True, exist_ok=True)
        conf = cfg.data_dir / "zoo.cfg"
        conf.write_text(
            "\n".join(
                [
                    f"tickTime={cfg.tick_time_ms}",
                    f"dataDir={snapshots}",
                    f"clientPort={cfg.port}",
                    f"clientPortAddress={cfg.host}",
                    f"maxClientCnxns={cfg.max_client_connections}",
                    "admin.enableServer=false",
                    "4lw.commands.whitelist=ruok,srvr",
                    "autopurge.snapRetainCount=3",
                    "autopurge.purgeInterval=1",
                    "",
                ]
            )
        )
        return conf

    def start(self) -> None:
        """Start the server and wait until it answers ``ruok``."""
        if self._process is not None:
            return
        java = shutil.which(self.config.java)
        if java is None:
            raise ZooKeeperStartError(f"java executable {self.config.java!r} not found (Java 17 is required)")
        self._kill_orphan()
        if not port_is_free(self.config.host, self.config.port):
            raise ZooKeeperStartError(f"port {self.connect_string} is already in use")
        conf = self._write_config()
        cmd = [
            java,
            f"-Xmx{self.config.heap_mb}m",
            "-Dzookeeper.admin.enableServer=false",
            "-cp",
            find_zookeeper_classpath(),
            "org.apache.zookeeper.server.ZooKeeperServerMain",
            str(conf),
        ]
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child process
        try:
            self._process = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
            )
        finally:
            log.close()
        self._pid_path.write_text(str(self._process.pid))
        deadline = time.monotonic() + self.config.start_timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                break
            if self.is_serving():
                return
            time.sleep(0.1)
        tail = self._log_tail()
        self.stop()
        raise ZooKeeperStartError(f"ZooKeeper on {self.connect_string} did not start; log tail:\n{tail}")

    @property
    def _pid_path(self) -> Path:
        return self.config.data_dir / "zookeeper.pid"

    def _kill_orphan(self) -> None:
        """Kill a server a crashed owner left running on this data dir (two servers on one data dir corrupt it).

        Only a live process whose command line runs ZooKeeper with this data dir's ``zoo.cfg`` is killed.
        """
        conf = str(self.config.data_dir / "zoo.cfg").encode()
        kill_orphan(
            self._pid_path,
            lambda cmdline: b"org.apache.zookeeper.server.ZooKeeperServerMain" in cmdline and conf in cmdline,
            self.config.stop_grace_s,
        )

    def is_serving(self) -> bool:
        """True once the server answers ``ruok`` and reports a mode (it serves requests)."""
        host, port = self.config.host, self.config.port
        if four_letter_word(host, port, "ruok", timeout_s=1.0) != "imok":
            return False
        return "Mode:" in four_letter_word(host, port, "srvr", timeout_s=1.0)

    def _log_tail(self, lines: int = 30) -> str:
        return log_tail(self.log_path, lines)

    def stop(self) -> None:
        """Stop the server process by its pid; idempotent."""
        process, self._process = self._process, None
        stop_child(process, self.config.stop_grace_s)

    def kill(self) -> None:
        """SIGKILL the server (crash simulation); the data dir stays as it was."""
        process, self._process = self._process, None
        kill_child(process, self.config.stop_grace_s)

    def __enter__(self) -> EmbeddedZooKeeper:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
