"""Spark Python data source ``segstore``: batch and streaming reads and writes of segstore streams.

The connector in layers, from the top (a layer imports only the ones below it; the contracts in ``pyproject.toml``
hold it so):

* ``read`` - :class:`SegstoreDataSource` (``read.source``, format name ``segstore``: the batch and streaming
  readers, and the class Spark asks for writers too, which it takes from ``write.sink``); on the driver,
  ``read.planning`` (micro-batch ends with admission control, segment ranges following scaling) and
  ``read.splitting`` (ranges cut at event starts into more input partitions), ``read.pushdown`` and
  ``read.pushdown_readers`` (filters of batch reads pruning streams, segments and ranges); on the executors,
  ``read.partition_reader`` (one segment range as Arrow record batches), ``read.tier2_direct`` and
  ``read.tier2_locations`` (ranges straight from the Tier-2 Parquet chunks); the options ``metadata``
  (``read.metadata``), ``subscriber`` (``read.subscription``) and ``watermarkColumn`` (``read.watermark_column``);
  ``read.lag`` (bytes behind the tail, from a streaming query's progress) and ``read.streaming_runner``;
  ``read.history`` (:func:`history`: a stream's Tier-2 history through Spark's own Parquet reader, its files pinned
  by ``read.history_pins``, split from the rest by ``read.history_plan``);
* ``write`` - the sink (``write.sink``): exactly-once through transactions and a commit log (``write.commit_log``),
  at-least-once (``write.plain``), rows routed and framed column-wise (``write.framing``), and its controller
  connections (``write.connection``);
* ``kvt_source`` - :class:`SegstoreKvtDataSource` (format name ``segstore-kvt``), a batch read of a key-value table;
* ``options`` - every option, parsed once, errors naming the option: the names reads and writes take
  (``options.names``, the README's table is checked against it), the case-insensitive view and the stream target
  (``options.common``), ``options.read`` / ``options.write``, a missing stream created (``options.stream_creation``),
  ``options.tier2_location``, and stream cuts as the Pravega client's Base64 text (``options.stream_cut_text``);
* ``offsets`` - query offsets as stream cuts and back; the head, tail and time cuts of a stream;
* ``connection`` - the blocking connection of the driver and the executors to the controller and the segment
  stores;
* ``errors`` - the connector's error classes.

pyspark finds both formats by itself through the top-level modules ``pyspark_segstore`` and
``pyspark_segstore_kvt``; or register them on a session with :func:`register` (``spark.dataSource.register`` under
the hood)::

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
    from pravega_spark.read.history import history
    from pravega_spark.read.lag import lag_bytes, total_lag_bytes
    from pravega_spark.read.source import SegstoreDataSource

_WHERE = {
    "SegstoreDataSource": "read.source",
    "head_offset": "offsets",
    "history": "read.history",
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
    "history",
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
    (idempotent).

    On a cluster, the Python that plans and runs the data source is the one the session's context names: pyspark
    takes it from ``PYSPARK_PYTHON`` when the session starts and reads ``spark.pyspark.python`` only under
    ``spark-submit``. A session given ``spark.pyspark.python`` alone (a notebook, a test) would run the connector
    with the driver's ``python3``; so when that option is set, the context adopts it first, as ``spark-submit``
    would have (and ``format("segstore")`` then works without ``PYSPARK_PYTHON``).

    It also sets ``spark.sql.python.filterPushdown.enabled`` (off by default in pyspark 4.3; a data source cannot
    turn it on itself), so filters on ``scope``, ``stream``, ``segment_id``, ``offset`` and ``timestamp`` prune
    batch reads (:mod:`pravega_spark.read.pushdown`); a session that sets it to false afterwards reads as before."""
    from pravega_spark.kvt_source import SegstoreKvtDataSource
    from pravega_spark.read.source import SegstoreDataSource

    if not type(spark).__module__.startswith("pyspark.sql.connect"):  # a Connect server has its own Python
        context = spark.sparkContext
        python = context.getConf().get("spark.pyspark.python")
        if python:
            context.pythonExec = python
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
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
