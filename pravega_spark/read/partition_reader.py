"""Executor side of the ``segstore`` source: read one segment range and yield Arrow record batches.

A :class:`SegmentRangePartition` names a segment and a byte range ``[start, end)`` whose both ends are
event boundaries (the driver plans them so, :mod:`pravega_spark.read.planning`); a :class:`PackedPartition` holds
several small ones, read in turn by one task. :func:`read_partition` yields
``pyarrow.RecordBatch`` es in the source's schema (:data:`ARROW_SCHEMA`), one row per event, in offset
order, every event of the range exactly once:

1. the part of the range below the segment's Tier-2 storage length straight from its Parquet chunks, when
   ``pravega_spark.read.tier2_direct`` exists and can reach them from this machine, where the segment store says
   they are or under option ``tier2Location`` (``read_range`` returns None when it cannot: then everything
   comes from the segment store);
2. the rest from the segment store, through one prefetching segment reader with large requests.

The ``timestamp`` column (ingestion time) comes from the chunks' ``ingest_time_ms`` in case 1 and from segstore's
wire extension ``ReadIngestTimes`` in case 2 (:class:`SegmentIngestTimes`); null where the segment store does not
know the extension (a Pravega one).

Hot path: the segment's bytes are framed into events column-wise by the wire codec's scanner
(:mod:`segstore_shared.event_frames`, shared with the engine's Tier-2 chunk format: vectorised checks of
runs of equally long events and of chains of small ones, a plain walk only where neither applies); payloads are
cut out of the buffer with one strided copy or one boolean mask, and every column is built from buffers (no per-row
Python objects).

Data loss: a range below the segment's start (truncated) or of a deleted segment raises
:class:`~pravega_spark.errors.DataLossError` unless the partition says ``fail_on_data_loss=False``, in
which case the missing part is skipped and logged.

Executors keep one :class:`~pravega_spark.connection.StreamConnection` per controller per process (Python
workers are reused across tasks), made on first use after the worker was forked.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from controller_client.model import qualified_segment_name
from pravega_spark.errors import DataLossError, Tier2ReadError
from pravega_spark.options.tier2_location import Tier2Location
from segment_store.client import NoSuchSegmentError, SegmentIsTruncatedError
from segment_store.protocol import HEADER_SIZE, ProtocolError
from segstore_shared.event_frames import find_frames, frame_lengths, invalid_header

_log = logging.getLogger(__name__)

#: The columns of the source, in order. Documented in :class:`pravega_spark.read.source.SegstoreDataSource`.
ARROW_SCHEMA = pa.schema(
    [
        pa.field("event", pa.binary()),
        pa.field("scope", pa.string()),
        pa.field("stream", pa.string()),
        pa.field("segment_id", pa.int64()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
    ]
)
SPARK_SCHEMA_DDL = "event binary, scope string, stream string, segment_id bigint, offset bigint, timestamp timestamp"
TIMESTAMP_TYPE = ARROW_SCHEMA.field("timestamp").type
"""Spark's ``timestamp`` in Arrow: the ``timestamp`` column (an event's ingestion time)."""

IngestTimes = Callable[[npt.NDArray[np.int64]], "npt.NDArray[np.int64] | None"]
"""Event offsets (ascending) -> their ingestion times (epoch ms), or None where they are not known."""

_MIB = 1024 * 1024
BATCH_BYTES = 2 * _MIB
"""Segment bytes per record batch (a batch may be larger when one event is)."""


@dataclass(frozen=True)
class SegmentRangePartition(InputPartition):
    """One Spark input partition: events of ``segment_id`` whose headers start in ``[start, end)``."""

    controller: str
    scope: str
    stream: str
    segment_id: int
    start: int
    end: int
    fail_on_data_loss: bool = True
    timeout_s: float = 30.0
    tier2_location: str | None = None
    """The Tier-2 root as executors see it (option ``tier2Location``); None: only locations chunks report."""
    trust_store: str | None = None
    """Option ``trustStore`` (TLS): read by the executor at this path."""
    token: str | None = field(default=None, repr=False)
    """With authentication: the delegation token the driver got for this read (never a password)."""
    watermark_thresholds: tuple[tuple[int, int], ...] | None = None
    """With option ``watermarkColumn``: the ``(offset, lower bound ms)`` thresholds of this range
    (:mod:`pravega_spark.read.watermark_column`); None without the option."""

    @property
    def segment_name(self) -> str:
        return qualified_segment_name(self.scope, self.stream, self.segment_id)


@dataclass(frozen=True)
class PackedPartition(InputPartition):
    """Several small segment ranges read one after another by one task (planning packs them so)."""

    parts: tuple[SegmentRangePartition, ...]


# ---- framing ----------------------------------------------------------------------------------------------------
def frame_events(data: Any, limit: int | None = None) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], int]:
    """Split ``data`` (bytes-like, starting at an event boundary) into events.

    Returns ``(starts, lengths, consumed)``: the header positions and payload lengths of the whole events in
    ``data[:limit]``, and the position after the last of them (where a partial event begins). Raises
    ProtocolError for a header with a type other than 0 or a negative length. The scan is the wire codec's
    (:func:`segstore_shared.event_frames.find_frames`).
    """
    view = memoryview(data).cast("B") if not isinstance(data, bytes | bytearray) else data
    if limit is not None and limit < len(view):
        view = memoryview(view)[:limit]
    starts, consumed = find_frames(view)
    bad = invalid_header(view, consumed)
    if bad is not None:
        raise ProtocolError(f"bad event header (type {bad[0]}, length {bad[1]}) at {consumed}")
    return starts, frame_lengths(starts, consumed), consumed


def _constant_strings(value: str, count: int) -> pa.Array:
    encoded = value.encode()
    offsets = np.arange(0, (count + 1) * len(encoded), len(encoded) or 1, dtype=np.int32)[: count + 1]
    if not encoded:
        offsets = np.zeros(count + 1, dtype=np.int32)
    return pa.Array.from_buffers(pa.string(), count, [None, pa.py_buffer(offsets), pa.py_buffer(encoded * count)])


def events_to_batch(
    data: Any,
    starts: npt.NDArray[np.int64],
    lengths: npt.NDArray[np.int64],
    base_offset: int,
    scope: str,
    stream: str,
    segment_id: int,
    times: IngestTimes | None = None,
) -> pa.RecordBatch:
    """A record batch of the events at ``starts`` (header positions in ``data``, a buffer that begins at
    segment offset ``base_offset``) with payload ``lengths``; their ``timestamp`` from ``times`` (null without,
    or where it answers None)."""
    count = len(starts)
    buffer = np.frombuffer(data, dtype=np.uint8)
    if count and lengths[0] == lengths[-1] and starts[-1] - starts[0] == (count - 1) * (HEADER_SIZE + lengths[0]):
        stride = HEADER_SIZE + int(lengths[0])  # one run of equal events: a strided copy
        block = buffer[int(starts[0]) : int(starts[0]) + count * stride].reshape(count, stride)
        payload = np.ascontiguousarray(block[:, HEADER_SIZE:]).reshape(-1)
    else:
        keep = np.ones(len(buffer), dtype=bool)
        if count:
            keep[(starts[:, None] + np.arange(HEADER_SIZE)).reshape(-1)] = False
            keep[int(starts[-1]) + HEADER_SIZE + int(lengths[-1]) :] = False
            keep[: int(starts[0])] = False
        payload = buffer[keep]
    value_offsets = np.zeros(count + 1, dtype=np.int32)
    np.cumsum(lengths, out=value_offsets[1:])
    events = pa.Array.from_buffers(pa.binary(), count, [None, pa.py_buffer(value_offsets), pa.py_buffer(payload)])
    columns = [
        events,
        _constant_strings(scope, count),
        _constant_strings(stream, count),
        pa.array(np.full(count, segment_id, dtype=np.int64)),
        pa.array(starts + base_offset),
        timestamps(None if times is None else times(starts + base_offset), count),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)


def timestamps(times_ms: npt.NDArray[np.int64] | None, count: int) -> pa.Array:
    """The ``timestamp`` column of ``count`` events ingested at ``times_ms`` (epoch ms); nulls for None."""
    if times_ms is None:
        return pa.nulls(count, TIMESTAMP_TYPE)
    return pa.array(np.asarray(times_ms, dtype=np.int64) * 1000, type=TIMESTAMP_TYPE)


def batches_from_chunks(
    chunks: Iterable[bytes],
    start: int,
    scope: str,
    stream: str,
    segment_id: int,
    batch_bytes: int = BATCH_BYTES,
    times: IngestTimes | None = None,
) -> Iterator[pa.RecordBatch]:
    """Record batches of the events in consecutive segment bytes beginning at offset ``start`` (an event
    boundary), ``timestamp`` from ``times`` (see :func:`events_to_batch`). Raises ProtocolError if the bytes
    end inside an event."""
    pending: list[bytes] = []
    pending_size = 0
    base = start
    for chunk in chunks:
        pending.append(chunk)
        pending_size += len(chunk)
        if pending_size < batch_bytes:
            continue
        data = pending[0] if len(pending) == 1 else b"".join(pending)
        starts, lengths, consumed = frame_events(data)
        if len(starts):
            yield events_to_batch(data, starts, lengths, base, scope, stream, segment_id, times)
        rest = data[consumed:]
        base += consumed
        pending, pending_size = ([rest], len(rest)) if rest else ([], 0)
    if pending_size:
        data = b"".join(pending)
        starts, lengths, consumed = frame_events(data)
        if consumed != len(data):
            raise ProtocolError(
                f"segment {scope}/{stream}/{segment_id}: range ends inside an event at offset {base + consumed}"
            )
        yield events_to_batch(data, starts, lengths, base, scope, stream, segment_id, times)


# ---- executor runtime ------------------------------------------------------------------------------------------
_lock = threading.Lock()
_connections: dict[tuple[int, str, str | None], tuple[str | None, Any]] = {}


def _connection(controller: str, timeout_s: float, trust_store: str | None = None, token: str | None = None) -> Any:
    """This process's connection to ``controller`` (made after fork, reused by later tasks; made again when the
    driver hands out a new token, as it does for every batch with authentication on)."""
    from pravega_spark.connection import StreamConnection
    from pravega_spark.options.common import StreamTarget

    key = (os.getpid(), controller, trust_store)
    with _lock:
        held = _connections.get(key)
        if held is not None and held[0] == token:
            return held[1]
        if held is not None:
            held[1].close()
        credentials = StreamTarget(controller, "-", "-", trust_store, token=token)
        connection = StreamConnection(controller, timeout_s, credentials=credentials)
        _connections[key] = (token, connection)
        return connection


def _tier2_module() -> Any:
    """``pravega_spark.read.tier2_direct`` if it exists, else None."""
    if importlib.util.find_spec("pravega_spark.read.tier2_direct") is None:
        return None
    return importlib.import_module("pravega_spark.read.tier2_direct")


def _batch_end(batch: pa.RecordBatch) -> int:
    """The segment offset just after the last event of ``batch``."""
    last = batch.num_rows - 1
    event: bytes = batch.column("event")[last].as_py()
    return int(batch.column("offset")[last].as_py()) + HEADER_SIZE + len(event)


def _conform(batch: pa.RecordBatch) -> pa.RecordBatch:
    """A batch of :func:`pravega_spark.read.tier2_direct.read_range` (``ingest_time_ms`` last) in the source's
    schema."""
    times = batch.column("ingest_time_ms").to_numpy()
    columns = [batch.column(n) for n in ARROW_SCHEMA.names[:-1]]
    return pa.RecordBatch.from_arrays([*columns, timestamps(times, batch.num_rows)], schema=ARROW_SCHEMA)


def _from_tier2(partition: SegmentRangePartition, connection: Any, position: list[int]) -> Iterator[pa.RecordBatch]:
    """The part of the range Tier-2 serves from here; ``position[0]`` follows what was yielded. The chunks are
    where the segment store says (segstore's extension, one round trip), or under ``tier2Location`` if given."""
    tier2 = _tier2_module()
    if tier2 is None:
        return
    given = partition.tier2_location
    location = None if given is None else Tier2Location.parse(given)
    read = tier2.read_range(
        connection, partition.segment_name, position[0], partition.end, location=location, ingest_time=True
    )
    if read is None:
        return
    try:
        for batch in read:
            if batch.num_rows:
                yield _conform(batch)
                position[0] = _batch_end(batch)
        position[0] = max(position[0], read.end)
    except Tier2ReadError as error:
        _log.info("%s; reading on from the segment store", error)
        position[0] = error.offset


class SegmentIngestTimes:
    """The ingestion times of the events of a partition read through the segment store (segstore's extension
    ``ReadIngestTimes``, asked for the rest of the range when a batch needs times not yet known: usually one round
    trip per partition). None (null timestamps) where the segment store does not know the extension."""

    def __init__(self, connection: Any, partition: SegmentRangePartition) -> None:
        self._connection = connection
        self._partition = partition
        self._offsets = np.empty(0, np.int64)  # run starts, ascending
        self._times = np.empty(0, np.int64)
        self._known_to = -1  # runs cover [self._offsets[0], self._known_to)

    def __call__(self, offsets: npt.NDArray[np.int64]) -> npt.NDArray[np.int64] | None:
        if not offsets.size:
            return np.empty(0, np.int64)
        first, last = int(offsets[0]), int(offsets[-1])
        known = self._offsets.size and self._offsets[0] <= first and last < self._known_to
        if not known and not self._fetch(first, last + 1):
            return None
        return self._times[np.searchsorted(self._offsets, offsets, side="right") - 1]

    def _fetch(self, start: int, need: int) -> bool:
        p = self._partition
        offsets: list[int] = []
        times: list[int] = []
        at = start
        while at < need:
            answer = self._connection.ingest_times(p.scope, p.stream, p.segment_id, at, max(p.end, need))
            if answer is None:
                return False
            end, runs = answer
            if end <= at or not runs or runs[0][0] != at:
                raise ProtocolError(f"segment {p.segment_name}: no ingestion times for [{at}, {need}) ({answer})")
            offsets += [o for o, _ in runs]
            times += [t for _, t in runs]
            at = end
        self._offsets, self._times, self._known_to = np.array(offsets, np.int64), np.array(times, np.int64), at
        return True


def read_partition(partition: SegmentRangePartition) -> Iterator[pa.RecordBatch]:
    """The events of ``partition`` as record batches (see the module docstring)."""
    position = partition.start
    if position >= partition.end:
        return
    connection = _connection(partition.controller, partition.timeout_s, partition.trust_store, partition.token)
    served = [position]
    yield from _from_tier2(partition, connection, served)
    position = served[0]
    times = SegmentIngestTimes(connection, partition)
    while position < partition.end:
        chunks = connection.chunks(partition.scope, partition.stream, partition.segment_id, position, partition.end)
        try:
            for batch in batches_from_chunks(
                chunks, position, partition.scope, partition.stream, partition.segment_id, times=times
            ):
                yield batch
                position = _batch_end(batch)
            return
        except SegmentIsTruncatedError as error:
            lost_to = min(max(error.start_offset, position), partition.end)
            message = (
                f"segment {partition.segment_name}: offsets [{position}, {lost_to}) were truncated away "
                f"before this query read them"
            )
            if partition.fail_on_data_loss or lost_to <= position:
                raise DataLossError(message + " (set option failOnDataLoss=false to skip lost data)") from None
            _log.warning("%s; skipped (failOnDataLoss=false)", message)
            position = lost_to
        except NoSuchSegmentError:
            message = (
                f"segment {partition.segment_name} no longer exists (truncated away): "
                f"[{position}, {partition.end}) lost"
            )
            if partition.fail_on_data_loss:
                raise DataLossError(message + " (set option failOnDataLoss=false to skip lost data)") from None
            _log.warning("%s; skipped (failOnDataLoss=false)", message)
            return
