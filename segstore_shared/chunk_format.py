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

The Parquet key-value metadata holds :data:`META_VERSION` (``"1"``), :data:`META_LENGTH` (bytes of segment data)
and :data:`META_FRAMING` (``"events"`` or ``"raw"``). A reader must check the length and the framing against what it
expects before trusting the rows.
"""

from __future__ import annotations

import pyarrow as pa

FORMAT_VERSION = 1

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
"""The schema readers see (``pyarrow.parquet.read_table`` of a chunk gives exactly this)."""
