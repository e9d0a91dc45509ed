"""The blocking API from a plain thread (the segment store runs on the test's event loop)."""

from __future__ import annotations

import asyncio
import threading
from collections import defaultdict

import pytest
from fake_controller import FakeController, fast_client_config

from controller_client.blocking.streams import BlockingStreamManager
from controller_client.errors import StreamNotFoundError
from controller_client.model import ScalingPolicy, StreamConfiguration, TxnState
from controller_client.ports import ControllerApi
from controller_client.stream_manager import StreamManagerConfig
from segment_store.client import SegmentClient
from segment_store.server.service import SegmentStoreService

pytestmark = pytest.mark.integration


def _smoke(endpoint: tuple[str, int]) -> dict[str, object]:
    assert threading.current_thread() is not threading.main_thread()
    made: list[FakeController] = []

    async def connect() -> ControllerApi:  # made on the manager's loop: its segment client belongs there
        made.append(FakeController(SegmentClient(endpoint, fast_client_config()), endpoint))
        return made[0]

    with BlockingStreamManager(connect, StreamManagerConfig(client=fast_client_config())) as manager:
        assert manager.create_scope("blk")
        assert manager.create_stream("blk", "s", StreamConfiguration(ScalingPolicy.fixed(3)))
        assert manager.list_streams("blk") == ["s"]
        with pytest.raises(StreamNotFoundError):
            manager.create_writer("blk", "missing")
        counters: dict[str, int] = defaultdict(int)
        with manager.create_writer("blk", "s") as writer:
            acks = []
            for i in range(300):
                key = f"k{i % 11}"
                acks.append(writer.write_event(f"{key}:{counters[key]}".encode(), key))
                counters[key] += 1
            batch = writer.write_events([(b"batch:%d" % i, "b") for i in range(100)])
            writer.flush(timeout_s=10)
            assert all(a.result(0) is None for a in acks) and batch.result(0) is None
        with manager.create_txn_writer("blk", "s") as txn_writer:
            txn = txn_writer.begin()
            txn.write_event(b"txn:0", "t").result(10)
            txn.commit()
            assert txn.check_status() == TxnState.COMMITTED
        tail = manager.tail_cut("blk", "s")
        with manager.create_reader("blk", "s", end=tail) as reader:
            events = [event.data for event in reader]
        with manager.create_reader("blk", "s", start=tail) as reader, pytest.raises(TimeoutError):
            reader.next_event(timeout_s=0.1)
        segment = next(iter(tail.positions))
        raw = manager.read_segment_range("blk", "s", segment, 0, tail.positions[segment])
        controller = made[0]
        manager.seal_stream("blk", "s")
        manager.delete_stream("blk", "s")
        assert not manager.stream_exists("blk", "s")
    return {"events": events, "raw": raw, "lookups": controller.uri_lookups}


async def test_blocking_stream_manager_round_trips(service: SegmentStoreService) -> None:
    result = await asyncio.to_thread(_smoke, service.endpoint)
    events = result["events"]
    assert isinstance(events, list) and len(events) == 401
    per_key: dict[str, list[int]] = defaultdict(list)
    for data in events:
        key, number = data.decode().split(":")
        per_key[key].append(int(number))
    assert all(numbers == sorted(numbers) for numbers in per_key.values())
    assert per_key["txn"] == [0] and per_key["batch"] == list(range(100))
    assert isinstance(result["raw"], bytes) and len(result["raw"]) > 0
    assert result["lookups"] == 3
