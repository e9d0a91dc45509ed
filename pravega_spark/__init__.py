"""Spark Python data source ``segstore``: batch and streaming reads and writes of segstore streams.

* ``source`` - :class:`SegstoreDataSource` (format name ``segstore``), the batch and streaming readers;
* ``option_names`` - every option name reads and writes take (the README's table is checked against it);
* ``read_options`` / ``write_options`` / ``stream_creation`` - the options, parsed once, errors naming the option;
* ``offsets`` - query offsets as stream cuts and back, head and tail cuts of a stream;
* ``stream_cut_text`` - stream cuts as the Pravega client's Base64 text (``StreamCut.asText()``);
* ``metadata`` - option ``metadata``: the streams of a scope, or a stream's head and tail cuts;
* ``lag`` - bytes behind the tail per segment, from a streaming query's progress;
* ``planning`` - micro-batch ends (admission control) and segment ranges, following scaling;
* ``partition_reader`` - executors: one segment range as Arrow record batches;
* ``sink`` - the writers (exactly-once through transactions);
* ``kvt_source`` - :class:`SegstoreKvtDataSource` (format name ``segstore-kvt``), a batch read of a key-value table.

Register the source on a session with :func:`register` (``spark.dataSource.register`` under the hood)::

    import pravega_spark
    pravega_spark.register(spark)
    df = spark.read.format("segstore").option("scope", "demo").option("stream", "events").load()

Names are imported on first use, so importing the package does not import pyspark.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from segstore_shared import compat as _compat

_compat.install()  # old import paths of moved modules, for one release (CHANGELOG.md 0.2.0)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from pravega_spark.offsets import head_offset, offset_to_stream_cut, stream_cut_to_offset, tail_offset
    from pravega_spark.options.stream_cut_text import stream_cut_from_base64, stream_cut_to_base64
    from pravega_spark.read.lag import lag_bytes, total_lag_bytes
    from pravega_spark.read.source import SegstoreDataSource

_WHERE = {
    "SegstoreDataSource": "read.source",
    "head_offset": "offsets",
    "lag_bytes": "read.lag",
    "total_lag_bytes": "read.lag",
    "tail_offset": "offsets",
    "offset_to_stream_cut": "offsets",
    "stream_cut_to_offset": "offsets",
    "stream_cut_from_base64": "options.stream_cut_text",
    "stream_cut_to_base64": "options.stream_cut_text",
}

__all__ = [
    "SegstoreDataSource",
    "head_offset",
    "lag_bytes",
    "offset_to_stream_cut",
    "register",
    "stream_cut_from_base64",
    "stream_cut_to_base64",
    "stream_cut_to_offset",
    "tail_offset",
    "total_lag_bytes",
]


def register(spark: SparkSession) -> None:
    """Make ``format("segstore")`` and ``format("segstore-kvt")`` (key-value tables) available in ``spark``
    (idempotent)."""
    from pravega_spark.kvt_source import SegstoreKvtDataSource
    from pravega_spark.read.source import SegstoreDataSource

    spark.dataSource.register(SegstoreDataSource)
    spark.dataSource.register(SegstoreKvtDataSource)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'pravega_spark' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"pravega_spark.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
