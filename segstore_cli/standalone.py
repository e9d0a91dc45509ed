"""``segstore standalone``: a whole system on one machine, from one command.

It runs, under ``--data-dir``:

- a ZooKeeper server (child process; its state in ``<data-dir>/zookeeper``),
- one segment store process (child; file Tier-1 in ``<data-dir>/tier1`` or JetStream logs on the NATS
  servers of ``--nats``, filesystem Tier-2 in ``<data-dir>/tier2`` or S3), in cluster mode: it
  registers in ZooKeeper and runs the containers the controller assigns to it,
- the controller, in this process (gRPC on ``--controller-port``).

Invariants: the ready line is printed only once the controller serves and every container is
running on the segment store (a request for any segment is answered, not ``WrongHost``), and it names the
ports really listened on (port 0: the free one each server got); SIGTERM or SIGINT stops the controller, then
the segment store (SIGTERM, so it closes its logs cleanly), then ZooKeeper; a restart on the same data dir
finds every stream and event. If the segment store process dies once it listened, it is started again (with
backoff, on the same ports), as a supervisor would.

Logs, under the data dir: this process's (the controller's) in ``controller.log`` (:data:`LOG_FILE`), the segment
store process's in ``segmentstore.log`` (its stdout and stderr, its whole log at the standalone's ``--log-level``),
ZooKeeper's in ``zookeeper/zookeeper.log``. Only warnings and errors reach the standalone's stderr.

Ports: every fixed port (``--controller-port``, ``--segmentstore-port``, ``--zookeeper-port``, ``--metrics-port``
and the one after it) is checked before anything starts; a taken one stops the start with
:class:`StandalonePortError`, whose message names the flag and the port. A server that fails to listen anyway
(the port was taken since) does the same: the controller here, the segment store process by exiting before it
listens (it reports why: :func:`~segstore_shared.processes.report_status`), which stops the start at once.
Before the check, what a standalone killed on the same data dir left running (its ZooKeeper server, its segment
store process still closing) is killed: it holds the ports. A standalone holds its data dir's lock while it runs:
a second one on the same dir stops at once (:class:`StandaloneInUseError`), killing nothing.

TLS (``tls``): the controller's gRPC port and the segment store's wire port both serve it, with the same
certificate; the controller reaches its segment store over TLS, trusting ``segment_store_tls`` (by default
the standalone's own certificate, or ``--tls-ca`` when client certificates are required, presenting its
certificate then). With TLS the system is advertised by host name, ``localhost`` unless ``advertise_host``
says otherwise: the controller URI is ``tls://localhost:<port>`` and ``getURI`` answers ``localhost``,
because Pravega's Rust-based clients refuse IP addresses as TLS host names.

Authentication (``auth``): off by default (a laptop). With a password file the controller authenticates
every caller and signs delegation tokens; the segment store process checks them with the same key, which it
gets in its environment (``SEGSTORE_AUTH_TOKEN_SIGNING_KEY``). ``segstore standalone --auth-password-file F``
makes a random key for the run unless one is given (tokens then do not outlive a restart: clients get new ones).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from controller.config import AuthConfig, ControllerConfig
from segstore_shared.auth.settings import SIGNING_KEY_ENV
from segstore_shared.auth.tls import TlsConfig, TrustConfig
from segstore_shared.coordination.zookeeper_server import EmbeddedZooKeeper, ZooKeeperConfig, free_port
from segstore_shared.ports import IN_USE, PortClaim, PortInUseError, in_use_line, unavailable
from segstore_shared.processes import die_with_parent_env, kill_orphan, read_status, status_file_env

log = logging.getLogger(__name__)

LOG_FILE = "controller.log"
"""This process's log (the controller's), in the data dir."""

WHAT_METRICS = "the segment store's metrics"
"""The port after ``--metrics-port``, in messages."""


@dataclass(frozen=True, slots=True)
class StandaloneConfig:
    data_dir: Path
    host: str = "127.0.0.1"
    controller_port: int = 9090
    segmentstore_port: int = 12345
    zookeeper_port: int = 0
    """0 = a free port chosen at start."""
    container_count: int = 4
    log_level: str = "info"
    ready_timeout_s: float = 120.0
    storage_args: tuple[str, ...] = ()
    """Tier-1 and Tier-2 flags for the segment store process (``--tier1 jetstream --nats ...``, ``--tier2 s3
    --s3-bucket ...``); none = file ledgers and filesystem under the data dir."""
    cache_size_mb: int | None = None
    """The segment store process's read cache (all its containers together); None = its default (1024)."""
    cache_idle_evict_s: float | None = None
    """Cached data idle this long leaves the segment store's cache (0: only when full); None = its default (30)."""
    tls: TlsConfig | None = None
    """TLS on the controller's and the segment store's ports (one certificate for both); None = plain text."""
    segment_store_tls: TrustConfig | None = None
    """What the controller trusts in its segment store (with ``tls``); None = ``tls.ca_path`` if client
    certificates are required (then presenting ``tls``'s certificate), else the standalone's own certificate."""
    advertise_host: str | None = None
    auth: AuthConfig | None = None
    """Authentication (a password file and the token signing key, which the segment store process gets in its
    environment, never on its command line); None = off."""
    metrics_port: int | None = None
    """The controller's ``/metrics``, ``/healthz`` and ``/readyz`` on this port, the segment store's on the next
    one (0: each a free one); None = no metrics (the default: two more fixed ports would keep a second standalone
    from starting)."""
    metrics_host: str = "127.0.0.1"
    """The address both metrics ports bind."""
    periodic: Mapping[str, float] = field(default_factory=dict)
    """Settings of the controller's periodic work (``ControllerConfig`` field -> value, e.g.
    ``retention_period_s``); missing ones keep their defaults."""
    """The host name in the controller URI and the segment store's registration (what ``getURI`` answers);
    None = ``localhost`` with TLS (the certificate must name it), else ``host``."""

    @property
    def advertised_host(self) -> str:
        if self.advertise_host is not None:
            return self.advertise_host
        return "localhost" if self.tls is not None else self.host

    @property
    def segment_store_trust(self) -> TrustConfig | None:
        """TLS of the controller's connections to the segment store (see ``segment_store_tls``)."""
        if self.tls is None:
            return None
        if self.segment_store_tls is not None:
            return self.segment_store_tls
        tls = self.tls
        if tls.ca_path is not None:
            return TrustConfig(tls.ca_path, cert_path=tls.cert_path, key_path=tls.key_path)
        return TrustConfig(tls.cert_path)


class StandaloneError(RuntimeError):
    """The standalone system could not start."""


class StandaloneInUseError(StandaloneError):
    """The standalone system could not start: what it was told to use is in use (the message names the flag)."""


class StandalonePortError(StandaloneInUseError):
    """The standalone system could not start: a port it was told to listen on is taken (the message names the flag
    and the port: ``--controller-port 9090: address already in use``)."""


class Standalone:
    """The running system; :meth:`start` then :meth:`stop` (or ``async with``)."""

    def __init__(self, config: StandaloneConfig) -> None:
        self.config = config
        self.zookeeper: EmbeddedZooKeeper | None = None
        self.controller: object | None = None
        self._segmentstore: asyncio.subprocess.Process | None = None
        self._segmentstore_ports: dict[str, int] = {}
        """The segment store process's ports, by its flag (``--port``, ``--metrics-port``), once it listened."""
        self._supervisor: asyncio.Task[None] | None = None
        self._stopping = False
        self._lock: IO[str] | None = None
        """The data dir's lock, held while this system runs (another standalone on the dir stops at once)."""

    @property
    def controller_uri(self) -> str:
        """``tcp://host:port``, or with TLS ``tls://localhost:port`` (the advertised host)."""
        scheme = "tls" if self.config.tls is not None else "tcp"
        return f"{scheme}://{self.config.advertised_host}:{self.controller_port}"

    @property
    def controller_port(self) -> int:
        from controller.service import ControllerService

        assert isinstance(self.controller, ControllerService)
        return self.controller.endpoint[1]

    @property
    def segmentstore_endpoint(self) -> tuple[str, int]:
        """Where clients reach the segment store (the advertised host; the port it listens on, once it does)."""
        return self.config.advertised_host, self._segmentstore_ports.get("--port", self.config.segmentstore_port)

    @property
    def controller_metrics_port(self) -> int | None:
        """The port of the controller's ``/metrics`` (None: no metrics, or not started)."""
        from controller.service import ControllerService

        if not isinstance(self.controller, ControllerService) or self.controller.metrics_endpoint is None:
            return None
        return self.controller.metrics_endpoint[1]

    @property
    def port_claims(self) -> list[PortClaim]:
        """The ports the flags name, checked before anything starts (port 0: a free one, nothing to check)."""
        cfg = self.config
        claims = [
            PortClaim("--controller-port", cfg.host, cfg.controller_port),
            PortClaim("--segmentstore-port", cfg.host, cfg.segmentstore_port),
            PortClaim("--zookeeper-port", "127.0.0.1", cfg.zookeeper_port),
        ]
        if cfg.metrics_port:
            claims.append(PortClaim("--metrics-port", cfg.metrics_host, cfg.metrics_port))
            claims.append(
                PortClaim("--metrics-port", cfg.metrics_host, cfg.metrics_port + 1, cfg.metrics_port, WHAT_METRICS)
            )
        return claims

    async def __aenter__(self) -> Standalone:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    async def start(self) -> None:
        """Start everything; StandalonePortError (before anything starts, if it can) naming a taken port's flag,
        StandaloneInUseError if another standalone runs on the data dir, StandaloneError if the segment store process
        exits before it listens (with what it said)."""
        from controller.service import ControllerService

        cfg = self.config
        self._lock_data_dir()
        await asyncio.to_thread(self._kill_orphans)
        problem = unavailable(self.port_claims)
        if problem is not None:
            self._unlock_data_dir()
            claim, why = problem
            raise StandalonePortError(claim.line(why))
        cfg.data_dir.mkdir(parents=True, exist_ok=True)
        self._lock_data_dir()
        zk_port = cfg.zookeeper_port or free_port()
        self.zookeeper = EmbeddedZooKeeper(ZooKeeperConfig(data_dir=cfg.data_dir / "zookeeper", port=zk_port))
        try:
            await asyncio.to_thread(self.zookeeper.start)
            controller_config = ControllerConfig(
                host=cfg.host,
                port=cfg.controller_port,
                advertise_host=cfg.advertised_host,
                zookeeper=self.zookeeper.connect_string,
                container_count=cfg.container_count,
                tls=cfg.tls,
                segment_store_tls=cfg.segment_store_trust,
                auth=cfg.auth,
                **cfg.periodic,  # type: ignore[arg-type]
            )
            self.controller = await ControllerService.start(controller_config, cfg.metrics_port, cfg.metrics_host)
            await self._start_segmentstore()
            await self._await_listening()
            self._supervisor = asyncio.create_task(self._supervise(), name="segmentstore-supervisor")
            await self.controller.wait_for_containers(cfg.ready_timeout_s)
        except PortInUseError as error:  # taken since the check (ZooKeeper, the controller's ports)
            await self.stop()
            raise StandalonePortError(in_use_line(self.port_claims, error)) from None
        except BaseException:
            await self.stop()
            raise

    def _segmentstore_command(self) -> list[str]:
        cfg = self.config
        assert self.zookeeper is not None
        tls: list[str] = []
        if cfg.tls is not None:
            tls = ["--tls-cert", str(cfg.tls.cert_path), "--tls-key", str(cfg.tls.key_path)]
            if cfg.tls.ca_path is not None:
                tls += ["--tls-ca", str(cfg.tls.ca_path)]
        return [
            sys.executable,
            "-m",
            "segstore_cli",
            "segmentstore",
            "--cluster",
            "--host",
            cfg.host,
            "--port",
            str(self.segmentstore_endpoint[1]),
            "--advertise-host",
            cfg.advertised_host,
            *tls,
            "--data-dir",
            str(cfg.data_dir),
            "--zookeeper",
            self.zookeeper.connect_string,
            "--container-count",
            str(cfg.container_count),
            "--log-level",
            cfg.log_level,
            "--log-file",
            "-",  # its whole log on its stderr, which is its log file (with what Python says when it crashes)
            *(["--cache-size-mb", str(cfg.cache_size_mb)] if cfg.cache_size_mb is not None else []),
            *(["--cache-idle-evict-s", str(cfg.cache_idle_evict_s)] if cfg.cache_idle_evict_s is not None else []),
            *self._metrics_flags(),
            *cfg.storage_args,
        ]

    def _metrics_flags(self) -> list[str]:
        port = self.segmentstore_metrics_port
        return [] if port is None else ["--metrics-port", str(port), "--metrics-host", self.config.metrics_host]

    @property
    def segmentstore_metrics_port(self) -> int | None:
        """The segment store process's metrics port: the one after the controller's (with ``metrics_port`` 0, a free
        one: 0 until it listens); None without metrics."""
        learned = self._segmentstore_ports.get("--metrics-port")
        if learned is not None:
            return learned
        port = self.config.metrics_port
        return None if port is None else port + 1 if port else 0

    @property
    def _log_path(self) -> Path:
        return self.config.data_dir / "segmentstore.log"

    @property
    def _status_path(self) -> Path:
        return self.config.data_dir / "segmentstore.status"

    @property
    def _pid_path(self) -> Path:
        return self.config.data_dir / "segmentstore.pid"

    async def _start_segmentstore(self) -> None:
        with open(self._log_path, "ab") as log_file:
            env = status_file_env(self._status_path, die_with_parent_env())
            if self.config.auth is not None:
                env[SIGNING_KEY_ENV] = self.config.auth.token_signing_key
            # A session of its own: a Ctrl-C on the terminal reaches this process only, which stops the segment
            # store (one SIGTERM: a second signal would cut its clean stop short); it dies with this process (env).
            self._segmentstore = await asyncio.create_subprocess_exec(
                *self._segmentstore_command(), stdout=log_file, stderr=log_file, env=env, start_new_session=True
            )
        self._pid_path.write_text(str(self._segmentstore.pid))
        self._pid_path.with_suffix(".parent").write_text(str(os.getpid()))
        log.info("segment store process %d started (log %s)", self._segmentstore.pid, self._log_path)

    def _lock_data_dir(self) -> None:
        """Hold the data dir's lock (if the dir exists: a new one has no other user) for the life of this system;
        StandaloneInUseError if another standalone holds it (it must not lose its ZooKeeper as an "orphan")."""
        if self._lock is not None or not self.config.data_dir.is_dir():
            return
        lock = open(self.config.data_dir / "standalone.lock", "a")  # noqa: SIM115 - held until stop()
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            message = f"--data-dir {self.config.data_dir}: in use by another segstore standalone"
            raise StandaloneInUseError(message) from None
        self._lock = lock

    def _unlock_data_dir(self) -> None:
        lock, self._lock = self._lock, None
        if lock is not None:
            lock.close()  # the lock goes with the file description

    def _kill_orphans(self) -> None:
        """What a standalone killed on this data dir left running holds its ports (and its data): its ZooKeeper
        server, and its segment store process while that still closes (it got SIGTERM as its parent died). Both
        are killed before the ports are checked; a segment store whose standalone still runs is left alone."""
        EmbeddedZooKeeper(ZooKeeperConfig(data_dir=self.config.data_dir / "zookeeper")).kill_orphan()
        data_dir = str(self.config.data_dir).encode()

        def is_orphan(cmdline: Sequence[bytes]) -> bool:
            return b"segmentstore" in cmdline and data_dir in cmdline and not _parent_runs(self._pid_path)

        kill_orphan(self._pid_path, is_orphan, 10.0)

    async def _await_listening(self) -> None:
        """Wait until the segment store process listens and learn its ports (restarts keep them); if it exits first,
        raise what it said (StandalonePortError naming the standalone's flag for a port it could not listen on)."""
        process = self._segmentstore
        assert process is not None
        timeout_s = self.config.ready_timeout_s
        deadline = time.monotonic() + timeout_s
        while True:
            status = read_status(self._status_path)
            if status is not None and status.get("state") == "serving":
                self._segmentstore_ports = {str(flag): int(port) for flag, port in status["ports"].items()}
                return
            if process.returncode is not None:
                raise self._exit_error(process.returncode, status)
            if time.monotonic() > deadline:
                raise StandaloneError(f"segment store process not listening after {timeout_s} s (log {self._log_path})")
            await asyncio.sleep(0.05)

    def _exit_error(self, code: int, status: Mapping[str, object] | None) -> StandaloneError:
        """The error of a segment store process that exited with ``code`` before it listened, from its ``status``."""
        failed = status if status is not None and status.get("state") == "failed" else {}
        said, port = failed.get("line"), failed.get("port")
        claim = next((claim for claim in self.port_claims if claim.port and claim.port == port), None)
        if claim is not None:
            return StandalonePortError(claim.line(str(failed.get("why", IN_USE))))
        if said is not None:
            return StandaloneError(f"segment store process exited with {code}: {said} (log {self._log_path})")
        return StandaloneError(f"segment store process exited with {code} before it listened (log {self._log_path})")

    async def _supervise(self) -> None:
        delay = 1.0
        while not self._stopping:
            process = self._segmentstore
            assert process is not None
            started = time.monotonic()
            code = await process.wait()
            if self._stopping:
                return
            status = read_status(self._status_path)
            said = f" ({status['line']})" if status is not None and status.get("state") == "failed" else ""
            log.error("segment store process %d exited with %s%s; restarting in %.0f s", process.pid, code, said, delay)
            await asyncio.sleep(delay)
            delay = 1.0 if time.monotonic() - started > 60 else min(delay * 2, 30.0)
            if not self._stopping:
                await self._start_segmentstore()

    async def stop(self) -> None:
        from controller.service import ControllerService

        self._stopping = True
        if self._supervisor is not None:
            self._supervisor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._supervisor
            self._supervisor = None
        if isinstance(self.controller, ControllerService):
            await self.controller.stop()
        self.controller = None
        process, self._segmentstore = self._segmentstore, None
        if process is not None and process.returncode is None:
            process.send_signal(signal.SIGTERM)
            try:
                async with asyncio.timeout(30.0):
                    await process.wait()
            except TimeoutError:
                process.kill()
                await process.wait()
        if self.zookeeper is not None:
            await asyncio.to_thread(self.zookeeper.stop)
            self.zookeeper = None
        self._unlock_data_dir()


def _parent_runs(pid_path: Path) -> bool:
    """Whether the process named in ``pid_path`` is still the child of the process that started it (named in the
    ``.parent`` file next to it): an orphan has another parent (init, or a subreaper)."""
    try:
        pid = int(pid_path.read_text().strip())
        started_by = int(pid_path.with_suffix(".parent").read_text().strip())
        parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return False
    return parent == started_by


async def run_standalone(config: StandaloneConfig) -> int:
    """Run until SIGINT/SIGTERM; prints one ready line. Returns the exit code."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    system = Standalone(config)
    try:
        await system.start()
    except StandaloneInUseError as error:  # one line naming the flag (and the port): exit code 2
        print(f"segstore standalone: {error}", file=sys.stderr, flush=True)
        return 2
    except Exception as error:  # reported to the user: exit code 1
        print(f"segstore standalone: failed to start: {error}", file=sys.stderr, flush=True)
        return 1
    assert system.zookeeper is not None
    host, port = system.segmentstore_endpoint
    tls = " (TLS)" if config.tls is not None else ""
    tls += ", authentication on" if config.auth is not None else ""
    if config.metrics_port is not None:
        tls += f", metrics http://{config.metrics_host}:{system.controller_metrics_port}/metrics (controller) and :"
        tls += f"{system.segmentstore_metrics_port} (segment store)"
    print(
        f"segstore standalone ready: controller {system.controller_uri}, segment store {host}:{port}{tls}, "
        f"zookeeper {system.zookeeper.connect_string}, data {config.data_dir} (pid {os.getpid()})",
        flush=True,
    )
    await stop.wait()
    await system.stop()
    return 0
