"""A stream's Iceberg table: its schema, and its rows as the stream's chunk files registered in place.

Blocking pyiceberg code: call it from the maintainer's worker process only (:mod:`.worker`).

The table (format v2, identifier ``<scope>.<stream>``) has one data file per chunk file of the stream's segments,
registered as it is (no copy, no rewrite; segstore stays the owner and the only writer of the files):

===============  ============  =======================================================================
column           type          where it comes from
===============  ============  =======================================================================
``scope``        string        identity partition value in the manifest (not in the file)
``stream``       string        identity partition value in the manifest (not in the file)
``segment_id``   long          identity partition value in the manifest (not in the file)
``chunk_start``  long          identity partition: the chunk's first byte in its segment
``chunk_offset`` long          the file's ``offset`` column (name mapping): the row's offset in the chunk
``event``        binary        the file's ``event`` column: the event payload (or raw bytes)
``timestamp``    timestamptz   the file's ``ingest_time_ms`` (chunk format 2: TIMESTAMP(MILLIS, UTC))
``framed``       boolean       the file's ``framed`` column: True for an event
===============  ============  =======================================================================

An event's offset in its segment is ``chunk_start + chunk_offset`` (what a segstore reader's position says).
The partition columns are optional fields (a reader fills a column absent from a file from an identity
partition only for optional fields); the file columns are required, as in the files. Chunk format 1 files
(``ingest_time_ms`` a plain int64) are not registered: a reader would read their times 1000x off.
"""

from __future__ import annotations

import json
import logging
import os
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow.parquet as pq

from segment_store.iceberg.config import IcebergConfig
from segment_store.iceberg.names import StreamSegment
from segstore_shared.chunk_format import META_FRAMING, META_VERSION

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table

log = logging.getLogger(__name__)

FILE_COLUMNS = {"offset": "chunk_offset", "event": "event", "ingest_time_ms": "timestamp", "framed": "framed"}
"""Chunk file column -> table column (the table's ``schema.name-mapping.default``)."""
TABLE_PROPERTIES = {
    "commit.manifest-merge.enabled": "true",
    "commit.manifest.min-count-to-merge": "10",
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "10",
    "write.metadata.metrics.column.event": "none",
    "write.metadata.metrics.column.framed": "none",
}
"""merge_append keeps a few manifests (read cost); old metadata files are deleted; no metrics for the columns the
chunk files keep no statistics for (``event``, ``framed``)."""


@dataclass(frozen=True, slots=True)
class ChunkFile:
    """A chunk file as a table row source: where it is, which segment bytes it holds, whose pins hold it."""

    location: str
    segment: str
    coordinates: StreamSegment
    chunk: str
    chunk_start: int
    container_id: int
    length: int = 0
    """Segment bytes the chunk holds (what it adds to a table's lag until registered)."""
    min_ms: int | None = None
    """Ingestion time of its earliest event (None: not recorded)."""
    cut: int = 0
    """The first live offset in the chunk: rows with ``offset < cut`` were truncated away (the segment's start
    offset is inside this chunk: :mod:`.truncation`); 0 for a whole chunk."""


def file_path(location: str) -> str:
    """The data file path a table names for a chunk at ``location`` (a chunk storage URI): a ``file://`` URI with
    its path as it is on disk (readers of Iceberg tables do not percent-decode file paths; segstore's chunk
    directories have ``%`` in their names), an ``s3://`` URI as ``s3://bucket/<key>`` (the key as it is in the
    bucket; the endpoint and credentials are the FileIO's settings: :mod:`.file_io`), any other URI as it is."""
    parts = urllib.parse.urlsplit(location)
    if parts.scheme == "file":
        return "file://" + urllib.request.url2pathname(parts.path)
    if parts.scheme == "s3":  # s3://bucket/<key, percent-encoded>?endpoint_override=...: the key as in the bucket
        return f"s3://{parts.netloc}{urllib.parse.unquote(parts.path)}"
    return location


def open_catalog(config: IcebergConfig, file_io: Mapping[str, str] | None = None) -> Catalog:
    """The configured catalog (``config.catalog``, configured the pyiceberg way), or the default SQL catalog on
    SQLite under ``config.home``; ``file_io``: FileIO properties added to the catalog's (S3 Tier-2: :mod:`.file_io`)."""
    from pyiceberg.catalog import load_catalog
    from pyiceberg.catalog.sql import SqlCatalog

    extra = dict(file_io or {})
    if config.catalog is not None:
        return load_catalog(config.catalog, **extra)
    home = config.home
    (home / "warehouse").mkdir(parents=True, exist_ok=True)
    warehouse = (home / "warehouse").as_uri()
    return SqlCatalog("segstore", uri=f"sqlite:///{home / 'catalog.db'}", warehouse=warehouse, **extra)


def load_or_create(
    catalog: Catalog, scope: str, stream: str, properties: Mapping[str, str] | None = None, location: str | None = None
) -> Table:
    """The stream's table, created (with its namespace) if missing: with ``properties`` besides
    :data:`TABLE_PROPERTIES`, at ``location`` (None: the catalog's default for it)."""
    from pyiceberg.exceptions import NoSuchTableError
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.types import BinaryType, BooleanType, LongType, NestedField, StringType, TimestamptzType

    identifier = (scope, stream)
    try:
        return catalog.load_table(identifier)
    except NoSuchTableError:
        pass
    schema = Schema(
        NestedField(1, "scope", StringType(), required=False),
        NestedField(2, "stream", StringType(), required=False),
        NestedField(3, "segment_id", LongType(), required=False),
        NestedField(4, "chunk_start", LongType(), required=False),
        NestedField(5, "chunk_offset", LongType(), required=True),
        NestedField(6, "event", BinaryType(), required=True),
        NestedField(7, "timestamp", TimestamptzType(), required=True),
        NestedField(8, "framed", BooleanType(), required=True),
    )
    spec = PartitionSpec(
        *(PartitionField(i, 1000 + i, IdentityTransform(), n) for i, n in enumerate(schema.column_names[:4], 1))
    )
    catalog.create_namespace_if_not_exists(scope)
    table = catalog.create_table(
        identifier,
        schema=schema,
        location=location,
        partition_spec=spec,
        properties={**TABLE_PROPERTIES, **(properties or {})},
    )
    created = table.schema()  # create_table assigns fresh field ids: map by the created ones
    mapping = [{"field-id": created.find_field(c).field_id, "names": [f]} for f, c in FILE_COLUMNS.items()]
    with table.transaction() as tx:
        tx.set_properties({"schema.name-mapping.default": json.dumps(mapping)})
    log.info("iceberg: created table %s.%s at %s", scope, stream, table.location())
    table = catalog.load_table(identifier)
    write_version_hint(table)  # a reader of the directory finds the new (empty) table, not only after a first commit
    return table


def data_file(table: Table, chunk: ChunkFile, location: str | None = None) -> DataFile | None:
    """The table's data file for ``chunk`` (partition values given, statistics from its Parquet footer), or None
    for a chunk that is not a format 2 events chunk. ``location``: the file holding the chunk's rows when it is not
    the chunk file itself (a trimmed copy: :mod:`.truncation`). Raises OSError if the file cannot be read."""
    location = chunk.location if location is None else location
    from pyiceberg.io.pyarrow import compute_statistics_plan, data_file_statistics_from_parquet_metadata
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
    from pyiceberg.typedef import Record

    with table.io.new_input(location).open() as handle:
        footer = pq.read_metadata(handle)
        size = handle.seek(0, os.SEEK_END)
    kv = footer.metadata or {}
    if kv.get(META_VERSION, b"1") == b"1" or kv.get(META_FRAMING) != b"events":
        return None
    schema = table.schema()
    stats = data_file_statistics_from_parquet_metadata(
        parquet_metadata=footer,
        stats_columns=compute_statistics_plan(schema, table.properties),
        parquet_column_mapping={f: schema.find_field(column).field_id for f, column in FILE_COLUMNS.items()},
    )
    where = chunk.coordinates
    made = DataFile.from_args(
        content=DataFileContent.DATA,
        file_path=location,
        file_format=FileFormat.PARQUET,
        partition=Record(where.scope, where.stream, where.segment_id, chunk.chunk_start),
        file_size_in_bytes=size,
        sort_order_id=None,
        equality_ids=None,
        key_metadata=None,
        **stats.to_serialized_dict(),
    )
    made.spec_id = table.metadata.default_spec_id  # not a field of the struct: deleting the file later needs it
    return made


def local_path(location: str) -> str | None:
    """The local file ``location`` names as pyiceberg's FileIO opens it (a ``file://`` URI: its netloc and path
    as spelt, no percent-decoding; a bare path: as it is, made absolute), or None for any other scheme."""
    parts = urllib.parse.urlsplit(location)
    if parts.scheme == "":
        return os.path.abspath(location)
    if parts.scheme == "file":
        return parts.netloc + parts.path
    return None


def write_version_hint(table: Table) -> None:
    """``<table>/metadata/version-hint.text`` naming the current metadata file, so readers without the catalog
    (DuckDB ``iceberg_scan('<table dir>')``) find it. Written after the commit (a hint never names an uncommitted
    version); atomically on a local filesystem, next to the metadata file: pyiceberg writes a ``file://``
    location under its path as spelt (``%20`` is a directory name's three characters, not a space), so the hint
    does too (:func:`local_path`)."""
    location = table.metadata_location
    name = location.rsplit("/", 1)[1].removesuffix(".metadata.json")
    hint = location.rsplit("/", 1)[0] + "/version-hint.text"
    path = local_path(hint)
    if path is not None:
        temporary = f"{path}.tmp"
        with open(temporary, "w") as out:
            out.write(name)
        os.replace(temporary, path)
        return
    with table.io.new_output(hint).create(overwrite=True) as out:
        out.write(name.encode())


__all__ = [
    "FILE_COLUMNS",
    "TABLE_PROPERTIES",
    "ChunkFile",
    "data_file",
    "load_or_create",
    "local_path",
    "open_catalog",
    "write_version_hint",
]  # fmt: skip
