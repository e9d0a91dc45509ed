"""Configuration of the table store (Pravega ``TableExtensionConfig``)."""

from __future__ import annotations

from dataclasses import dataclass

from segment_store.tables.entries import MAX_KEY_BYTES, MAX_VALUE_BYTES

MAX_SERIALIZATION_BYTES = MAX_KEY_BYTES + MAX_VALUE_BYTES
"""Largest key + value of one entry (Pravega ``EntrySerializer.MAX_SERIALIZATION_LENGTH``, 1 MiB)."""


@dataclass(frozen=True, slots=True)
class TableConfig:
    """Limits, read sizes and compaction policy of a :class:`~segment_store.tables.table_store.TableStore`.

    Compaction of a table is due after an update when more than ``compaction_trigger_bytes`` lie between the
    compaction offset and the tail and live entries fill less than ``min_utilization_percent`` of them; one
    pass then copies the live entries of at most ``max_compaction_bytes`` from the head to the tail and
    truncates the segment there.
    """

    # Pravega allows 32 x MAX_SERIALIZATION_BYTES; ours must fit one container append (16 MiB - 1 KiB).
    max_batch_bytes: int = 16 * MAX_SERIALIZATION_BYTES - 1024
    read_chunk_bytes: int = 256 * 1024
    max_read_result_bytes: int = 2 * 1024 * 1024  # Pravega PravegaRequestProcessor.MAX_READ_SIZE
    min_utilization_percent: int = 75  # Pravega utilization.min
    compaction_trigger_bytes: int = 4 * MAX_SERIALIZATION_BYTES  # Pravega compaction.bytes.max
    max_compaction_bytes: int = 4 * MAX_SERIALIZATION_BYTES
    conditional_append_attempts: int = 3

    def __post_init__(self) -> None:
        if self.max_batch_bytes < MAX_SERIALIZATION_BYTES:
            raise ValueError(f"max_batch_bytes: must be at least {MAX_SERIALIZATION_BYTES}")
        if self.read_chunk_bytes < 64:
            raise ValueError("read_chunk_bytes: must be at least 64")
        if self.max_read_result_bytes < 1:
            raise ValueError("max_read_result_bytes: must be positive")
        if not 0 <= self.min_utilization_percent <= 100:
            raise ValueError("min_utilization_percent: must be within [0, 100]")
        if self.compaction_trigger_bytes < 0:
            raise ValueError("compaction_trigger_bytes: must not be negative")
        if self.max_compaction_bytes < 1:
            raise ValueError("max_compaction_bytes: must be positive")
        if self.conditional_append_attempts < 1:
            raise ValueError("conditional_append_attempts: must be at least 1")
