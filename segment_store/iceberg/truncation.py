"""The truncation boundary chunk: a table holds exactly the events at or above its segment's start offset.

A stream truncated at an offset inside a chunk keeps that chunk (its segment's layout records the new start
offset; the chunk still holds live bytes), so registering the chunk file as it is would leave the events below the
cut visible to every table reader. Instead the table registers a **trimmed copy** of that one chunk: its rows at or
above the cut (``offset >= cut``, offsets still relative to the chunk's start, so ``chunk_start + chunk_offset``
stays each event's segment offset), the same columns and footer metadata, written under the table's own location
(``<table>/data/truncated/``, never in Tier-2: segstore's chunk files stay segstore's) and swapped in for the
chunk by the same ``overwrite`` snapshot that applies the truncation.

Why a copy and not an Iceberg delete file: pyiceberg 0.12 writes no positional or equality delete files (its
``merge-on-read`` delete mode falls back to copy-on-write, which rewrites whole data files, and its snapshot
producer writes data manifests only), so a delete file would need a hand-written delete manifest that every
reader must then apply; a plain data file is read the same way by pyiceberg, DuckDB's ``iceberg_scan`` and any
other engine. The cost is one rewrite of at most one chunk per segment per truncation (chunks are MiBs).

Invariants:

* A copy's name is a function of (segment, chunk start, chunk name, cut) (:func:`trimmed_location`): a pass that
  failed after writing it writes the same file again, and a restart finds a registered copy by its name.
* A copy stays on disk while any kept snapshot refers to it (a reader of a snapshot can open its files until the
  snapshot expires, as the pins keep the chunk files); :func:`delete_unreferenced_copies` deletes the others, after
  snapshot expiry, on the table's committer thread only.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

import pyarrow.compute as pc
import pyarrow.parquet as pq

from segment_store.iceberg.cleanup import delete_unreferenced_files
from segment_store.iceberg.stream_table import ChunkFile
from segstore_shared.chunk_format import META_LENGTH

if TYPE_CHECKING:
    from pyiceberg.table import Table

TRUNCATED_DIR = "data/truncated"
"""Where a table's trimmed copies live, under its location."""


def trimmed_location(table_location: str, chunk: ChunkFile) -> str:
    """The data file the table holds for ``chunk``: the chunk file itself when it is whole (``cut == 0``), else its
    trimmed copy under ``<table_location>/data/truncated/``."""
    if chunk.cut == 0:
        return chunk.location
    digest = hashlib.sha256(chunk.chunk.encode()).hexdigest()[:12]
    name = f"{chunk.coordinates.segment_id}-{chunk.chunk_start}-{chunk.cut}-{digest}.parquet"
    return f"{table_location.rstrip('/')}/{TRUNCATED_DIR}/{name}"


def write_trimmed(table: Table, chunk: ChunkFile, location: str) -> None:
    """Write the rows of ``chunk`` with ``offset >= chunk.cut`` to ``location`` (a Parquet file with the chunk's
    columns and footer metadata). Raises OSError if the chunk cannot be read or the copy written."""
    with table.io.new_input(chunk.location).open() as handle:
        source = pq.ParquetFile(handle)
        footer = {k: v for k, v in (source.metadata.metadata or {}).items() if k != META_LENGTH}  # not its length
        rows = source.read()
    live = rows.filter(pc.greater_equal(rows.column("offset"), chunk.cut))
    with (
        table.io.new_output(location).create(overwrite=True) as out,
        pq.ParquetWriter(out, live.schema, store_schema=False) as writer,
    ):
        writer.write_table(live)
        writer.add_key_value_metadata(footer)  # format version and framing: what makes it a table file


def delete_unreferenced_copies(table: Table) -> int:
    """Delete the trimmed copies under the table's location that no kept snapshot refers to, wherever the table's
    FileIO can list (:mod:`.cleanup`: a local directory, S3, ...). Returns how many were deleted."""

    def referenced() -> set[str]:
        names: set[str] = set()
        for snapshot in table.metadata.snapshots:
            for manifest in snapshot.manifests(table.io):
                for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
                    names.add(entry.data_file.file_path.rsplit("/", 1)[-1])
        return names

    directory = f"{table.location().rstrip('/')}/{TRUNCATED_DIR}"
    return delete_unreferenced_files(table.io, directory, ".parquet", referenced)


__all__ = ["TRUNCATED_DIR", "delete_unreferenced_copies", "trimmed_location", "write_trimmed"]
