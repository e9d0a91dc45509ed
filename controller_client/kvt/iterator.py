"""Iterating a key-value table's keys or entries in key order (Java's ``KeyValueTableIteratorImpl``).

A :class:`KeyValueTableIteratorBuilder` (``table.iterator(max_iteration_size)``) makes a
:class:`KeyValueTableIterator` over a range of stored keys ``[from, to]`` (inclusive; primary + secondary):

* ``for_primary_key(pk)`` - every key of one primary key; with ``from_secondary``/``to_secondary`` a range of its
  secondary keys;
* ``for_primary_key_prefix(pk, secondary_prefix)`` - the keys of one primary key whose secondary key starts so;
* ``for_range(from_pk, to_pk)`` - the primary keys between two (inclusive; None: unbounded);
* ``for_prefix(pk_prefix)`` - the primary keys starting with a prefix;
* ``all()``.

Bounds are padded as Java pads them (with 0x00 below, 0xFF above). When both ends have one primary key, only its
table segment is read; otherwise every segment is read in order and the reads are merged, so keys come in
unsigned byte order of primary key, then secondary key. Each segment is read page by page, the next page from
the key after the last one (Java's ``SegmentIteratorArgs.next``), so a table changing meanwhile is read without
a key twice; keys added or removed behind the position may or may not be seen.
"""

from __future__ import annotations

import heapq
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Protocol, TypeVar

from controller_client.kvt.model import KeyValueTableConfiguration, TableEntry, TableKey, Version
from controller_client.kvt.routing import Partitions
from controller_client.model import InvalidModelError, SegmentRange
from segment_store.client import SegmentClient

_I = TypeVar("_I", TableKey, TableEntry)
_T = TypeVar("_T")
MIN_BYTE, MAX_BYTE = b"\x00", b"\xff"


class IteratedTable(Protocol):
    """What an iteration reads of its table (:class:`~controller_client.kvt.table.KeyValueTable` has it)."""

    @property
    def config(self) -> KeyValueTableConfiguration: ...

    @property
    def partitions(self) -> Partitions: ...

    @property
    def client(self) -> SegmentClient: ...

    async def run(self, segment: SegmentRange, call: Callable[[str], Awaitable[_T]]) -> _T:
        """``call(segment name)`` through the table's segment caller, with the replies' errors as the table's."""
        ...

    def split_key(self, stored: bytes) -> TableKey: ...


def key_after(key: bytes) -> bytes | None:
    """The next key of the same length in unsigned byte order (None after the last one)."""
    data = bytearray(key)
    for i in range(len(data) - 1, -1, -1):
        if data[i] != 0xFF:
            data[i] += 1
            return bytes(data)
        data[i] = 0
    return None


def _pad(key: bytes | None, fill: bytes, size: int) -> bytes:
    key = key or b""
    return key + fill * (size - len(key))


def _exact(key: bytes | None, size: int, what: str) -> None:
    if key is not None and len(key) != size:
        raise InvalidModelError(f"{what}: must be {size} bytes, not {len(key)}")


def _at_most(key: bytes | None, size: int, what: str) -> None:
    if key is not None and len(key) > size:
        raise InvalidModelError(f"{what}: at most {size} bytes, not {len(key)}")


class KeyValueTableIteratorBuilder:
    def __init__(self, table: IteratedTable, max_iteration_size: int = 10) -> None:
        if max_iteration_size <= 0:
            raise InvalidModelError(f"max_iteration_size: must be positive, not {max_iteration_size}")
        self._table = table
        self._size = max_iteration_size
        config = table.config
        self._pk, self._sk = config.primary_key_length, config.secondary_key_length

    def _make(self, from_pk: bytes, from_sk: bytes, to_pk: bytes, to_sk: bytes) -> KeyValueTableIterator:
        return KeyValueTableIterator(self._table, from_pk, from_sk, to_pk, to_sk, self._size)

    def for_primary_key(
        self, primary_key: bytes, from_secondary: bytes | None = None, to_secondary: bytes | None = None
    ) -> KeyValueTableIterator:
        _exact(primary_key, self._pk, "primary key")
        _exact(from_secondary, self._sk, "from secondary key")
        _exact(to_secondary, self._sk, "to secondary key")
        return self._make(
            primary_key, _pad(from_secondary, MIN_BYTE, self._sk), primary_key, _pad(to_secondary, MAX_BYTE, self._sk)
        )

    def for_primary_key_prefix(self, primary_key: bytes, secondary_prefix: bytes) -> KeyValueTableIterator:
        _exact(primary_key, self._pk, "primary key")
        _at_most(secondary_prefix, self._sk, "secondary key prefix")
        return self._make(
            primary_key,
            _pad(secondary_prefix, MIN_BYTE, self._sk),
            primary_key,
            _pad(secondary_prefix, MAX_BYTE, self._sk),
        )

    def for_range(self, from_primary: bytes | None = None, to_primary: bytes | None = None) -> KeyValueTableIterator:
        _exact(from_primary, self._pk, "from primary key")
        _exact(to_primary, self._pk, "to primary key")
        return self._make(
            _pad(from_primary, MIN_BYTE, self._pk),
            MIN_BYTE * self._sk,
            _pad(to_primary, MAX_BYTE, self._pk),
            MAX_BYTE * self._sk,
        )

    def for_prefix(self, primary_prefix: bytes) -> KeyValueTableIterator:
        _at_most(primary_prefix, self._pk, "primary key prefix")
        return self._make(
            _pad(primary_prefix, MIN_BYTE, self._pk),
            MIN_BYTE * self._sk,
            _pad(primary_prefix, MAX_BYTE, self._pk),
            MAX_BYTE * self._sk,
        )

    def all(self) -> KeyValueTableIterator:
        return self.for_range(None, None)


class KeyValueTableIterator:
    """Keys (:meth:`keys`) or entries (:meth:`entries`) between two stored keys, in key order; each call starts
    a new pass."""

    def __init__(
        self, table: IteratedTable, from_pk: bytes, from_sk: bytes, to_pk: bytes, to_sk: bytes, page_size: int
    ) -> None:
        self._table = table
        self.from_key = from_pk + from_sk
        self.to_key = to_pk + to_sk
        self.single_segment = from_pk == to_pk
        self._first_primary = from_pk
        self._page = page_size

    def _segments(self) -> list[SegmentRange]:
        if self.single_segment:
            return [self._table.partitions.segment_for(self._first_primary)]
        return list(self._table.partitions.segments)

    def keys(self) -> AsyncIterator[TableKey]:
        """The keys in the range, in key order."""
        return self._merged(self._key_page)

    def entries(self) -> AsyncIterator[TableEntry]:
        """The entries in the range, in key order, each with its version."""
        return self._merged(self._entry_page)

    async def segment_entries(self, segment: SegmentRange) -> AsyncIterator[TableEntry]:
        """The entries in the range that one table segment holds, in key order (a reader that splits the work by
        segment, as Spark's tasks do, reads each this way)."""
        async for _, entry in self._segment(segment, self._entry_page):
            yield entry

    async def _key_page(self, segment: SegmentRange, start: bytes) -> list[tuple[bytes, TableKey]]:
        table = self._table
        found = await table.run(
            segment, lambda name: table.client.read_table_keys(name, self._page, b"", start, self.to_key)
        )
        return [(k.key, table.split_key(k.key)) for k in found.keys]

    async def _entry_page(self, segment: SegmentRange, start: bytes) -> list[tuple[bytes, TableEntry]]:
        table = self._table
        found = await table.run(
            segment, lambda name: table.client.read_table_entries(name, self._page, b"", start, self.to_key)
        )
        return [
            (e.key, TableEntry(table.split_key(e.key), Version(segment.segment_id, e.version), e.value))
            for e in found.entries
        ]

    async def _merged(
        self, page: Callable[[SegmentRange, bytes], Awaitable[list[tuple[bytes, _I]]]]
    ) -> AsyncIterator[_I]:
        if self.from_key > self.to_key:
            return
        streams = [self._segment(segment, page) for segment in self._segments()]
        heads: list[tuple[bytes, int, _I]] = []
        for index, stream in enumerate(streams):
            first = await anext(stream, None)
            if first is not None:
                heapq.heappush(heads, (first[0], index, first[1]))
        while heads:
            _, index, item = heapq.heappop(heads)
            yield item
            following = await anext(streams[index], None)
            if following is not None:
                heapq.heappush(heads, (following[0], index, following[1]))

    async def _segment(
        self, segment: SegmentRange, page: Callable[[SegmentRange, bytes], Awaitable[list[tuple[bytes, _I]]]]
    ) -> AsyncIterator[tuple[bytes, _I]]:
        start: bytes | None = self.from_key
        while start is not None and start <= self.to_key:
            items = await page(segment, start)
            if not items:
                return
            for item in items:
                yield item
            start = key_after(items[-1][0])
