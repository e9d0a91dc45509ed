"""Plain result values of :class:`~segment_store.client.raw_client.SegmentClient` calls (no wire types)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from segment_store.protocol import TableKey

#: Table key version meaning "no condition" (update or remove whatever is there).
NO_VERSION: Final = TableKey.NO_VERSION
#: Table key version meaning "only if the key does not exist" (insert).
NOT_EXISTS: Final = TableKey.NOT_EXISTS


@dataclass(frozen=True, slots=True)
class SegmentStatus:
    """A segment's state (``GetStreamSegmentInfo``); ``write_offset`` is its length."""

    name: str
    exists: bool
    sealed: bool
    deleted: bool
    last_modified_ms: int
    write_offset: int
    start_offset: int


@dataclass(frozen=True, slots=True)
class ReadSegmentResult:
    """Bytes read at ``offset``; empty with ``at_tail`` when a tail read timed out on the server."""

    segment: str
    offset: int
    data: bytes
    at_tail: bool
    end_of_segment: bool


@dataclass(frozen=True, slots=True)
class TableSegmentStatus:
    """A table segment's state (``GetTableSegmentInfo``)."""

    name: str
    start_offset: int
    length: int
    entry_count: int
    key_length: int


@dataclass(frozen=True, slots=True)
class VersionedKey:
    """A table key and its current version."""

    key: bytes
    version: int


@dataclass(frozen=True, slots=True)
class VersionedEntry:
    """A table entry and its key's current version."""

    key: bytes
    value: bytes
    version: int


@dataclass(frozen=True, slots=True)
class KeysPage:
    """One page of a key iteration; pass ``continuation_token`` to get the next (empty page: done)."""

    keys: list[VersionedKey]
    continuation_token: bytes


@dataclass(frozen=True, slots=True)
class EntriesPage:
    """One page of an entry iteration; pass ``continuation_token`` to get the next (empty page: done)."""

    entries: list[VersionedEntry]
    continuation_token: bytes


@dataclass(frozen=True, slots=True)
class DeltaPage:
    """Entries changed since a position; resume at ``last_position``. ``should_clear``: start over."""

    entries: list[VersionedEntry]
    should_clear: bool
    reached_end: bool
    last_position: int


@dataclass(frozen=True, slots=True)
class StoredChunk:
    """One Tier-2 chunk: segment bytes ``[start_offset, start_offset + length)``, at ``path`` (see
    :class:`StorageChunkLocations`)."""

    start_offset: int
    length: int
    chunk_name: str
    path: str

    @property
    def end_offset(self) -> int:
        return self.start_offset + self.length


@dataclass(frozen=True, slots=True)
class StorageChunkLocations:
    """Where a segment's Tier-2 chunks live (segstore extension ``ListStorageChunkLocations``).

    ``kind`` is ``"file"`` (each chunk's ``path`` is an absolute path on the segment store's host), ``"s3"``
    (``path`` is the object key in ``bucket``; ``endpoint`` the URL the segment store uses, "" for AWS) or ``""``
    (nobody outside the segment store can open them: in-memory Tier-2). ``start_offset`` is the segment's first
    readable offset; ``chunks`` are contiguous, in offset order, up to its storage length."""

    segment: str
    start_offset: int
    kind: str
    endpoint: str
    bucket: str
    chunks: tuple[StoredChunk, ...]
