"""The fixtures of the tests below this folder (defined in ``tests/fixtures/client_library_fixtures.py``)."""

from client_library_fixtures import controller, manager, service  # noqa: F401  (the fixtures of these tests)
