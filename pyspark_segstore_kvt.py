"""Makes ``spark.read.format("segstore-kvt")`` (a key-value table as a DataFrame) work without registering it by
hand: pyspark registers the ``DefaultSource`` of every top-level ``pyspark_*`` module (see ``pyspark_segstore``)."""

from pravega_spark.kvt_source import SegstoreKvtDataSource as DefaultSource

__all__ = ["DefaultSource"]
