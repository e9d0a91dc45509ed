"""Makes ``spark.read.format("segstore")`` work without registering the data source by hand.

pyspark discovers Python data sources in top-level modules named ``pyspark_*`` that define a
``DefaultSource`` (a ``DataSource`` subclass) and registers them under ``DefaultSource.name()``.
"""

from pravega_spark.read.source import SegstoreDataSource as DefaultSource

__all__ = ["DefaultSource"]
