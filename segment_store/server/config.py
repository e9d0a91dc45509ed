"""Configuration of the segment store's wire server."""

from __future__ import annotations

from dataclasses import dataclass, field

from segstore_shared.auth.tls import TlsConfig

MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """Listener, flow control and timeouts of the wire server (Pravega's ``ServiceConfig`` subset)."""

    host: str = "127.0.0.1"
    port: int = 12345
    """0 picks a free port (tests)."""
    max_connections: int = 1024
    connection_high_watermark_bytes: int = 16 * MIB
    """A connection stops reading its socket while this many append bytes are unacknowledged..."""
    connection_low_watermark_bytes: int = 8 * MIB
    """...and resumes below this."""
    process_high_watermark_bytes: int = 512 * MIB
    """All connections together: above this every connection that adds more pauses..."""
    process_low_watermark_bytes: int = 256 * MIB
    """...until the total drops below this."""
    write_buffer_high_bytes: int = 8 * MIB
    """A connection whose peer does not read our replies stops reading requests beyond this much backlog."""
    max_concurrent_requests: int = 32
    """Requests (other than appends) of one connection handled at once; the rest wait in order."""
    max_queued_requests: int = 1024
    """Above this many waiting requests the connection stops reading its socket."""
    idle_timeout_s: float = 120.0
    """A connection that sends nothing (not even KeepAlive) for this long is closed."""
    read_tail_wait_s: float = 30.0
    """A ReadSegment at the tail of an open segment waits this long for data (then answers empty, at tail)."""
    max_read_bytes: int = 8 * MIB
    """Largest SegmentRead reply (a larger suggested length is cut)."""
    max_table_reply_bytes: int = 8 * MIB
    tls: TlsConfig | None = None
    """TLS from the first byte on ``port`` (no plain text then); None = plain text."""
    tls_handshake_timeout_s: float = 10.0
    """A TLS handshake not done within this long is aborted (it counts against ``max_connections`` meanwhile)."""
    auth_token_signing_key: str | None = field(default=None, repr=False)
    """The key the controller signs delegation tokens with: every command's token is checked (``token_gate``);
    None = authentication off (tokens are ignored). Never logged."""

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port: {self.port} outside [0, 65535]")
        if self.max_connections < 1:
            raise ValueError("max_connections: must be at least 1")
        if not 0 < self.connection_low_watermark_bytes < self.connection_high_watermark_bytes:
            raise ValueError("connection_low_watermark_bytes: must be positive and below the high watermark")
        if not 0 < self.process_low_watermark_bytes < self.process_high_watermark_bytes:
            raise ValueError("process_low_watermark_bytes: must be positive and below the high watermark")
        if self.idle_timeout_s <= 0 or self.read_tail_wait_s < 0:
            raise ValueError("idle_timeout_s must be positive and read_tail_wait_s not negative")
        if self.auth_token_signing_key == "":
            raise ValueError("auth_token_signing_key: must not be empty (None turns authentication off)")
        if self.tls_handshake_timeout_s <= 0:
            raise ValueError("tls_handshake_timeout_s: must be positive")
        if not 4096 <= self.max_read_bytes <= 16 * MIB - 1024:
            raise ValueError("max_read_bytes: must be within [4 KiB, 16 MiB - 1 KiB]")
