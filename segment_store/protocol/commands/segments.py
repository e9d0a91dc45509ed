"""Segment commands and replies: read, info, create, seal, truncate, delete, merge, attributes, admin.

Fields marked "optional" are trailing fields added in later wire versions; older peers omit them and
the decoder substitutes the default Java substitutes (Java's ``in.available()`` checks).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Self

from segment_store.protocol.errors import ProtocolError
from segment_store.protocol.layout import Record, WireRecord, compile_layout
from segment_store.protocol.registry import WireCommand, register
from segment_store.protocol.types import (
    BLOB,
    BOOL,
    I8,
    I32,
    I64,
    UTF,
    UUID,
    Buffer,
    ListOf,
    Opt,
    short_read,
)

#: ``CreateSegment``/``UpdateSegmentPolicy`` scale types (Java ``ScaleType``).
NO_SCALE = 0
IN_KBYTES_PER_SEC = 1
IN_EVENTS_PER_SEC = 2


@register
@dataclass(frozen=True, slots=True)
class ReadSegment(WireCommand):
    """Read up to ``suggested_length`` bytes at ``offset``. ``request_id`` optional (-1)."""

    TYPE_CODE = 9
    LAYOUT = (UTF, I64, I32, UTF, Opt(I64, -1, 8))
    segment: str
    offset: int
    suggested_length: int
    delegation_token: str
    request_id: int


@register
@dataclass(frozen=True, slots=True)
class SegmentRead(WireCommand):
    """Data read from ``segment`` at ``offset``. ``request_id`` optional (-1)."""

    TYPE_CODE = 10
    LAYOUT = (UTF, I64, BOOL, BOOL, BLOB, Opt(I64, -1, 8))
    segment: str
    offset: int
    at_tail: bool
    end_of_segment: bool
    data: bytes
    request_id: int


@register
@dataclass(frozen=True, slots=True)
class GetStreamSegmentInfo(WireCommand):
    """Ask for a segment's state; answered by ``StreamSegmentInfo``."""

    TYPE_CODE = 11
    LAYOUT = (I64, UTF, UTF)
    request_id: int
    segment_name: str
    delegation_token: str


@register
@dataclass(frozen=True, slots=True)
class StreamSegmentInfo(WireCommand):
    """A segment's state. ``start_offset`` optional (0)."""

    TYPE_CODE = 12
    LAYOUT = (I64, UTF, BOOL, BOOL, BOOL, I64, I64, Opt(I64, 0, 8))
    request_id: int
    segment_name: str
    exists: bool
    is_sealed: bool
    is_deleted: bool
    last_modified: int
    write_offset: int
    start_offset: int


@register
@dataclass(frozen=True, slots=True)
class CreateSegment(WireCommand):
    """Create a stream segment (``target_rate`` before ``scale_type`` on the wire; rollover optional, 0)."""

    TYPE_CODE = 20
    LAYOUT = (I64, UTF, I32, I8, UTF, Opt(I64, 0, 8))
    request_id: int
    segment: str
    target_rate: int
    scale_type: int
    delegation_token: str
    rollover_size_bytes: int


@register
@dataclass(frozen=True, slots=True)
class SegmentCreated(WireCommand):
    """Reply to ``CreateSegment``/``CreateTableSegment``/``CreateTransientSegment``."""

    TYPE_CODE = 21
    LAYOUT = (I64, UTF)
    request_id: int
    segment: str


@register
@dataclass(frozen=True, slots=True)
class SealSegment(WireCommand):
    """Seal a segment (no more appends)."""

    TYPE_CODE = 28
    LAYOUT = (I64, UTF, UTF)
    request_id: int
    segment: str
    delegation_token: str


@register
@dataclass(frozen=True, slots=True)
class SegmentSealed(WireCommand):
    """Reply to ``SealSegment``."""

    TYPE_CODE = 29
    LAYOUT = (I64, UTF)
    request_id: int
    segment: str


@register
@dataclass(frozen=True, slots=True)
class DeleteSegment(WireCommand):
    """Delete a segment."""

    TYPE_CODE = 30
    LAYOUT = (I64, UTF, UTF)
    request_id: int
    segment: str
    delegation_token: str


@register
@dataclass(frozen=True, slots=True)
class SegmentDeleted(WireCommand):
    """Reply to ``DeleteSegment``/``DeleteTableSegment``."""

    TYPE_CODE = 31
    LAYOUT = (I64, UTF)
    request_id: int
    segment: str


@register
@dataclass(frozen=True, slots=True)
class UpdateSegmentPolicy(WireCommand):
    """Change a segment's scaling policy (``target_rate`` before ``scale_type`` on the wire)."""

    TYPE_CODE = 32
    LAYOUT = (I64, UTF, I32, I8, UTF)
    request_id: int
    segment: str
    target_rate: int
    scale_type: int
    delegation_token: str


@register
@dataclass(frozen=True, slots=True)
class SegmentPolicyUpdated(WireCommand):
    """Reply to ``UpdateSegmentPolicy``."""

    TYPE_CODE = 33
    LAYOUT = (I64, UTF)
    request_id: int
    segment: str


@register
@dataclass(frozen=True, slots=True)
class GetSegmentAttribute(WireCommand):
    """Read one attribute of a segment."""

    TYPE_CODE = 34
    LAYOUT = (I64, UTF, UUID, UTF)
    request_id: int
    segment_name: str
    attribute_id: uuid.UUID
    delegation_token: str


@register
@dataclass(frozen=True, slots=True)
class SegmentAttribute(WireCommand):
    """An attribute value (``NULL_ATTRIBUTE_VALUE`` if unset)."""

    TYPE_CODE = 35
    LAYOUT = (I64, I64)
    request_id: int
    value: int


@register
@dataclass(frozen=True, slots=True)
class UpdateSegmentAttribute(WireCommand):
    """Compare-and-set one attribute of a segment."""

    TYPE_CODE = 36
    LAYOUT = (I64, UTF, UUID, I64, I64, UTF)
    request_id: int
    segment_name: str
    attribute_id: uuid.UUID
    new_value: int
    expected_value: int
    delegation_token: str


@register
@dataclass(frozen=True, slots=True)
class SegmentAttributeUpdated(WireCommand):
    """Reply to ``UpdateSegmentAttribute``."""

    TYPE_CODE = 37
    LAYOUT = (I64, BOOL)
    request_id: int
    success: bool


@register
@dataclass(frozen=True, slots=True)
class TruncateSegment(WireCommand):
    """Drop a segment's data below ``truncation_offset``."""

    TYPE_CODE = 38
    LAYOUT = (I64, UTF, I64, UTF)
    request_id: int
    segment: str
    truncation_offset: int
    delegation_token: str


@register
@dataclass(frozen=True, slots=True)
class SegmentTruncated(WireCommand):
    """Reply to ``TruncateSegment``."""

    TYPE_CODE = 39
    LAYOUT = (I64, UTF)
    request_id: int
    segment: str


@register
@dataclass(frozen=True, slots=True)
class CreateTransientSegment(WireCommand):
    """Create a transient segment for ``writer_id`` under ``parent_segment``."""

    TYPE_CODE = 40
    LAYOUT = (I64, UUID, UTF, UTF)
    request_id: int
    writer_id: uuid.UUID
    parent_segment: str
    delegation_token: str


@register
@dataclass(frozen=True, slots=True)
class LocateOffset(WireCommand):
    """Find the event boundary at or after ``target_offset`` (wire version 17)."""

    TYPE_CODE = 41
    LAYOUT = (I64, UTF, I64, UTF)
    request_id: int
    segment: str
    target_offset: int
    delegation_token: str


@register
@dataclass(frozen=True, slots=True)
class OffsetLocated(WireCommand):
    """Reply to ``LocateOffset``."""

    TYPE_CODE = 42
    LAYOUT = (I64, UTF, I64)
    request_id: int
    segment: str
    offset: int


@compile_layout
@dataclass(frozen=True, slots=True)
class ConditionalAttributeUpdate(WireRecord):
    """One attribute update applied with a merge (``REPLACE`` or ``REPLACE_IF_EQUALS``)."""

    REPLACE = 1
    REPLACE_IF_EQUALS = 4
    LAYOUT = (UUID, I8, I64, I64)
    attribute_id: uuid.UUID
    attribute_update_type: int
    new_value: int
    old_value: int


@register
@dataclass(frozen=True, slots=True)
class MergeSegments(WireCommand):
    """Merge ``source`` into ``target``. ``attribute_updates`` optional: absent (pre-v5) means ()."""

    TYPE_CODE = 58
    LAYOUT = (I64, UTF, UTF, UTF, Opt(ListOf(Record(ConditionalAttributeUpdate, 33)), (), 1))
    request_id: int
    target: str
    source: str
    delegation_token: str
    attribute_updates: tuple[ConditionalAttributeUpdate, ...]


@register
@dataclass(frozen=True, slots=True)
class SegmentsMerged(WireCommand):
    """Reply to ``MergeSegments``. ``new_target_write_offset`` optional (-1)."""

    TYPE_CODE = 59
    LAYOUT = (I64, UTF, UTF, Opt(I64, -1, 1))
    request_id: int
    target: str
    source: str
    new_target_write_offset: int


@register
@dataclass(frozen=True, slots=True)
class MergeSegmentsBatch(WireCommand):
    """Merge several sources into one target."""

    TYPE_CODE = 90
    LAYOUT = (I64, UTF, ListOf(UTF), UTF)
    request_id: int
    target_segment_id: str
    source_segment_ids: tuple[str, ...]
    delegation_token: str


@register
@dataclass(frozen=True, slots=True)
class SegmentsBatchMerged(WireCommand):
    """Reply to ``MergeSegmentsBatch``: on the wire one count, then (source, offset) pairs interleaved.

    Encoding raises ProtocolError if the two tuples differ in length.
    """

    TYPE_CODE = 91
    request_id: int
    target: str
    sources: tuple[str, ...]
    new_target_write_offset: tuple[int, ...]

    def write_fields(self, out: list[Buffer]) -> None:
        if len(self.sources) != len(self.new_target_write_offset):
            raise ProtocolError(f"{len(self.sources)} sources but {len(self.new_target_write_offset)} offsets")
        I64.write(self.request_id, out)
        UTF.write(self.target, out)
        I32.write(len(self.sources), out)
        for source, offset in zip(self.sources, self.new_target_write_offset, strict=True):
            UTF.write(source, out)
            I64.write(offset, out)

    @classmethod
    def read_fields(cls, body: memoryview, pos: int) -> tuple[Self, int]:
        request_id, pos = I64.read(body, pos)
        target, pos = UTF.read(body, pos)
        count, pos = I32.read(body, pos)
        if count < 0 or count * 10 > len(body) - pos:
            raise ProtocolError(f"{count} merged sources cannot fit in {len(body) - pos} bytes")
        sources: list[str] = []
        offsets: list[int] = []
        for _ in range(count):
            source, pos = UTF.read(body, pos)
            if pos + 8 > len(body):
                raise short_read(8, pos, len(body))
            offset, pos = I64.read(body, pos)
            sources.append(source)
            offsets.append(offset)
        return cls(request_id, target, tuple(sources), tuple(offsets)), pos


@register
@dataclass(frozen=True, slots=True)
class FlushToStorage(WireCommand):
    """Admin: flush a container's data to long-term storage."""

    TYPE_CODE = -3
    LAYOUT = (I32, UTF, I64)
    container_id: int
    delegation_token: str
    request_id: int


@register
@dataclass(frozen=True, slots=True)
class StorageFlushed(WireCommand):
    """Reply to ``FlushToStorage``."""

    TYPE_CODE = -4
    LAYOUT = (I64,)
    request_id: int


@register
@dataclass(frozen=True, slots=True)
class ListStorageChunks(WireCommand):
    """Admin: list the storage chunks of a segment."""

    TYPE_CODE = -5
    LAYOUT = (UTF, UTF, I64)
    segment: str
    delegation_token: str
    request_id: int


@compile_layout
@dataclass(frozen=True, slots=True)
class ChunkInfo(WireRecord):
    """One chunk in a ``StorageChunksListed`` reply."""

    LAYOUT = (I64, I64, I64, UTF, BOOL)
    length_in_metadata: int
    length_in_storage: int
    start_offset: int
    chunk_name: str
    exists_in_storage: bool


@register
@dataclass(frozen=True, slots=True)
class StorageChunksListed(WireCommand):
    """Reply to ``ListStorageChunks``."""

    TYPE_CODE = -6
    LAYOUT = (I64, ListOf(Record(ChunkInfo, 27)))
    request_id: int
    chunks: tuple[ChunkInfo, ...]
