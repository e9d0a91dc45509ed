"""ChunkedSegmentStorage: Tier-2 of one container as segments over a chunk storage (Pravega SLTS).

Each :meth:`~ChunkedSegmentStorage.write` becomes one new, immutable Parquet chunk
(:mod:`segment_store.storage.format.parquet_chunk`) named

    data/c{container}/{escaped segment name}/e{epoch}-{seq}.parquet

(:mod:`segment_store.storage.data_chunk_names`) and one journal record ("chunk added"); every other
change (create, seal, concat, truncate, delete) is a journal record only. The chunk metadata of all
segments lives in memory and is made durable by the
:class:`~segment_store.storage.journal.system_journal.SystemJournal` (journal and snapshots in the same
chunk storage, seed 004). A method returns once its record is durable; memory changes only then, so a
failure changes nothing. Changes of one segment take turns under its lock (:class:`SegmentLocks`);
changes of different segments run concurrently.

Boot (:meth:`~ChunkedSegmentStorage.open`) replays the journal and then deletes the data
chunks no metadata references (written but never journaled: a crash or a failed record, or
a zombie's; released but not yet collected when the previous owner stopped), but only chunks
of an epoch up to its own, so a zombie booting late cannot delete a newer owner's chunks.
Chunks released by truncate, delete and compaction go to the
:class:`~segment_store.storage.chunk_gc.ChunkGarbageCollector`, which deletes them
``gc_delay_s`` after the record is durable (reads in flight finish first). A
:class:`~segment_store.storage.compaction.Compactor` merges runs of small chunks in the
background (``compaction_enabled``).

Writes encode through a :class:`~segment_store.storage.chunk_encoder.ChunkEncoder` (a thread or worker
processes). Reads decode the Parquet chunks in worker threads: from the chunk's local path when the backend has
one (filesystem), else from the chunk bytes, of which a small LRU is kept so sequential reads of one chunk fetch
it once; a chunk larger than that LRU (and than 8 MiB) is read by ranges (footer and the row groups needed).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import operator
import time
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TypeVar

import pyarrow as pa

from segment_store.storage.backends.filesystem import map_os_error
from segment_store.storage.chunk_encoder import ChunkEncoder, ThreadChunkEncoder
from segment_store.storage.chunk_gc import ChunkGarbageCollector
from segment_store.storage.chunk_pins import ChunkPins
from segment_store.storage.chunk_reads import ChunkCache, RangedChunkFile
from segment_store.storage.chunk_storage import (
    BufferLike,
    ChunkNotFoundError,
    ChunkStorage,
    ChunkStorageUnavailableError,
    as_buffers,
)
from segment_store.storage.chunk_times import ChunkTimeQueries
from segment_store.storage.compaction import Compactor
from segment_store.storage.data_chunk_names import data_chunk_name, data_prefix, parse_data_chunk_name
from segment_store.storage.format import parquet_chunk
from segment_store.storage.journal.chunk_metadata import (
    AddChunk,
    ChunkEntry,
    ChunkMetadata,
    ConcatSegments,
    CreateSegment,
    DeleteSegment,
    ReplaceChunks,
    SealSegment,
    SegmentLayout,
    TruncateSegment,
)
from segment_store.storage.journal.records import parse_system_name, system_prefix
from segment_store.storage.journal.system_journal import SnapshotInfoStore, SystemJournal
from segment_store.storage.segment_storage import ChunkRef, Framing, IngestPairs, StorageSegmentInfo
from segment_store.storage.storage_config import ChunkedStorageConfig
from segstore_shared.contracts import (
    BadOffsetError,
    ContainerOfflineError,
    InvalidOffsetError,
    SegmentExistsError,
    SegmentNotExistsError,
    SegmentSealedError,
    SegmentTruncatedError,
)

log = logging.getLogger(__name__)
_T = TypeVar("_T")

_RANGED_READ_MIN_BYTES = 8 * 1024 * 1024
"""Chunks above the cache budget and this size are read by ranges (footer, row groups), not whole."""


class SegmentLocks:
    """One asyncio lock per segment name, dropped when nobody holds or waits for it: every change of a
    segment (and a compaction's switch of its chunks) holds its segment's lock."""

    def __init__(self) -> None:
        self._entries: dict[str, tuple[asyncio.Lock, list[int]]] = {}

    @contextlib.asynccontextmanager
    async def hold(self, *names: str) -> AsyncIterator[None]:
        ordered = sorted(set(names))  # one global order: no deadlock between concat and others
        entries = []
        for name in ordered:
            entry = self._entries.setdefault(name, (asyncio.Lock(), [0]))
            entry[1][0] += 1
            entries.append(entry)
        locked: list[asyncio.Lock] = []
        try:
            for lock, _ in entries:
                await lock.acquire()
                locked.append(lock)
            yield
        finally:
            for lock in reversed(locked):
                lock.release()
            for name, (_, users) in zip(ordered, entries, strict=True):
                users[0] -= 1
                if users[0] == 0:
                    del self._entries[name]


class ChunkedSegmentStorage(ChunkTimeQueries):
    """The :class:`~segment_store.storage.segment_storage.SegmentStorage` of one container (its time queries and
    the merge-time rewrite at concat: :mod:`~segment_store.storage.chunk_times`).

    ``chunk_storage`` is shared with other containers (names are per container) and is not
    closed by :meth:`close`. ``snapshot_info_store`` keeps the pointer to the latest snapshot
    (see :class:`~segment_store.storage.journal.system_journal.SnapshotInfoStore`). Calls before
    :meth:`open` or after :meth:`close` raise ContainerOfflineError; :meth:`open` may raise
    StorageNotPrimaryError (a newer owner exists) or JournalCorruptedError.
    """

    def __init__(
        self,
        chunk_storage: ChunkStorage,
        container_id: int,
        snapshot_info_store: SnapshotInfoStore,
        config: ChunkedStorageConfig | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        encoder: ChunkEncoder | None = None,
    ) -> None:
        """``encoder``: where chunks are Parquet-encoded (None: a thread; the service passes one it owns)."""
        self._encoder: ChunkEncoder = encoder or ThreadChunkEncoder()
        self._storage = chunk_storage
        self._cid = container_id
        self._info_store = snapshot_info_store
        self._config = config or ChunkedStorageConfig()
        self._clock = clock
        self._sleep = sleep
        self._journal: SystemJournal | None = None
        self._gc: ChunkGarbageCollector | None = None
        self._compactor: Compactor | None = None
        self._open = False
        self._locks = SegmentLocks()
        self._cache = ChunkCache(self._config.chunk_cache_bytes)
        self._pins = ChunkPins(chunk_storage, container_id)

    @property
    def container_id(self) -> int:
        return self._cid

    @property
    def max_write_bytes(self) -> int:
        return self._config.max_chunk_bytes

    @property
    def journal(self) -> SystemJournal:
        """The system journal (after :meth:`open`)."""
        if self._journal is None:
            raise ContainerOfflineError(f"container {self._cid}: Tier-2 storage is not open")
        return self._journal

    @property
    def gc(self) -> ChunkGarbageCollector:
        """The garbage collector of released chunks (after :meth:`open`)."""
        if self._gc is None:
            raise ContainerOfflineError(f"container {self._cid}: Tier-2 storage is not open")
        return self._gc

    @property
    def compactor(self) -> Compactor:
        """The compactor (after :meth:`open`; it runs in the background only if ``compaction_enabled``)."""
        if self._compactor is None:
            raise ContainerOfflineError(f"container {self._cid}: Tier-2 storage is not open")
        return self._compactor

    # -- lifecycle ------------------------------------------------------------------------

    async def open(self, epoch: int) -> None:
        """Boot: replay the journal (fencing lower epochs), snapshot, sweep unreferenced chunks."""
        if self._open:
            raise RuntimeError(f"container {self._cid}: Tier-2 storage is already open")
        listed = await asyncio.to_thread(lambda: list(self._storage.list(data_prefix(self._cid))))
        parsed = {name: parse_data_chunk_name(name) for name in listed}
        own = [p[1] for p in parsed.values() if p is not None and p[0] == epoch]
        journal = SystemJournal(
            self._storage, self._cid, self._info_store, self._config, clock=self._clock, sleep=self._sleep
        )
        metadata = await journal.boot(epoch, min_seq=max(own, default=-1) + 1)
        self._journal = journal
        self._open = True
        await asyncio.to_thread(self._pins.load)
        held_orphans: list[str] = []
        if journal.booted_from_snapshot:
            held_orphans = await self._sweep(metadata, parsed, epoch)
        elif listed:
            log.error(
                "container %s: no snapshot pointer but %d data chunks exist; not deleting them", self._cid, len(listed)
            )
        self._gc = ChunkGarbageCollector(
            self._storage,
            self._cid,
            metadata.referenced_chunks,
            self._still_primary,
            self._config,
            clock=self._clock,
            held=self._pins.held_for_s,
        )
        self._gc.enqueue(held_orphans)  # released before the restart, still pinned: deleted once the pins end
        self._compactor = Compactor(self, self._storage, self._cid, self._config, sleep=self._sleep)
        if self._config.compaction_enabled:
            self._compactor.start()

    def _still_primary(self) -> bool:
        """No snapshot of a higher epoch exists (every boot writes one). Worker thread."""
        epoch = self.journal.epoch
        for name in self._storage.list(system_prefix(self._cid, "snapshot")):
            parsed = parse_system_name(name)
            if parsed is not None and parsed.epoch > epoch:
                return False
        return True

    async def _sweep(self, metadata: ChunkMetadata, listed: dict[str, tuple[int, int] | None], epoch: int) -> list[str]:
        """Delete unreferenced data chunks; return those a live pin holds instead (for the GC)."""
        referenced = metadata.referenced_chunks()
        pinned = self._pins.held()
        orphans = [n for n, p in listed.items() if n not in referenced and p is not None and p[0] <= epoch]
        held = [n for n in orphans if n in pinned]
        orphans = [n for n in orphans if n not in pinned]
        missing = referenced - listed.keys()
        if missing:
            log.error("container %s: %d referenced chunks are missing, e.g. %r", self._cid, len(missing), min(missing))
        if orphans:
            deleted = await asyncio.to_thread(self._delete_quietly, orphans)
            log.info("container %s: deleted %d of %d unreferenced data chunks", self._cid, deleted, len(orphans))
        return held

    async def close(self) -> None:
        """Stop compaction and GC (queued chunks are left to the next boot's sweep), finish queued
        journal commits and cleanups; later calls raise ContainerOfflineError."""
        self._open = False
        if self._compactor is not None:
            await self._compactor.stop()
        if self._gc is not None:
            await self._gc.stop()
        if self._journal is not None:
            await self._journal.close()
        self._cache.clear()

    # -- queries --------------------------------------------------------------------------

    async def exists(self, name: str) -> bool:
        return self._metadata().get(name) is not None

    async def info(self, name: str) -> StorageSegmentInfo:
        seg = self._require(name)
        return StorageSegmentInfo(seg.name, seg.length, seg.start_offset, seg.sealed, seg.framing, len(seg.chunks))

    async def chunks(self, name: str) -> list[ChunkRef]:
        seg = self._require(name)
        return [ChunkRef(c.name, c.start_offset, c.length, self._storage.location(c.name)) for c in seg.chunks]

    async def read(self, name: str, offset: int, length: int) -> bytes:
        """Exactly ``length`` bytes at ``offset``, decoded from the chunks holding them."""
        seg = self._require(name)
        if offset < 0 or length < 0:
            raise InvalidOffsetError(name, f"negative offset {offset} or length {length}")
        if offset < seg.start_offset:
            raise SegmentTruncatedError(name, seg.start_offset, offset)
        end = offset + length
        if end > seg.length:
            raise InvalidOffsetError(name, f"read [{offset}, {end}) is beyond length {seg.length}")
        parts: list[bytes] = []
        for chunk in seg.overlapping(offset, end):
            start = max(offset, chunk.start_offset)
            stop = min(end, chunk.end_offset)
            parts.append(await self._read_piece(name, chunk, start - chunk.start_offset, stop - start))
        return b"".join(parts)

    async def _read_piece(self, segment: str, chunk: ChunkEntry, offset: int, length: int) -> bytes:
        try:
            decode = functools.partial(parquet_chunk.decode_range, offset=offset, length=length)
            return await self._chunk_call(chunk, decode)
        except ChunkNotFoundError as missing:
            position = self._position_of_released(segment, chunk, offset, missing)
            return await self.read(segment, position, length)  # compacted: same bytes, new chunks

    async def first_event_at_or_after(self, name: str, offset: int, end: int) -> int | None:
        """The offset of the first event that starts in ``[offset, end)``, or None if none does (``end``: at most the
        storage length; chunks are cut at append boundaries, so a chunk's end is an event boundary). Reads the
        ``offset`` and ``framed`` columns of the row groups from ``offset`` on. Raises SegmentNotExistsError,
        SegmentTruncatedError (``offset`` is below the segment's start)."""
        seg = self._require(name)
        if offset < seg.start_offset:
            raise SegmentTruncatedError(name, seg.start_offset, offset)
        position = offset
        while position < end:
            chunks = self._require(name).overlapping(position, end)
            if not chunks:
                return None
            chunk = chunks[0]
            relative = max(position, chunk.start_offset) - chunk.start_offset
            search = functools.partial(parquet_chunk.first_event_at_or_after, start=relative)
            try:
                found = await self._chunk_call(chunk, search)
            except ChunkNotFoundError as missing:
                position = self._position_of_released(name, chunk, relative, missing)
                continue  # compacted: search the new chunks from the same position
            if found is not None:
                at = chunk.start_offset + found
                return at if at < end else None
            if chunk.end_offset < end:
                return chunk.end_offset  # no event starts in the rest of this chunk: the next starts with it
            return None
        return None

    async def _chunk_call(self, chunk: ChunkEntry, use: Callable[[parquet_chunk.Source], _T]) -> _T:
        """``use`` the chunk's Parquet source in a worker thread, retrying while Tier-2 is unavailable."""
        attempts = self._config.read_attempts
        for attempt in range(attempts):
            try:
                return await asyncio.to_thread(self._with_source, chunk, use)
            except ChunkStorageUnavailableError as exc:
                if attempt + 1 == attempts:
                    raise
                log.debug("container %s: read of %r failed, retrying: %r", self._cid, chunk.name, exc)
                await self._sleep(self._config.retry_delay_s)
        raise AssertionError("unreachable")

    def _position_of_released(self, segment: str, chunk: ChunkEntry, offset: int, missing: ChunkNotFoundError) -> int:
        """After ``missing`` on ``chunk``: the segment position of ``offset`` in it, if the chunk was released
        while in use (compacted; truncated raises SegmentTruncatedError); a chunk the segment still references
        raises ``missing`` (the metadata is wrong: never paper over it)."""
        seg = self._metadata().get(segment)
        if seg is not None and any(c.name == chunk.name for c in seg.chunks):
            raise missing
        # released while this read was in flight (and collected: it outlived the GC delay)
        if seg is None:
            raise SegmentNotExistsError(segment, "deleted while reading") from None
        position = chunk.start_offset + offset
        if seg.start_offset > position:
            raise SegmentTruncatedError(segment, seg.start_offset, position) from None
        return position

    def _with_source(self, chunk: ChunkEntry, use: Callable[[parquet_chunk.Source], _T]) -> _T:
        """``use`` the chunk as a Parquet source: its local file, its cached bytes, ranged reads of a big
        chunk, or its bytes read whole (then cached). Runs in a worker thread."""
        path = _local_path(self._storage.location(chunk.name))
        if path is not None:
            try:
                return use(path)
            except OSError as exc:
                raise map_os_error(chunk.name, exc) from exc
        data = self._cache.get(chunk.name)
        if data is None and chunk.length > max(self._config.chunk_cache_bytes, _RANGED_READ_MIN_BYTES):
            ranged = RangedChunkFile(self._storage, chunk.name, self._cache)
            return use(pa.PythonFile(ranged, mode="r"))
        if data is None:
            data = self._storage.read_all(chunk.name)
            self._cache.put(chunk.name, data)
        return use(data)

    # -- changes --------------------------------------------------------------------------

    async def create(self, name: str, framing: Framing) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"segment name must be a non-empty string, not {name!r}")
        if framing not in ("events", "raw"):
            raise ValueError(f"framing must be 'events' or 'raw', not {framing!r}")
        journal = self._live_journal()
        async with self._locks.hold(name):
            if journal.metadata.get(name) is not None:
                raise SegmentExistsError(name)
            await journal.commit([CreateSegment(name, framing)])

    async def write(self, name: str, offset: int, data: Sequence[BufferLike], ingest_times: IngestPairs | int) -> int:
        """Append ``data`` at ``offset`` as one new chunk; returns the new length.

        Raises ValueError for more than ``max_chunk_bytes`` bytes or bad ingest times (before
        anything is written).
        """
        journal = self._live_journal()
        async with self._locks.hold(name):
            seg = self._require(name)
            if seg.sealed:
                raise SegmentSealedError(name)
            if offset != seg.length:
                raise BadOffsetError(name, offset, seg.length)
            buffers = as_buffers(data)
            size = sum(b.nbytes for b in buffers)
            if size > self._config.max_chunk_bytes:
                limit = self._config.max_chunk_bytes
                raise ValueError(f"{name}: write of {size} bytes exceeds max_chunk_bytes {limit}")
            if size == 0:
                return seg.length
            times = _ingest_ranges(ingest_times)
            chunk = data_chunk_name(self._cid, name, journal.epoch, journal.next_seq())
            encoded = await self._encoder.encode(buffers, times, seg.framing, self._config.chunk_compression)
            try:
                await asyncio.to_thread(self._storage.write_chunk, chunk, encoded)
            except Exception:
                await asyncio.to_thread(self._delete_quietly, [chunk])  # it may have landed
                raise
            low, high = _time_bounds(times)
            await journal.commit([AddChunk(name, chunk, offset, size, low, high)], orphans=[chunk])
            if self._storage.location(chunk) is None:
                self._cache.put(chunk, bytes(encoded))
            return offset + size

    async def seal(self, name: str) -> None:
        journal = self._live_journal()
        async with self._locks.hold(name):
            if not self._require(name).sealed:
                await journal.commit([SealSegment(name)])

    async def concat(self, target: str, offset: int, source: str, merge_time_ms: int | None = None) -> None:
        """See :meth:`SegmentStorage.concat`; with ``merge_time_ms``, the source's chunks are first rewritten with
        every row at that time (:meth:`merge_time_rewrites`), in the same journal record."""
        journal = self._live_journal()
        async with self._locks.hold(target, source):
            tgt = self._require(target)
            src = self._require(source)
            if tgt.sealed:
                raise SegmentSealedError(target)
            if not src.sealed:
                raise InvalidOffsetError(source, "concat source is not sealed")
            if src.start_offset != 0:
                raise InvalidOffsetError(source, f"concat source is truncated (start offset {src.start_offset})")
            if offset != tgt.length:
                raise BadOffsetError(target, offset, tgt.length)
            rewrites: list[ReplaceChunks] = []
            written: list[str] = []
            if merge_time_ms is not None:
                rewrites, written = await self.merge_time_rewrites(src, merge_time_ms)
            released = await journal.commit([*rewrites, ConcatSegments(target, source, offset)], orphans=written)
            await self._release(released)

    async def truncate(self, name: str, offset: int) -> None:
        journal = self._live_journal()
        async with self._locks.hold(name):
            seg = self._require(name)
            if not 0 <= offset <= seg.length:
                raise InvalidOffsetError(name, f"truncate at {offset} outside [0, {seg.length}]")
            if offset <= seg.start_offset:
                return
            released = await journal.commit([TruncateSegment(name, offset)])
            await self._release(released)

    async def delete(self, name: str) -> None:
        journal = self._live_journal()
        async with self._locks.hold(name):
            self._require(name)
            released = await journal.commit([DeleteSegment(name)])
            await self._release(released)

    async def _release(self, chunks: list[ChunkEntry]) -> None:
        """Hand chunks no metadata references any more to the GC (deleted after ``gc_delay_s``)."""
        for chunk in chunks:
            self._cache.discard(chunk.name)
        if chunks:
            await self.gc.release(c.name for c in chunks)

    @property
    def pins(self) -> ChunkPins:
        """The readers' pins on this container's chunks (:mod:`~segment_store.storage.chunk_pins`)."""
        return self._pins

    # -- compaction host (see segment_store.storage.compaction.CompactionHost) ---------------

    def segment_names(self) -> list[str]:
        return [seg.name for seg in self._metadata()]

    def layout(self, name: str) -> SegmentLayout | None:
        return self._metadata().get(name)

    def new_chunk_name(self, segment: str) -> str:
        journal = self._live_journal()
        return data_chunk_name(self._cid, segment, journal.epoch, journal.next_seq())

    def chunk_source(self, chunk: str) -> parquet_chunk.Source:
        return _local_path(self._storage.location(chunk)) or self._storage.read_all(chunk)

    async def replace_chunks(self, segment: str, run: Sequence[ChunkEntry], chunk: str) -> bool:
        """Journal the switch of ``run`` to ``chunk`` if ``segment`` still holds ``run``; release the run."""
        journal = self._live_journal()
        async with self._locks.hold(segment):
            seg = self._metadata().get(segment)
            if not run or seg is None:
                return False
            current = seg.overlapping(run[0].start_offset, run[-1].end_offset)
            if current != list(run):
                return False
            size = run[-1].end_offset - run[0].start_offset
            timed = all(c.timed for c in run)
            low = min(c.min_ms for c in run if c.min_ms is not None) if timed else None
            high = max(c.max_ms for c in run if c.max_ms is not None) if timed else None
            change = ReplaceChunks(segment, chunk, run[0].start_offset, size, tuple(c.name for c in run), low, high)
            released = await journal.commit([change], orphans=[chunk])
            await self._release(released)
            return True

    def _delete_quietly(self, names: Sequence[str]) -> int:
        """Delete chunks no metadata references; failures are logged (boot sweeps them). Worker thread."""
        deleted = 0
        for name in names:
            try:
                deleted += self._storage.delete_if_exists(name)
            except Exception as exc:
                log.warning("container %s: cannot delete chunk %r (left for the boot sweep): %r", self._cid, name, exc)
        return deleted

    # -- helpers --------------------------------------------------------------------------

    def _live_journal(self) -> SystemJournal:
        if not self._open or self._journal is None:
            raise ContainerOfflineError(f"container {self._cid}: Tier-2 storage is not open")
        return self._journal

    def _metadata(self) -> ChunkMetadata:
        return self._live_journal().metadata

    def _require(self, name: str) -> SegmentLayout:
        seg = self._metadata().get(name)
        if seg is None:
            raise SegmentNotExistsError(name)
        return seg


def _ingest_ranges(ingest_times: IngestPairs | int | parquet_chunk.IngestRanges) -> int | parquet_chunk.IngestRanges:
    """One time for the whole write, or ``(relative offset, ms)`` pairs as IngestRanges (ValueError if bad)."""
    if isinstance(ingest_times, parquet_chunk.IngestRanges):
        return ingest_times
    if isinstance(ingest_times, Sequence):
        return parquet_chunk.IngestRanges.from_pairs(ingest_times)
    return operator.index(ingest_times)


def _time_bounds(times: int | parquet_chunk.IngestRanges) -> tuple[int, int]:
    """The least and greatest ingestion time of a chunk written with ``times``."""
    if isinstance(times, parquet_chunk.IngestRanges):
        return int(times.times_ms.min()), int(times.times_ms.max())
    return times, times


def _local_path(location: str | None) -> str | None:
    """The local filesystem path of a ``file://`` location, else ``None``."""
    if location is None or not location.startswith("file://"):
        return None
    return urllib.request.url2pathname(urllib.parse.urlparse(location).path)
