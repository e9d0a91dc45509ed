"""segstore's wire extension for the state of the Iceberg tables (type codes -34/-35; see :mod:`.extensions` for
the conventions).

* ``ListIcebergTables`` -> ``IcebergTablesListed`` (-34/-35): what the segment store's table maintainer knows of
  each stream table of the containers running there (``segstore admin tables``; docs/iceberg.md, "Operating
  tables"). ``enabled`` False: the segment store keeps no tables (no ``--iceberg-tables``); the list is then
  empty. Container-wide, like ``ListChunkPins``: with authentication on, only the controller's master token
  passes.
"""

from __future__ import annotations

from dataclasses import dataclass

from segment_store.protocol.layout import Record, WireRecord, compile_layout
from segment_store.protocol.registry import WireCommand, register
from segment_store.protocol.types import BOOL, I32, I64, UTF, ListOf


@register
@dataclass(frozen=True, slots=True)
class ListIcebergTables(WireCommand):
    """segstore extension: the state of the segment store's Iceberg tables (``IcebergTablesListed``)."""

    TYPE_CODE = -34
    LAYOUT = (I64, UTF)
    request_id: int
    delegation_token: str


@compile_layout
@dataclass(frozen=True, slots=True)
class IcebergTableInfo(WireRecord):
    """One table as one segment store sees it (its containers' segments of the stream; definitions in
    :class:`segment_store.iceberg.status.TableStatus`). ``snapshot_id`` and ``committed_at_ms`` are -1 before
    the first snapshot; ``lag_age_ms`` is 0 with no lag; ``last_error`` is "" while passes succeed."""

    LAYOUT = (UTF, I64, I64, I64, I64, I64, I64, I64, I32, I64, UTF)
    table: str
    snapshot_id: int
    committed_at_ms: int
    data_files: int
    lag_bytes: int
    lag_chunks: int
    lag_age_ms: int
    last_pass_at_ms: int
    failures: int
    failed_passes: int
    last_error: str


@register
@dataclass(frozen=True, slots=True)
class IcebergTablesListed(WireCommand):
    """Reply to ``ListIcebergTables``: whether tables are on here, and each table's state, by name."""

    TYPE_CODE = -35
    LAYOUT = (I64, BOOL, ListOf(Record(IcebergTableInfo, 72)))
    request_id: int
    enabled: bool
    tables: tuple[IcebergTableInfo, ...]
