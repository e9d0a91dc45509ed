"""The fixtures of the tests below this folder (defined in ``tests/fixtures/segment_client_fixtures.py``)."""

from segment_client_fixtures import client, service  # noqa: F401  (the fixtures of these tests)
