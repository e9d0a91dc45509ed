"""The fixtures of the tests below this folder (defined in ``tests/fixtures/spark_fixtures.py``)."""

from spark_fixtures import spark, standalone, streams  # noqa: F401  (the fixtures of these tests)
