"""Configuration of the durable log."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class DurableLogConfig:
    """Durable log settings; defaults suit one container on a local disk."""

    max_frame_bytes: int = 1024 * 1024
    max_in_flight_frames: int = 16
    checkpoint_min_commit_count: int = 300
    checkpoint_commit_count: int = 10_000
    checkpoint_total_commit_length_bytes: int = 256 * 1024 * 1024
    max_queue_batch_bytes: int = 16 * 1024 * 1024

    def __post_init__(self) -> None:
        if not 4096 <= self.max_frame_bytes <= 16 * 1024 * 1024:
            raise ValueError(f"max_frame_bytes: {self.max_frame_bytes} outside [4096, 16 MiB]")
        if self.max_in_flight_frames < 1:
            raise ValueError("max_in_flight_frames: must be at least 1")
        if self.checkpoint_commit_count < self.checkpoint_min_commit_count:
            raise ValueError("checkpoint_commit_count: must be >= checkpoint_min_commit_count")
        if self.checkpoint_total_commit_length_bytes <= 0:
            raise ValueError("checkpoint_total_commit_length_bytes: must be positive")
