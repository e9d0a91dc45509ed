"""Configuration of the segment client: one frozen dataclass per component, units in the field names."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from segment_store.client.retry import RetryPolicy
from segment_store.protocol import MAX_FRAME_PAYLOAD
from segstore_shared.auth.tls import TrustConfig

KIB = 1024
MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class ConnectionConfig:
    """One TCP connection to a segment store."""

    connect_timeout_ms: int = 5_000
    """Opening the socket and the ``Hello`` exchange together."""
    request_timeout_ms: int = 60_000
    """Default wait for the reply of a request (tail reads pass their own, longer wait)."""
    keepalive_interval_ms: int = 10_000
    """Period of ``KeepAlive`` frames; below the server's idle timeout. 0 disables them."""
    silent_peer_timeout_ms: int = 30_000
    """A connection on which nothing arrives for this long (the server echoes every ``KeepAlive``) is dropped
    as dead: a frozen or unreachable segment store, whose containers move elsewhere. Needs keep-alives; 0 never."""
    delegation_token: str = ""
    """Token sent with every request that carries one (empty: no authentication)."""
    tls: TrustConfig | None = None
    """TLS to the segment stores, trusting what this says (the host name checked is the endpoint's host);
    None = plain text. A certificate problem raises the non-retriable ``TlsError``."""

    def __post_init__(self) -> None:
        if self.connect_timeout_ms <= 0:
            raise ValueError("connect_timeout_ms: must be positive")
        if self.request_timeout_ms <= 0:
            raise ValueError("request_timeout_ms: must be positive")
        if self.keepalive_interval_ms < 0:
            raise ValueError("keepalive_interval_ms: must not be negative")
        if self.silent_peer_timeout_ms < 0:
            raise ValueError("silent_peer_timeout_ms: must not be negative")
        if self.silent_peer_timeout_ms and self.silent_peer_timeout_ms < 2 * self.keepalive_interval_ms:
            raise ValueError("silent_peer_timeout_ms: must be at least two keep-alive intervals (or 0)")


@dataclass(frozen=True, slots=True)
class PoolConfig:
    """Connections kept per segment store endpoint; each connection multiplexes many requests."""

    max_connections_per_endpoint: int = 4
    """A new connection is opened only while every existing one is busy and fewer than this exist."""

    def __post_init__(self) -> None:
        if self.max_connections_per_endpoint < 1:
            raise ValueError("max_connections_per_endpoint: must be at least 1")


@dataclass(frozen=True, slots=True)
class WriterConfig:
    """An append session (one writer id on one segment)."""

    max_block_bytes: int = 512 * KIB
    """Largest append block sent at once (framed events); a single larger write goes alone."""
    max_unacked_bytes: int = 16 * MIB
    """Bytes written but not yet acknowledged; ``write`` waits (backpressure) beyond this."""
    retry: RetryPolicy = field(default_factory=lambda: RetryPolicy(max_attempts=30, max_delay_ms=1_000))
    """Reconnect policy after a lost connection; the counter resets on every acknowledgement."""

    def __post_init__(self) -> None:
        if not 8 < self.max_block_bytes <= MAX_FRAME_PAYLOAD - 64:
            raise ValueError(f"max_block_bytes: must be within 9..{MAX_FRAME_PAYLOAD - 64}")
        if self.max_unacked_bytes < self.max_block_bytes:
            raise ValueError("max_unacked_bytes: must be >= max_block_bytes")


@dataclass(frozen=True, slots=True)
class ReaderConfig:
    """A segment reader."""

    read_request_bytes: int = 1 * MIB
    """``suggested_length`` of each ``ReadSegment``."""
    prefetch_bytes: int = 4 * MIB
    """Bytes of ``ReadSegment`` requests kept in flight ahead of the caller (at least one request)."""
    retry: RetryPolicy = field(default_factory=lambda: RetryPolicy(max_attempts=10, max_delay_ms=1_000))
    """Re-issue policy after a lost connection."""

    def __post_init__(self) -> None:
        if not 0 < self.read_request_bytes <= MAX_FRAME_PAYLOAD - 1024:
            raise ValueError(f"read_request_bytes: must be within 1..{MAX_FRAME_PAYLOAD - 1024}")
        if self.prefetch_bytes < self.read_request_bytes:
            raise ValueError("prefetch_bytes: must be >= read_request_bytes")


@dataclass(frozen=True, slots=True)
class ClientConfig:
    """Everything the client needs; ``from_mapping`` reads flat ``section.key`` settings (file or env);
    ``connection.tls`` takes a trust store path ("" for the system's trust)."""

    connection: ConnectionConfig = field(default_factory=ConnectionConfig)
    pool: PoolConfig = field(default_factory=PoolConfig)
    writer: WriterConfig = field(default_factory=WriterConfig)
    reader: ReaderConfig = field(default_factory=ReaderConfig)
    read_retry: RetryPolicy = field(default_factory=lambda: RetryPolicy(max_attempts=4, max_delay_ms=200))
    """Policy for requests that are safe to repeat (info, attribute and table reads, ``read_segment``)
    when they fail retriably (lost connection, timeout, ``WrongHost``); other requests are not retried."""

    @classmethod
    def from_mapping(cls, settings: Mapping[str, Any]) -> ClientConfig:
        """Build from ``{"connection.request_timeout_ms": 1000, ...}``; an unknown key raises ValueError."""
        sections: dict[str, dict[str, Any]] = {f.name: {} for f in fields(cls) if f.name != "read_retry"}
        for key, value in settings.items():
            section, _, name = key.partition(".")
            if section not in sections or not name:
                raise ValueError(f"{key}: unknown client setting")
            sections[section][name] = value
        built: dict[str, Any] = {}
        for f in fields(cls):
            if f.name not in sections:
                continue
            section_type = type(getattr(cls(), f.name))
            known = {g.name: g for g in fields(section_type)}
            for name, value in sections[f.name].items():
                if name not in known or name == "retry":
                    raise ValueError(f"{f.name}.{name}: unknown client setting")
                default = getattr(section_type(), name)
                if name == "tls":  # a trust store path ("" = the system's trust) or a TrustConfig
                    if not isinstance(value, TrustConfig):
                        value = TrustConfig(Path(value) if value else None)
                    sections[f.name][name] = value
                    continue
                sections[f.name][name] = type(default)(value)
            built[f.name] = section_type(**sections[f.name])
        return cls(**built)
