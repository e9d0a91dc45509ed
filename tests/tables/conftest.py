"""Fixtures of the table tests: ``host`` is the SegmentHost under the tables (in memory, and the real container).

Tests use only the SegmentHost API and the table API, so ``host`` can be any SegmentHost (the real
segment container included) without changing them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import pytest
from container_env import ContainerEnv
from memory_host import MemoryHost

from segment_store.tables.config import TableConfig
from segment_store.tables.host import SegmentHost
from segment_store.tables.table_store import TableStore

# Small reads, so entries span read boundaries everywhere.
SMALL_READS = TableConfig(read_chunk_bytes=700)


@pytest.fixture(params=["memory", "container"])
async def host(request: pytest.FixtureRequest) -> AsyncIterator[SegmentHost]:
    """The in-memory host, and the real segment container (in-memory Tier-1, in-memory Tier-2)."""
    if request.param == "memory":
        yield MemoryHost(read_block_bytes=1000)
        return
    env = ContainerEnv()
    container = await env.start()
    yield container
    await env.close()


@pytest.fixture
async def store(host: SegmentHost) -> AsyncIterator[TableStore]:
    table_store = TableStore(host, SMALL_READS)
    yield table_store
    await table_store.close()


@pytest.fixture
def make_store(host: SegmentHost) -> Callable[..., TableStore]:
    """A new TableStore over the same host (a restart), with config overrides."""

    def make(**overrides: int) -> TableStore:
        return TableStore(host, TableConfig(**{"read_chunk_bytes": 700, **overrides}))

    return make
