"""The Tier-2 chunk file as readers outside the segment store see it: a contract between the engine, which writes
chunks (:mod:`segment_store.storage.format.parquet_chunk`), and whoever reads them straight from Tier-2 (the Spark
connector's executors).

A chunk of an event segment is one Parquet file with one row per event, in offset order, tiling the chunk exactly:

===================  ===========  ==============================================================
column               type         meaning
===================  ===========  ==============================================================
``offset``           int64        offset of the row's first byte, relative to the chunk's start
``event``            binary       framed row: the payload without the 8-byte header;
                                  raw row: the bytes as they are
``ingest_time_ms``   int64        epoch ms at which the row's first byte was appended
``framed``           bool         ``True``: an event; ``False``: raw bytes
===================  ===========  ==============================================================

The Parquet key-value metadata holds :data:`META_VERSION`, :data:`META_LENGTH` (bytes of segment data) and
:data:`META_FRAMING` (``"events"`` or ``"raw"``). A reader must check the length and the framing against what it
expects before trusting the rows.

Format versions (:data:`META_VERSION`; both are read everywhere, :data:`FORMAT_VERSION` is written):

* ``"1"``: ``ingest_time_ms`` is a plain INT64.
* ``"2"``: the same INT64 values and encoding, annotated as Parquet ``TIMESTAMP(MILLIS, isAdjustedToUTC=true)``
  (:data:`FILE_SCHEMA`), so table formats and engines that map Parquet types (Iceberg ``timestamptz``, DuckDB,
  Spark) read the column as a point in time, and min/max statistics are timestamps. Readers that want epoch ms
  cast it back to int64 (:func:`as_reader_schema`: no copy, the bytes are the same).
"""

from __future__ import annotations

import pyarrow as pa

FORMAT_VERSION = 2
"""The version written; every version up to it is readable."""
INGEST_TIME_TYPE = pa.timestamp("ms", tz="UTC")
"""Arrow type of ``ingest_time_ms`` in a version 2 file (Parquet TIMESTAMP(MILLIS, isAdjustedToUTC))."""

META_VERSION = b"segstore.chunk.format_version"
META_LENGTH = b"segstore.chunk.length"
META_FRAMING = b"segstore.chunk.framing"

SCHEMA = pa.schema(
    [
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("event", pa.binary(), nullable=False),
        pa.field("ingest_time_ms", pa.int64(), nullable=False),
        pa.field("framed", pa.bool_(), nullable=False),
    ]
)
"""The schema readers see: that of a version 1 file, and of a version 2 file after :func:`as_reader_schema`."""

FILE_SCHEMA = pa.schema([f.with_type(INGEST_TIME_TYPE) if f.name == "ingest_time_ms" else f for f in SCHEMA])
"""The schema of a version 2 file (``pyarrow.parquet.read_table`` of one gives exactly this)."""


def as_reader_schema(table: pa.Table) -> pa.Table:
    """``table`` (columns of a chunk of any version) with ``ingest_time_ms`` as int64 epoch ms (a zero-copy cast of
    a version 2 file's timestamp column; a version 1 table is returned as it is)."""
    index = table.schema.get_field_index("ingest_time_ms")
    if index < 0 or table.schema.field(index).type == pa.int64():
        return table
    field = table.schema.field(index).with_type(pa.int64())
    return table.set_column(index, field, table.column(index).cast(pa.int64()))
