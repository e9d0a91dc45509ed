"""Which Tier-1 a segment store process uses: file ledger logs (the default) or JetStream logs.

The file ledger log keeps each container's log in fsync'd files under ``<data dir>/tier1``:
right for one machine, or hosts sharing one directory. The JetStream log keeps it in a
replicated NATS JetStream stream: a shared-nothing cluster, where losing a host loses no
acknowledged append (see :mod:`segment_store.tier1.jetstream.log`).

Sources, later ones winning: defaults, environment (:meth:`Tier1Config.from_env`), command-line
flags (:func:`add_cli_arguments` + :meth:`Tier1Config.from_cli`).

==================  ================================  ==============================
field               environment                       flag
==================  ================================  ==============================
``backend``         ``SEGSTORE_TIER1``                ``--tier1 {file,jetstream}``
``nats``            ``SEGSTORE_NATS``                 ``--nats URL[,URL...]``
``nats_monitor``    ``SEGSTORE_NATS_MONITOR``         ``--nats-monitor URL[,URL...]``
``nats_tls_ca``     ``SEGSTORE_NATS_TLS_CA``          ``--nats-tls-ca PEM``
``nats_creds``      ``SEGSTORE_NATS_CREDS``           ``--nats-creds FILE``
``replicas``        ``SEGSTORE_TIER1_REPLICAS``       ``--tier1-replicas N``
``stream_prefix``   ``SEGSTORE_TIER1_STREAM_PREFIX``  ``--tier1-stream-prefix P``
``lease_ms``        ``SEGSTORE_TIER1_LEASE_MS``       ``--tier1-lease-ms MS``
==================  ================================  ==============================
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from segment_store.tier1.jetstream.config import JetStreamLogConfig, parse_servers, redacted
from segment_store.tier1.jetstream.sync_check import parse_monitors
from segstore_shared.errors import naming_flags

Backend = Literal["file", "jetstream"]
_ENV = {
    "backend": "SEGSTORE_TIER1",
    "nats": "SEGSTORE_NATS",
    "nats_monitor": "SEGSTORE_NATS_MONITOR",
    "nats_tls_ca": "SEGSTORE_NATS_TLS_CA",
    "nats_creds": "SEGSTORE_NATS_CREDS",
    "replicas": "SEGSTORE_TIER1_REPLICAS",
    "stream_prefix": "SEGSTORE_TIER1_STREAM_PREFIX",
    "lease_ms": "SEGSTORE_TIER1_LEASE_MS",
}
_FLAGS = {"tier1": "backend", "nats": "nats", "nats_monitor": "nats_monitor", "nats_tls_ca": "nats_tls_ca",
          "nats_creds": "nats_creds", "tier1_replicas": "replicas", "tier1_stream_prefix": "stream_prefix",
          "tier1_lease_ms": "lease_ms"}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Tier1Config:
    """The Tier-1 backend and, for JetStream, where NATS is (module docstring)."""

    backend: Backend = "file"
    nats: tuple[str, ...] = ()
    """JetStream: NATS server URLs (``nats://host:4222``); one is enough to reach a cluster."""
    nats_monitor: tuple[str, ...] = ()
    """JetStream: the NATS servers' monitoring endpoints (``http://host:8222``); the segment store asks their
    ``/varz`` at start-up and warns of servers that do not fsync before acknowledging. None given: not checked."""
    nats_tls_ca: str | None = None
    """JetStream: CA certificates (PEM) the NATS servers' TLS certificates must chain to; TLS is on with it or with
    ``tls://`` URLs (then None: the system's trust store)."""
    nats_creds: str | None = None
    """JetStream: a NATS credentials file (``.creds``, the user's JWT and nkey seed as ``nsc`` writes it) to log in
    with; None: no login, or the ``user:password@`` in the URLs."""
    replicas: int | None = None
    """JetStream: replicas of each container's stream; None = 3 when several servers are given, else 1."""
    stream_prefix: str = "segstore-tier1"
    """JetStream: stream names are ``<prefix>-container-<id>`` (lets several clusters share one NATS)."""
    lease_ms: int = 1000
    """File ledgers: the ownership lease (:mod:`segment_store.tier1.file.ledger_log`): one ZooKeeper check covers
    the groups synced in the half lease after it. It assumes a stopped owner's clock runs on (boot time counts a
    suspend, not a hypervisor pause or live migration that stops the guest's clock); 0 makes every group wait for
    a check started after its sync (no clock assumption; one ZooKeeper round trip per group commit)."""

    def __post_init__(self) -> None:
        if self.backend not in ("file", "jetstream"):
            raise ValueError(f"tier1: must be 'file' or 'jetstream', not {self.backend!r}")
        if self.backend == "jetstream" and not self.nats:
            raise ValueError("nats: the JetStream Tier-1 needs NATS server URLs (--nats nats://host:4222,...)")
        if self.nats_tls_ca is not None and not os.path.isfile(self.nats_tls_ca):
            raise ValueError(f"nats_tls_ca: {self.nats_tls_ca}: no such file")
        if self.nats_creds is not None and not os.path.isfile(self.nats_creds):
            raise ValueError(f"nats_creds: {self.nats_creds}: no such file")
        if not 0 <= self.lease_ms <= 60_000:
            raise ValueError(f"tier1_lease_ms: must be between 0 and 60000, not {self.lease_ms}")
        if self.replicas is not None and not 1 <= self.replicas <= 5:
            raise ValueError(f"tier1_replicas: must be between 1 and 5, not {self.replicas}")

    @property
    def effective_replicas(self) -> int:
        if self.replicas is not None:
            return self.replicas
        return 3 if len(self.nats) > 1 else 1

    def jetstream(self) -> JetStreamLogConfig:
        """The JetStream log configuration these settings describe."""
        return JetStreamLogConfig(
            servers=self.nats,
            monitors=self.nats_monitor,
            tls_ca=self.nats_tls_ca,
            creds=self.nats_creds,
            replicas=self.effective_replicas,
            stream_prefix=self.stream_prefix,
        )

    def describe(self) -> str:
        if self.backend == "file":
            return "tier1 file ledgers"
        return f"tier1 JetStream R{self.effective_replicas} on {','.join(redacted(url) for url in self.nats)}"

    @classmethod
    def from_mapping(cls, values: Mapping[str, str]) -> Tier1Config:
        """Build from string values keyed by field name; unknown keys raise ``ValueError`` naming the key."""
        parsed: dict[str, object] = {}
        for key, raw in values.items():
            if key == "backend":
                parsed[key] = raw.strip().lower()
            elif key == "nats":
                parsed[key] = parse_servers(raw)
            elif key == "nats_monitor":
                try:
                    parsed[key] = parse_monitors(raw)
                except ValueError as exc:
                    raise ValueError(f"nats_monitor: {exc}") from None
            elif key in ("replicas", "lease_ms"):
                try:
                    parsed[key] = int(raw)
                except ValueError:
                    raise ValueError(f"tier1_{key}: not a number: {raw!r}") from None
            elif key in ("stream_prefix", "nats_tls_ca", "nats_creds"):
                parsed[key] = raw.strip()
            else:
                raise ValueError(f"{key}: unknown Tier-1 setting")
        return cls(**parsed)  # type: ignore[arg-type]

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Tier1Config:
        env = os.environ if environ is None else environ
        return cls.from_mapping({key: env[name] for key, name in _ENV.items() if env.get(name)})

    @classmethod
    def from_cli(cls, args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> Tier1Config:
        """The environment's settings with the flags of :func:`add_cli_arguments` that were given on top."""
        env = os.environ if environ is None else environ
        values = {key: env[name] for key, name in _ENV.items() if env.get(name)}
        for flag, key in _FLAGS.items():
            value = getattr(args, flag, None)
            if value is not None:
                values[key] = str(value)
        try:
            return cls.from_mapping(values)
        except ValueError as exc:  # "--tier1-lease-ms: ...", not "tier1_lease_ms: ..."
            raise naming_flags(exc, {flag: f"--{flag.replace('_', '-')}" for flag in _FLAGS}) from exc


def add_cli_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the Tier-1 flags (``--tier1``, ``--nats``, ``--nats-monitor``, ``--nats-tls-ca``, ``--nats-creds``,
    ``--tier1-replicas``, ``--tier1-stream-prefix``, ``--tier1-lease-ms``)."""
    group = parser.add_argument_group("Tier-1", "where appends are made durable before they are acknowledged")
    group.add_argument(
        "--tier1",
        choices=("file", "jetstream"),
        help="file ledgers under <data dir>/tier1 (default; one machine or a shared directory) or NATS JetStream "
        "(replicated; a shared-nothing cluster) ($SEGSTORE_TIER1)",
    )
    group.add_argument("--nats", help="JetStream: NATS server URLs, comma-separated ($SEGSTORE_NATS)")
    group.add_argument(
        "--nats-monitor",
        metavar="URL[,URL...]",
        help="JetStream: the NATS servers' monitoring endpoints (http://host:8222), comma-separated: at start-up "
        "their /varz is read and a WARNING names the servers that do not fsync before acknowledging (a NATS "
        "connection cannot tell; default: not checked) ($SEGSTORE_NATS_MONITOR)",
    )
    group.add_argument(
        "--nats-tls-ca",
        metavar="PEM",
        help="JetStream: CA certificates the NATS servers' TLS certificates must chain to; turns TLS on (so do "
        "tls:// URLs, which otherwise trust the system's store) ($SEGSTORE_NATS_TLS_CA)",
    )
    group.add_argument(
        "--nats-creds",
        metavar="FILE",
        help="JetStream: a NATS credentials file (.creds: the user's JWT and nkey seed, as nsc writes it) to log in "
        "with; a user and password can instead be given in the URLs, nats://user:password@host:4222 "
        "($SEGSTORE_NATS_CREDS)",
    )
    group.add_argument(
        "--tier1-replicas",
        type=int,
        help="JetStream: replicas of each container's stream (default 3 with several servers, else 1)",
    )
    group.add_argument("--tier1-stream-prefix", help="JetStream: stream name prefix (default segstore-tier1)")
    group.add_argument(
        "--tier1-lease-ms",
        type=int,
        metavar="MS",
        help="file ledgers: the ownership lease (default 1000): one ZooKeeper check covers the appends synced in "
        "the half lease after it, assuming a stopped owner's clock runs on; 0 checks ownership for every group "
        "commit, safe also when a hypervisor pause or live migration stops the clock ($SEGSTORE_TIER1_LEASE_MS)",
    )
