"""Configuration of the controller process (frozen dataclasses; defaults written once, next to the field).

:class:`ControllerConfig` is what one process serves and how its background work runs; :class:`AuthConfig` its
authentication settings (used by :mod:`controller.rpc.authentication`). The lowest layer of the controller: it
imports nothing of the controller, only :mod:`segstore_shared` (TLS, authentication defaults).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from segstore_shared.auth.settings import DEFAULT_TOKEN_MAX_LIFETIME_S
from segstore_shared.auth.tls import TlsConfig, TrustConfig


@dataclass(frozen=True, slots=True)
class AuthConfig:
    """The controller's authentication settings."""

    password_file: Path
    token_signing_key: str
    """Shared with every segment store (they verify the delegation tokens signed with it)."""
    token_ttl_s: int = 600
    token_max_lifetime_s: int = DEFAULT_TOKEN_MAX_LIFETIME_S
    """How long after a user logs in the tokens issued to them may still be renewed (0: not past their exp)."""
    cache_ttl_s: float = 60.0
    """How long a successful password check is remembered (per authorization header, never the password)."""
    login_threads: int = 2
    """Threads that run PBKDF2 (off the event loop)."""
    login_queue: int = 64
    """Password checks running or waiting at once; more are answered UNAVAILABLE (clients retry)."""
    login_failures_burst: int = 10
    """Failed (or running) password checks per user and per peer address before more are refused at once..."""
    login_failures_per_s: float = 1.0
    """...and how many a second that allowance grows back (``controller.rpc.login_limits``)."""

    def __post_init__(self) -> None:
        if not self.token_signing_key:
            raise ValueError("token_signing_key: must not be empty when authentication is on")
        for name in ("login_threads", "login_queue", "login_failures_burst"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be at least 1, not {getattr(self, name)}")
        if self.login_failures_per_s <= 0:
            raise ValueError(f"login_failures_per_s: must be positive, not {self.login_failures_per_s}")
        if self.token_ttl_s <= 0:
            raise ValueError(f"token_ttl_s: must be positive, not {self.token_ttl_s}")
        if self.token_max_lifetime_s < 0:
            raise ValueError(f"token_max_lifetime_s: must be >= 0, not {self.token_max_lifetime_s}")


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    """What one controller process serves and how its background work runs."""

    host: str = "127.0.0.1"
    """Address the gRPC server binds."""
    port: int = 9090
    """gRPC port (0 = any free port)."""
    advertise_host: str | None = None
    """Host name clients should use for this controller (getControllerServerList); None = ``host``."""
    zookeeper: str = "127.0.0.1:2181"
    """ZooKeeper connect string (stream metadata, cluster membership, container mapping)."""
    zookeeper_session_timeout_s: float = 10.0
    """ZooKeeper session timeout: how soon after this process dies its buckets (and leadership) move."""
    container_count: int = 4
    """Segment containers in the cluster: fixed for the life of the data (it decides segment placement)."""
    metadata_root: str = "/controller"
    """ZooKeeper path under which stream metadata lives."""
    txn_default_lease_ms: int = 30_000
    """Lease of a transaction whose creator asked for none."""
    txn_max_lease_ms: int = 600_000
    """Largest lease a create or ping may ask for; more is INVALID_ARGUMENT."""
    txn_timeout_check_s: float = 1.0
    """How often open transactions are checked for expired leases (expired ones are aborted)."""
    completed_txn_ttl_s: float = 3_600.0
    """How long the outcome of a committed or aborted transaction stays queryable."""
    retention_period_s: float = 60.0
    """How often retention policies are applied (a stream cut is recorded, then truncation is considered)."""
    auto_scale_period_s: float = 10.0
    """How often segment traffic is checked against auto-scaling policies."""
    watermark_period_s: float = 10.0
    """How often the writers' marks of a stream are turned into its next watermark."""
    txn_scan_period_s: float = 10.0
    """How often the streams this controller owns are scanned for transactions opened through other
    controllers (so their leases are enforced) and for workflows left midway."""
    bucket_count: int = 16
    """Buckets the streams' periodic work is spread over among the controllers: fixed for the life of the
    cluster's metadata (``controller.cluster.buckets``)."""
    auto_scale_cooldown_s: float = 60.0
    """A segment created by a scale is not scaled again before this long."""
    rpc_workers: int = 64
    """Concurrent gRPC calls served at once."""
    tls: TlsConfig | None = None
    """TLS on the gRPC port (with ``ca_path``: client certificates required); None = plain text."""
    segment_store_tls: TrustConfig | None = None
    """TLS to the segment stores: what the controller trusts in them (and presents, if they require client
    certificates); None = plain text. ``segstore controller`` sets it whenever it has TLS itself."""
    auth: AuthConfig | None = None
    """Authentication and authorization of callers, delegation tokens for the segment stores (which then need the
    same signing key); None = off (anyone may do anything, tokens are empty)."""

    def __post_init__(self) -> None:
        if not 0 <= self.port < 65536:
            raise ValueError(f"port: must be within [0, 65535], not {self.port}")
        if self.container_count <= 0:
            raise ValueError("container_count: must be positive")
        if self.txn_default_lease_ms <= 0 or self.txn_max_lease_ms < self.txn_default_lease_ms:
            raise ValueError("txn_default_lease_ms/txn_max_lease_ms: need 0 < default <= max")
        if self.bucket_count <= 0:
            raise ValueError("bucket_count: must be positive")
        names = ("txn_timeout_check_s", "retention_period_s", "auto_scale_period_s", "watermark_period_s")
        for name in (*names, "txn_scan_period_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name}: must be positive")
        if not self.metadata_root.startswith("/"):
            raise ValueError("metadata_root: must be an absolute ZooKeeper path")
        if self.advertise_host is not None and not self.advertise_host.strip():
            raise ValueError("advertise_host: empty")

    @property
    def advertised_host(self) -> str:
        return self.advertise_host or self.host

    @property
    def scheme(self) -> str:
        """The URI scheme clients use: ``tls`` with TLS, else ``tcp``."""
        return "tls" if self.tls is not None else "tcp"
