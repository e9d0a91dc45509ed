"""SeaweedFS for tests: the server (``segment_store.storage.backends.seaweedfs_server``) signed with the
tests' credentials.

Import the fixture into a test module (``from seaweedfs_fixtures import seaweed_server_fixture  # noqa: F401``) and ask
for ``seaweed_server``; each module gets its own server, killed at the end. A ``SeaweedServer`` has the
``endpoint`` and ``client()`` of :class:`s3_fixtures.MotoServer`, so ``s3_fixtures.new_s3_storage`` takes it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from s3_fixtures import CREDENTIALS

from segment_store.storage.backends.seaweedfs_server import SeaweedServer as _SeaweedServer


class SeaweedServer(_SeaweedServer):
    def __init__(self, data_dir: Path) -> None:
        super().__init__(data_dir, CREDENTIALS)


@pytest.fixture(scope="module", name="seaweed_server")
def seaweed_server_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedServer]:
    """A started SeaweedFS server for the module; killed at the end."""
    server = SeaweedServer(tmp_path_factory.mktemp("seaweedfs"))
    server.start()
    try:
        yield server
    finally:
        server.stop()
