"""What the table API takes and gives: keys, entries, pages, delta reads, table info, limits.

A key's *version* is the segment offset of the entry that last wrote it (a compaction moves the entry
but keeps its version). In requests a version is a condition: :data:`NO_VERSION` = none,
:data:`NOT_EXISTS` = the key must not exist, any other value = the key's current version must equal it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, NamedTuple, TypeVar

NO_VERSION = -(2**63)
"""No condition on the key (Pravega ``TableKey.NO_VERSION``)."""

NOT_EXISTS = -1
"""The key must not exist (Pravega ``TableKey.NOT_EXISTS``)."""

MAX_KEY_BYTES = 8192
"""Longest key (Pravega ``TableStore.MAXIMUM_KEY_LENGTH``)."""

MAX_VALUE_BYTES = 1024 * 1024 - MAX_KEY_BYTES
"""Longest value (Pravega ``TableStore.MAXIMUM_VALUE_LENGTH``, 1016 KiB)."""

MAX_FIXED_KEY_LENGTH = 256
"""Longest key of a fixed-key table (Pravega ``AttributeId.MAX_LENGTH``)."""

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class TableKey:
    """A key and a version: a condition in ``remove``, the current version in iteration results."""

    key: bytes
    version: int = NO_VERSION


@dataclass(frozen=True, slots=True)
class TableEntry:
    """A key, its value and a version: a condition in ``put``, the current version in results."""

    key: bytes
    value: bytes
    version: int = NO_VERSION


@dataclass(frozen=True, slots=True)
class DeltaEntry:
    """One entry as written in the segment; ``removed`` entries have an empty value."""

    key: bytes
    value: bytes
    version: int
    removed: bool = False


class Page(NamedTuple, Generic[T]):
    """One page of an iteration. The iteration is over when ``items`` is empty (the token is empty then too);
    otherwise pass ``continuation_token`` to get the next page."""

    items: list[T]
    continuation_token: bytes


class DeltaRead(NamedTuple):
    """Entries written at or after a position, in segment order (``TableEntriesDeltaRead``).

    ``should_clear``: the position was below the compaction offset, so earlier state must be dropped and
    rebuilt from these entries; ``reached_end``: ``last_position`` is the table's length when the read began;
    ``last_position``: where to continue from.
    """

    entries: list[DeltaEntry]
    should_clear: bool
    reached_end: bool
    last_position: int


@dataclass(frozen=True, slots=True)
class TableSegmentInfo:
    """A table segment's state (``TableSegmentInfo``); ``key_length`` 0 means variable-length keys."""

    name: str
    start_offset: int
    length: int
    entry_count: int
    key_length: int
