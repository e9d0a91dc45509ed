"""Parquet chunk format: a contiguous byte range of a segment as one Parquet file, decodable exactly.

Segment data of an event segment is a run of Pravega wire ``Event`` frames (int32 BE type 0,
int32 BE length, payload), stored as the client sent them. A chunk keeps **one row per event**
so Spark executors can read history column-wise straight from Tier-2:

===================  ===========  ==============================================================
column               type         meaning
===================  ===========  ==============================================================
``offset``           int64        offset of the row's first byte, relative to the chunk's start
                                  (so a chunk can be relinked into another segment on merge)
``event``            binary       framed row: the payload without the 8-byte header;
                                  raw row: the bytes as they are
``ingest_time_ms``   int64        epoch ms at which the row's first byte was appended (format 2:
                                  annotated TIMESTAMP(MILLIS, UTC), same bytes)
``framed``           bool         ``True``: an event; ``False``: raw bytes
===================  ===========  ==============================================================

All columns are required (non-null). Rows are in offset order and tile the chunk exactly:
a framed row spans ``8 + len(event)`` bytes, a raw row ``len(event)`` bytes. With framing
``"events"`` the data is parsed as frames from the start; at the first bytes that are not a
whole frame (a partial tail, a non-zero type, a negative or overlong length) parsing stops and
the rest becomes raw rows. Framing ``"raw"`` (non-event segments) makes raw rows only. Raw rows
hold at most :data:`RAW_ROW_BYTES`; an event is never split, whatever its size. Callers must
cut event chunks at append (event) boundaries: bytes starting inside an event still decode
exactly, but their rows are not the events a reader expects.

The columns and metadata keys are the contract in :mod:`segstore_shared.chunk_format`. The Parquet key-value
metadata holds ``segstore.chunk.format_version`` (``"2"`` is written, ``"1"`` and ``"2"`` are read: every reader
here returns ``ingest_time_ms`` as int64 epoch ms whatever the version),
``segstore.chunk.length`` (bytes of segment data) and ``segstore.chunk.framing``.

Choices (numbers from ``bench/parquet_chunk.py``, see ``bench/results/parquet_chunk.json``):
row groups of about :data:`ROW_GROUP_BYTES` of data, so a range read decodes at most a few
MiB of a 16 MiB chunk; ``offset`` and ``ingest_time_ms`` use DELTA_BINARY_PACKED (monotone and
near-constant: a few bits per row) and carry statistics, which :func:`decode_range` uses to
pick row groups; ``event`` is PLAIN without dictionary or statistics (payloads rarely repeat and
min/max of blobs cost time for nothing). Compression is :data:`DEFAULT_COMPRESSION`; see there.
1 MiB row groups: a 64 KiB range of a 16 MiB chunk decodes in 1.6 ms (10 ms with one group)
while whole-chunk encode/decode speed stays that of one group (256 KiB groups: no faster
overall, 4x the footer entries).

Encoding builds the ``event`` column as a ``binary_view`` array whose views point into the
caller's buffer (no copy of payloads before Parquet's own); decoding rebuilds frames with one
``binary_join_element_wise`` of synthesized headers and payloads. Both are CPU-bound, mostly
in numpy/pyarrow code that releases the GIL: call them from a worker thread.
"""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal, TypeAlias

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from segment_store.storage.chunk_storage import ChunkData, as_buffers
from segstore_shared.chunk_format import (
    FILE_SCHEMA,
    FORMAT_VERSION,
    INGEST_TIME_TYPE,
    META_FRAMING,
    META_LENGTH,
    META_VERSION,
    SCHEMA,
    as_reader_schema,
)
from segstore_shared.errors import SegstoreError
from segstore_shared.event_frames import HEADER_BYTES, find_frames

MAX_CHUNK_BYTES = 1 << 31
"""Chunks must be smaller (``binary`` columns use int32 offsets); Tier-2 chunks are MiBs."""
RAW_ROW_BYTES = 1 << 20
"""Largest raw row; raw data is split into rows of this size."""
ROW_GROUP_BYTES = 1 << 20
"""Target data bytes per row group (a row group holds whole rows, so it may be larger)."""
DEFAULT_COMPRESSION = "lz4"
"""Parquet LZ4_RAW. Measured on 4 MiB of 100 B±50 JSON-like events (encode / decode MB/s,
size ratio): none 462 / 1307 / 1.03x, lz4 254 / 915 / 2.7x, snappy 248 / 494 / 2.6x,
zstd(1) 195 / 597 / 4.2x. lz4 beats snappy outright; zstd stores 36% less but costs ~25% of
encode and ~35% of decode throughput, and encode speed is what bounds the storage writer.
Pass ``compression="zstd"`` where Tier-2 bytes cost more than CPU (S3 at scale)."""

_WRITE_SCHEMA = pa.schema([f.with_type(pa.binary_view()) if f.name == "event" else f for f in FILE_SCHEMA])

Framing: TypeAlias = Literal["events", "raw"]
Source: TypeAlias = "bytes | bytearray | memoryview | pa.Buffer | str | os.PathLike[str] | pa.NativeFile"
"""A chunk to read: its bytes, a local path, a URI (``file://``, ``s3://``) or an open pyarrow file."""


class ChunkFormatError(SegstoreError):
    """The bytes are not a readable segstore Parquet chunk (corrupt, foreign or too new)."""


@dataclass(frozen=True, slots=True)
class IngestRanges:
    """Ingestion time by append range: bytes from ``starts[i]`` on were appended at ``times_ms[i]``.

    ``starts`` are chunk-relative offsets, strictly increasing, the first one 0. A row gets the
    time of the range holding its first byte. The storage writer passes one range per append;
    per-event times are ranges starting at each event.

    Raises:
        ValueError: on shape or ordering violations.
    """

    starts: npt.NDArray[np.int64]
    times_ms: npt.NDArray[np.int64]

    def __post_init__(self) -> None:
        starts = np.ascontiguousarray(self.starts, dtype=np.int64)
        times = np.ascontiguousarray(self.times_ms, dtype=np.int64)
        object.__setattr__(self, "starts", starts)
        object.__setattr__(self, "times_ms", times)
        if starts.ndim != 1 or starts.shape != times.shape or starts.size == 0:
            raise ValueError("IngestRanges needs two 1-D arrays of equal, non-zero length")
        if starts[0] != 0:
            raise ValueError(f"IngestRanges must start at offset 0, not {int(starts[0])}")
        if starts.size > 1 and not bool(np.all(starts[1:] > starts[:-1])):
            raise ValueError("IngestRanges starts must be strictly increasing")

    @classmethod
    def from_pairs(cls, pairs: Iterable[tuple[int, int]]) -> IngestRanges:
        """Build from ``(start_offset, time_ms)`` pairs in offset order."""
        arr = np.array(list(pairs), dtype=np.int64).reshape(-1, 2)
        return cls(arr[:, 0], arr[:, 1])

    def at(self, offsets: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """Times of the ranges holding ``offsets``."""
        return self.times_ms[np.searchsorted(self.starts, offsets, side="right") - 1]


IngestTimes: TypeAlias = "int | IngestRanges | Sequence[tuple[int, int]]"
"""One time for the whole chunk, :class:`IngestRanges`, or ``(start_offset, time_ms)`` pairs."""


@dataclass(frozen=True, slots=True)
class ChunkFormatInfo:
    """What a chunk's footer says: format version, data length, framing, rows and row groups."""

    version: int
    length: int
    framing: str
    rows: int
    row_groups: int


# -- encode ---------------------------------------------------------------------------------


def encode(
    data: ChunkData,
    ingest_times: IngestTimes,
    framing: Framing = "events",
    *,
    compression: str = DEFAULT_COMPRESSION,
    row_group_bytes: int = ROW_GROUP_BYTES,
    raw_row_bytes: int = RAW_ROW_BYTES,
) -> bytes:
    """Encode segment bytes ``data`` (one buffer, or several back to back) as a Parquet chunk.

    Deterministic: the same arguments give the same bytes. ``compression``, ``row_group_bytes``
    and ``raw_row_bytes`` are tuning knobs; readers need not know them.

    Raises:
        ValueError: unknown ``framing``, bad ``ingest_times``, sizes < 1, or data of 2 GiB or more.
    """
    if framing not in ("events", "raw"):
        raise ValueError(f"framing must be 'events' or 'raw', not {framing!r}")
    views = as_buffers(data)
    buf: bytes | memoryview = views[0] if len(views) == 1 else b"".join(views)
    if len(buf) >= MAX_CHUNK_BYTES:
        raise ValueError(f"chunk of {len(buf)} bytes is not below {MAX_CHUNK_BYTES} (int32 binary offsets)")
    if row_group_bytes < 1 or raw_row_bytes < 1:
        raise ValueError(f"row_group_bytes ({row_group_bytes}) and raw_row_bytes ({raw_row_bytes}) must be >= 1")
    arr = np.frombuffer(buf, dtype=np.uint8)
    size = arr.size
    starts, framed_end = find_frames(buf, arr) if framing == "events" else (_EMPTY, 0)
    raw_starts = np.arange(framed_end, size, raw_row_bytes, dtype=np.int64)
    row_offsets = np.concatenate([starts, raw_starts])
    row_ends = np.append(row_offsets[1:], np.int64(size))
    payload_starts = row_offsets.copy()
    payload_starts[: starts.size] += HEADER_BYTES
    payload_lens = row_ends - payload_starts
    framed = np.zeros(row_offsets.size, dtype=np.bool_)
    framed[: starts.size] = True

    times = _row_times(ingest_times, row_offsets)
    events = _binary_view(arr, buf, payload_starts, payload_lens)
    table = pa.Table.from_arrays(
        [pa.array(row_offsets), events, pa.array(times).view(INGEST_TIME_TYPE), pa.array(framed)],
        schema=_WRITE_SCHEMA,
    )
    sink = pa.BufferOutputStream()
    with pq.ParquetWriter(
        sink,
        _WRITE_SCHEMA,
        compression=compression,
        use_dictionary=False,
        write_statistics=["offset", "ingest_time_ms"],
        column_encoding={"offset": "DELTA_BINARY_PACKED", "ingest_time_ms": "DELTA_BINARY_PACKED"},
        store_schema=False,
    ) as writer:
        for first, count in _row_groups(row_ends, row_group_bytes):
            writer.write_table(table.slice(first, count), row_group_size=max(count, 1))
        writer.add_key_value_metadata(
            {META_VERSION: str(FORMAT_VERSION), META_LENGTH: str(size), META_FRAMING: framing}
        )
    return sink.getvalue().to_pybytes()


_EMPTY = np.zeros(0, dtype=np.int64)


def _binary_view(
    arr: npt.NDArray[np.uint8],
    buf: bytes | memoryview,
    starts: npt.NDArray[np.int64],
    lengths: npt.NDArray[np.int64],
) -> pa.Array:
    """A ``binary_view`` array of ``buf[starts[i]:starts[i]+lengths[i]]`` without copying payloads.

    Arrow view layout, 16 bytes per value: int32 length, then either the value inline (length
    <= 12, zero padded) or a 4-byte prefix, int32 buffer index and int32 offset.
    """
    rows = starts.size
    views = np.zeros((rows, 4), dtype=np.int32)
    views[:, 0] = lengths
    raw = views.view(np.uint8)
    inline = lengths <= 12
    if inline.any():
        idx = starts[inline, None] + np.arange(12)
        keep = np.arange(12) < lengths[inline, None]
        raw[inline, 4:16] = np.where(keep, arr[np.minimum(idx, max(arr.size - 1, 0))], 0)
    long = ~inline
    if long.any():
        raw[long, 4:8] = arr[starts[long, None] + np.arange(4)]
        views[long, 3] = starts[long]
    return pa.Array.from_buffers(pa.binary_view(), rows, [None, pa.py_buffer(views), pa.py_buffer(buf)])


def _row_times(ingest_times: IngestTimes, row_offsets: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    if isinstance(ingest_times, int | np.integer):
        return np.full(row_offsets.size, ingest_times, dtype=np.int64)
    ranges = ingest_times if isinstance(ingest_times, IngestRanges) else IngestRanges.from_pairs(ingest_times)
    return ranges.at(row_offsets)


def _row_groups(row_ends: npt.NDArray[np.int64], target: int) -> Iterator[tuple[int, int]]:
    """Split rows into runs of whole rows holding about ``target`` bytes each."""
    rows = row_ends.size
    if rows == 0:
        yield 0, 0
        return
    cuts = np.searchsorted(row_ends, np.arange(target, int(row_ends[-1]), target), side="left") + 1
    bounds = np.unique(np.concatenate([[0], cuts, [rows]]))
    for first, last in itertools.pairwise(bounds.tolist()):
        yield first, last - first


# -- decode ---------------------------------------------------------------------------------


def chunk_info(source: Source) -> ChunkFormatInfo:
    """Read a chunk's footer.

    Raises:
        ChunkFormatError: not a segstore chunk, or a newer format version.
    """
    with _open(source) as pf:
        return _info(pf)


def decode_range(source: Source, offset: int, length: int) -> bytes:
    """Return exactly the segment bytes ``[offset, offset + length)`` of the chunk.

    Reads only the row groups (by ``offset`` statistics) and rows that overlap the range.

    Raises:
        ValueError: the range is not inside ``[0, chunk length]``.
        ChunkFormatError: the file is not a readable chunk or its rows do not tile the data.
        OSError: a path or URI source cannot be opened.
    """
    with _open(source) as pf:
        return _decode(pf, _info(pf), offset, length)


def decode(source: Source) -> bytes:
    """Return all segment bytes of the chunk (raises as :func:`decode_range`)."""
    with _open(source) as pf:
        info = _info(pf)
        return _decode(pf, info, 0, info.length)


def _decode(pf: pq.ParquetFile, info: ChunkFormatInfo, offset: int, length: int) -> bytes:
    if offset < 0 or length < 0 or offset + length > info.length:
        raise ValueError(f"range [{offset}, {offset + length}) outside chunk of {info.length} bytes")
    if length == 0:
        return b""
    end = offset + length
    groups, group_end = _groups_for(pf, info, offset, end)
    table = _read(pf, groups, ["offset", "event", "framed"])
    offsets = table.column("offset").to_numpy()
    first = int(np.searchsorted(offsets, offset, side="right")) - 1
    last = int(np.searchsorted(offsets, end, side="left"))
    if first < 0:
        raise ChunkFormatError(f"no row covers offset {offset}")
    table = table.slice(first, last - first)
    base = int(offsets[first])
    pieces = _rebuild(table)
    total = sum(p.nbytes for p in pieces)
    expected = (int(offsets[last]) if last < offsets.size else group_end) - base
    if total != expected:
        raise ChunkFormatError(f"rows from offset {base} hold {total} bytes, expected {expected}")
    return _join_slice(pieces, offset - base, length)


def read_events(
    source: Source,
    columns: Sequence[str] | None = None,
    *,
    start: int = 0,
    end: int | None = None,
    framed_only: bool = False,
) -> pa.Table:
    """Read the rows whose ``offset`` lies in ``[start, end)``, as a Spark executor would.

    Only overlapping row groups are read. ``columns`` picks columns of :data:`SCHEMA` (all by
    default). ``framed_only`` drops raw rows. The result has :data:`SCHEMA`'s types.

    Raises:
        ValueError: unknown column.
        ChunkFormatError: not a readable chunk.
        OSError: a path or URI source cannot be opened.
    """
    wanted = list(columns) if columns is not None else SCHEMA.names
    unknown = set(wanted) - set(SCHEMA.names)
    if unknown:
        raise ValueError(f"unknown columns {sorted(unknown)}; the schema has {SCHEMA.names}")
    needed = [n for n in SCHEMA.names if n in wanted or n == "offset" or (framed_only and n == "framed")]
    with _open(source) as pf:
        info = _info(pf)
        stop = info.length if end is None else min(end, info.length)
        groups, _ = _groups_for(pf, info, max(start, 0), stop)
        table = _read(pf, groups, needed)
    offsets = table.column("offset")
    mask = pc.and_(pc.greater_equal(offsets, start), pc.less(offsets, stop))
    if framed_only:
        mask = pc.and_(mask, table.column("framed"))
    return table.filter(mask).select(wanted)


def first_ingested_at_or_after(source: Source, timestamp_ms: int, start: int = 0, end: int | None = None) -> int | None:
    """The offset (relative to the chunk) of the first row in ``[start, end)`` ingested at or after
    ``timestamp_ms``, or None if every row there is older.

    Rows are searched in offset order whatever their times (a merged transaction's rows may be older
    than the rows before them). Row groups whose ``ingest_time_ms`` statistics say all rows are older
    are not read; only the ``offset`` and ``ingest_time_ms`` columns of the others are.

    Raises:
        ChunkFormatError: not a readable chunk.
        OSError: a path or URI source cannot be opened.
    """
    time_column = SCHEMA.get_field_index("ingest_time_ms")
    with _open(source) as pf:
        info = _info(pf)
        stop = info.length if end is None else min(end, info.length)
        groups, _ = _groups_for(pf, info, max(start, 0), stop)
        for g in groups:
            stats = pf.metadata.row_group(g).column(time_column).statistics
            if stats is not None and stats.has_min_max and int(stats.max_raw) < timestamp_ms:
                continue
            table = _read(pf, [g], ["offset", "ingest_time_ms"])
            offsets = table.column("offset").to_numpy()
            times = table.column("ingest_time_ms").to_numpy()
            hits = np.flatnonzero((offsets >= start) & (offsets < stop) & (times >= timestamp_ms))
            if hits.size:
                return int(offsets[int(hits[0])])
    return None


def end_before(source: Source, timestamp_ms: int, start: int = 0, end: int | None = None) -> int:
    """The least offset (relative to the chunk) ``e`` in ``[start, end]`` such that every row starting in
    ``[e, end)`` was ingested at or after ``timestamp_ms``: the end of the last row there ingested before it, or
    ``start`` if none was (rows in any time order). Reads only the ``offset`` and ``ingest_time_ms`` columns of
    the row groups holding the range. Raises ChunkFormatError, OSError."""
    offsets, times, stop = _offsets_and_times(source, start, end)
    older = np.flatnonzero((offsets >= start) & (offsets < stop) & (times < timestamp_ms))
    if not older.size:
        return start
    last = int(older[-1])
    return int(offsets[last + 1]) if last + 1 < offsets.size and offsets[last + 1] < stop else stop


def ingest_runs(source: Source, start: int = 0, end: int | None = None) -> list[tuple[int, int]]:
    """``(offset relative to the chunk, ms)`` where the ingestion time changes among the rows holding bytes of
    ``[start, end)``, in offset order (the first always, at ``start`` at the earliest): each time holds up to the
    next pair. Reads only the ``offset`` and
    ``ingest_time_ms`` columns of the row groups holding the range. Raises ChunkFormatError, OSError."""
    offsets, times, stop = _offsets_and_times(source, start, end)
    first = max(int(np.searchsorted(offsets, start, side="right")) - 1, 0)  # the row holding ``start``
    last = int(np.searchsorted(offsets, stop, side="left"))
    offsets, times = np.maximum(offsets[first:last], start), times[first:last]
    changes = np.flatnonzero(np.diff(times, prepend=np.int64(-1) if times.size == 0 else times[0] - 1))
    return [(int(offsets[i]), int(times[i])) for i in changes]


def _offsets_and_times(source: Source, start: int, end: int | None) -> tuple[np.ndarray, np.ndarray, int]:
    """The ``offset`` and ``ingest_time_ms`` columns (int64) of the row groups holding ``[start, end)``, and the
    range's end cut at the chunk's length. Raises ChunkFormatError, OSError."""
    with _open(source) as pf:
        info = _info(pf)
        stop = info.length if end is None else min(end, info.length)
        groups, _ = _groups_for(pf, info, max(start, 0), stop)
        table = _read(pf, groups, ["offset", "ingest_time_ms"])
    return table.column("offset").to_numpy(), table.column("ingest_time_ms").to_numpy(), stop


def first_event_at_or_after(source: Source, start: int) -> int | None:
    """The offset (relative to the chunk) of the first event row (``framed``) whose offset is at or after
    ``start``, or None if no event of the chunk starts there. Reads only the ``offset`` and ``framed``
    columns of the row groups from the one holding ``start`` on (statistics pick it), until one has a match.

    Raises:
        ChunkFormatError: not a readable chunk.
        OSError: a path or URI source cannot be opened.
    """
    with _open(source) as pf:
        info = _info(pf)
        groups, _ = _groups_for(pf, info, max(start, 0), info.length)
        for g in groups:
            table = _read(pf, [g], ["offset", "framed"])
            offsets = table.column("offset").to_numpy()
            framed = table.column("framed").to_numpy(zero_copy_only=False)
            hits = np.flatnonzero((offsets >= start) & framed)
            if hits.size:
                return int(offsets[int(hits[0])])
    return None


@contextlib.contextmanager
def _open(source: Source) -> Iterator[pq.ParquetFile]:
    with contextlib.ExitStack() as stack:
        if isinstance(source, pa.NativeFile):
            handle: pa.NativeFile = source
        elif isinstance(source, str | os.PathLike):
            location = os.fspath(source)
            if "://" in location:
                fs, path = pafs.FileSystem.from_uri(location)
                handle = stack.enter_context(fs.open_input_file(path))
            else:
                handle = stack.enter_context(pa.OSFile(location, "rb"))
        else:
            handle = pa.BufferReader(source if isinstance(source, pa.Buffer) else pa.py_buffer(source))
        try:
            pf = pq.ParquetFile(handle)
        except (pa.ArrowException, OSError) as exc:
            raise ChunkFormatError(f"not a Parquet chunk: {exc}") from exc
        yield pf


def _info(pf: pq.ParquetFile) -> ChunkFormatInfo:
    meta = pf.metadata
    kv = meta.metadata or {}
    try:
        version = int(kv[META_VERSION])
        length = int(kv[META_LENGTH])
        framing = kv[META_FRAMING].decode()
    except (KeyError, ValueError) as exc:
        raise ChunkFormatError(f"missing or bad segstore metadata: {exc!r}") from exc
    if version > FORMAT_VERSION:
        raise ChunkFormatError(f"chunk format version {version} is newer than {FORMAT_VERSION}")
    if version < 1:
        raise ChunkFormatError(f"chunk format version {version} is not a version")
    if pf.schema_arrow.names != SCHEMA.names:
        raise ChunkFormatError(f"unexpected columns {pf.schema_arrow.names}")
    return ChunkFormatInfo(version, length, framing, meta.num_rows, meta.num_row_groups)


def _groups_for(pf: pq.ParquetFile, info: ChunkFormatInfo, start: int, end: int) -> tuple[list[int], int]:
    """Non-empty row groups holding rows that start in or span ``[start, end)``, and where the last ends."""
    groups: list[int] = []
    firsts: list[int] = []
    for g in range(info.row_groups):
        group = pf.metadata.row_group(g)
        if group.num_rows == 0:
            continue
        stats = group.column(0).statistics
        if stats is not None and stats.has_min_max:
            firsts.append(int(stats.min))
        else:  # no statistics (rewritten by another tool): read the column
            firsts.append(int(pf.read_row_group(g, columns=["offset"]).column(0)[0].as_py()))
        groups.append(g)
    first_arr = np.array(firsts, dtype=np.int64)
    limits = np.append(first_arr[1:], np.int64(info.length))
    chosen = np.flatnonzero((first_arr < end) & (limits > start))
    if chosen.size == 0:
        return [], info.length
    return [groups[i] for i in chosen], int(limits[chosen[-1]])


def _read(pf: pq.ParquetFile, groups: list[int], columns: list[str]) -> pa.Table:
    if not groups:
        return SCHEMA.empty_table().select(columns)
    try:
        return as_reader_schema(pf.read_row_groups(groups, columns=columns))
    except (pa.ArrowException, OSError) as exc:
        raise ChunkFormatError(f"cannot read row groups {groups}: {exc}") from exc


def _rebuild(table: pa.Table) -> list[memoryview]:
    """Segment bytes of ``table``'s rows, as consecutive pieces: header + payload per framed row."""
    pieces: list[memoryview] = []
    events = table.column("event")
    framed = table.column("framed")
    for ev_chunk, fr_chunk in zip(events.chunks, framed.chunks, strict=True):
        pieces.append(_rebuild_batch(ev_chunk, fr_chunk))
    return pieces


def _rebuild_batch(events: pa.BinaryArray, framed: pa.BooleanArray) -> memoryview:
    rows = len(events)
    if rows == 0:
        return memoryview(b"")
    ev_offsets = np.frombuffer(events.buffers()[1], dtype=np.int32, count=rows + 1, offset=events.offset * 4)
    is_framed = framed.to_numpy(zero_copy_only=False)
    if not is_framed.any():
        data = events.buffers()[2]
        return memoryview(data)[ev_offsets[0] : ev_offsets[-1]]
    headers = np.zeros((int(is_framed.sum()), 2), dtype=">i4")
    headers[:, 1] = np.diff(ev_offsets)[is_framed]
    hdr_offsets = np.zeros(rows + 1, dtype=np.int32)
    np.cumsum(is_framed * np.int32(HEADER_BYTES), out=hdr_offsets[1:])
    header_array = pa.Array.from_buffers(pa.binary(), rows, [None, pa.py_buffer(hdr_offsets), pa.py_buffer(headers)])
    joined = pc.binary_join_element_wise(header_array, events, pa.scalar(b"", pa.binary()))
    out_offsets = np.frombuffer(joined.buffers()[1], dtype=np.int32, count=rows + 1, offset=joined.offset * 4)
    return memoryview(joined.buffers()[2])[out_offsets[0] : out_offsets[-1]]


def _join_slice(pieces: list[memoryview], skip: int, length: int) -> bytes:
    """``b"".join(pieces)[skip:skip + length]`` with one copy."""
    selected: list[memoryview] = []
    for piece in pieces:
        if skip >= piece.nbytes:
            skip -= piece.nbytes
            continue
        take = piece[skip : skip + length]
        skip = 0
        selected.append(take)
        length -= take.nbytes
        if length == 0:
            break
    return selected[0].tobytes() if len(selected) == 1 else b"".join(selected)
