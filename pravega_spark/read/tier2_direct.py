"""Direct Tier-2 reads for Spark executors: a segment range straight from its Parquet chunks.

What a segment store has moved to Tier-2 (below its *storage length*) sits in immutable Parquet
chunks (:mod:`segment_store.storage.format.parquet_chunk`): one row per event, the payload already
without its 8-byte header. An executor that can reach those chunks (a shared filesystem, S3)
reads them column-wise instead of pulling the bytes through the segment store and parsing events
in Python. :func:`read_range` asks the segment store which chunks hold the segment and where
(see "Where the chunks are" below), opens the ones covering the range with pyarrow and yields Arrow
record batches in the source's schema (:func:`arrow_schema`)::

    read = read_range(client, segment, start, end)  # or location=Tier2Location.parse(tier2Location)
    position = start
    if read is not None:
        try:
            for batch in read:
                yield batch
            position = read.end                 # Tier-2 served [start, read.end)
        except Tier2ReadError as error:
            position = error.offset             # served [start, error.offset): go on from there
    ...read [position, end) from the segment store...

Contract:

* ``start`` and ``end`` are event boundaries (stream-cut offsets, a segment's length), as for a
  segment store read; rows are the events whose offset lies in ``[start, read.end)``, byte-exact
  with what :meth:`SegmentClient.reader` returns for that range, each once, in offset order.
* ``read.end`` is ``min(end, the end of the contiguous chunks reachable from here)``; it is an
  event boundary (chunks are cut at append boundaries), so the segment store continues exactly there.
* ``None`` means nothing of the range can be read here: no chunk location (in-memory Tier-2, a
  segment store without the extension and no :class:`Tier2Location`, S3 without credentials here),
  the chunk file not present or not readable on this machine (or not the chunk listed: its length
  and framing are checked before any row is read), ``start`` below the segment's start offset
  (truncated: the segment store reports that), the segment missing, or nothing of the range in
  Tier-2 yet.
* A chunk that disappears (compacted, then garbage-collected) makes the reader list the chunks
  again and go on from where it stopped (compaction keeps the bytes and the event boundaries).
  If that fails too, iteration raises :class:`Tier2ReadError` whose ``offset`` is just after the
  last row yielded. Rows that are not events (raw bytes in a chunk) also end the Tier-2 read
  with :class:`Tier2ReadError` at their offset, so the segment store raises its framing error.

Where the chunks are: the segment store says, through segstore's wire extension
``ListStorageChunkLocations`` (:mod:`pravega_spark.read.tier2_locations`: a file path, or an S3 bucket and key
opened with the endpoint and credentials this executor is given; a segment store without the extension, or
chunks this executor cannot open, give ``None`` and the segment store serves the range). A
:class:`Tier2Location` passed by the caller (option ``tier2Location``, :mod:`pravega_spark.options.tier2_location`:
the Tier-2 root as seen from the executor, the same root and prefix the segment store was started with) overrides
that: chunk names from the plain ``ListStorageChunks`` then resolve under it, and S3 credentials come from pyarrow's
whole chain. A client without the extension call (a stand-in implementing only :class:`SegmentLookup`) may give
each chunk info a ``location`` attribute instead.
"""

from __future__ import annotations

import contextlib
import threading
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from controller_client.model import parse_segment_name
from pravega_spark.errors import Tier2ReadError
from pravega_spark.options.tier2_location import Tier2Location
from pravega_spark.read.tier2_locations import note_unopenable, reported_chunks, speaks_extension
from segment_store.client import BlockingClient, ReplyError, SegmentStatus
from segstore_shared.chunk_format import META_FRAMING, META_LENGTH, as_reader_schema

HEADER_BYTES = 8
"""The Pravega event header (int32 type, int32 length) that the chunks strip from each event."""
BATCH_BYTES = 4 * 1024 * 1024
"""Row groups (of ~1 MiB each) read per pyarrow call: decoding runs in parallel, S3 reads coalesce."""
MAX_RELISTS = 3
"""How many times one :func:`read_range` lists the chunks again after a chunk went missing."""

_BASE_FIELDS = [
    pa.field("event", pa.binary()),
    pa.field("scope", pa.string()),
    pa.field("stream", pa.string()),
    pa.field("segment_id", pa.int64()),
    pa.field("offset", pa.int64()),
]
INGEST_TIME_FIELD = pa.field("ingest_time_ms", pa.int64())
"""Optional column: epoch ms at which the event was appended (stored per event in the chunks)."""
SCHEMA = pa.schema(_BASE_FIELDS)
"""``event binary, scope string, stream string, segment_id long, offset long`` (Spark DDL, nullable)."""


def arrow_schema(ingest_time: bool = False) -> pa.Schema:
    """The schema of the batches :func:`read_range` yields (with ``ingest_time_ms`` last if asked)."""
    return pa.schema([*_BASE_FIELDS, INGEST_TIME_FIELD]) if ingest_time else SCHEMA


class SegmentLookup(Protocol):
    """The blocking segment store calls :func:`read_range` makes (``ReplyError`` subclasses for failure replies).

    Without a ``tier2Location``, a client that also has ``list_storage_chunk_locations(segment, start, end)`` (as
    :class:`BlockingClient` does; ``pravega_spark.connection.StreamConnection`` through its segment client) is asked
    where the chunks are instead (:mod:`pravega_spark.read.tier2_locations`)."""

    def get_segment_info(self, segment: str) -> SegmentStatus: ...

    def list_storage_chunks(self, segment: str) -> Sequence[Any]:
        """The wire ``ChunkInfo`` s: ``start_offset``, ``length_in_metadata``, ``chunk_name`` (+ ``location``)."""
        ...


Client: TypeAlias = "SegmentLookup | BlockingClient"
"""A :class:`SegmentLookup`, such as a :class:`BlockingClient`."""


# -- where chunks are ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Chunk:
    start: int
    length: int
    uri: str

    @property
    def end(self) -> int:
        return self.start + self.length


def _list_chunks(
    client: Client, segment: str, location: Tier2Location | None, start: int = 0, end: int = 2**63 - 1
) -> tuple[int, list[_Chunk]]:
    """The segment's start offset and its contiguous reachable chunks, in offset order (at least those holding
    ``[start, end)``): where the segment store says they are (its extension), or under ``location`` when one is
    given (it overrides)."""
    if location is None and speaks_extension(client):
        start_offset, reported = reported_chunks(client, segment, start, end)
        return start_offset, [_Chunk(start, length, uri) for start, length, uri in reported]
    info = client.get_segment_info(segment)
    if not info.exists or info.deleted:
        return info.start_offset, []
    chunks: list[_Chunk] = []
    for listed in client.list_storage_chunks(segment):
        uri = getattr(listed, "location", None)
        if uri is None and location is not None:
            uri = location.chunk_uri(listed.chunk_name)
        start = int(listed.start_offset)
        if uri is None or (chunks and chunks[-1].end != start):
            break
        chunks.append(_Chunk(start, int(listed.length_in_metadata), uri))
    return info.start_offset, chunks


# -- opening chunks -----------------------------------------------------------------------------

_filesystems: dict[tuple[str, str], pafs.FileSystem] = {}
_filesystems_lock = threading.Lock()


def _open(uri: str, stack: contextlib.ExitStack) -> pq.ParquetFile:
    """Open a chunk; raises OSError (FileNotFoundError when it is gone) or ArrowException."""
    parts = urllib.parse.urlsplit(uri)
    if parts.scheme == "file":
        handle: pa.NativeFile = stack.enter_context(pa.memory_map(urllib.request.url2pathname(parts.path)))
        return pq.ParquetFile(handle)
    key = (parts.scheme, parts.query)
    with _filesystems_lock:
        fs = _filesystems.get(key)
        if fs is None:
            fs = _filesystems[key] = pafs.FileSystem.from_uri(uri)[0]
    handle = stack.enter_context(fs.open_input_file(parts.netloc + urllib.parse.unquote(parts.path)))
    return pq.ParquetFile(handle, pre_buffer=True)


def _check_chunk(pf: pq.ParquetFile, chunk: _Chunk) -> None:
    kv = pf.metadata.metadata or {}
    if kv.get(META_FRAMING) != b"events" or int(kv.get(META_LENGTH, b"-1")) != chunk.length:
        raise ValueError(f"chunk {chunk.uri} is not an events chunk of {chunk.length} bytes")


def _group_runs(pf: pq.ParquetFile, lo: int, hi: int, length: int, batch_bytes: int) -> list[list[int]]:
    """Row groups holding rows that start in ``[lo, hi)`` (chunk-relative), in runs of about ``batch_bytes``."""
    meta = pf.metadata
    firsts: list[int] = []
    groups: list[int] = []
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        if group.num_rows == 0:
            continue
        stats = group.column(0).statistics
        if stats is not None and stats.has_min_max:
            firsts.append(int(stats.min))
        else:  # rewritten without statistics: read the offsets
            firsts.append(int(pf.read_row_group(g, columns=["offset"]).column(0)[0].as_py()))
        groups.append(g)
    runs: list[list[int]] = []
    size = 0
    for i, g in enumerate(groups):
        limit = firsts[i + 1] if i + 1 < len(groups) else length
        if firsts[i] >= hi or limit <= lo:
            continue
        if not runs or size >= batch_bytes:
            runs.append([])
            size = 0
        runs[-1].append(g)
        size += limit - firsts[i]
    return runs


# -- reading ------------------------------------------------------------------------------------


class Tier2Read:
    """An iterable of record batches: the events of ``[start, end)`` read from Tier-2 (see module docstring).

    Iterate once (iteration closes the open chunk files at its end; :meth:`close` drops an
    un-iterated read). ``position`` is the offset just after the last row yielded.
    """

    def __init__(
        self,
        client: Client,
        segment: str,
        start: int,
        end: int,
        location: Tier2Location | None,
        chunks: list[_Chunk],
        ingest_time: bool,
        batch_bytes: int,
    ) -> None:
        name = parse_segment_name(segment)
        self.segment = segment
        self.start = start
        self.end = end
        self.position = start
        self.schema = arrow_schema(ingest_time)
        self._client = client
        self._location = location
        self._chunks = chunks
        self._columns = ["offset", "event", "framed", *(["ingest_time_ms"] if ingest_time else [])]
        self._batch_bytes = batch_bytes
        self.relists = 0
        """How often the chunks were listed again because a listed chunk was gone."""
        self._scope = name.scope
        self._stream = name.stream
        self._segment_id = name.segment_id
        self._constants: list[pa.Array] = []
        self._stack = contextlib.ExitStack()
        self._first: pq.ParquetFile | None = None
        self._iterated = False

    def _opened(self) -> bool:
        """Open the chunk holding ``start`` now (listing again once if it is gone); False if unreachable."""
        for attempt in range(2):
            chunk = self._chunk_at(self.position)
            if chunk is None:
                return False
            try:
                self._first = _open(chunk.uri, self._stack)
                _check_chunk(self._first, chunk)
                return True
            except (OSError, pa.ArrowException, ValueError) as error:
                self._stack.close()
                note_unopenable(chunk.uri, error)
                if attempt == 0 and not self._relist():
                    return False
        return False

    def _chunk_at(self, offset: int) -> _Chunk | None:
        for chunk in self._chunks:
            if chunk.start <= offset < chunk.end:
                return chunk
        return None

    def _relist(self) -> bool:
        """List the chunks again; False if no more relists are allowed or the listing fails."""
        if self.relists == MAX_RELISTS:
            return False
        self.relists += 1
        try:
            _, self._chunks = _list_chunks(self._client, self.segment, self._location, self.position, self.end)
        except ReplyError:
            return False
        return True

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        if self._iterated:
            raise RuntimeError("a Tier2Read is iterated once (or was closed)")
        self._iterated = True
        return self._batches()

    def close(self) -> None:
        """Close the chunk opened by :func:`read_range` if the read is dropped without iterating it."""
        self._iterated = True
        self._stack.close()

    def __enter__(self) -> Tier2Read:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _batches(self) -> Iterator[pa.RecordBatch]:
        try:
            while self.position < self.end:
                chunk = self._chunk_at(self.position)
                if chunk is None:
                    raise Tier2ReadError(self.segment, self.position, "no listed chunk holds it")
                try:
                    yield from self._read_chunk(chunk)
                except (OSError, pa.ArrowException, ValueError) as exc:
                    if not self._relist():
                        raise Tier2ReadError(self.segment, self.position, f"{chunk.uri}: {exc}") from exc
        finally:
            self._stack.close()

    def _read_chunk(self, chunk: _Chunk) -> Iterator[pa.RecordBatch]:
        with contextlib.ExitStack() as stack:
            pf, self._first = self._first, None
            if pf is None:
                pf = _open(chunk.uri, stack)
                _check_chunk(pf, chunk)
            lo = self.position - chunk.start
            hi = min(self.end, chunk.end) - chunk.start
            for run in _group_runs(pf, lo, hi, chunk.length, self._batch_bytes):
                table = as_reader_schema(pf.read_row_groups(run, columns=self._columns))  # format 1 or 2
                for record in table.to_batches():
                    batch, raw = self._convert(record, chunk, hi)
                    if batch is not None:
                        yield batch
                    if raw:
                        raise Tier2ReadError(self.segment, self.position, "raw (non-event) bytes in Tier-2")
            if self.position < min(self.end, chunk.end):
                raise Tier2ReadError(self.segment, self.position, f"{chunk.uri} has no row there")

    def _convert(self, record: pa.RecordBatch, chunk: _Chunk, hi: int) -> tuple[pa.RecordBatch | None, bool]:
        """The events of ``record`` that start in ``[position, hi)`` (chunk-relative ``hi``), checked to
        tile the segment, as an output batch; and whether a raw row ended them."""
        offsets = record.column(0).to_numpy()
        lo = self.position - chunk.start
        first = int(np.searchsorted(offsets, lo, side="left"))
        last = int(np.searchsorted(offsets, hi, side="left"))
        if first >= last:
            return None, False
        if int(offsets[first]) != lo:
            raise Tier2ReadError(self.segment, self.position, "not an event boundary in Tier-2")
        rows = record.slice(first, last - first)
        framed = rows.column(2)
        raw = framed.false_count > 0
        if raw:
            rows = rows.slice(0, int(np.argmin(framed.to_numpy(zero_copy_only=False))))
        count = rows.num_rows
        if count == 0:
            return None, raw
        events = rows.column(1)
        row_offsets = offsets[first : first + count]
        value_offsets = np.frombuffer(events.buffers()[1], dtype=np.int32, count=count + 1, offset=events.offset * 4)
        ends = row_offsets + (np.diff(value_offsets) + HEADER_BYTES)
        if not np.array_equal(ends[:-1], row_offsets[1:]) or ends[-1] > chunk.length:
            raise Tier2ReadError(self.segment, self.position, f"{chunk.uri}: rows do not tile the data")
        batch = self._output(rows, row_offsets + chunk.start, count)
        self.position = chunk.start + int(ends[-1])
        return batch, raw

    def _output(self, rows: pa.RecordBatch, offsets: np.ndarray, count: int) -> pa.RecordBatch:
        scope, stream, segment_id = self._constant_columns(count)
        columns = [rows.column(1), scope, stream, segment_id, pa.array(offsets)]
        if len(self._columns) > 3:
            columns.append(rows.column(3))
        return pa.RecordBatch.from_arrays(columns, schema=self.schema)

    def _constant_columns(self, count: int) -> list[pa.Array]:
        if not self._constants or len(self._constants[0]) < count:
            size = max(count, 2 * len(self._constants[0]) if self._constants else 0, 1024)
            self._constants = [
                pa.repeat(pa.scalar(self._scope, pa.string()), size),
                pa.repeat(pa.scalar(self._stream, pa.string()), size),
                pa.array(np.full(size, self._segment_id, dtype=np.int64)),
            ]
        return [column.slice(0, count) for column in self._constants]


def read_range(
    client: Client,
    segment: str,
    start: int,
    end: int,
    *,
    location: Tier2Location | None = None,
    ingest_time: bool = False,
    batch_bytes: int = BATCH_BYTES,
) -> Tier2Read | None:
    """Read the events of stream segment ``segment`` in ``[start, end)`` straight from its Tier-2 chunks.

    Returns ``None`` if nothing of the range can be read from here; else a :class:`Tier2Read`
    whose ``end`` (<= ``end``) says where Tier-2 stops (see the module docstring for the contract).
    The chunk holding ``start`` is opened before returning, so an unreachable Tier-2 gives ``None``.

    Raises:
        ValueError: negative ``start`` or ``end`` < ``start``; ``segment`` not a qualified stream
            segment name (``scope/stream/<number>.#epoch.<epoch>``).
        ConnectionLostError, RequestTimeoutError: the segment store cannot be asked.
    """
    if start < 0 or end < start:
        raise ValueError(f"range: need 0 <= start <= end, got [{start}, {end})")
    parse_segment_name(segment)
    if start == end:
        return None
    try:
        segment_start, chunks = _list_chunks(client, segment, location, start, end)
    except ReplyError:
        return None
    if start < segment_start or not chunks or not chunks[0].start <= start < chunks[-1].end:
        return None
    read = Tier2Read(client, segment, start, min(end, chunks[-1].end), location, chunks, ingest_time, batch_bytes)
    return read if read._opened() else None


__all__ = [
    "BATCH_BYTES",
    "INGEST_TIME_FIELD",
    "SCHEMA",
    "Client",
    "SegmentLookup",
    "Tier2Location",
    "Tier2Read",
    "Tier2ReadError",
    "arrow_schema",
    "read_range",
]
