"""Configuration of the storage writer."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class WriterConfig:
    """Storage writer settings (Pravega ``WriterConfig``); defaults suit a local disk or S3."""

    flush_threshold_bytes: int = 4 * 1024 * 1024
    """A segment's buffered appends are flushed once they reach this size..."""
    flush_max_age_s: float = 10.0
    """...or once the oldest of them has waited this long. Reads never wait for Tier-2 (the cache and Tier-1
    hold what is not flushed), so this only trades Tier-1 and cache space for fewer, larger chunks: with many
    quiet segments, every segment's flush is a chunk write, two fsyncs and a journal record (Pravega: 30 s)."""
    max_flush_bytes: int = 32 * 1024 * 1024
    """Largest chunk one flush writes (whole appends; one append larger than this is a chunk of its own)."""
    max_read_count: int = 4096
    """Operations taken from the operation log per iteration."""
    min_iteration_interval_s: float = 0.01
    """While operations keep coming, an iteration starts at most this often (unless a flush is asked for):
    every iteration looks at each of the container's segments, so it should cover many commits, not one."""
    max_concurrent_flushes: int = 2
    """Segments flushed at once (encode and chunk I/O run in worker threads)."""
    retry_min_delay_s: float = 0.05
    retry_max_delay_s: float = 2.0
    """Backoff between attempts while Tier-2 fails with a retriable error."""

    def __post_init__(self) -> None:
        if self.flush_threshold_bytes <= 0:
            raise ValueError("flush_threshold_bytes: must be positive")
        if self.max_flush_bytes < self.flush_threshold_bytes:
            raise ValueError("max_flush_bytes: must be >= flush_threshold_bytes")
        if self.flush_max_age_s <= 0:
            raise ValueError("flush_max_age_s: must be positive")
        if not 0 <= self.min_iteration_interval_s <= 1:
            raise ValueError("min_iteration_interval_s: must be between 0 and 1")
        if self.max_read_count < 1:
            raise ValueError("max_read_count: must be at least 1")
        if self.max_concurrent_flushes < 1:
            raise ValueError("max_concurrent_flushes: must be at least 1")
        if not 0 < self.retry_min_delay_s <= self.retry_max_delay_s:
            raise ValueError("retry_min_delay_s: must be positive and <= retry_max_delay_s")
