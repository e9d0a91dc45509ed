"""The rows of a history read's chunk files, in the source's columns, read by Spark's own Parquet reader.

A chunk file's rows carry offsets relative to the chunk's start and no segment id (:mod:`segstore_shared.chunk_format`):
each file needs its segment id, its chunk start and the absolute range ``[lo, hi)`` of rows to keep
(:class:`~pravega_spark.read.history_plan.HistoryFile`). Two ways to give them to Spark, one scan of all the files
either way (Spark packs small files into partitions itself):

* :func:`linked_rows` (files Spark opens on this host): a directory of symbolic links, one per file, named
  ``segment_id=<id>/lo=<lo>/hi=<hi>/chunk_start=<start>/chunk.parquet``; Spark's partition discovery turns the
  names into columns that are constant per file, so a row costs nothing more than Spark's own Parquet scan and
  the projection (measured: ``bench/spark_history.py``). The executors must see the directory: Spark in local
  mode, or a directory every executor sees at the same path (``linkDir``).
* :func:`joined_rows` (anything else, e.g. ``s3a://`` files): each row's file, ``_metadata.file_path``, joined with
  a small broadcast table of the files: correct anywhere, several times slower per row.

Either way a row is kept only if framed (an event, not padding) and its absolute offset is in ``[lo, hi)``.
"""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pravega_spark.read.history_plan import HistoryFile

PARQUET_SCHEMA = "offset BIGINT, event BINARY, ingest_time_ms BIGINT, framed BOOLEAN"
"""The chunk columns (:mod:`segstore_shared.chunk_format`), given to Spark so it reads no footer to infer them."""
LINKED_SCHEMA = f"{PARQUET_SCHEMA}, segment_id BIGINT, lo BIGINT, hi BIGINT, chunk_start BIGINT"
"""The chunk columns and the partition columns the links' names give."""
FILES_SCHEMA = "file_path STRING, segment_id BIGINT, chunk_start BIGINT, lo BIGINT, hi BIGINT"
LINK_NAME = "chunk.parquet"


def link_files(directory: Path, files: Sequence[HistoryFile]) -> list[str]:
    """One symbolic link per file under ``directory`` (which must be empty or new), named by its partition values;
    the links' paths, in the order of ``files``. Raises OSError (the directory cannot be written)."""
    paths = []
    for file in files:
        folder = directory / f"segment_id={file.segment_id}" / f"lo={file.lo}" / f"hi={file.hi}"
        folder = folder / f"chunk_start={file.chunk_start}"
        folder.mkdir(parents=True, exist_ok=False)  # one file per segment and chunk start
        link = folder / LINK_NAME
        os.symlink(file.uri, link)
        paths.append(str(link))
    return paths


def linked_rows(spark: Any, directory: Path, links: Sequence[str], scope: str, stream: str) -> Any:
    """The kept rows of the files ``links`` point to (made by :func:`link_files` under ``directory``)."""

    rows = spark.read.schema(LINKED_SCHEMA).option("basePath", str(directory)).parquet(*links)
    return _kept(rows, scope, stream)


def joined_rows(spark: Any, files: Sequence[HistoryFile], scope: str, stream: str) -> Any:
    """The kept rows of ``files``, each row's file found by ``_metadata.file_path`` in a broadcast table."""
    from pyspark.sql import functions as F

    table = spark.createDataFrame(
        [(spark_file_path(f.uri), f.segment_id, f.chunk_start, f.lo, f.hi) for f in files], FILES_SCHEMA
    )
    rows = (
        spark.read.schema(PARQUET_SCHEMA)
        .parquet(*sorted({f.uri for f in files}))
        .select("offset", "event", "ingest_time_ms", "framed", F.col("_metadata.file_path").alias("file_path"))
        .join(F.broadcast(table), "file_path")
    )
    return _kept(rows, scope, stream)


def _kept(rows: Any, scope: str, stream: str) -> Any:
    """``rows`` (chunk columns with ``segment_id``, ``chunk_start``, ``lo``, ``hi``) in the source's columns: the
    framed ones within ``[lo, hi)``, ``offset`` absolute."""
    from pyspark.sql import functions as F

    absolute = F.col("chunk_start") + F.col("offset")
    return rows.where(F.col("framed") & (absolute >= F.col("lo")) & (absolute < F.col("hi"))).select(
        F.col("event"),
        F.lit(scope).alias("scope"),
        F.lit(stream).alias("stream"),
        F.col("segment_id"),
        absolute.alias("offset"),
        F.timestamp_millis(F.col("ingest_time_ms")).alias("timestamp"),
    )


def spark_file_path(path: str) -> str:
    """``_metadata.file_path`` as Spark gives it for ``path`` (Hadoop's URI: ``file:`` + the path, escaped as
    ``java.net.URI`` escapes a path: ``%`` and spaces among others)."""
    if path.startswith("s3a://"):
        bucket, _, key = path[len("s3a://") :].partition("/")
        return f"s3a://{bucket}/{urllib.parse.quote(key, safe=_URI_SAFE)}"
    return "file:" + urllib.parse.quote(path, safe=_URI_SAFE)


_URI_SAFE = "/-_.!~*'();:@&=+$,"


__all__ = ["LINKED_SCHEMA", "PARQUET_SCHEMA", "joined_rows", "link_files", "linked_rows", "spark_file_path"]
