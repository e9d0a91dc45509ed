"""The container read index: where every readable byte of every segment is, and tail reads.

Data enters from two sides: committed appends (the durable log's listener, in
log order) and Tier-2 reads (ranges below ``storage_length`` fetched on demand).
Entries of one segment never overlap and are sorted by offset. Merged
transactions are served through *redirects* (read the source segment's Tier-2
data) until the storage writer has concatenated them into the target.

Guarantees:
- a read returns only committed (acknowledged) bytes, exactly as appended;
- a read below ``start_offset`` raises :class:`SegmentTruncatedError`; a read of a
  deleted or merged segment raises :class:`SegmentNotExistsError`;
- a read at the tail of an unsealed segment waits up to its timeout and returns
  as soon as data arrives (empty result on timeout); at the end of a sealed
  segment it returns ``end_of_segment``;
- eviction only drops entries already in Tier-2 (below ``storage_length``), or of
  segments that no longer exist; the budget is the process's (shared by its containers'
  read indexes, :mod:`segment_store.reading.cache`), and :meth:`ReadIndex.close` gives this
  index's share back.
"""

from __future__ import annotations

import asyncio
import bisect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from segment_store.logs.operations import (
    AppendOperation,
    DeleteOperation,
    MergeOperation,
    Operation,
    SealOperation,
    TruncateOperation,
)
from segment_store.metadata import ContainerMetadata, SegmentMetadata
from segment_store.metrics import NO_METRICS, StoreMetrics
from segment_store.reading.cache import CacheAccount, CacheBudget, EntryKey
from segstore_shared.contracts import (
    InvalidOffsetError,
    SegmentNotExistsError,
    SegmentTruncatedError,
)
from segstore_shared.errors import SegstoreError

StorageReader = Callable[[str, int, int], Awaitable[bytes]]


class ReadIndexCorruptedError(SegstoreError):
    """Committed data is neither in the cache nor in Tier-2 (a bug or lost Tier-2 data)."""


@dataclass(frozen=True, slots=True)
class ReadIndexConfig:
    append_block_bytes: int = 1024 * 1024
    storage_read_block_bytes: int = 4 * 1024 * 1024

    def __post_init__(self) -> None:
        if self.append_block_bytes < 4096:
            raise ValueError("append_block_bytes: must be at least 4096")
        if self.storage_read_block_bytes < 4096:
            raise ValueError("storage_read_block_bytes: must be at least 4096")


@dataclass(frozen=True, slots=True)
class ReadResult:
    """``data`` starts at ``offset``; empty with ``end_of_segment`` at a sealed end, or at the tail on timeout."""

    offset: int
    data: bytes
    end_of_segment: bool = False

    @property
    def at_tail_timeout(self) -> bool:
        return not self.data and not self.end_of_segment


@dataclass(slots=True)
class _Redirect:
    offset: int
    length: int
    source_name: str


class _AppendBlock:
    """A cache block that appends are copied into: its buffer is allocated once, at its capacity, and filled
    in place, so an append costs one copy of its own bytes (a growing ``bytearray`` is reallocated, and
    copied whole, each time it outgrows its memory: with many segments growing at once, several times per
    append). ``len`` is the bytes filled; slicing returns ``bytes`` of the filled part."""

    __slots__ = ("buf", "used")

    def __init__(self, capacity: int, data: bytes | memoryview) -> None:
        self.buf = bytearray(capacity)
        self.used = len(data)
        self.buf[: self.used] = data

    def add(self, data: bytes | memoryview) -> None:
        """Copy ``data`` after the filled part; the caller checked it fits."""
        used = self.used
        self.buf[used : used + len(data)] = data
        self.used = used + len(data)

    def __len__(self) -> int:
        return self.used

    def __getitem__(self, part: slice) -> bytes:
        start, stop, _ = part.indices(self.used)
        with memoryview(self.buf) as view:
            return view[start:stop].tobytes()

    def __bytes__(self) -> bytes:
        return self[:]


_FIRST_APPEND_BLOCK_BYTES = 16 * 1024


@dataclass(slots=True)
class _SegmentIndex:
    segment_id: int
    offsets: list[int] = field(default_factory=list)
    blocks: list[bytes | _AppendBlock] = field(default_factory=list)
    next_capacity: int = _FIRST_APPEND_BLOCK_BYTES  # of the next append block (doubles up to the config's)
    redirects: list[_Redirect] = field(default_factory=list)
    waiters: list[asyncio.Future[None]] = field(default_factory=list)

    def find(self, offset: int) -> int:
        """Index of the entry holding ``offset``, or -1."""
        i = bisect.bisect_right(self.offsets, offset) - 1
        if i >= 0 and offset < self.offsets[i] + len(self.blocks[i]):
            return i
        return -1

    def next_start_after(self, offset: int) -> int | None:
        i = bisect.bisect_right(self.offsets, offset)
        return self.offsets[i] if i < len(self.offsets) else None

    def insert(self, offset: int, data: bytes) -> None:
        i = bisect.bisect_left(self.offsets, offset)
        self.offsets.insert(i, offset)
        self.blocks.insert(i, data)

    def wake(self) -> None:
        waiters, self.waiters = self.waiters, []
        for w in waiters:
            if not w.done():
                w.set_result(None)


class ReadIndex:
    """Read index of one container (see module docstring). Runs on the container's event loop."""

    def __init__(
        self,
        metadata: ContainerMetadata,
        storage_reader: StorageReader,
        budget: CacheBudget | None = None,
        config: ReadIndexConfig | None = None,
        metrics: StoreMetrics = NO_METRICS,
    ) -> None:
        self.metadata = metadata
        self._metrics = metrics
        self.config = config or ReadIndexConfig()
        self.budget: CacheAccount = (budget or CacheBudget()).account(self._may_evict, self._drop_entry)
        """This index's share of the (process-wide) cache budget."""
        self._read_storage = storage_reader
        self._indexes: dict[int, _SegmentIndex] = {}

    def _index(self, segment_id: int) -> _SegmentIndex:
        index = self._indexes.get(segment_id)
        if index is None:
            index = self._indexes[segment_id] = _SegmentIndex(segment_id)
        return index

    # ---- committed operations (durable log listener) ---------------------------------------------------------
    def on_committed(self, ops: list[Operation]) -> None:
        for op in ops:
            if isinstance(op, AppendOperation):
                self._append(op.segment_id, op.offset, op.data)
            elif isinstance(op, MergeOperation):
                self._merge(op)
            elif isinstance(op, SealOperation):
                self._index(op.segment_id).wake()
            elif isinstance(op, TruncateOperation):
                self._truncate(op.segment_id, op.offset)
            elif isinstance(op, DeleteOperation):
                self.drop_segment(op.segment_id)
        if self.budget.needs_eviction:
            self.evict()

    def _append(self, segment_id: int, offset: int, data: bytes | memoryview) -> None:
        index = self._index(segment_id)
        size = len(data)
        if index.blocks:
            last = index.blocks[-1]
            if (
                type(last) is _AppendBlock
                and index.offsets[-1] + last.used == offset
                and last.used + size <= len(last.buf)
            ):
                last.add(data)
                index.wake()
                return
        limit = self.config.append_block_bytes
        block: bytes | _AppendBlock
        if size >= limit // 4:
            block = data if isinstance(data, bytes) else bytes(data)
            budget = size
        else:  # blocks of a segment grow from 16 KiB to the limit: a segment that gets little holds little
            capacity = min(limit, max(index.next_capacity, 2 * size))
            index.next_capacity = min(limit, 2 * capacity)
            block = _AppendBlock(capacity, data)
            budget = capacity  # the memory it holds
        index.offsets.append(offset)
        index.blocks.append(block)
        self.budget.add((segment_id, offset), budget)
        index.wake()

    def _merge(self, op: MergeOperation) -> None:
        source = self.metadata.get(op.source_id)
        target = self._index(op.segment_id)
        src = self._indexes.pop(op.source_id, None)
        if src is not None:
            for offset, block in zip(src.offsets, src.blocks, strict=True):
                self.budget.remove((op.source_id, offset))
                new_offset = op.target_offset + offset
                target.insert(new_offset, bytes(block))
                self.budget.add((op.segment_id, new_offset), len(block))
            src.wake()
        if source is not None and op.length > 0:
            target.redirects.append(_Redirect(op.target_offset, op.length, source.name))
        target.wake()

    def _truncate(self, segment_id: int, start_offset: int) -> None:
        index = self._indexes.get(segment_id)
        if index is None:
            return
        while index.blocks and index.offsets[0] + len(index.blocks[0]) <= start_offset:
            self.budget.remove((segment_id, index.offsets.pop(0)))
            index.blocks.pop(0)

    def merge_completed(self, target_id: int) -> None:
        """Tier-2 concatenated a merged source into ``target_id``: drop redirects now below its storage length."""
        index = self._indexes.get(target_id)
        segment = self.metadata.get(target_id)
        if index is not None and segment is not None and index.redirects:
            index.redirects = [r for r in index.redirects if r.offset + r.length > segment.storage_length]

    def drop_segment(self, segment_id: int) -> None:
        index = self._indexes.pop(segment_id, None)
        if index is None:
            return
        for offset in index.offsets:
            self.budget.remove((segment_id, offset))
        index.wake()

    # ---- eviction -------------------------------------------------------------------------------------------
    def _may_evict(self, key: EntryKey) -> bool:
        segment_id, offset = key
        index = self._indexes.get(segment_id)
        segment = self.metadata.get(segment_id)
        if index is None or segment is None or not segment.live:
            return True
        i = index.find(offset)
        return i < 0 or offset + len(index.blocks[i]) <= segment.storage_length

    def _drop_entry(self, key: EntryKey) -> None:
        segment_id, offset = key
        index = self._indexes.get(segment_id)
        if index is None:
            return
        i = index.find(offset)
        if i >= 0 and index.offsets[i] == offset:
            del index.offsets[i]
            del index.blocks[i]

    def evict(self) -> int:
        """Evict least recently used data that is already in Tier-2; returns bytes freed."""
        for index in self._indexes.values():
            segment = self.metadata.get(index.segment_id)
            if segment is not None and index.redirects:
                index.redirects = [r for r in index.redirects if r.offset + r.length > segment.storage_length]
        return self.budget.evict()

    def close(self) -> None:
        """The container stopped: give the cache back (every entry leaves the budget) and wake tail readers."""
        self.budget.close()
        indexes, self._indexes = self._indexes, {}
        for index in indexes.values():
            index.wake()

    # ---- reads ----------------------------------------------------------------------------------------------
    def _segment(self, segment_id: int) -> SegmentMetadata:
        segment = self.metadata.get(segment_id)
        if segment is None or not segment.live:
            raise SegmentNotExistsError(segment.name if segment else f"#{segment_id}")
        return segment

    async def read(self, segment_id: int, offset: int, max_length: int, timeout_s: float) -> ReadResult:
        """Read up to ``max_length`` committed bytes at ``offset`` (see module docstring for the cases)."""
        if max_length <= 0:
            raise ValueError("max_length must be positive")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, timeout_s)
        while True:
            segment = self._segment(segment_id)
            if offset < segment.start_offset:
                raise SegmentTruncatedError(segment.name, segment.start_offset, offset)
            if offset < segment.length:
                return await self._read_available(segment, offset, min(max_length, segment.length - offset))
            if segment.sealed:
                if offset > segment.length:
                    raise InvalidOffsetError(segment.name, f"offset {offset} beyond sealed length {segment.length}")
                return ReadResult(offset, b"", end_of_segment=True)
            remaining = deadline - loop.time()
            if remaining <= 0:
                return ReadResult(offset, b"")
            waiter: asyncio.Future[None] = loop.create_future()
            self._index(segment_id).waiters.append(waiter)
            try:
                async with asyncio.timeout(remaining):
                    await waiter
            except TimeoutError:
                return ReadResult(offset, b"")

    async def _read_available(self, segment: SegmentMetadata, offset: int, length: int) -> ReadResult:
        index = self._index(segment.segment_id)
        i = index.find(offset)
        if i >= 0:
            parts: list[bytes] = []
            position, remaining = offset, length
            while remaining > 0 and i < len(index.blocks) and index.offsets[i] <= position:
                block = index.blocks[i]
                start = position - index.offsets[i]
                piece = bytes(block[start : start + remaining])
                parts.append(piece)
                self.budget.touch((segment.segment_id, index.offsets[i]))
                position += len(piece)
                remaining -= len(piece)
                i += 1
            data = parts[0] if len(parts) == 1 else b"".join(parts)
            self._metrics.read("cache", len(data))
            return ReadResult(offset, data)
        for redirect in index.redirects:
            if redirect.offset <= offset < redirect.offset + redirect.length:
                want = min(length, redirect.offset + redirect.length - offset, self.config.storage_read_block_bytes)
                data = await self._read_storage(redirect.source_name, offset - redirect.offset, want)
                self._metrics.read("tier2", len(data))
                return ReadResult(offset, data)
        if offset < segment.storage_length:
            want = min(length, segment.storage_length - offset, self.config.storage_read_block_bytes)
            next_start = index.next_start_after(offset)
            if next_start is not None:
                want = min(want, next_start - offset)
            data = await self._read_storage(segment.name, offset, want)
            if len(data) != want:
                raise ReadIndexCorruptedError(
                    f"{segment.name}: Tier-2 returned {len(data)} of {want} bytes at {offset}"
                )
            if index.find(offset) < 0 and self._index(segment.segment_id) is index:
                index.insert(offset, data)
                self.budget.add((segment.segment_id, offset), len(data))
                if self.budget.needs_eviction:
                    self.evict()
            self._metrics.read("tier2", len(data))
            return ReadResult(offset, data)
        raise ReadIndexCorruptedError(
            f"{segment.name}: offset {offset} is neither cached nor in Tier-2 (storage length {segment.storage_length})"
        )

    def cached_bytes(self, segment_id: int) -> int:
        index = self._indexes.get(segment_id)
        return 0 if index is None else sum(len(b) for b in index.blocks)
