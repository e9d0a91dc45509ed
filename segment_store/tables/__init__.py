"""Table segments: key -> value tables with versions, stored as entries in a segment (Pravega table segments).

- :mod:`~segment_store.tables.table_store` — :class:`TableStore`, one per container: create/delete tables,
  conditional put/remove, get, key/entry iteration, delta reads, info, compaction.
- :mod:`~segment_store.tables.entries` — what the API takes and gives (keys, entries, pages, limits).
- :mod:`~segment_store.tables.entry_serializer` — the entry layout in the segment, and reading it back.
- :mod:`~segment_store.tables.key_index` — the in-memory index of one table (keys, versions, offsets).
- :mod:`~segment_store.tables.compactor` — copies live entries off the head and truncates.
- :mod:`~segment_store.tables.host` — the container API a table store uses (:class:`SegmentHost`).
- :mod:`~segstore_shared.table_errors` — table errors.
"""

from segment_store.tables.config import TableConfig
from segment_store.tables.entries import (
    MAX_KEY_BYTES,
    MAX_VALUE_BYTES,
    NO_VERSION,
    NOT_EXISTS,
    DeltaEntry,
    DeltaRead,
    Page,
    TableEntry,
    TableKey,
    TableSegmentInfo,
)
from segment_store.tables.host import SegmentHost
from segment_store.tables.table_store import TableStore

__all__ = [
    "MAX_KEY_BYTES",
    "MAX_VALUE_BYTES",
    "NOT_EXISTS",
    "NO_VERSION",
    "DeltaEntry",
    "DeltaRead",
    "Page",
    "SegmentHost",
    "TableConfig",
    "TableEntry",
    "TableKey",
    "TableSegmentInfo",
    "TableStore",
]
