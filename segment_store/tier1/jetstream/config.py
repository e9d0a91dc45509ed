"""Configuration of the JetStream Tier-1 log (one frozen dataclass; defaults written once, here)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from nats.js import api

from segment_store.tier1.jetstream.records import HEADER_ROOM
from segstore_shared.coordination.store import validate_path

MIB = 1024 * 1024
_NAME = re.compile(r"^[A-Za-z0-9_-]+$")
_SUBJECT = re.compile(r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$")


def redacted(url: str) -> str:
    """``url`` with the password of its ``user:password@`` (if any) replaced by ``***``, for messages and logs."""
    scheme, sep, rest = url.partition("://")
    user_info, at, host = rest.rpartition("@")
    if not at or ":" not in user_info:
        return url
    return f"{scheme}{sep}{user_info.split(':', 1)[0]}:***@{host}"


def parse_servers(text: str) -> tuple[str, ...]:
    """``nats://h1:4222,nats://h2:4222`` (or ``h1:4222,...``) as a tuple of URLs; raises ``ValueError``."""
    servers = []
    for part in text.split(","):
        url = part.strip()
        if not url:
            continue
        if "://" not in url:
            url = f"nats://{url}"
        scheme, _, rest = url.partition("://")
        if scheme not in ("nats", "tls") or not rest or "/" in rest.rstrip("/"):
            raise ValueError(f"not a NATS server URL: {redacted(part.strip())!r} (expected nats://host:port)")
        servers.append(url)
    if not servers:
        raise ValueError("no NATS server given")
    return tuple(servers)


@dataclass(frozen=True, slots=True)
class JetStreamLogConfig:
    """Settings of :class:`segment_store.tier1.jetstream.log.JetStreamLog`.

    Log ``container-7`` is the JetStream stream ``<stream_prefix>-container-7`` on subject
    ``<subject_prefix>.container-7``; its metadata node is ``<metadata_root>/container-7``.
    """

    servers: tuple[str, ...]
    """NATS server URLs (any node of the cluster; the client learns the others)."""
    monitors: tuple[str, ...] = ()
    """The servers' monitoring endpoints (``http://host:8222``), asked at connect whether the servers fsync before
    they acknowledge (a WARNING names those that do not; :mod:`~segment_store.tier1.jetstream.sync_check`); none:
    not checked (a NATS connection cannot tell)."""
    replicas: int = 3
    """JetStream replicas of each log's stream (Raft group size; a quorum must store an append before its ack)."""
    stream_prefix: str = "segstore-tier1"
    subject_prefix: str = "segstore.tier1"
    metadata_root: str = "/segstore/tier1/jetstream"
    max_append_length_bytes: int = MIB + 8 * 1024
    """Longest accepted append: a 1 MiB data frame plus header room. The servers' ``max_payload`` must hold it
    plus 1 KiB of headers (``segstore nats`` sets 2 MiB)."""
    ack_timeout_s: float = 10.0
    """An append not acknowledged by JetStream within this fails the log (NATS or the stream's quorum is
    unavailable): the container restarts on a new log instance, which recovers what was stored. The time the log
    spends fencing again (``refence_after_s``) does not count: a re-fence waits out the stream's leader election
    (up to ``stream_ready_timeout_s``), as a new log instance would, and fails the log itself if it cannot finish."""
    refence_after_s: float = 2.0
    """An append not acknowledged within this (or one JetStream refused with "no leader" or "wrong last sequence")
    makes the owner fence the log again in place: a new epoch, a new fence, the pending entries JetStream stored
    acknowledged and the others published again, instead of failing the log. Losing a NATS server then costs
    writers the stream's leader election, not a container restart. Below ``ack_timeout_s``, which bounds how long
    an append may wait while the log is open."""
    refence_timeout_s: float = 60.0
    """A re-fence not finished within this fails the log (the container restarts on a new log instance, as without
    re-fencing): its steps have bounds of their own, this one holds whatever step hangs (a coordination call that
    is never answered), so an append never waits for ever."""
    request_timeout_s: float = 5.0
    """One JetStream API request (stream info, fence publish, a read batch, purge)."""
    stream_ready_timeout_s: float = 30.0
    """How long creating a stream or publishing a fence retries while the cluster elects leaders."""
    read_batch_bytes: int = 8 * MIB
    """About how much one read request fetches (JetStream direct get batches)."""
    connect_timeout_s: float = 10.0
    tls_ca: str | None = None
    """CA certificates (PEM) to trust in the NATS servers' TLS certificates; None: the system's trust store. TLS is
    used with ``tls://`` URLs, or when a server requires it."""
    creds: str | None = None
    """A NATS credentials file (``.creds``: the user's JWT and nkey seed, as ``nsc`` writes it) to log in with;
    None: no credentials, or the ``user:password@`` of the URLs."""
    coordination_timeout_s: float = 30.0
    """How long metadata reads/updates retry a lost ZooKeeper connection before giving up."""
    coordination_retry_delay_s: float = 0.05

    def __post_init__(self) -> None:
        if not self.servers:
            raise ValueError("servers: at least one NATS server URL is required")
        if not 1 <= self.replicas <= 5:
            raise ValueError("replicas: must be between 1 and 5 (JetStream's limit)")
        if not _NAME.match(self.stream_prefix):
            raise ValueError(f"stream_prefix: {self.stream_prefix!r} may hold only letters, digits, '-' and '_'")
        if not _SUBJECT.match(self.subject_prefix):
            raise ValueError(f"subject_prefix: {self.subject_prefix!r} is not a literal NATS subject")
        try:
            validate_path(self.metadata_root)
        except ValueError as exc:
            raise ValueError(f"metadata_root: {exc}") from exc
        if self.metadata_root == "/":
            raise ValueError("metadata_root: must not be the root node")
        if not 0 < self.max_append_length_bytes <= 63 * MIB:
            raise ValueError("max_append_length_bytes: must be positive and at most 63 MiB (NATS max_payload)")
        for key in ("ack_timeout_s", "request_timeout_s", "stream_ready_timeout_s", "connect_timeout_s",
                    "coordination_timeout_s", "refence_timeout_s"):  # fmt: skip
            if getattr(self, key) <= 0:
                raise ValueError(f"{key}: must be positive")
        if not 0 < self.refence_after_s < self.ack_timeout_s:
            raise ValueError("refence_after_s: must be positive and below ack_timeout_s")
        if self.read_batch_bytes <= 0:
            raise ValueError("read_batch_bytes: must be positive")
        if not 0 < self.coordination_retry_delay_s <= self.coordination_timeout_s:
            raise ValueError("coordination_retry_delay_s: must be positive and below coordination_timeout_s")

    def stream_name(self, log_name: str) -> str:
        return f"{self.stream_prefix}-{log_name}"

    def subject(self, log_name: str) -> str:
        return f"{self.subject_prefix}.{log_name}"


def stream_config(config: JetStreamLogConfig, log_name: str) -> api.StreamConfig:
    """The JetStream stream of log ``log_name``: file storage, ``replicas`` copies, one subject, messages up to a
    full data frame plus headers, direct gets (pipelined recovery reads), no single-message deletes."""
    return api.StreamConfig(
        name=config.stream_name(log_name),
        description=f"segstore Tier-1 log {log_name}",
        subjects=[config.subject(log_name)],
        storage=api.StorageType.FILE,
        num_replicas=config.replicas,
        retention=api.RetentionPolicy.LIMITS,
        discard=api.DiscardPolicy.OLD,
        max_msg_size=config.max_append_length_bytes + HEADER_ROOM,
        allow_direct=True,
        deny_delete=True,
        deny_purge=False,
    )
