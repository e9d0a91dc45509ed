"""The table store of one segment container: key -> value tables with versions, on table segments.

After Pravega's ``ContainerTableExtensionImpl``. Every update or removal batch is serialized
(:mod:`~segment_store.tables.entry_serializer`) and written with one append, so a batch is all-or-nothing;
a key's version is the offset of the entry that last wrote it.

The key index (:class:`~segment_store.tables.key_index.KeyIndex`) lives in memory and is built on first
use by reading the segment from its head; values are read from the segment when asked for.

Concurrency and failures:

- Updates of one table run one at a time under the table's lock, which covers catching the index up with
  the segment, checking the conditions, the append and applying the batch to the index. The locked section
  runs in its own task, so a caller that is cancelled mid-append does not release the lock before the
  append has an outcome. Different tables update concurrently.
- The index changes only after the append succeeded. Before every locked section the index is caught up
  with the segment's length, so an append that failed but landed anyway (unknown outcome) is indexed
  then; conditional batches append with ``expected_offset`` = the indexed tail, so such an entry can never
  slip between a check and the append (the batch is re-checked instead).
- Reads do not take the lock unless the index is behind the segment. A read whose entry a concurrent
  compaction truncated away looks the key up again.

Compaction (:class:`~segment_store.tables.compactor.TableCompactor`) runs at the end of an update when due,
inside the same locked section; its failure is logged and does not fail the update.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any, TypeVar

from segment_store.tables.attributes import COMPACTION_OFFSET, KEY_LENGTH
from segment_store.tables.compactor import TableCompactor
from segment_store.tables.config import TableConfig
from segment_store.tables.entries import (
    MAX_FIXED_KEY_LENGTH,
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
from segment_store.tables.entry_serializer import ParsedEntry, read_entry, scan, serialize
from segment_store.tables.host import SegmentHost
from segment_store.tables.key_index import KeyIndex
from segstore_shared.contracts import (
    ROLLOVER_SIZE,
    BadOffsetError,
    InvalidOffsetError,
    SegmentInfo,
    SegmentNotExistsError,
    SegmentTruncatedError,
    SegmentType,
    SegmentTypeMismatchError,
    SegstoreError,
)
from segstore_shared.table_errors import (
    BadContinuationTokenError,
    BadKeyLengthError,
    InvalidTableKeyError,
    TableBatchTooLargeError,
    TableConfigError,
    TableDataCorruptedError,
    TableKeyBadVersionError,
    TableKeyNotExistsError,
    TableKeyTooLongError,
    TableSegmentNotEmptyError,
    TableValueTooLongError,
)

logger = logging.getLogger(__name__)

R = TypeVar("R")
_Item = tuple[bytes, bytes | None, int]  # key, value (None: removal), condition
_READ_ATTEMPTS = 3


@dataclass(eq=False)
class _Table:
    name: str
    segment_id: int
    key_length: int  # 0: variable-length keys
    index: KeyIndex | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


def _head(info: SegmentInfo) -> int:
    """Where live entries start: the compaction offset, or the start offset if the segment is truncated past it."""
    return max(info.start_offset, info.attributes.get(COMPACTION_OFFSET, 0))


class TableStore:
    """Table segments of one container (see module docstring). One instance per container and event loop."""

    def __init__(self, host: SegmentHost, config: TableConfig | None = None) -> None:
        self._host = host
        self.config = config or TableConfig()
        self._compactor = TableCompactor(host, self.config)
        self._tables: dict[str, _Table] = {}
        self._tasks: set[asyncio.Task[Any]] = set()

    async def close(self) -> None:
        """Wait for locked sections whose callers were cancelled."""
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    # ---- segments --------------------------------------------------------------------------------------------
    async def create_segment(
        self,
        name: str,
        key_length: int = 0,
        rollover_size_bytes: int = 0,
        segment_type: SegmentType = SegmentType.TABLE,
    ) -> None:
        """Create a table segment; ``key_length`` > 0 makes a fixed-key table whose keys all have that length.

        ``segment_type`` may add role flags (SYSTEM, CRITICAL, ...); the table flags are set from ``key_length``.
        Raises SegmentExistsError, TableConfigError (``key_length`` outside ``[0, 256]``).
        """
        if not 0 <= key_length <= MAX_FIXED_KEY_LENGTH:
            raise TableConfigError(name, f"key_length {key_length} is outside [0, {MAX_FIXED_KEY_LENGTH}]")
        if not key_length and segment_type & SegmentType.FIXED_KEY_TABLE == SegmentType.FIXED_KEY_TABLE:
            raise TableConfigError(name, "a fixed-key table needs a key_length")
        segment_type |= SegmentType.FIXED_KEY_TABLE if key_length else SegmentType.TABLE
        attributes = {COMPACTION_OFFSET: 0}
        if key_length:
            attributes[KEY_LENGTH] = key_length
        if rollover_size_bytes > 0:
            attributes[ROLLOVER_SIZE] = rollover_size_bytes
        await self._host.create_segment(name, segment_type, attributes)

    async def delete_segment(self, name: str, must_be_empty: bool = False) -> None:
        """Delete a table segment. Raises SegmentNotExistsError, TableSegmentNotEmptyError (``must_be_empty``)."""
        table, _ = await self._open(name)

        async def delete() -> None:
            if must_be_empty:
                await self._sync(table)
                count = len(table.index) if table.index is not None else 0
                if count:
                    raise TableSegmentNotEmptyError(name, count)
            await self._host.delete_segment(name)
            if self._tables.get(name) is table:
                del self._tables[name]

        await self._exclusive(table, delete)

    async def info(self, name: str) -> TableSegmentInfo:
        """The table's offsets and its number of keys. Raises SegmentNotExistsError."""
        table, info = await self._open(name)
        index = await self._ready(table, info)
        return TableSegmentInfo(name, info.start_offset, info.length, len(index), table.key_length)

    # ---- updates ---------------------------------------------------------------------------------------------
    async def put(self, name: str, entries: Sequence[TableEntry], table_segment_offset: int = -1) -> list[int]:
        """Insert or update entries atomically; returns each entry's new version, in order.

        An entry whose ``version`` is not NO_VERSION is a condition (see :mod:`~segment_store.tables.entries`);
        any failed condition fails the whole batch. ``table_segment_offset`` >= 0: append only if the segment's
        length is that. Raises SegmentNotExistsError, TableKeyNotExistsError, TableKeyBadVersionError,
        BadOffsetError, InvalidTableKeyError (and subclasses), TableValueTooLongError, TableBatchTooLargeError.
        """
        items = [(e.key, e.value, e.version) for e in entries]
        return await self._update(name, items, table_segment_offset)

    async def remove(self, name: str, keys: Sequence[TableKey], table_segment_offset: int = -1) -> None:
        """Remove keys atomically; conditions and errors as :meth:`put`. Removing a missing key unconditionally
        is not an error."""
        await self._update(name, [(k.key, None, k.version) for k in keys], table_segment_offset)

    async def _update(self, name: str, items: Sequence[_Item], table_segment_offset: int) -> list[int]:
        table, _ = await self._open(name)
        if not items:
            return []
        self._validate(table, items)
        data, positions = serialize([(key, value, NO_VERSION) for key, value, _ in items])
        if len(data) > self.config.max_batch_bytes:
            raise TableBatchTooLargeError(name, len(data), self.config.max_batch_bytes)
        conditional = any(condition != NO_VERSION for _, _, condition in items)

        async def update() -> list[int]:
            for attempt in range(1, self.config.conditional_append_attempts + 1):
                await self._sync(table)
                index = self._loaded(table)
                if conditional:
                    self._check_conditions(name, index, items)
                if table_segment_offset >= 0:
                    expected: int | None = table_segment_offset
                else:
                    expected = index.tail if conditional else None
                try:
                    offset = await self._host.append(name, data, expected_offset=expected)
                except BadOffsetError:
                    if table_segment_offset >= 0 or attempt == self.config.conditional_append_attempts:
                        raise
                    logger.info("%s: an unindexed append landed before a conditional batch; re-checking", name)
                    continue
                await self._record(table, offset, items, positions, len(data))
                await self._compact_if_due(table)
                return [offset + p for p in positions]
            raise AssertionError("unreachable")

        return await self._exclusive(table, update)

    def _validate(self, table: _Table, items: Sequence[_Item]) -> None:
        for key, value, _ in items:
            self._check_key(table, key)
            if value is not None and len(value) > MAX_VALUE_BYTES:
                raise TableValueTooLongError(table.name, len(value), MAX_VALUE_BYTES)

    @staticmethod
    def _check_key(table: _Table, key: bytes) -> None:
        if table.key_length and len(key) != table.key_length:
            raise BadKeyLengthError(table.name, key, table.key_length)
        if not key:
            raise InvalidTableKeyError(table.name, key, "empty key")
        if len(key) > MAX_KEY_BYTES:
            raise TableKeyTooLongError(table.name, key, MAX_KEY_BYTES)

    @staticmethod
    def _check_conditions(name: str, index: KeyIndex, items: Sequence[_Item]) -> None:
        """Pravega's order: a conditioned key that does not exist fails first, then version mismatches."""
        bad: dict[bytes, tuple[int, int]] = {}
        for key, _, condition in items:
            if condition == NO_VERSION:
                continue
            slot = index.get(key)
            if slot is None:
                if condition != NOT_EXISTS:
                    raise TableKeyNotExistsError(name, key)
            elif slot.version != condition:
                bad[key] = (condition, slot.version)
        if bad:
            raise TableKeyBadVersionError(name, bad)

    async def _record(
        self, table: _Table, offset: int, items: Sequence[_Item], positions: list[int], size: int
    ) -> None:
        """Apply a batch appended at ``offset`` to the index (under the lock)."""
        index = table.index
        try:
            if index is None or index.tail > offset:
                raise TableDataCorruptedError(table.name, offset, "the index is ahead of an append it has not seen")
            if index.tail < offset:
                await self._catch_up(table.name, index, offset)
        except SegstoreError:
            logger.warning(
                "%s: index dropped after append at %d; rebuilt on next use", table.name, offset, exc_info=True
            )
            table.index = None
            return
        ends = [*positions[1:], size]
        for (key, value, _), position, end in zip(items, positions, ends, strict=True):
            index.apply(ParsedEntry(offset + position, end - position, key, None, value is None, NO_VERSION))

    async def compact(self, name: str, force: bool = False) -> bool:
        """Run one compaction pass now if due (always if ``force``); returns whether the head moved."""
        table, _ = await self._open(name)

        async def run() -> bool:
            info = await self._sync(table)
            index = self._loaded(table)
            if not force and not self._compactor.is_due(index):
                return False
            return await self._compactor.compact(name, index, info)

        return await self._exclusive(table, run)

    async def _compact_if_due(self, table: _Table) -> None:
        index = table.index
        if index is None or not self._compactor.is_due(index):
            return
        try:
            info = await self._host.get_info(table.name)
            if info.length == index.tail:
                await self._compactor.compact(table.name, index, info)
        except Exception:
            # The update before it succeeded; a failed pass is retried after the next update.
            logger.exception("%s: compaction failed", table.name)
            table.index = None

    # ---- reads -----------------------------------------------------------------------------------------------
    async def get(self, name: str, keys: Sequence[bytes]) -> list[TableEntry | None]:
        """The current entry of each key (None if absent), in order. Raises SegmentNotExistsError,
        BadKeyLengthError (fixed-key tables)."""
        table, info = await self._open(name)
        for key in keys:
            if table.key_length and len(key) != table.key_length:
                raise BadKeyLengthError(name, key, table.key_length)
        await self._ready(table, info)
        return list(await asyncio.gather(*(self._read_current(table, key) for key in keys)))

    async def _read_current(self, table: _Table, key: bytes) -> TableEntry | None:
        for attempt in range(1, _READ_ATTEMPTS + 1):
            index = table.index or await self._ready(table, await self._host.get_info(table.name))
            slot = index.get(key)
            if slot is None:
                return None
            try:
                entry = await read_entry(self._host, table.name, slot.offset, slot.length)
            except SegmentTruncatedError:
                if attempt == _READ_ATTEMPTS:
                    raise
                continue  # a compaction moved the entry; the index already points at the copy
            if entry.key != key or entry.removed:
                raise TableDataCorruptedError(table.name, slot.offset, "the index points at another entry")
            return TableEntry(key, entry.value or b"", slot.version)
        raise AssertionError("unreachable")

    async def read_keys(
        self,
        name: str,
        suggested_count: int,
        continuation_token: bytes = b"",
        from_key: bytes = b"",
        to_key: bytes = b"",
    ) -> Page[TableKey]:
        """A page of keys with their versions (see :class:`~segment_store.tables.entries.Page`).

        Order is stable: by key hash, or by key in fixed-key tables, where ``from_key``/``to_key`` (inclusive,
        empty = unbounded) limit the range; hash tables ignore them. Raises BadContinuationTokenError.
        """
        found, token = await self._iterate(name, suggested_count, continuation_token, from_key, to_key, False)
        return Page([TableKey(e.key, e.version) for e in found], token)

    async def read_entries(
        self,
        name: str,
        suggested_count: int,
        continuation_token: bytes = b"",
        from_key: bytes = b"",
        to_key: bytes = b"",
    ) -> Page[TableEntry]:
        """A page of entries; as :meth:`read_keys`."""
        found, token = await self._iterate(name, suggested_count, continuation_token, from_key, to_key, True)
        return Page(found, token)

    async def _iterate(
        self,
        name: str,
        suggested_count: int,
        token: bytes,
        from_key: bytes,
        to_key: bytes,
        with_values: bool,
    ) -> tuple[list[TableEntry], bytes]:
        """A page of entries (with empty values unless ``with_values``) and the token after it."""
        table, info = await self._open(name)
        index = await self._ready(table, info)
        try:
            last = index.position_of_token(token)
        except ValueError as e:
            raise BadContinuationTokenError(name, str(e)) from e
        fixed = bool(table.key_length)
        low = from_key if fixed and from_key else None
        high = to_key if fixed and to_key else None
        count = max(1, suggested_count)
        out: list[TableEntry] = []
        size = 0
        while len(out) < count and size < self.config.max_read_result_bytes:
            positions = index.positions_after(last, count - len(out), low, high)
            if not positions:
                break
            keys = [index.key_at(p) for p in positions]
            found: list[TableEntry | None]
            if with_values:
                found = list(await asyncio.gather(*(self._read_current(table, key) for key in keys)))
            else:
                slots = [index.get(key) for key in keys]
                found = [None if s is None else TableEntry(k, b"", s.version) for k, s in zip(keys, slots, strict=True)]
            for position, entry in zip(positions, found, strict=True):
                last = position
                if entry is None:
                    continue  # removed since the page was cut
                out.append(entry)
                size += len(entry.key) + len(entry.value)
                if size >= self.config.max_read_result_bytes:
                    break
            index = table.index or index
        return out, (index.token(last) if out and last is not None else b"")

    async def read_entries_delta(self, name: str, from_position: int, suggested_count: int) -> DeltaRead:
        """Entries written at or after ``from_position``, in segment order, removals included.

        Starts at the head instead if ``from_position`` is below it (``should_clear``). Each entry's version
        is the one it was written with (kept by compaction). Raises SegmentNotExistsError, InvalidOffsetError
        (``from_position`` outside ``[0, length]``), TableDataCorruptedError (not an entry boundary).
        """
        count = max(1, suggested_count)
        for attempt in range(1, _READ_ATTEMPTS + 1):
            info = await self._info(name)
            if not 0 <= from_position <= info.length:
                raise InvalidOffsetError(name, f"from_position {from_position} outside [0, {info.length}]")
            head = _head(info)
            start = max(from_position, head)
            entries: list[DeltaEntry] = []
            position, size = start, 0
            try:
                chunk = self.config.read_chunk_bytes
                async with aclosing(scan(self._host, name, start, info.length, chunk)) as scanned:
                    async for e in scanned:
                        entries.append(DeltaEntry(e.key, e.value or b"", e.version, e.removed))
                        position = e.offset + e.length
                        size += e.length
                        if len(entries) >= count or size >= self.config.max_read_result_bytes:
                            break
            except SegmentTruncatedError:
                if attempt == _READ_ATTEMPTS:
                    raise
                continue  # compacted while reading; start again from the new head
            return DeltaRead(entries, from_position < head, position >= info.length, position)
        raise AssertionError("unreachable")

    # ---- table state -----------------------------------------------------------------------------------------
    async def _info(self, name: str) -> SegmentInfo:
        info = await self._host.get_info(name)
        if not info.segment_type.is_table:
            raise SegmentTypeMismatchError(name, "not a table segment")
        return info

    async def _open(self, name: str) -> tuple[_Table, SegmentInfo]:
        """The table's state, replaced if the segment was deleted and created again."""
        info = await self._info(name)
        table = self._tables.get(name)
        if table is None or table.segment_id != info.segment_id:
            key_length = 0
            if info.segment_type & SegmentType.FIXED_KEY_TABLE == SegmentType.FIXED_KEY_TABLE:
                key_length = info.attributes.get(KEY_LENGTH, 0)
                if not 0 < key_length <= MAX_FIXED_KEY_LENGTH:
                    raise TableConfigError(name, f"fixed-key table with key length attribute {key_length}")
            table = _Table(name, info.segment_id, key_length)
            self._tables[name] = table
        return table, info

    async def _ready(self, table: _Table, info: SegmentInfo) -> KeyIndex:
        """The index, caught up with ``info`` (taking the lock only if it is behind)."""
        index = table.index
        if index is None or index.tail < info.length or _head(info) > index.head:
            await self._exclusive(table, lambda: self._sync(table))
            index = self._loaded(table)
        return index

    def _loaded(self, table: _Table) -> KeyIndex:
        if table.index is None:
            raise SegmentNotExistsError(table.name, "table index unavailable")
        return table.index

    async def _sync(self, table: _Table) -> SegmentInfo:
        """Catch the index up with the segment, or rebuild it from the head (under the lock)."""
        info = await self._info(table.name)
        if info.segment_id != table.segment_id:
            raise SegmentNotExistsError(table.name, "deleted while in use")
        head = _head(info)
        index = table.index
        if index is None or head > index.head or info.length < index.tail:
            fresh = KeyIndex(head, hashed=not table.key_length)
            await self._catch_up(table.name, fresh, info.length)
            table.index = fresh
        elif index.tail < info.length:
            await self._catch_up(table.name, index, info.length)
        return info

    async def _catch_up(self, name: str, index: KeyIndex, end: int) -> None:
        async with aclosing(scan(self._host, name, index.tail, end, self.config.read_chunk_bytes, False)) as entries:
            async for entry in entries:
                index.apply(entry)

    async def _exclusive(self, table: _Table, section: Callable[[], Awaitable[R]]) -> R:
        """Run ``section`` under the table's lock in its own task: cancelling the caller does not cut it short."""

        async def run() -> R:
            async with table.lock:
                return await section()

        task = asyncio.ensure_future(run())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            task.add_done_callback(_report_orphan)
            raise


def _report_orphan(task: asyncio.Future[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.warning("a table update whose caller was cancelled failed", exc_info=task.exception())
