"""Log operations: what a segment container writes to its durable log, and their serialization.

An operation is created by the container, validated and completed (offsets,
lengths) by the metadata updater, given a sequence number by the operation
processor, serialized into data frames, and replayed from them at recovery.

Serialization (big-endian): ``type u8 | sequence_number i64 | body``; bodies are
fixed ``struct`` layouts followed by variable parts (attribute updates, names,
payloads). :func:`serialize` returns a list of buffers so a large append payload
is not copied before it reaches the data frame. :func:`deserialize` raises
:class:`OperationSerializationError` on any malformed input.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

from segstore_shared.contracts import NULL_ATTRIBUTE_VALUE, AttributeUpdate, AttributeUpdateType, SegmentType
from segstore_shared.errors import SegstoreError


class OperationSerializationError(SegstoreError):
    """Bytes that do not decode as a log operation (a corrupted or foreign log)."""


_HEADER = struct.Struct(">Bq")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_ATTRIBUTE_UPDATE = struct.Struct(">QQBqq")  # id (high, low), type, value, comparison value
_MASK64 = (1 << 64) - 1


@dataclass(slots=True)
class Operation:
    """Base of every log operation. ``sequence_number`` is -1 until the processor assigns it."""

    TYPE: ClassVar[int] = 0
    sequence_number: int = field(default=-1, kw_only=True)

    def body(self) -> list[bytes | memoryview]:
        raise NotImplementedError

    @property
    def is_storage_operation(self) -> bool:
        """True for the operations the storage writer applies to Tier-2."""
        return False


@dataclass(slots=True)
class SegmentOperation(Operation):
    segment_id: int = 0


@dataclass(slots=True)
class MapSegmentOperation(SegmentOperation):
    """Creates (maps) a segment: assigns its id and initial state."""

    TYPE: ClassVar[int] = 1
    _FIXED: ClassVar[struct.Struct] = struct.Struct(">qqqqqqB")
    name: str = ""
    segment_type: SegmentType = SegmentType.STREAM
    start_offset: int = 0
    length: int = 0
    storage_length: int = 0
    created_ms: int = 0
    sealed: bool = False
    attributes: dict[int, int] = field(default_factory=dict)

    def body(self) -> list[bytes | memoryview]:
        name = self.name.encode("utf-8")
        return [
            self._FIXED.pack(
                self.segment_id,
                int(self.segment_type),
                self.start_offset,
                self.length,
                self.storage_length,
                self.created_ms,
                self.sealed,
            ),
            _U16.pack(len(name)),
            name,
            _encode_attributes(self.attributes),
        ]


@dataclass(slots=True)
class AppendOperation(SegmentOperation):
    """Appends ``data`` at ``offset`` (assigned by the updater unless ``expected_offset`` is given)."""

    TYPE: ClassVar[int] = 2
    _FIXED: ClassVar[struct.Struct] = struct.Struct(">qqqqI")
    data: bytes | memoryview = b""
    offset: int = -1
    expected_offset: int = -1  # -1: unconditional
    ingest_time_ms: int = 0
    attribute_updates: tuple[AttributeUpdate, ...] = ()

    def body(self) -> list[bytes | memoryview]:
        return [
            self._FIXED.pack(self.segment_id, self.offset, self.expected_offset, self.ingest_time_ms, len(self.data)),
            _encode_updates(self.attribute_updates),
            self.data,
        ]

    @property
    def is_storage_operation(self) -> bool:
        return True


@dataclass(slots=True)
class SealOperation(SegmentOperation):
    """Seals a segment; ``length`` is the length at which it was sealed (assigned by the updater)."""

    TYPE: ClassVar[int] = 3
    _FIXED: ClassVar[struct.Struct] = struct.Struct(">qq")
    length: int = -1

    def body(self) -> list[bytes | memoryview]:
        return [self._FIXED.pack(self.segment_id, self.length)]

    @property
    def is_storage_operation(self) -> bool:
        return True


@dataclass(slots=True)
class TruncateOperation(SegmentOperation):
    """Moves a segment's start offset up to ``offset``."""

    TYPE: ClassVar[int] = 4
    _FIXED: ClassVar[struct.Struct] = struct.Struct(">qq")
    offset: int = 0

    def body(self) -> list[bytes | memoryview]:
        return [self._FIXED.pack(self.segment_id, self.offset)]

    @property
    def is_storage_operation(self) -> bool:
        return True


@dataclass(slots=True)
class MergeOperation(SegmentOperation):
    """Merges sealed ``source_id`` into the end of ``segment_id`` (the target) at ``target_offset``.

    ``merge_time_ms``: when the merge was accepted (epoch ms, set by the metadata updater, at least the target's
    and the source's last modification): the ingestion time of every merged event, in every tier. Logged as type
    9 (type 5 without it: an operation logged before it existed reads back with 0, time unknown)."""

    TYPE: ClassVar[int] = 9
    UNTIMED_TYPE: ClassVar[int] = 5
    _FIXED: ClassVar[struct.Struct] = struct.Struct(">qqqq")
    _TIME: ClassVar[struct.Struct] = struct.Struct(">q")
    source_id: int = 0
    target_offset: int = -1
    length: int = -1
    attribute_updates: tuple[AttributeUpdate, ...] = ()  # applied to the target, atomically with the merge
    merge_time_ms: int = 0

    def body(self) -> list[bytes | memoryview]:
        return [
            self._FIXED.pack(self.segment_id, self.source_id, self.target_offset, self.length),
            _encode_updates(self.attribute_updates),
            self._TIME.pack(self.merge_time_ms),
        ]

    @property
    def is_storage_operation(self) -> bool:
        return True


@dataclass(slots=True)
class DeleteOperation(SegmentOperation):
    """Deletes a segment."""

    TYPE: ClassVar[int] = 6
    _FIXED: ClassVar[struct.Struct] = struct.Struct(">q")

    def body(self) -> list[bytes | memoryview]:
        return [self._FIXED.pack(self.segment_id)]

    @property
    def is_storage_operation(self) -> bool:
        return True


@dataclass(slots=True)
class UpdateAttributesOperation(SegmentOperation):
    """Changes attributes of a segment without appending data."""

    TYPE: ClassVar[int] = 7
    _FIXED: ClassVar[struct.Struct] = struct.Struct(">q")
    attribute_updates: tuple[AttributeUpdate, ...] = ()

    def body(self) -> list[bytes | memoryview]:
        return [self._FIXED.pack(self.segment_id), _encode_updates(self.attribute_updates)]


@dataclass(slots=True)
class MetadataCheckpointOperation(Operation):
    """A snapshot of the whole container metadata; the only place Tier-1 may be truncated before."""

    TYPE: ClassVar[int] = 8
    snapshot: bytes = b""

    def body(self) -> list[bytes | memoryview]:
        return [_U32.pack(len(self.snapshot)), self.snapshot]


def _encode_updates(updates: tuple[AttributeUpdate, ...]) -> bytes:
    parts = [_U16.pack(len(updates))]
    for u in updates:
        parts.append(
            _ATTRIBUTE_UPDATE.pack(
                u.attribute_id >> 64, u.attribute_id & _MASK64, int(u.update_type), u.value, u.comparison_value
            )
        )
    return b"".join(parts)


def _encode_attributes(attributes: dict[int, int]) -> bytes:
    parts = [_U32.pack(len(attributes))]
    for key, value in attributes.items():
        parts.append(_ATTRIBUTE_UPDATE.pack(key >> 64, key & _MASK64, 0, value, NULL_ATTRIBUTE_VALUE))
    return b"".join(parts)


class _Reader:
    """Bounds-checked cursor over one serialized operation."""

    __slots__ = ("_buf", "_pos")

    def __init__(self, buf: memoryview) -> None:
        self._buf = buf
        self._pos = 0

    def unpack(self, layout: struct.Struct) -> tuple:
        end = self._pos + layout.size
        if end > len(self._buf):
            raise OperationSerializationError("operation is shorter than its fields")
        values = layout.unpack_from(self._buf, self._pos)
        self._pos = end
        return values

    def take(self, length: int) -> memoryview:
        end = self._pos + length
        if length < 0 or end > len(self._buf):
            raise OperationSerializationError("operation payload runs past its end")
        view = self._buf[self._pos : end]
        self._pos = end
        return view

    def updates(self) -> tuple[AttributeUpdate, ...]:
        (count,) = self.unpack(_U16)
        result = []
        for _ in range(count):
            high, low, kind, value, comparison = self.unpack(_ATTRIBUTE_UPDATE)
            try:
                update_type = AttributeUpdateType(kind)
            except ValueError as exc:
                raise OperationSerializationError(f"unknown attribute update type {kind}") from exc
            result.append(AttributeUpdate((high << 64) | low, update_type, value, comparison))
        return tuple(result)

    def attributes(self) -> dict[int, int]:
        (count,) = self.unpack(_U32)
        result = {}
        for _ in range(count):
            high, low, _kind, value, _comparison = self.unpack(_ATTRIBUTE_UPDATE)
            result[(high << 64) | low] = value
        return result

    def finish(self) -> None:
        if self._pos != len(self._buf):
            raise OperationSerializationError(f"{len(self._buf) - self._pos} trailing bytes after operation")


def _read_map(r: _Reader, seq: int) -> Operation:
    segment_id, segment_type, start, length, storage_length, created_ms, sealed = r.unpack(MapSegmentOperation._FIXED)
    (name_length,) = r.unpack(_U16)
    try:
        name = bytes(r.take(name_length)).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise OperationSerializationError("segment name is not UTF-8") from exc
    return MapSegmentOperation(
        segment_id=segment_id,
        name=name,
        segment_type=SegmentType(segment_type),
        start_offset=start,
        length=length,
        storage_length=storage_length,
        sealed=bool(sealed),
        created_ms=created_ms,
        attributes=r.attributes(),
        sequence_number=seq,
    )


def _read_append(r: _Reader, seq: int) -> Operation:
    segment_id, offset, expected, ingest, data_length = r.unpack(AppendOperation._FIXED)
    updates = r.updates()
    return AppendOperation(
        segment_id=segment_id,
        offset=offset,
        expected_offset=expected,
        ingest_time_ms=ingest,
        attribute_updates=updates,
        data=bytes(r.take(data_length)),
        sequence_number=seq,
    )


def _read_seal(r: _Reader, seq: int) -> Operation:
    segment_id, length = r.unpack(SealOperation._FIXED)
    return SealOperation(segment_id=segment_id, length=length, sequence_number=seq)


def _read_truncate(r: _Reader, seq: int) -> Operation:
    segment_id, offset = r.unpack(TruncateOperation._FIXED)
    return TruncateOperation(segment_id=segment_id, offset=offset, sequence_number=seq)


def _read_merge(r: _Reader, seq: int, timed: bool = True) -> Operation:
    target, source, target_offset, length = r.unpack(MergeOperation._FIXED)
    updates = r.updates()
    (merge_time_ms,) = r.unpack(MergeOperation._TIME) if timed else (0,)  # 0: logged without it
    return MergeOperation(
        segment_id=target,
        source_id=source,
        target_offset=target_offset,
        length=length,
        attribute_updates=updates,
        merge_time_ms=merge_time_ms,
        sequence_number=seq,
    )


def _read_delete(r: _Reader, seq: int) -> Operation:
    (segment_id,) = r.unpack(DeleteOperation._FIXED)
    return DeleteOperation(segment_id=segment_id, sequence_number=seq)


def _read_update_attributes(r: _Reader, seq: int) -> Operation:
    (segment_id,) = r.unpack(UpdateAttributesOperation._FIXED)
    return UpdateAttributesOperation(segment_id=segment_id, attribute_updates=r.updates(), sequence_number=seq)


def _read_checkpoint(r: _Reader, seq: int) -> Operation:
    (length,) = r.unpack(_U32)
    return MetadataCheckpointOperation(snapshot=bytes(r.take(length)), sequence_number=seq)


_READERS: dict[int, Callable[[_Reader, int], Operation]] = {
    MapSegmentOperation.TYPE: _read_map,
    AppendOperation.TYPE: _read_append,
    SealOperation.TYPE: _read_seal,
    TruncateOperation.TYPE: _read_truncate,
    MergeOperation.TYPE: _read_merge,
    MergeOperation.UNTIMED_TYPE: lambda r, seq: _read_merge(r, seq, timed=False),
    DeleteOperation.TYPE: _read_delete,
    UpdateAttributesOperation.TYPE: _read_update_attributes,
    MetadataCheckpointOperation.TYPE: _read_checkpoint,
}


def serialize(op: Operation) -> list[bytes | memoryview]:
    """The operation's bytes as a list of buffers (header first). Requires an assigned sequence number."""
    if op.sequence_number < 0:
        raise ValueError(f"{type(op).__name__} has no sequence number yet")
    return [_HEADER.pack(op.TYPE, op.sequence_number), *op.body()]


def serialized_size(op: Operation) -> int:
    return sum(len(part) for part in serialize(op))


def deserialize(data: bytes | memoryview) -> Operation:
    """Decode one operation; raises :class:`OperationSerializationError` on malformed input."""
    reader = _Reader(memoryview(data))
    kind, seq = reader.unpack(_HEADER)
    read = _READERS.get(kind)
    if read is None:
        raise OperationSerializationError(f"unknown operation type {kind}")
    try:
        op = read(reader, seq)
    except (ValueError, OverflowError) as exc:
        if isinstance(exc, OperationSerializationError):
            raise
        raise OperationSerializationError(f"malformed operation of type {kind}: {exc}") from exc
    reader.finish()
    return op
