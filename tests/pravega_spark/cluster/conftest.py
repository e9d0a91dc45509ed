"""The fixtures of the cluster tests (defined in ``tests/fixtures/spark_cluster.py``): one Spark standalone cluster
and one driver session connected to it per test module."""

from spark_cluster import cluster, cluster_spark, cluster_streams  # noqa: F401  (the fixtures of these tests)
