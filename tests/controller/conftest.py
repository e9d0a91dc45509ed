"""The fixtures of the tests below this folder (defined in ``tests/fixtures/controller_fixtures.py``)."""

from controller_fixtures import clock, connect, env, store  # noqa: F401  (the fixtures of these tests)
