"""The fixture every end-to-end Iceberg test module shares: ``streams`` over that module's own ``standalone``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from spark_fixtures import Streams
from standalone_process import StandaloneProcess


@pytest.fixture(scope="module")
def streams(standalone: StandaloneProcess) -> Iterator[Streams]:
    """Stream helpers (create, write, read) on the module's ``standalone`` (each module starts its own)."""
    helper = Streams(standalone)
    try:
        yield helper
    finally:
        helper.close()
