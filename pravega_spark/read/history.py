"""A stream's history at Spark's native Parquet speed: :func:`history`.

``spark.read.format("segstore")`` is a Python data source: every row crosses from a Python worker to the JVM.
The part of a stream the segment stores have moved to Tier-2 is Parquet already (one row per event,
:mod:`segstore_shared.chunk_format`), so :func:`history` reads that part with Spark's own Parquet reader and only
the rest (above each segment's storage length) with the Python source, as one DataFrame::

    with pravega_spark.history(spark, controller="tcp://127.0.0.1:9090", scope="demo", stream="events") as read:
        read.df.groupBy("segment_id").count().show()

Invariants:

* ``read.df`` has exactly the columns and types of ``spark.read.format("segstore")`` (``event``, ``scope``,
  ``stream``, ``segment_id``, ``offset``, ``timestamp``) and exactly its rows for a read from the stream's head cut
  to its tail cut as they were when :func:`history` was called: every event once (scaling, merged transactions and
  truncation included; the split is :mod:`pravega_spark.read.history_plan`).
* Chunk rows are kept only if framed (events) and within ``[lo, hi)`` of their segment (rows below a truncation
  point or above the tail cut are dropped); ``offset`` is made absolute from each file's chunk start, joined by
  ``_metadata.file_path`` with a small broadcast table of the files.
* The files are pinned (:mod:`pravega_spark.read.history_pins`) before the DataFrame is made and stay pinned
  until the ``with`` block ends (or :meth:`History.close`): garbage collection and compaction of the segment
  stores leave them in place meanwhile, and the pins are renewed in the background while held.

Options (keyword arguments, names as ``format("segstore")`` spells them; an unknown one fails naming it, with the
closest known name): ``controller``, ``scope``, ``stream``, ``trustStore``, ``username``, ``password``,
``token``, ``controllerTimeoutMs``; ``pinTtlMs`` (how long a pin lives without renewal, default 120000);
``linkDir`` (a directory every executor sees at the same path, for the links to filesystem chunk files;
default: a temporary directory when Spark runs in local mode, else no links);
for Tier-2 on S3, Spark's ``s3a`` file system (the ``hadoop-aws`` jar) and ``s3Endpoint``,
``s3AccessKeyId``, ``s3SecretAccessKey``, set on the session's Hadoop configuration. Without ``s3a`` on the
classpath, S3 chunks are left to the Python source (which reads them itself, with pyarrow), logged once.
"""

from __future__ import annotations

import difflib
import logging
import os
import shutil
import tempfile
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from controller_client.model import qualified_segment_name
from pravega_spark.connection import StreamConnection
from pravega_spark.errors import SegstoreOptionError
from pravega_spark.offsets import ReadState, head_cut, tail_cut
from pravega_spark.options.common import Options, StreamTarget
from pravega_spark.read.history_pins import DEFAULT_PIN_TTL_MS, HeldPins, list_chunk_files, pin_files
from pravega_spark.read.history_plan import ChunkFile, HistoryFile, HistoryPlan, plan_history
from pravega_spark.read.history_rows import PARQUET_SCHEMA, joined_rows, link_files, linked_rows
from pravega_spark.read.planning import LiveCatalog
from segment_store.client import ErrorMessageError

_log = logging.getLogger(__name__)

CONNECTION_OPTIONS = (
    "controller",
    "scope",
    "stream",
    "trustStore",
    "username",
    "password",
    "token",
    "controllerTimeoutMs",
)
"""Options passed on to the ``segstore`` source for the part above the storage length."""
HISTORY_OPTIONS = (*CONNECTION_OPTIONS, "pinTtlMs", "linkDir", "s3Endpoint", "s3AccessKeyId", "s3SecretAccessKey")
"""Every option :func:`history` takes."""

_S3A = "org.apache.hadoop.fs.s3a.S3AFileSystem"
PLAN_ATTEMPTS = 3
"""Plans made when the segment store refuses to pin a listed chunk (compacted and collected in between)."""


@dataclass(frozen=True, slots=True)
class HistoryOptions:
    """The parsed options of :func:`history`."""

    target: StreamTarget
    passed: Mapping[str, str]
    """The connection options as given, for the ``segstore`` source."""
    controller_timeout_s: float
    pin_ttl_ms: int
    s3: Mapping[str, str]
    """Hadoop ``fs.s3a.*`` settings from ``s3Endpoint``, ``s3AccessKeyId``, ``s3SecretAccessKey``."""
    link_dir: str | None = None
    """``linkDir``: where the links to local chunk files go (a directory every executor sees at that path)."""

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> HistoryOptions:
        given = {str(k): str(v) for k, v in options.items() if v is not None}
        lowered = {name.lower(): name for name in HISTORY_OPTIONS}
        for key in given:
            if key.lower() not in lowered:
                found = difflib.get_close_matches(key.lower(), list(lowered), n=1, cutoff=0.5)
                hint = (
                    f"did you mean '{lowered[found[0]]}'?" if found else f"history takes {', '.join(HISTORY_OPTIONS)}"
                )
                raise SegstoreOptionError(key, f"unknown option of pravega_spark.history; {hint}")
        view = Options.of({k: v for k, v in given.items() if k.lower() in {n.lower() for n in CONNECTION_OPTIONS}})
        target = StreamTarget.parse(view)
        timeout_ms = view.integer("controllerTimeoutMs", 30_000)
        values = {k.lower(): v for k, v in given.items()}
        ttl_text = values.get("pinttlms", str(DEFAULT_PIN_TTL_MS))
        try:
            pin_ttl_ms = int(ttl_text)
        except ValueError:
            raise SegstoreOptionError("pinTtlMs", f"must be a whole number of milliseconds, got {ttl_text!r}") from None
        if pin_ttl_ms < 1000:
            raise SegstoreOptionError(
                "pinTtlMs", f"must be at least 1000 (a pin is renewed at half its life), got {pin_ttl_ms}"
            )
        s3 = {
            hadoop: values[name.lower()]
            for name, hadoop in (
                ("s3Endpoint", "fs.s3a.endpoint"),
                ("s3AccessKeyId", "fs.s3a.access.key"),
                ("s3SecretAccessKey", "fs.s3a.secret.key"),
            )
            if name.lower() in values
        }
        passed = {k: v for k, v in given.items() if k.lower() in {n.lower() for n in CONNECTION_OPTIONS}}
        link_dir = values.get("linkdir")
        if link_dir is not None and not os.path.isdir(link_dir):
            raise SegstoreOptionError("linkDir", f"must be an existing directory, got {link_dir!r}")
        return cls(target, passed, (timeout_ms or 30_000) / 1000.0, pin_ttl_ms, s3, link_dir)


class _Listing(Mapping[int, Sequence[ChunkFile]]):
    """Per segment id, its contiguous openable Tier-2 chunks (asked of the segment store on first use)."""

    def __init__(self, connection: StreamConnection, scope: str, stream: str, s3a: bool) -> None:
        self._connection = connection
        self._scope = scope
        self._stream = stream
        self._s3a = s3a
        self._found: dict[int, list[ChunkFile]] = {}

    def __getitem__(self, segment_id: int) -> Sequence[ChunkFile]:
        if segment_id not in self._found:
            self._found[segment_id] = self._list(segment_id)
        return self._found[segment_id]

    def _list(self, segment_id: int) -> list[ChunkFile]:
        name = qualified_segment_name(self._scope, self._stream, segment_id)
        files: list[ChunkFile] = []
        for chunk in list_chunk_files(self._connection, name, self._s3a):
            path = spark_path(chunk.uri, self._s3a)
            if path is None:
                break
            files.append(ChunkFile(chunk.start, chunk.length, path, chunk.name))
        return files

    def __iter__(self) -> Iterator[int]:
        return iter(self._found)

    def __len__(self) -> int:
        return len(self._found)


def spark_path(uri: str, s3a: bool) -> str | None:
    """The path Spark's Parquet reader opens for chunk ``uri`` (a local path; ``s3a://bucket/key``), or None."""
    parts = urllib.parse.urlsplit(uri)
    if parts.scheme == "file":
        return urllib.request.url2pathname(parts.path)
    if parts.scheme == "s3" and s3a:
        return f"s3a://{parts.netloc}{urllib.parse.unquote(parts.path)}"
    return None


def _s3a_available(spark: Any, settings: Mapping[str, str]) -> bool:
    """Whether Spark can open ``s3a://`` (the hadoop-aws jar); applies ``settings`` to its Hadoop configuration."""
    jvm = getattr(spark, "_jvm", None)
    if jvm is None:
        return False
    from py4j.protocol import Py4JJavaError

    try:
        jvm.java.lang.Class.forName(_S3A)
    except Py4JJavaError as error:  # ClassNotFoundException
        _log.info("Spark has no s3a file system (%s): S3 chunks are read by the segstore source", error)
        return False
    conf = spark._jsc.hadoopConfiguration()
    for key, value in settings.items():
        conf.set(key, value)
    if "fs.s3a.endpoint" in settings:
        conf.set("fs.s3a.path.style.access", "true")
    return True


class History:
    """What :func:`history` returns: the DataFrame ``df``, the plan, and the pins holding its files.

    A context manager: leaving it releases the pins (:meth:`close`). ``df`` must be computed before that."""

    def __init__(
        self, df: Any, plan: HistoryPlan, tail: ReadState, pins: HeldPins | None, links: Path | None = None
    ) -> None:
        self.df = df
        self.plan = plan
        self.tail = tail
        self.pins = pins
        self.links = links
        """The directory of links to the chunk files Spark reads (None: the files are matched by path per row)."""

    @property
    def files(self) -> list[str]:
        """The chunk files Spark's Parquet reader reads."""
        return [f.uri for f in self.plan.files]

    def close(self) -> None:
        if self.pins is not None:
            self.pins.release()
        if self.links is not None:
            shutil.rmtree(self.links, ignore_errors=True)  # links only: the files they point to stay

    def __enter__(self) -> History:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _linkable(spark: Any, files: Sequence[HistoryFile], link_dir: str | None) -> bool:
    """Whether the files are read through links (:mod:`.history_rows`): all local paths, and the executors see the
    links (``linkDir`` given, or Spark in local mode: its executors are this process's JVM)."""
    if any("://" in f.uri for f in files):
        return False
    return link_dir is not None or str(spark.conf.get("spark.master", "")).startswith("local")


def history(spark: Any, **options: Any) -> History:
    """A stream's events from its head to its tail, Tier-2 read by Spark's Parquet reader (module docstring).

    Raises SegstoreOptionError (naming the option), DataLossError, and what the connection raises."""

    parsed = HistoryOptions.parse(options)
    target = parsed.target
    s3a = _s3a_available(spark, parsed.s3)
    connection = StreamConnection(target.controller, parsed.controller_timeout_s, credentials=target)
    try:
        connection.require_stream(target.scope, target.stream)
        for attempt in range(PLAN_ATTEMPTS):
            head = ReadState.from_stream_cut(head_cut(connection, target.scope, target.stream))
            tail = ReadState.from_stream_cut(tail_cut(connection, target.scope, target.stream))
            listing = _Listing(connection, target.scope, target.stream, s3a)
            plan = plan_history(head, tail, LiveCatalog(connection, target.scope, target.stream), listing)
            try:
                pins = pin_files(connection, target.scope, target.stream, plan, parsed.pin_ttl_ms)
                break
            except ErrorMessageError as error:  # a listed chunk was compacted away before it was pinned
                if attempt == PLAN_ATTEMPTS - 1:
                    raise
                _log.info("%s/%s: planning again: %s", target.scope, target.stream, error)
    except BaseException:
        connection.close()
        raise
    if pins is None:
        connection.close()
    links: Path | None = None
    try:
        parts = []
        if plan.files:
            if _linkable(spark, plan.files, parsed.link_dir):
                links = Path(tempfile.mkdtemp(prefix="segstore-history-", dir=parsed.link_dir))
                paths = link_files(links, plan.files)
                parts.append(linked_rows(spark, links, paths, target.scope, target.stream))
            else:
                parts.append(joined_rows(spark, plan.files, target.scope, target.stream))
        if plan.frontier != tail or not parts:
            rest = spark.read.format("segstore").options(**parsed.passed)
            if plan.frontier != tail:
                rest = rest.option("startingOffsets", plan.frontier.to_json())
            parts.append(rest.option("endingOffsets", tail.to_json()).load())
        df = parts[0] if len(parts) == 1 else parts[0].unionByName(parts[1])
    except BaseException:
        if pins is not None:
            pins.release()
        if links is not None:
            shutil.rmtree(links, ignore_errors=True)
        raise
    return History(df, plan, tail, pins, links)


__all__ = ["HISTORY_OPTIONS", "PARQUET_SCHEMA", "History", "HistoryOptions", "history", "spark_path"]
