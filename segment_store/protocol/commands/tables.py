"""Table-segment commands and the key/value/entry encodings they share.

Encodings (Java ``WireCommands.TableKey``/``TableValue``/``TableEntries``/``TableIteratorArgs``):

* ``TableKey``: int32 payload size (4 + len(data) + 8), int32 data length, data, int64 version. A key
  with empty data is written as the two ints only (no version) and decodes as ``TableKey.EMPTY``
  (version ``NO_VERSION``), so an empty key's version does not survive the wire.
* ``TableValue``: int32 payload size (4 + len(data)), int32 data length, data.
* ``TableEntries``: int32 count, then key, value, key, value... (here a tuple of ``TableEntry``).
* ``TableIteratorArgs``: four int32-length buffers: continuation token, prefix filter (deprecated,
  always written empty and dropped on read), from key, to key. Each one is read only if four bytes are
  left (older peers, and the Rust client, send only the continuation token).

The reader checks the declared payload size the way Java does (it must not exceed the bytes left) but
does not use it to skip.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, ClassVar

from segment_store.protocol.errors import ProtocolError
from segment_store.protocol.registry import WireCommand, register
from segment_store.protocol.types import BLOB, BOOL, I32, I64, UTF, Buffer, Kind, ListOf, Opt, short_read

_PAIR = struct.Struct(">ii")
_LONG = struct.Struct(">q")
_INT = struct.Struct(">i")


@dataclass(frozen=True, slots=True)
class TableKey:
    """A table key and its version (``NO_VERSION`` for unconditional, ``NOT_EXISTS`` for insert-only)."""

    NO_VERSION: ClassVar[int] = -(2**63)
    NOT_EXISTS: ClassVar[int] = -1
    EMPTY: ClassVar[TableKey]
    data: bytes
    key_version: int


TableKey.EMPTY = TableKey(b"", TableKey.NO_VERSION)


@dataclass(frozen=True, slots=True)
class TableValue:
    """A table value."""

    data: bytes


@dataclass(frozen=True, slots=True)
class TableEntry:
    """A key and its value, as one element of Java's ``TableEntries`` list."""

    key: TableKey
    value: TableValue


@dataclass(frozen=True, slots=True)
class TableIteratorArgs:
    """Where a key/entry iteration resumes and the key range it covers (empty bytes = unbounded)."""

    continuation_token: bytes
    from_key: bytes
    to_key: bytes


def _sized_header(body: memoryview, pos: int, what: str) -> tuple[int, int, int]:
    """Read (payload size, data length) of a key or value; check them the way Java does."""
    available = len(body) - pos
    if available < 8:
        raise short_read(8, pos, len(body))
    payload, length = _PAIR.unpack_from(body, pos)
    if length != 0:
        if available < payload:
            raise ProtocolError(f"{what} declares {payload} bytes but only {available} are left")
        if length < 0:
            raise ProtocolError(f"{what} has negative data length {length}")
        if pos + 8 + length > len(body):
            raise short_read(length, pos + 8, len(body))
    return payload, length, pos + 8


class _TableKeyKind(Kind):
    __slots__ = ()

    def read(self, body: memoryview, pos: int) -> tuple[TableKey, int]:
        _, length, pos = _sized_header(body, pos, "table key")
        if length == 0:
            return TableKey.EMPTY, pos
        end = pos + length
        if end + 8 > len(body):
            raise short_read(8, end, len(body))
        return TableKey(bytes(body[pos:end]), _LONG.unpack_from(body, end)[0]), end + 8

    def write(self, value: Any, out: list[Buffer]) -> None:
        length = len(value.data)
        out.append(_PAIR.pack(4 + length + 8, length))
        if length:
            out.append(value.data)
            out.append(_LONG.pack(value.key_version))


class _TableValueKind(Kind):
    __slots__ = ()

    def read(self, body: memoryview, pos: int) -> tuple[TableValue, int]:
        _, length, pos = _sized_header(body, pos, "table value")
        if length == 0:
            return TableValue(b""), pos
        return TableValue(bytes(body[pos : pos + length])), pos + length

    def write(self, value: Any, out: list[Buffer]) -> None:
        length = len(value.data)
        out.append(_PAIR.pack(4 + length, length))
        if length:
            out.append(value.data)


TABLE_KEY: Kind = _TableKeyKind("TableKey", 8)
TABLE_VALUE: Kind = _TableValueKind("TableValue", 8)


class _TableEntriesKind(Kind):
    __slots__ = ()

    def read(self, body: memoryview, pos: int) -> tuple[tuple[TableEntry, ...], int]:
        if pos + 4 > len(body):
            raise short_read(4, pos, len(body))
        count = _INT.unpack_from(body, pos)[0]
        pos += 4
        if count < 0 or count * 16 > len(body) - pos:
            raise ProtocolError(f"{count} table entries cannot fit in {len(body) - pos} bytes")
        entries = []
        for _ in range(count):
            key, pos = TABLE_KEY.read(body, pos)
            value, pos = TABLE_VALUE.read(body, pos)
            entries.append(TableEntry(key, value))
        return tuple(entries), pos

    def write(self, value: Any, out: list[Buffer]) -> None:
        out.append(_INT.pack(len(value)))
        for entry in value:
            TABLE_KEY.write(entry.key, out)
            TABLE_VALUE.write(entry.value, out)


class _IteratorArgsKind(Kind):
    __slots__ = ()

    @staticmethod
    def _buffer(body: memoryview, pos: int) -> tuple[bytes, int]:
        if len(body) - pos < 4:
            return b"", pos
        length = _INT.unpack_from(body, pos)[0]
        pos += 4
        if length < 0 or length > len(body) - pos:
            raise ProtocolError(f"iterator buffer length {length} does not fit in {len(body) - pos} bytes")
        return bytes(body[pos : pos + length]), pos + length

    def read(self, body: memoryview, pos: int) -> tuple[TableIteratorArgs, int]:
        token, pos = self._buffer(body, pos)
        _prefix_filter, pos = self._buffer(body, pos)
        from_key, pos = self._buffer(body, pos)
        to_key, pos = self._buffer(body, pos)
        return TableIteratorArgs(token, from_key, to_key), pos

    def write(self, value: Any, out: list[Buffer]) -> None:
        for part in (value.continuation_token, b"", value.from_key, value.to_key):
            out.append(_INT.pack(len(part)))
            if part:
                out.append(part)


TABLE_ENTRIES: Kind = _TableEntriesKind("TableEntries", 4)
ITERATOR_ARGS: Kind = _IteratorArgsKind("TableIteratorArgs", 0)


@register
@dataclass(frozen=True, slots=True)
class GetTableSegmentInfo(WireCommand):
    """Ask for a table segment's state."""

    TYPE_CODE = 68
    LAYOUT = (I64, UTF, UTF)
    request_id: int
    segment_name: str
    delegation_token: str


@register
@dataclass(frozen=True, slots=True)
class TableSegmentInfo(WireCommand):
    """A table segment's state."""

    TYPE_CODE = 69
    LAYOUT = (I64, UTF, I64, I64, I64, I32)
    request_id: int
    segment_name: str
    start_offset: int
    length: int
    entry_count: int
    key_length: int


@register
@dataclass(frozen=True, slots=True)
class CreateTableSegment(WireCommand):
    """Create a table segment. The last three fields are optional, each read if it fits (False, 0, 0)."""

    TYPE_CODE = 70
    LAYOUT = (I64, UTF, UTF, Opt(BOOL, False, 1), Opt(I32, 0, 4), Opt(I64, 0, 8))
    request_id: int
    segment: str
    delegation_token: str
    sorted_deprecated: bool
    key_length: int
    rollover_size_bytes: int


@register
@dataclass(frozen=True, slots=True)
class DeleteTableSegment(WireCommand):
    """Delete a table segment (only if empty when ``must_be_empty``)."""

    TYPE_CODE = 71
    LAYOUT = (I64, UTF, BOOL, UTF)
    request_id: int
    segment: str
    must_be_empty: bool
    delegation_token: str


@register
@dataclass(frozen=True, slots=True)
class UpdateTableEntries(WireCommand):
    """Insert or update entries. ``table_segment_offset`` optional (-1: no condition)."""

    TYPE_CODE = 74
    LAYOUT = (I64, UTF, UTF, TABLE_ENTRIES, Opt(I64, -1, 1))
    request_id: int
    segment: str
    delegation_token: str
    entries: tuple[TableEntry, ...]
    table_segment_offset: int


@register
@dataclass(frozen=True, slots=True)
class TableEntriesUpdated(WireCommand):
    """Reply to ``UpdateTableEntries``: the new version of each key, in request order."""

    TYPE_CODE = 75
    LAYOUT = (I64, ListOf(I64))
    request_id: int
    updated_versions: tuple[int, ...]


@register
@dataclass(frozen=True, slots=True)
class RemoveTableKeys(WireCommand):
    """Remove keys. ``table_segment_offset`` optional (-1: no condition)."""

    TYPE_CODE = 76
    LAYOUT = (I64, UTF, UTF, ListOf(TABLE_KEY), Opt(I64, -1, 1))
    request_id: int
    segment: str
    delegation_token: str
    keys: tuple[TableKey, ...]
    table_segment_offset: int


@register
@dataclass(frozen=True, slots=True)
class TableKeysRemoved(WireCommand):
    """Reply to ``RemoveTableKeys``."""

    TYPE_CODE = 77
    LAYOUT = (I64, UTF)
    request_id: int
    segment: str


@register
@dataclass(frozen=True, slots=True)
class ReadTable(WireCommand):
    """Read the values of some keys."""

    TYPE_CODE = 78
    LAYOUT = (I64, UTF, UTF, ListOf(TABLE_KEY))
    request_id: int
    segment: str
    delegation_token: str
    keys: tuple[TableKey, ...]


@register
@dataclass(frozen=True, slots=True)
class TableRead(WireCommand):
    """Reply to ``ReadTable``."""

    TYPE_CODE = 79
    LAYOUT = (I64, UTF, TABLE_ENTRIES)
    request_id: int
    segment: str
    entries: tuple[TableEntry, ...]


@register
@dataclass(frozen=True, slots=True)
class ReadTableKeys(WireCommand):
    """Iterate keys."""

    TYPE_CODE = 83
    LAYOUT = (I64, UTF, UTF, I32, ITERATOR_ARGS)
    request_id: int
    segment: str
    delegation_token: str
    suggested_key_count: int
    args: TableIteratorArgs


@register
@dataclass(frozen=True, slots=True)
class TableKeysRead(WireCommand):
    """Reply to ``ReadTableKeys``."""

    TYPE_CODE = 84
    LAYOUT = (I64, UTF, ListOf(TABLE_KEY), BLOB)
    request_id: int
    segment: str
    keys: tuple[TableKey, ...]
    continuation_token: bytes


@register
@dataclass(frozen=True, slots=True)
class ReadTableEntries(WireCommand):
    """Iterate entries."""

    TYPE_CODE = 85
    LAYOUT = (I64, UTF, UTF, I32, ITERATOR_ARGS)
    request_id: int
    segment: str
    delegation_token: str
    suggested_entry_count: int
    args: TableIteratorArgs


@register
@dataclass(frozen=True, slots=True)
class TableEntriesRead(WireCommand):
    """Reply to ``ReadTableEntries``."""

    TYPE_CODE = 86
    LAYOUT = (I64, UTF, TABLE_ENTRIES, BLOB)
    request_id: int
    segment: str
    entries: tuple[TableEntry, ...]
    continuation_token: bytes


@register
@dataclass(frozen=True, slots=True)
class TableEntriesDeltaRead(WireCommand):
    """Reply to ``ReadTableEntriesDelta``."""

    TYPE_CODE = 87
    LAYOUT = (I64, UTF, TABLE_ENTRIES, BOOL, BOOL, I64)
    request_id: int
    segment: str
    entries: tuple[TableEntry, ...]
    should_clear: bool
    reached_end: bool
    last_position: int


@register
@dataclass(frozen=True, slots=True)
class ReadTableEntriesDelta(WireCommand):
    """Read entries changed since ``from_position``."""

    TYPE_CODE = 88
    LAYOUT = (I64, UTF, UTF, I64, I32)
    request_id: int
    segment: str
    delegation_token: str
    from_position: int
    suggested_entry_count: int
