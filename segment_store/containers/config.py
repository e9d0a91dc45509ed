"""Configuration of a segment container (one frozen dataclass holding each component's config)."""

from __future__ import annotations

from dataclasses import dataclass, field

from segment_store.logs.config import DurableLogConfig
from segment_store.reading.cache import CacheConfig
from segment_store.reading.read_index import ReadIndexConfig
from segment_store.writer.config import WriterConfig


@dataclass(frozen=True, slots=True)
class ContainerConfig:
    durable_log: DurableLogConfig = field(default_factory=DurableLogConfig)
    read_index: ReadIndexConfig = field(default_factory=ReadIndexConfig)
    cache: CacheConfig = field(default_factory=CacheConfig)
    writer: WriterConfig = field(default_factory=WriterConfig)
    max_append_bytes: int = 16 * 1024 * 1024 - 1024
    """Largest single append (an event block); larger ones fail with TooLargeError."""
    max_unflushed_bytes: int = 512 * 1024 * 1024
    """Appended bytes not yet in Tier-2 beyond which new appends wait (throttling, not failure)."""
    max_segment_name_bytes: int = 1024
    namesake_removal_timeout_s: float = 30.0
    """How long creating a segment waits for a deleted namesake to leave Tier-2 (then ThrottledTimeoutError)."""

    def __post_init__(self) -> None:
        if self.max_append_bytes <= 0:
            raise ValueError("max_append_bytes: must be positive")
        if self.max_unflushed_bytes < self.max_append_bytes:
            raise ValueError("max_unflushed_bytes: must be >= max_append_bytes")
        if self.max_segment_name_bytes <= 0:
            raise ValueError("max_segment_name_bytes: must be positive")
