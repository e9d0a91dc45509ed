"""segstore's own wire commands: extensions Pravega does not have (its clients never send them).

Each one is a request/reply pair with type codes from -20 down (Pravega's negative codes stop at -6, its
positive ones are its own), a request id first and a delegation token last in the request, checked by the
segment store's token gate like Pravega's reads (``segment_store.server.token_gate``). A Pravega segment store
does not know these type codes: its decoder fails and it closes the connection, so to a client an extension
sent to a Pravega server looks like a lost connection (``ConnectionLostError``); callers that can do without
the answer fall back (README, "Wire-protocol extensions").

* ``LocateOffsetAtTime`` -> ``OffsetAtTimeLocated`` (-20/-21): the offset of the first event ingested at or
  after a time.
* ``ListStorageChunkLocations`` -> ``StorageChunkLocationsListed`` (-22/-23): the segment's Tier-2 chunks and
  where each one lives (a file path, or an S3 bucket and key and the endpoint the segment store uses), so a
  reader that can reach them (a Spark executor) reads them directly. Credentials are never on the wire.
* ``ReadIngestTimes`` -> ``IngestTimesRead`` (-24/-25): when the events of a range were ingested, as runs of
  ``(offset, ms)``, so a reader that gets the bytes through ``ReadSegment`` can give each event its time.
* ``LocateOffsetBeforeTime`` -> ``OffsetBeforeTimeLocated`` (-32/-33): where the events ingested before a time
  end (every later event was ingested at or after it), or -1 when the segment store cannot tell.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from segment_store.protocol.layout import Record, WireRecord, compile_layout
from segment_store.protocol.registry import WireCommand, register
from segment_store.protocol.types import I64, UTF, ListOf

#: ``StorageChunkLocationsListed.kind``: chunks are files; each ``ChunkLocation.path`` is an absolute path.
TIER2_FILE: Final = "file"
#: ``StorageChunkLocationsListed.kind``: chunks are S3 objects in ``bucket``; each ``path`` is the object key.
TIER2_S3: Final = "s3"
#: ``StorageChunkLocationsListed.kind``: chunks cannot be opened from outside the segment store (in memory).
TIER2_NONE: Final = ""
#: Most chunks one ``StorageChunkLocationsListed`` lists (a reply stays far below the 16 MiB frame limit).
MAX_LISTED_CHUNKS: Final = 1000
#: Most runs one ``IngestTimesRead`` carries (16 bytes each: a reply stays far below the 16 MiB frame limit).
MAX_INGEST_TIME_RUNS: Final = 100_000


@register
@dataclass(frozen=True, slots=True)
class LocateOffsetAtTime(WireCommand):
    """segstore extension (Pravega has no such command; its clients never send it): the offset of the first
    event of ``segment`` ingested at or after ``timestamp_ms`` (epoch ms), or the segment's length if every
    event is older."""

    TYPE_CODE = -20
    LAYOUT = (I64, UTF, I64, UTF)
    request_id: int
    segment: str
    timestamp_ms: int
    delegation_token: str


@register
@dataclass(frozen=True, slots=True)
class LocateOffsetBeforeTime(WireCommand):
    """segstore extension: the least offset (an event start) of ``segment`` from which every event up to its
    length was ingested at or after ``timestamp_ms`` (epoch ms), so a read of the events ingested before it can
    stop there (``OffsetBeforeTimeLocated``; -1: cannot tell, e.g. Tier-2 chunk metadata without time bounds).
    Needs ``READ``. Answered ``NoSuchSegment`` for a missing segment."""

    TYPE_CODE = -32
    LAYOUT = (I64, UTF, I64, UTF)
    request_id: int
    segment: str
    timestamp_ms: int
    delegation_token: str


@register
@dataclass(frozen=True, slots=True)
class OffsetBeforeTimeLocated(WireCommand):
    """Reply to ``LocateOffsetBeforeTime`` (segstore extension); ``offset`` -1: the segment store cannot tell."""

    TYPE_CODE = -33
    LAYOUT = (I64, UTF, I64)
    request_id: int
    segment: str
    offset: int


@register
@dataclass(frozen=True, slots=True)
class OffsetAtTimeLocated(WireCommand):
    """Reply to ``LocateOffsetAtTime`` (segstore extension)."""

    TYPE_CODE = -21
    LAYOUT = (I64, UTF, I64)
    request_id: int
    segment: str
    offset: int


@register
@dataclass(frozen=True, slots=True)
class ListStorageChunkLocations(WireCommand):
    """segstore extension: the Tier-2 chunks of ``segment`` holding bytes of ``[from_offset, to_offset)`` and where
    they live (``StorageChunkLocationsListed``), at most ``MAX_LISTED_CHUNKS`` of them: ask again from the last
    one's end for more. It reveals the storage layout, so it needs the permission a read of the segment needs
    (``READ``). Answered ``NoSuchSegment`` for a missing segment."""

    TYPE_CODE = -22
    LAYOUT = (I64, UTF, I64, I64, UTF)
    request_id: int
    segment: str
    from_offset: int
    to_offset: int
    delegation_token: str


@compile_layout
@dataclass(frozen=True, slots=True)
class ChunkLocation(WireRecord):
    """One chunk in a ``StorageChunkLocationsListed`` reply: segment bytes ``[start_offset, start_offset +
    length)`` in chunk ``chunk_name``, at ``path`` (an absolute file path, or the S3 object key; "" when the
    reply's kind is ``TIER2_NONE``)."""

    LAYOUT = (I64, I64, UTF, UTF)
    start_offset: int
    length: int
    chunk_name: str
    path: str


@register
@dataclass(frozen=True, slots=True)
class StorageChunkLocationsListed(WireCommand):
    """Reply to ``ListStorageChunkLocations`` (segstore extension).

        ``start_offset``: the segment's first readable offset (below it: truncated; a chunk may start below it).
        ``kind``: ``TIER2_FILE``, ``TIER2_S3`` or ``TIER2_NONE``. ``endpoint``: with S3, the endpoint URL the segment
        store uses (``http://host:port``; "" for AWS's own). ``bucket``: with S3, the bucket. ``chunks``: in offset
        order, contiguous: those holding bytes of the asked range below the segment's storage length (none while
    nothing of it is in Tier-2), the first ``MAX_LISTED_CHUNKS`` of them."""

    TYPE_CODE = -23
    LAYOUT = (I64, UTF, I64, UTF, UTF, UTF, ListOf(Record(ChunkLocation, 20)))
    request_id: int
    segment: str
    start_offset: int
    kind: str
    endpoint: str
    bucket: str
    chunks: tuple[ChunkLocation, ...]


@register
@dataclass(frozen=True, slots=True)
class ReadIngestTimes(WireCommand):
    """segstore extension: when the events of ``segment`` in ``[from_offset, to_offset)`` were ingested
    (``IngestTimesRead``). Needs ``READ``, as a read of those bytes does. Answered ``NoSuchSegment`` for a missing
    segment, ``SegmentIsTruncated`` when ``from_offset`` is below the segment's start."""

    TYPE_CODE = -24
    LAYOUT = (I64, UTF, I64, I64, UTF)
    request_id: int
    segment: str
    from_offset: int
    to_offset: int
    delegation_token: str


@compile_layout
@dataclass(frozen=True, slots=True)
class IngestTimeRun(WireRecord):
    """One run in an ``IngestTimesRead`` reply: the events from ``offset`` up to the next run's offset (or the
    reply's ``end_offset``) were ingested at ``time_ms`` (epoch ms)."""

    LAYOUT = (I64, I64)
    offset: int
    time_ms: int


@register
@dataclass(frozen=True, slots=True)
class IngestTimesRead(WireCommand):
    """Reply to ``ReadIngestTimes`` (segstore extension).

    ``runs`` cover ``[from_offset, end_offset)`` of the request in offset order (the first starts at
    ``from_offset``; consecutive runs have different times), at most ``MAX_INGEST_TIME_RUNS`` of them.
    ``end_offset``: where the answer stops, at most ``to_offset`` and the segment's length: ask again from
    there for more. A time is the segment store's clock when the append carrying the event was accepted; for an
    event of a transaction merged but not yet in Tier-2, the segment's first time after the merge (README,
    "Event time")."""

    TYPE_CODE = -25
    LAYOUT = (I64, UTF, I64, ListOf(Record(IngestTimeRun, 16)))
    request_id: int
    segment: str
    end_offset: int
    runs: tuple[IngestTimeRun, ...]
