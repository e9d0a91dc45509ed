"""Time queries of Tier-2 segments, and the merge-time rewrite of a transaction's chunks at concat.

Part of :class:`~segment_store.storage.chunked_storage.ChunkedSegmentStorage` (a mixin: it uses that class's chunk
access), kept apart because it is about *when* rows were ingested, not where they are.

The rule (``segment_store/reading/ingest_times.py``): an event's ingestion time is when its append was accepted,
or, for a transaction's event, when the transaction was merged. A transaction's chunks are written to Tier-2 with
the times its events were written into it; :meth:`ChunkTimeQueries.merge_time_rewrites` rewrites them with the
merge time before the concat relinks them (one journal record holds both), so every reader of a chunk - the
segment store, a Spark executor reading it directly, Spark's own Parquet reader - sees the same time as the
in-memory read index gave before, and times never decrease along a segment.

Invariants of the queries: they read chunks in offset order (a chunk compacted away meanwhile is read again
from its replacement); a chunk whose time bounds (``ChunkEntry.min_ms``/``max_ms``) already answer is not opened;
metadata without bounds (written before they existed) makes them open the chunk, or, for
:meth:`ChunkTimeQueries.end_before_time`, answer None ("cannot tell": no narrowing, as before bounds existed).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Sequence
from typing import TypeVar

from segment_store.storage.chunk_storage import ChunkNotFoundError, ChunkStorage
from segment_store.storage.compaction import merge_chunks
from segment_store.storage.format import parquet_chunk
from segment_store.storage.journal.chunk_metadata import ChunkEntry, ReplaceChunks, SegmentLayout
from segment_store.storage.segment_storage import Framing
from segment_store.storage.storage_config import ChunkedStorageConfig
from segstore_shared.contracts import SegmentTruncatedError

log = logging.getLogger(__name__)
_T = TypeVar("_T")


class ChunkTimeQueries:
    """Time queries over the chunks of a segment (see the module docstring)."""

    _storage: ChunkStorage
    _config: ChunkedStorageConfig

    # -- provided by the storage ------------------------------------------------------------------------------
    def _require(self, name: str) -> SegmentLayout:
        raise NotImplementedError

    async def _chunk_call(self, chunk: ChunkEntry, use: Callable[[parquet_chunk.Source], _T]) -> _T:
        raise NotImplementedError

    def _position_of_released(self, segment: str, chunk: ChunkEntry, offset: int, missing: ChunkNotFoundError) -> int:
        raise NotImplementedError

    def new_chunk_name(self, segment: str) -> str:
        raise NotImplementedError

    def chunk_source(self, chunk: str) -> parquet_chunk.Source:
        raise NotImplementedError

    def _delete_quietly(self, names: Sequence[str]) -> int:
        raise NotImplementedError

    # -- queries -----------------------------------------------------------------------------------------------
    async def first_ingested_at_or_after(self, name: str, start: int, end: int, timestamp_ms: int) -> int | None:
        """The offset of the first event in ``[start, end)`` ingested at or after ``timestamp_ms`` (in offset
        order), or None if every one there is older. Chunks whose bounds say every row is older are skipped
        unopened; of the others only the time columns of row groups whose statistics allow a match are read.
        Raises SegmentNotExistsError, SegmentTruncatedError (``start`` is below the segment's start)."""
        seg = self._require(name)
        if start < seg.start_offset:
            raise SegmentTruncatedError(name, seg.start_offset, start)
        position = start
        while position < end:
            chunks = self._require(name).overlapping(position, end)
            if not chunks:
                return None
            chunk = chunks[0]
            if chunk.max_ms is not None and chunk.max_ms < timestamp_ms:
                position = chunk.end_offset
                continue
            if chunk.min_ms is not None and chunk.min_ms >= timestamp_ms and position == chunk.start_offset:
                return position  # its first row qualifies
            search = functools.partial(
                parquet_chunk.first_ingested_at_or_after,
                timestamp_ms=timestamp_ms,
                start=max(position, chunk.start_offset) - chunk.start_offset,
                end=min(end, chunk.end_offset) - chunk.start_offset,
            )
            try:
                found = await self._chunk_call(chunk, search)
            except ChunkNotFoundError as missing:
                relative = max(position, chunk.start_offset) - chunk.start_offset
                position = self._position_of_released(name, chunk, relative, missing)
                continue  # compacted: search the new chunks from the same position
            if found is not None:
                return chunk.start_offset + found
            position = chunk.end_offset
        return None

    async def end_before_time(self, name: str, start: int, end: int, timestamp_ms: int) -> int | None:
        """The least offset ``e`` in ``[start, end]`` (``end`` at most the storage length, both event starts) such
        that every event starting in ``[e, end)`` was ingested at or after ``timestamp_ms``: where a read of the
        events ingested before it may stop. Chunks are walked from the end; only one whose bounds straddle the
        time is opened. None when a chunk without bounds would decide (old metadata), or the chunks changed
        meanwhile (compacted, truncated): the caller cannot narrow. Raises SegmentNotExistsError."""
        chunks = self._require(name).overlapping(start, end)
        answer = start
        for chunk in reversed(chunks):
            lo, hi = max(start, chunk.start_offset), min(end, chunk.end_offset)
            if chunk.min_ms is None or chunk.max_ms is None:
                return None
            if chunk.min_ms >= timestamp_ms:
                answer = lo
                continue
            if chunk.max_ms < timestamp_ms:
                return hi
            search = functools.partial(
                parquet_chunk.end_before,
                timestamp_ms=timestamp_ms,
                start=lo - chunk.start_offset,
                end=hi - chunk.start_offset,
            )
            try:
                return chunk.start_offset + await self._chunk_call(chunk, search)
            except ChunkNotFoundError:
                return None  # compacted or truncated meanwhile: cannot tell
        return answer

    async def ingest_runs(self, name: str, start: int, end: int, max_runs: int) -> list[tuple[int, int]]:
        """``(offset, ms)`` where the ingestion time changes among the events in ``[start, end)`` (``end`` at most the
        storage length), from the chunks' ``ingest_time_ms`` (a chunk whose bounds are one time is not opened);
        chunk by chunk, stopping after the one that brings more than ``max_runs``. Raises SegmentNotExistsError,
        SegmentTruncatedError."""
        if start < self._require(name).start_offset:
            raise SegmentTruncatedError(name, self._require(name).start_offset, start)
        runs: list[tuple[int, int]] = []
        position = start
        while position < end and len(runs) <= max_runs and (chunks := self._require(name).overlapping(position, end)):
            chunk = chunks[0]
            relative = max(position, chunk.start_offset) - chunk.start_offset
            if chunk.min_ms is not None and chunk.min_ms == chunk.max_ms:
                found = [(relative, chunk.min_ms)]
            else:
                read = functools.partial(parquet_chunk.ingest_runs, start=relative, end=end - chunk.start_offset)
                try:
                    found = await self._chunk_call(chunk, read)
                except ChunkNotFoundError as missing:
                    position = self._position_of_released(name, chunk, relative, missing)
                    continue  # compacted: read the new chunks from the same position
            if found and runs and found[0][1] == runs[-1][1]:
                del found[0]  # the previous chunk's last time goes on
            runs += [(chunk.start_offset + at, ms) for at, ms in found]
            position = chunk.end_offset
        return runs

    # -- the merge-time rewrite ----------------------------------------------------------------------------------
    async def merge_time_rewrites(self, source: SegmentLayout, time_ms: int) -> tuple[list[ReplaceChunks], list[str]]:
        """Write a copy of each chunk of ``source`` (a sealed transaction about to be concatenated) whose rows are
        not all at ``time_ms``, with every row at ``time_ms``; return the changes that switch ``source`` to them
        (for the concat's journal record) and the chunks written (its orphans). The caller holds ``source``'s
        lock. On failure the chunks written are deleted and the error raised (nothing changed)."""
        changes: list[ReplaceChunks] = []
        written: list[str] = []
        try:
            for chunk in source.chunks:
                if chunk.min_ms == time_ms and chunk.max_ms == time_ms:
                    continue
                name = self.new_chunk_name(source.name)
                encoded = await asyncio.to_thread(self._rewrite, chunk, source.framing, time_ms)
                written.append(name)
                await asyncio.to_thread(self._storage.write_chunk, name, encoded)
                changes.append(
                    ReplaceChunks(source.name, name, chunk.start_offset, chunk.length, (chunk.name,), time_ms, time_ms)
                )
        except BaseException:
            await asyncio.shield(asyncio.to_thread(self._delete_quietly, written))
            raise
        return changes, written

    def _rewrite(self, chunk: ChunkEntry, framing: Framing, time_ms: int) -> bytes:
        """``chunk`` re-encoded with every row at ``time_ms``. Worker thread."""
        source = [(self.chunk_source(chunk.name), chunk.length)]
        return merge_chunks(source, framing, compression=self._config.chunk_compression, time_ms=time_ms)
