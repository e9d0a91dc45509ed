"""Run a real ZooKeeper server, or an ensemble of them, as child processes.

segstore uses ZooKeeper in every run mode. Standalone mode and the tests start
their own server from the ZooKeeper jars that ship inside pyspark
(``<pyspark>/jars/zookeeper-*.jar``), or from Debian's ``zookeeper`` package
when pyspark is absent. :class:`ZooKeeperEnsemble` runs several servers from
the same jars as one replicated ensemble on one host (each member's config
names every member's peer and election ports; its id is in ``myid``), so
leader election, follower lag and ``sync`` are real.

Invariants:
- :meth:`EmbeddedZooKeeper.start` returns only once the server answers the
  ``ruok`` four-letter command with ``imok`` and ``srvr`` reports its mode (it
  serves requests) on its client port, or raises
  :class:`ZooKeeperStartError` (the server's log tail is in the message) and
  leaves no process behind. An ensemble member serves only while a quorum of
  its ensemble runs: :meth:`ZooKeeperEnsemble.start` launches every member
  before it waits for any.
- :meth:`EmbeddedZooKeeper.stop` stops the process it started, by its pid
  (SIGTERM, then SIGKILL after a grace period); it is idempotent.
- The server binds the given host only (127.0.0.1 by default) and keeps all of
  its state under ``data_dir``, so a restart on the same directory finds it.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import socket
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from segstore_shared.errors import SegstoreError
from segstore_shared.ports import PortInUseError
from segstore_shared.processes import ChildServer, free_port, port_is_free, start_together

__all__ = [
    "EmbeddedZooKeeper",
    "QuorumPeer",
    "ZooKeeperConfig",
    "ZooKeeperEnsemble",
    "ZooKeeperPortInUseError",
    "ZooKeeperStartError",
    "find_zookeeper_classpath",
    "four_letter_word",
    "free_port",
    "port_is_free",
]

_DEBIAN_ZK_JARS = "/usr/share/java"
_STANDALONE_MAIN = "org.apache.zookeeper.server.ZooKeeperServerMain"
_QUORUM_MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"


class ZooKeeperStartError(SegstoreError):
    """The ZooKeeper server did not come up."""


class ZooKeeperPortInUseError(ZooKeeperStartError, PortInUseError):
    """The ZooKeeper server did not come up: one of its ports is taken."""


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
class QuorumPeer:
    """One member of an ensemble as every member's config names it (``server.<id>=host:peer:election``)."""

    server_id: int
    host: str
    client_port: int
    peer_port: int
    """Followers connect to the leader here."""
    election_port: int
    """Leader election."""

    def __post_init__(self) -> None:
        if not 1 <= self.server_id <= 255:
            raise ValueError(f"server_id: {self.server_id} is not within [1, 255]")
        for name in ("client_port", "peer_port", "election_port"):
            port = getattr(self, name)
            if not 0 < port < 65536:
                raise ValueError(f"{name}: {port} is not a TCP port")

    @property
    def config_line(self) -> str:
        return f"server.{self.server_id}={self.host}:{self.peer_port}:{self.election_port}"


@dataclass(frozen=True, slots=True)
class ZooKeeperConfig:
    """Settings of an embedded ZooKeeper server (standalone, or one member of an ensemble)."""

    data_dir: Path
    host: str = "127.0.0.1"
    port: int = 2181
    tick_time_ms: int = 500
    max_client_connections: int = 200
    start_timeout_s: float = 60.0
    stop_grace_s: float = 10.0
    java: str = "java"
    heap_mb: int = 256
    server_id: int | None = None
    """This server's id in ``ensemble`` (written to ``myid``); None for a standalone server."""
    ensemble: tuple[QuorumPeer, ...] = ()
    """Every member of the ensemble, this one included; empty for a standalone server."""
    init_limit_ticks: int = 10
    """Ensemble: ticks a follower may take to connect to and sync with a new leader."""
    sync_limit_ticks: int = 5
    """Ensemble: ticks a follower may lag the leader before it is dropped."""

    def __post_init__(self) -> None:
        if not 0 < self.port < 65536:
            raise ValueError(f"port: {self.port} is not a TCP port")
        if self.start_timeout_s <= 0:
            raise ValueError("start_timeout_s: must be positive")
        if (self.server_id is None) != (not self.ensemble):
            raise ValueError("server_id: needed with ensemble, and only with it")
        if self.ensemble:
            ids = [peer.server_id for peer in self.ensemble]
            if len(set(ids)) != len(ids):
                raise ValueError(f"ensemble: server ids {ids} repeat")
            me = self.member
            if me is None:
                raise ValueError(f"server_id: {self.server_id} is not in the ensemble {ids}")
            if (me.host, me.client_port) != (self.host, self.port):
                raise ValueError(f"ensemble: member {self.server_id} is {me.host}:{me.client_port}, not host:port")
        if self.init_limit_ticks < 1 or self.sync_limit_ticks < 1:
            raise ValueError("init_limit_ticks/sync_limit_ticks: must be positive")

    @property
    def member(self) -> QuorumPeer | None:
        """This server's entry in ``ensemble`` (None for a standalone server)."""
        return next((peer for peer in self.ensemble if peer.server_id == self.server_id), None)


class EmbeddedZooKeeper(ChildServer[ZooKeeperConfig]):
    """A ZooKeeper server process owned by this object (see module docstring); :meth:`start` returns once it serves
    (an ensemble member: once a quorum runs)."""

    log_name = "zookeeper.log"
    pid_name = "zookeeper.pid"
    start_error = ZooKeeperStartError
    port_in_use_error = ZooKeeperPortInUseError

    @property
    def connect_string(self) -> str:
        return f"{self.config.host}:{self.config.port}"

    def describe(self) -> str:
        return f"ZooKeeper on {self.connect_string}"

    def _write_config(self) -> Path:
        cfg = self.config
        snapshots = cfg.data_dir / "data"
        snapshots.mkdir(parents=True, exist_ok=True)
        lines = [
            f"tickTime={cfg.tick_time_ms}",
            f"dataDir={snapshots}",
            f"clientPort={cfg.port}",
            f"clientPortAddress={cfg.host}",
            f"maxClientCnxns={cfg.max_client_connections}",
            "admin.enableServer=false",
            "4lw.commands.whitelist=ruok,srvr",
            "autopurge.snapRetainCount=3",
            "autopurge.purgeInterval=1",
        ]
        if cfg.ensemble:
            (snapshots / "myid").write_text(f"{cfg.server_id}\n")
            lines += [f"initLimit={cfg.init_limit_ticks}", f"syncLimit={cfg.sync_limit_ticks}"]
            lines += [peer.config_line for peer in cfg.ensemble]
        conf = cfg.data_dir / "zoo.cfg"
        conf.write_text("\n".join([*lines, ""]))
        return conf

    def _prepare(self) -> list[str]:
        java = shutil.which(self.config.java)
        if java is None:
            raise ZooKeeperStartError(f"java executable {self.config.java!r} not found (Java 17 is required)")
        self._kill_orphan(self._is_our_server)
        member = self.config.member
        ports = [self.config.port] + ([member.peer_port, member.election_port] if member is not None else [])
        self._check_ports_free(("port", port) for port in ports)
        conf = self._write_config()
        main = _QUORUM_MAIN if member is not None else _STANDALONE_MAIN
        return [
            java,
            f"-Xmx{self.config.heap_mb}m",
            "-Dzookeeper.admin.enableServer=false",
            "-cp",
            find_zookeeper_classpath(),
            main,
            str(conf),
        ]

    def _is_our_server(self, cmdline: Sequence[bytes]) -> bool:
        """Whether a process a crashed owner left running on this data dir is ours to kill (two servers on one data
        dir corrupt it): only one that runs ZooKeeper with this data dir's ``zoo.cfg``."""
        conf = str(self.config.data_dir / "zoo.cfg").encode()
        return any(main.encode() in cmdline for main in (_STANDALONE_MAIN, _QUORUM_MAIN)) and conf in cmdline

    def is_ready(self) -> bool:
        """What :meth:`start` waits for: :meth:`is_serving`."""
        return self.is_serving()

    def is_serving(self) -> bool:
        """True once the server answers ``ruok`` and reports a mode (it serves requests)."""
        if four_letter_word(self.config.host, self.config.port, "ruok", timeout_s=1.0) != "imok":
            return False
        return self.mode() is not None

    def mode(self) -> str | None:
        """What ``srvr`` reports: ``standalone``, ``leader`` or ``follower``; None while it does not serve
        (not running, or an ensemble member without a quorum)."""
        reply = four_letter_word(self.config.host, self.config.port, "srvr", timeout_s=1.0)
        found = re.search(r"^Mode: (\w+)", reply, re.MULTILINE)
        return found.group(1) if found else None


@dataclass
class ZooKeeperEnsemble:
    """Several ZooKeeper servers replicating one tree on one host (tests; a quorum must run to serve)."""

    members: list[EmbeddedZooKeeper] = field(default_factory=list)

    @classmethod
    def on_free_ports(cls, base_dir: Path, size: int = 3, *, host: str = "127.0.0.1") -> ZooKeeperEnsemble:
        """An ensemble of ``size`` members (ids 1..size) under ``base_dir/zk<id>``, not started."""
        if size < 2:
            raise ValueError("size: an ensemble needs at least two members (one is a standalone server)")
        ports: list[int] = []
        while len(ports) < 3 * size:  # client, peer and election port of each member, all different
            port = free_port(host)
            if port not in ports:
                ports.append(port)
        triples = [ports[i : i + 3] for i in range(0, len(ports), 3)]
        peers = tuple(
            QuorumPeer(server_id, host, client, peer_port=peer, election_port=election)
            for server_id, (client, peer, election) in enumerate(triples, start=1)
        )
        return cls(
            [
                EmbeddedZooKeeper(
                    ZooKeeperConfig(
                        data_dir=base_dir / f"zk{peer.server_id}",
                        host=host,
                        port=peer.client_port,
                        server_id=peer.server_id,
                        ensemble=peers,
                    )
                )
                for peer in peers
            ]
        )

    @property
    def connect_string(self) -> str:
        """Every member's client address, comma-separated (a client moves to another when one fails)."""
        return ",".join(member.connect_string for member in self.members)

    def start(self, members: Sequence[EmbeddedZooKeeper] | None = None) -> None:
        """Launch the given members (default all: a member serves only once a quorum runs), then wait for each to
        serve; on failure stop those members (and only those: the others may serve on as a quorum)."""
        start_together(list(members) if members is not None else self.members)

    def leader(self) -> EmbeddedZooKeeper | None:
        """The member that reports itself leader now (None during an election)."""
        return next((member for member in self.members if member.mode() == "leader"), None)

    def stop(self) -> None:
        for member in self.members:
            member.stop()

    def __enter__(self) -> ZooKeeperEnsemble:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
