"""The segment storage port: Tier-2 seen as segments (Pravega's ``Storage`` over SLTS).

The storage writer and the read index of one container talk to Tier-2 only through this
interface; :class:`~segment_store.storage.chunked_storage.ChunkedSegmentStorage` implements it
over a :class:`~segment_store.storage.chunk_storage.ChunkStorage` (filesystem, S3, memory).

A segment in Tier-2 is an ordered list of chunks; each chunk is one immutable Parquet object
(:mod:`segment_store.storage.format.parquet_chunk`) holding a contiguous byte range of the segment.
One instance serves one container and is owned by one container instance at a time (its
``epoch`` is the container's Tier-1 epoch; a higher epoch fences lower ones).

Invariants every implementation keeps:

- **Exact bytes.** Any range ``[start_offset, length)`` reads back exactly as written.
- **Append-only, in order.** :meth:`SegmentStorage.write` appends at exactly the current
  length; a wrong offset raises :class:`~segstore_shared.contracts.BadOffsetError` and changes
  nothing. ``length`` and ``start_offset`` never decrease; a sealed segment never changes
  length.
- **Atomic changes.** Each method either takes effect completely (durably: it survives a
  crash once the call returned) or not at all; a crash mid-call leaves at most unreferenced
  chunks, which boot cleans up. Chunk metadata never references a chunk that does not exist.
- **Live chunks are never deleted.** Chunks are deleted only after the metadata no longer
  references them (wholly below ``start_offset`` after :meth:`truncate`, or of a deleted
  segment).
- **Concat relinks.** :meth:`concat` moves the source's chunks to the end of the target (chunk
  offsets are chunk-relative, so a chunk means the same in either segment). Given the merge time,
  it first rewrites the source's chunks whose rows are not all at that time (a transaction's
  events take the merge time in every tier: ``segment_store/reading/ingest_times.py``), in the
  same atomic change.
- **Times.** A chunk's ``ingest_time_ms`` never changes once its segment is a merge target's
  part; chunk metadata records each new chunk's time bounds.

Errors: :class:`~segstore_shared.contracts.SegmentNotExistsError`,
:class:`~segstore_shared.contracts.SegmentExistsError`,
:class:`~segstore_shared.contracts.SegmentSealedError`,
:class:`~segstore_shared.contracts.SegmentTruncatedError` (read below ``start_offset``),
:class:`~segstore_shared.contracts.InvalidOffsetError` (read past ``length``, bad truncate),
:class:`~segstore_shared.contracts.BadOffsetError` (write not at ``length``),
:class:`~segment_store.storage.chunk_storage.ChunkStorageUnavailableError` (retriable outage;
nothing changed).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, TypeAlias

from segment_store.storage.chunk_storage import BufferLike

Framing: TypeAlias = Literal["events", "raw"]
IngestPairs: TypeAlias = Sequence[tuple[int, int]]
"""``(offset relative to the written data, ingest time ms)`` pairs in offset order, first at 0."""


@dataclass(frozen=True, slots=True)
class ChunkRef:
    """One chunk of a segment: bytes ``[start_offset, start_offset + length)`` of the segment."""

    chunk_name: str
    start_offset: int
    length: int
    location: str | None  # ChunkStorage.location(): a path/URI a Spark executor may open, or None


@dataclass(frozen=True, slots=True)
class StorageSegmentInfo:
    """What Tier-2 holds of one segment."""

    name: str
    length: int
    start_offset: int
    sealed: bool
    framing: Framing
    chunk_count: int


class SegmentStorage(Protocol):
    """Tier-2 for one container, as segments (see module docstring for the invariants).

    Every method is a coroutine and runs on the container's event loop; blocking work (chunk
    I/O, Parquet encode/decode) happens in worker threads. Operations on *different* segments
    may run concurrently; the caller (the storage writer) never runs two mutations of the same
    segment at once.
    """

    @property
    def max_write_bytes(self) -> int:
        """The most one :meth:`write` accepts (one chunk); callers keep flushes within it."""

    async def open(self, epoch: int) -> None:
        """Boot: load the chunk metadata (fencing lower epochs) and reconcile with the chunks present."""

    async def create(self, name: str, framing: Framing) -> None:
        """Create an empty segment. Raises SegmentExistsError."""

    async def exists(self, name: str) -> bool: ...

    async def info(self, name: str) -> StorageSegmentInfo:
        """Raises SegmentNotExistsError."""

    async def write(self, name: str, offset: int, data: Sequence[BufferLike], ingest_times: IngestPairs | int) -> int:
        """Append ``data`` (buffers back to back) at ``offset`` (== current length) as new chunk(s).

        Event segments must be given whole events (the caller cuts at append boundaries).
        Returns the new length. Raises BadOffsetError, SegmentSealedError, SegmentNotExistsError.
        """

    async def read(self, name: str, offset: int, length: int) -> bytes:
        """Exactly ``length`` bytes at ``offset``. Raises SegmentTruncatedError, InvalidOffsetError."""

    async def seal(self, name: str) -> None:
        """Seal (idempotent). Raises SegmentNotExistsError."""

    async def concat(self, target: str, offset: int, source: str, merge_time_ms: int | None = None) -> None:
        """Append sealed ``source``'s chunks to ``target`` at ``offset`` (== target length); ``source`` is gone.
        With ``merge_time_ms``, every moved row reads back with that ingestion time.

        Raises BadOffsetError, SegmentSealedError (target sealed), InvalidOffsetError (source
        not sealed or truncated), SegmentNotExistsError.
        """

    async def truncate(self, name: str, offset: int) -> None:
        """Raise ``start_offset`` to ``offset`` (no-op if not higher); delete chunks wholly below it."""

    async def delete(self, name: str) -> None:
        """Delete the segment and (after the metadata change is durable) its chunks. Raises SegmentNotExistsError."""

    async def first_ingested_at_or_after(self, name: str, start: int, end: int, timestamp_ms: int) -> int | None:
        """The offset of the first event in ``[start, end)`` ingested at or after ``timestamp_ms`` (in offset
        order), or None if every one there is older. Raises SegmentNotExistsError, SegmentTruncatedError."""

    async def end_before_time(self, name: str, start: int, end: int, timestamp_ms: int) -> int | None:
        """The least offset in ``[start, end]`` (``end`` at most the storage length) after which every event up to
        ``end`` was ingested at or after ``timestamp_ms``; None if the chunk metadata cannot tell (no time bounds).
        Raises SegmentNotExistsError."""

    async def ingest_runs(self, name: str, start: int, end: int, max_runs: int) -> list[tuple[int, int]]:
        """``(offset, ms)`` where the ingestion time changes among the events in ``[start, end)`` (``end`` at most
        the storage length), the first event's always; all of them, or (at least) more than ``max_runs`` from
        ``start`` on. Raises SegmentNotExistsError, SegmentTruncatedError."""

    async def first_event_at_or_after(self, name: str, offset: int, end: int) -> int | None:
        """The offset of the first event that starts in ``[offset, end)`` (``end`` at most the storage length), or
        None if none does. Raises SegmentNotExistsError, SegmentTruncatedError."""

    async def chunks(self, name: str) -> list[ChunkRef]:
        """The chunks holding ``[start_offset, length)``, in offset order (for direct Tier-2 reads)."""

    async def close(self) -> None: ...
