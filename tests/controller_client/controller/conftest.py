"""The fixtures of the tests below this folder (defined in ``tests/fixtures/controller_grpc_fixtures.py``)."""

from controller_grpc_fixtures import controller, fake, servicer  # noqa: F401  (the fixtures of these tests)
