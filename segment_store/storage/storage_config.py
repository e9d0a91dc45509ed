"""Configuration of the chunked segment storage (SLTS) and its system journal."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, fields

from segment_store.storage.format.parquet_chunk import DEFAULT_COMPRESSION, MAX_CHUNK_BYTES

MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class ChunkedStorageConfig:
    """Settings of :class:`~segment_store.storage.chunked_storage.ChunkedSegmentStorage`.

    Defaults suit a local disk or S3; tests shrink the snapshot cadence and the retry delay.
    """

    max_chunk_bytes: int = 64 * MIB
    """Largest ``write`` (one chunk); the storage writer keeps flushes smaller. Larger is a ValueError."""
    chunk_compression: str = DEFAULT_COMPRESSION
    """Parquet compression of data chunks (readers need not know it)."""
    encode_processes: int = 0
    """Where data chunks are Parquet-encoded: 0 = in a worker thread of the segment store process (pyarrow holds
    the GIL in parts: a large chunk can delay the event loop); N = in a pool of N worker processes, started with the
    service and shared by its containers (:mod:`segment_store.storage.chunk_encoder`)."""
    snapshot_every_records: int = 100
    """A snapshot of the container's chunk metadata is written after this many journal records..."""
    snapshot_every_s: float = 300.0
    """...or once this long has passed since the last one (checked when a record is written)."""
    snapshot_attempts: int = 3
    """Snapshot writes tried (each under a new name) before the snapshot is given up."""
    journal_write_attempts: int = 3
    """Attempts to write one journal record (each under a new name) on a retriable outage."""
    read_attempts: int = 3
    """Attempts of one chunk read on a retriable outage (seed 004: fixed count, fixed interval)."""
    retry_delay_s: float = 0.05
    """Pause between the attempts above."""
    chunk_cache_bytes: int = 32 * MIB
    """Budget of the LRU of chunk bytes fetched for reads (backends without a local path)."""
    boot_read_concurrency: int = 8
    """Journal objects read at once during boot."""
    gc_delay_s: float = 60.0
    """Chunks released by truncate, delete or compaction are deleted this long after their release,
    so reads already in flight on them (here or in a Spark executor) can finish. 0: deleted before
    the truncate/delete returns (tests that check deletion at once)."""
    gc_retry_min_delay_s: float = 1.0
    """First pause before a failed chunk deletion is retried (doubling per attempt)..."""
    gc_retry_max_delay_s: float = 60.0
    """...up to this pause."""
    gc_max_attempts: int = 10
    """Deletion attempts per chunk; then it is left to the next boot's sweep."""
    gc_concurrency: int = 4
    """Chunk deletions in flight at once."""
    compaction_enabled: bool = True
    """Merge runs of small chunks of a segment into larger ones in the background."""
    compaction_interval_s: float = 30.0
    """Pause between two compaction passes over the container's segments."""
    compaction_small_chunk_bytes: int = 2 * MIB
    """A chunk holding fewer segment bytes than this is small (a candidate for merging)."""
    compaction_min_chunks: int = 8
    """Fewest consecutive small chunks merged into one."""
    compaction_target_bytes: int = 32 * MIB
    """Most segment bytes of a merged chunk (``max_chunk_bytes`` if that is smaller)."""

    def __post_init__(self) -> None:
        if not 0 < self.max_chunk_bytes < MAX_CHUNK_BYTES:
            raise ValueError(f"max_chunk_bytes: must be in (0, {MAX_CHUNK_BYTES})")
        if not self.chunk_compression:
            raise ValueError("chunk_compression: must not be empty")
        if not 0 <= self.encode_processes <= 64:
            raise ValueError("encode_processes: must be within [0, 64] (0: encode in a thread)")
        if self.snapshot_every_records < 1:
            raise ValueError("snapshot_every_records: must be at least 1")
        if self.snapshot_every_s <= 0:
            raise ValueError("snapshot_every_s: must be positive")
        for key in ("snapshot_attempts", "journal_write_attempts", "read_attempts", "boot_read_concurrency"):
            if getattr(self, key) < 1:
                raise ValueError(f"{key}: must be at least 1")
        if self.retry_delay_s < 0:
            raise ValueError("retry_delay_s: must not be negative")
        if self.chunk_cache_bytes < 0:
            raise ValueError("chunk_cache_bytes: must not be negative")
        for key in ("gc_delay_s", "gc_retry_min_delay_s"):
            if getattr(self, key) < 0:
                raise ValueError(f"{key}: must not be negative")
        if self.gc_retry_max_delay_s < self.gc_retry_min_delay_s:
            raise ValueError("gc_retry_max_delay_s: must be >= gc_retry_min_delay_s")
        for key in ("gc_max_attempts", "gc_concurrency", "compaction_small_chunk_bytes", "compaction_target_bytes"):
            if getattr(self, key) < 1:
                raise ValueError(f"{key}: must be at least 1")
        if self.compaction_interval_s <= 0:
            raise ValueError("compaction_interval_s: must be positive")
        if self.compaction_min_chunks < 2:
            raise ValueError("compaction_min_chunks: must be at least 2")

    @classmethod
    def from_mapping(cls, values: Mapping[str, str]) -> ChunkedStorageConfig:
        """Build from string values (a config file section); unknown keys raise ``ValueError``."""
        known = {field.name: field for field in fields(cls)}
        parsed: dict[str, object] = {}
        for key, raw in values.items():
            if key not in known:
                raise ValueError(f"{key}: unknown chunked storage setting")
            default = known[key].default
            try:
                if isinstance(default, bool):
                    parsed[key] = parse_bool(raw)
                elif isinstance(default, int):
                    parsed[key] = int(raw)
                elif isinstance(default, float):
                    parsed[key] = float(raw)
                else:
                    parsed[key] = raw
            except ValueError as exc:
                raise ValueError(f"{key}: {exc}") from exc
        return cls(**parsed)  # type: ignore[arg-type]

    @classmethod
    def from_env(cls, prefix: str = "SEGSTORE_SLTS_") -> ChunkedStorageConfig:
        """Build from environment variables named ``<prefix><FIELD IN CAPITALS>``.

        (``SEGSTORE_TIER2_*`` choose the backend: :class:`~segment_store.storage.tier2_config.Tier2Config`.)
        """
        values = {name[len(prefix) :].lower(): value for name, value in os.environ.items() if name.startswith(prefix)}
        return cls.from_mapping(values)


def parse_bool(raw: str) -> bool:
    """``true/false``, ``yes/no``, ``on/off``, ``1/0`` (any case); ValueError otherwise."""
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{raw!r} is not a boolean (true/false, yes/no, on/off, 1/0)")
