"""The batch readers of ``format("segstore")`` that take filters (:mod:`pravega_spark.read.pushdown`), and the
choice between them and the plain ones.

pyspark asks a reader for filters only with ``spark.sql.python.filterPushdown.enabled``; without it, it *fails* a
read whose reader overrides ``pushFilters`` (``DATA_SOURCE_PUSHDOWN_DISABLED``), and a data source cannot see the
session's conf. So :func:`batch_reader` gives a reader with ``pushFilters`` unless pyspark's worker that plans a
read without pushdown (``pyspark.sql.worker.plan_data_source_read``, which never calls it) is the caller: a read
works with the conf on or off, and prunes with it on (:func:`pravega_spark.register` turns it on), with pyspark's
worker daemon and without (``tests/pravega_spark/read/test_spark_pushdown_workers.py``).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence

from pyspark.sql.datasource import DataSourceReader, Filter
from pyspark.sql.types import StructType

from pravega_spark.options.read import ReadOptions
from pravega_spark.read.pushdown import accept
from pravega_spark.read.source import SegstoreBatchReader, SeveralStreamsBatchReader

PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"
_PLAIN_PLANNER = "pyspark.sql.worker.plan_data_source_read"


class PushdownBatchReader(SegstoreBatchReader):
    """:class:`SegstoreBatchReader` taking filters (see :mod:`pravega_spark.read.pushdown`)."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        self.pushed, returned = accept(filters)
        return returned


class PushdownSeveralStreamsReader(SeveralStreamsBatchReader):
    """:class:`SeveralStreamsBatchReader` taking filters (see :mod:`pravega_spark.read.pushdown`)."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        self.pushed, returned = accept(filters)
        return returned


def _planned_without_pushdown() -> bool:
    """Whether pyspark's plain read planner (pushdown off, or no filter to push) called us: a frame on the stack
    belongs to that module. Its ``__spec__`` names it both ways pyspark runs it: imported by the daemon
    (``spark.python.use.daemon``, the default; the process's ``__main__`` is then ``pyspark.daemon``) and as
    ``python -m`` without it (``__name__`` is then ``__main__``, which is why neither the process's main module
    nor ``__name__`` alone tells)."""
    frame = sys._getframe(1)
    while frame is not None:
        if getattr(frame.f_globals.get("__spec__"), "name", None) == _PLAIN_PLANNER:
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


def batch_reader(options: ReadOptions, schema: StructType) -> DataSourceReader:
    """The batch reader of events for ``options`` (one stream or several), taking filters where pyspark may
    push them."""
    plain = _planned_without_pushdown()
    if options.selection is not None:
        return (SeveralStreamsBatchReader if plain else PushdownSeveralStreamsReader)(options, schema)
    return (SegstoreBatchReader if plain else PushdownBatchReader)(options, schema)


__all__: Sequence[str] = ["PUSHDOWN_CONF", "PushdownBatchReader", "PushdownSeveralStreamsReader", "batch_reader"]
