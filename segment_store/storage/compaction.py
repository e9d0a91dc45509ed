"""Background compaction: runs of small Parquet chunks of a segment merged into larger chunks.

A segment that receives little data gets one small chunk per storage writer flush (one per
second at most). Many small files are slow to list, open and read (for Spark most of all), so
:class:`Compactor` merges runs of consecutive small chunks, in the background:

1. **plan** (:func:`plan_runs`): consecutive chunks each holding fewer than
   ``compaction_small_chunk_bytes``, together at most ``compaction_target_bytes``, at least
   ``compaction_min_chunks`` of them;
2. **merge** (:func:`merge_chunks`, worker thread): the rows of the old chunks, offsets shifted,
   written as one new Parquet chunk under a fresh data chunk name. Rows are copied as they are
   (events stay events, raw rows stay raw, ingestion times are kept), so the merged chunk
   decodes to exactly the bytes of the old ones;
3. **switch** (:meth:`CompactionHost.replace_chunks`): under the segment's lock, if the run is
   still what it was (no truncate or delete took part of it meanwhile), one journal record
   (:class:`~segment_store.storage.journal.chunk_metadata.ReplaceChunks`) swaps the old chunks for the
   new one. The switch is atomic: before the record is durable every reader sees the old
   chunks, after it the new one;
4. **release**: the old chunks go to the :mod:`~segment_store.storage.chunk_gc` queue and are
   deleted ``gc_delay_s`` later, so reads in flight on them finish.

A crash at any point leaves a consistent state: before the record, the new chunk is an
unreferenced data chunk that the next boot's sweep deletes; after it, the old chunks are. Reads
are byte-exact throughout, since both versions hold the same bytes and the old chunks outlive
the switch by the GC delay (a read that still misses one re-reads through the new layout).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from segment_store.storage.chunk_storage import ChunkStorage
from segment_store.storage.format import parquet_chunk
from segment_store.storage.journal.chunk_metadata import ChunkEntry, SegmentLayout
from segment_store.storage.segment_storage import Framing
from segment_store.storage.storage_config import ChunkedStorageConfig
from segstore_shared.chunk_format import FILE_SCHEMA

log = logging.getLogger(__name__)


class CompactionHost(Protocol):
    """What the compactor needs from the chunked segment storage of its container."""

    def segment_names(self) -> list[str]:
        """Names of the segments in Tier-2 now."""
        ...

    def layout(self, name: str) -> SegmentLayout | None:
        """The current layout of segment ``name`` (read it, never change it), or ``None``."""
        ...

    def new_chunk_name(self, segment: str) -> str:
        """A fresh data chunk name for ``segment`` (one the boot sweep knows as a data chunk)."""
        ...

    def chunk_source(self, chunk: str) -> parquet_chunk.Source:
        """What :mod:`parquet_chunk` can read chunk ``chunk`` from (a local path, or its bytes). Worker thread.

        Raises the chunk storage's errors.
        """
        ...

    async def replace_chunks(self, segment: str, run: Sequence[ChunkEntry], chunk: str) -> bool:
        """Switch ``run`` of ``segment`` to chunk ``chunk`` (journaled), releasing the run to the GC.

        Returns ``False``, changing nothing, if the segment no longer holds ``run`` as it was.
        Raises what a journal commit raises (nothing changed then).
        """
        ...


def plan_runs(
    seg: SegmentLayout, *, small_bytes: int, target_bytes: int, min_chunks: int
) -> list[tuple[ChunkEntry, ...]]:
    """Runs of consecutive small chunks of ``seg`` worth merging (see the module docstring)."""
    runs: list[tuple[ChunkEntry, ...]] = []
    current: list[ChunkEntry] = []
    size = 0
    for chunk in seg.chunks:
        if chunk.length < small_bytes and size + chunk.length <= target_bytes:
            current.append(chunk)
            size += chunk.length
            continue
        if len(current) >= min_chunks:
            runs.append(tuple(current))
        current, size = ([chunk], chunk.length) if chunk.length < small_bytes else ([], 0)
    if len(current) >= min_chunks:
        runs.append(tuple(current))
    return runs


def merge_chunks(
    sources: Sequence[tuple[parquet_chunk.Source, int]],
    framing: Framing,
    *,
    compression: str = parquet_chunk.DEFAULT_COMPRESSION,
    row_group_bytes: int = parquet_chunk.ROW_GROUP_BYTES,
    time_ms: int | None = None,
) -> bytes:
    """One Parquet chunk holding the rows of ``sources`` (``(chunk, its length)`` in segment order), with their
    ingestion times, or every row at ``time_ms`` if given (a merged transaction's chunk: the merge time).

    The result decodes to the concatenation of the sources' bytes, row for row, and is laid out
    as :func:`parquet_chunk.encode` lays out chunks (row groups of about ``row_group_bytes``,
    statistics and encodings of ``offset`` and ``ingest_time_ms``, the footer metadata).
    CPU-bound: call it from a worker thread.

    Raises:
        ChunkFormatError: a source is not a readable chunk, or its length is not the given one.
        ValueError: no sources, or 2 GiB or more in total.
    """
    if not sources:
        raise ValueError("nothing to merge")
    tables: list[pa.Table] = []
    base = 0
    for source, length in sources:
        info = parquet_chunk.chunk_info(source)
        if info.length != length:
            raise parquet_chunk.ChunkFormatError(f"chunk holds {info.length} bytes, metadata says {length}")
        table = parquet_chunk.read_events(source)
        if base:
            shifted = pc.add(table.column("offset"), pa.scalar(base, pa.int64()))
            table = table.set_column(0, parquet_chunk.SCHEMA.field("offset"), shifted)
        tables.append(table)
        base += length
    if base >= parquet_chunk.MAX_CHUNK_BYTES:
        raise ValueError(f"merged chunk of {base} bytes is not below {parquet_chunk.MAX_CHUNK_BYTES}")
    merged = pa.concat_tables(tables)
    ingest = merged.schema.get_field_index("ingest_time_ms")
    field = FILE_SCHEMA.field(ingest)
    times = merged.column(ingest) if time_ms is None else pa.array(np.full(merged.num_rows, time_ms, dtype=np.int64))
    merged = merged.set_column(ingest, field, times.cast(field.type))  # format 2: a UTC timestamp (ms)
    offsets = merged.column("offset").to_numpy()
    ends = np.append(offsets[1:], np.int64(base))
    cuts = np.searchsorted(ends, np.arange(row_group_bytes, base, row_group_bytes), side="left") + 1
    bounds = np.unique(np.concatenate([[0], cuts, [offsets.size]])).tolist()
    sink = pa.BufferOutputStream()
    with pq.ParquetWriter(
        sink,
        FILE_SCHEMA,
        compression=compression,
        use_dictionary=False,
        write_statistics=["offset", "ingest_time_ms"],
        column_encoding={"offset": "DELTA_BINARY_PACKED", "ingest_time_ms": "DELTA_BINARY_PACKED"},
        store_schema=False,
    ) as writer:
        for first, last in itertools.pairwise(bounds):
            writer.write_table(merged.slice(first, last - first), row_group_size=max(last - first, 1))
        writer.add_key_value_metadata(
            {
                parquet_chunk.META_VERSION: str(parquet_chunk.FORMAT_VERSION),
                parquet_chunk.META_LENGTH: str(base),
                parquet_chunk.META_FRAMING: framing,
            }
        )
    return sink.getvalue().to_pybytes()


class Compactor:
    """Merges small chunks of one container's segments, every ``compaction_interval_s`` (see module docstring).

    :meth:`start` runs passes in a background task until :meth:`stop`; :meth:`compact_segment`
    and :meth:`compact_all` run one pass now (tests, or an operator). Counters:
    :attr:`merged_runs`, :attr:`merged_chunks`, :attr:`aborted_runs`.
    """

    def __init__(
        self,
        host: CompactionHost,
        storage: ChunkStorage,
        container_id: int,
        config: ChunkedStorageConfig | None = None,
        *,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._host = host
        self._storage = storage
        self._cid = container_id
        self._config = config or ChunkedStorageConfig()
        self._sleep = sleep
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()  # one pass at a time
        self.merged_runs = 0
        self.merged_chunks = 0
        self.aborted_runs = 0

    def plan(self, seg: SegmentLayout) -> list[tuple[ChunkEntry, ...]]:
        config = self._config
        return plan_runs(
            seg,
            small_bytes=config.compaction_small_chunk_bytes,
            target_bytes=min(config.compaction_target_bytes, config.max_chunk_bytes),
            min_chunks=config.compaction_min_chunks,
        )

    async def compact_all(self) -> int:
        """One pass over every segment; returns the runs merged. Errors of one segment are logged."""
        merged = 0
        for name in self._host.segment_names():
            try:
                merged += await self.compact_segment(name)
            except Exception as exc:
                log.warning("container %s: compaction of %r failed (retried next pass): %r", self._cid, name, exc)
        return merged

    async def compact_segment(self, name: str) -> int:
        """Merge the runs of segment ``name`` as planned now; returns the runs merged.

        Raises the chunk storage's and the journal's errors (nothing is switched then).
        """
        async with self._lock:
            seg = self._host.layout(name)
            if seg is None:
                return 0
            framing = seg.framing
            merged = 0
            for run in self.plan(seg):
                merged += await self._compact_run(name, framing, run)
            return merged

    async def _compact_run(self, segment: str, framing: Framing, run: tuple[ChunkEntry, ...]) -> int:
        chunk = self._host.new_chunk_name(segment)

        def merge() -> bytes:
            sources = [(self._host.chunk_source(c.name), c.length) for c in run]
            return merge_chunks(sources, framing, compression=self._config.chunk_compression)

        encoded = await asyncio.to_thread(merge)
        try:
            await asyncio.to_thread(self._storage.write_chunk, chunk, encoded)
        except BaseException:
            await asyncio.shield(self._discard(chunk))  # a failed write may have landed
            raise
        # From here on a journal record may reference the chunk: only the journal (which deletes
        # the orphan of a record known not to have landed) or the boot sweep may delete it.
        switched = await self._host.replace_chunks(segment, run, chunk)
        if not switched:
            self.aborted_runs += 1
            await self._discard(chunk)
            log.info("container %s: %r changed during compaction; run of %d chunks left", self._cid, segment, len(run))
            return 0
        self.merged_runs += 1
        self.merged_chunks += len(run)
        log.debug("container %s: merged %d chunks of %r into %r", self._cid, len(run), segment, chunk)
        return 1

    async def _discard(self, chunk: str) -> None:
        """Delete a merged chunk that no record references (failures are left to the boot sweep)."""
        try:
            await asyncio.to_thread(self._storage.delete_if_exists, chunk)
        except Exception as exc:
            log.warning("container %s: cannot delete unused chunk %r (left to the sweep): %r", self._cid, chunk, exc)

    # -- background -----------------------------------------------------------------------

    def start(self) -> None:
        """Run :meth:`compact_all` every ``compaction_interval_s`` until :meth:`stop`."""
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name=f"compactor-c{self._cid}")

    async def _run(self) -> None:
        while True:
            await self._sleep(self._config.compaction_interval_s)
            await self.compact_all()

    async def stop(self) -> None:
        """Stop the background passes (a run cut short leaves at most an unreferenced chunk). Idempotent."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
