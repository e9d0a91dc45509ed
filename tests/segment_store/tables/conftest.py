"""The fixtures of the tests below this folder (defined in ``tests/fixtures/table_fixtures.py``)."""

from table_fixtures import host, make_store, store  # noqa: F401  (the fixtures of these tests)
