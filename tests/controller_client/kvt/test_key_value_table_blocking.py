"""The blocking key-value table API from a plain thread (the controller and segment store run on the test's loop)."""

from __future__ import annotations

import asyncio
import threading

import pytest
from fake_controller import fast_client_config
from kvt_controller import kvt_controller

from controller_client.blocking.streams import BlockingStreamManager
from controller_client.kvt.errors import BadKeyVersionError, KeyValueTableNotFoundError
from controller_client.kvt.model import Insert, KeyValueTableConfiguration, TableKey
from controller_client.stream_manager import StreamManagerConfig

pytestmark = pytest.mark.integration


def _use_a_table(uri: str) -> list[bytes]:
    assert threading.current_thread() is not threading.main_thread()
    config = KeyValueTableConfiguration(partition_count=3, primary_key_length=2, secondary_key_length=1)
    with BlockingStreamManager.connect(uri, StreamManagerConfig(client=fast_client_config())) as manager:
        manager.create_scope("blk")
        assert manager.create_key_value_table("blk", "t", config)
        assert manager.list_key_value_tables("blk") == ["t"]
        assert manager.get_key_value_table_configuration("blk", "t") == config
        table = manager.key_value_table("blk", "t")
        assert table.config == config
        version = table.put_if_absent(TableKey(b"k1", b"a"), b"first")
        with pytest.raises(BadKeyVersionError):
            table.put_if_absent(TableKey(b"k1", b"a"), b"again")
        version = table.replace(TableKey(b"k1", b"a"), b"second", version)
        table.update([Insert(TableKey(b"k1", b"b"), b"b"), Insert(TableKey(b"k1", b"c"), b"c")])
        table.put(TableKey(b"k2", b"a"), b"other")
        assert table.exists(TableKey(b"k2", b"a"))
        table.remove(TableKey(b"k2", b"a"))
        assert table.get(TableKey(b"k2", b"a")) is None
        entry = table.get(TableKey(b"k1", b"a"))
        assert entry is not None and entry.version == version
        assert [e.value if e else None for e in table.get_all([TableKey(b"k1", b"c"), TableKey(b"k9", b"z")])] == [
            b"c",
            None,
        ]
        values = [e.value for e in table.iterator(max_iteration_size=1).for_primary_key(b"k1").entries()]
        keys = list(table.iterator().for_prefix(b"k").keys())
        assert [k.secondary for k in keys] == [b"a", b"b", b"c"]
        assert manager.delete_key_value_table("blk", "t")
        with pytest.raises(KeyValueTableNotFoundError):
            manager.key_value_table("blk", "t")
        return values


async def test_a_table_through_the_blocking_manager() -> None:
    async with kvt_controller() as controller:
        assert await asyncio.to_thread(_use_a_table, controller.uri) == [b"second", b"b", b"c"]
