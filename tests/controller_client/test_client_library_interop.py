"""Our client library (``controller_client``) against ``segstore standalone``, across with the official Pravega
client: what one writes the other reads, each routing key in order, also across a scale and a transaction."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pravega_client  # the official Pravega client: a test dependency (pyproject), never skipped
import pytest
from official_client import assert_each_key_in_order, official_read
from standalone_process import StandaloneProcess

from controller_client import ControllerClient, ScalingPolicy, StreamConfiguration, StreamManager

pytestmark = [pytest.mark.integration, pytest.mark.slow]

KEYS = 50


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    data_dir: Path = tmp_path_factory.mktemp("standalone")
    with StandaloneProcess(data_dir) as process:
        yield process


@pytest.fixture
async def manager(standalone: StandaloneProcess) -> AsyncIterator[StreamManager]:
    controller = await ControllerClient.connect(standalone.controller_uri)
    async with controller, StreamManager(controller) as stream_manager:
        yield stream_manager


def _events(count: int) -> list[tuple[str, str]]:
    """``(event, routing key)`` with per-key sequence numbers in the text."""
    return [(f"k{i % KEYS:02d}:{i // KEYS:06d}", f"key-{i % KEYS}") for i in range(count)]


def _assert_per_key_order(events: list[str], expected: list[tuple[str, str]]) -> None:
    assert sorted(events) == sorted(e for e, _ in expected)  # each exactly once
    assert_each_key_in_order(events)


async def test_our_writer_across_a_scale_is_read_by_the_official_client(
    standalone: StandaloneProcess, manager: StreamManager
) -> None:
    await manager.create_scope("ours")
    await manager.create_stream("ours", "st", StreamConfiguration(ScalingPolicy.fixed(2)))
    expected = _events(6000)
    async with await manager.create_writer("ours", "st") as writer:
        for i, (event, key) in enumerate(expected):
            await writer.write_event(event.encode(), key)
            if i == 3000:
                segments = await manager.current_segments("ours", "st")
                first = segments[0]
                middle = (first.key_start + first.key_end) / 2
                started = await manager.controller.scale(
                    "ours", "st", [first.segment_id], [(first.key_start, middle), (middle, first.key_end)], 0
                )
                while not await manager.controller.check_scale("ours", "st", started.epoch):
                    await asyncio.sleep(0.01)  # the next writes to that range meet the sealed segment
    assert len(await manager.current_segments("ours", "st")) == 3

    events = await asyncio.to_thread(official_read, standalone.controller_uri, "ours", "st", "g1", len(expected))
    _assert_per_key_order(events, expected)


async def test_official_writer_is_read_by_our_reader(standalone: StandaloneProcess, manager: StreamManager) -> None:
    expected = _events(5000)

    def write() -> None:
        official = pravega_client.StreamManager(standalone.controller_uri)
        official.create_scope("theirs")
        official.create_stream("theirs", "st", 3)
        writer = official.create_writer("theirs", "st", 500)
        for event, key in expected:
            writer.write_event(event, key)
        writer.flush()

    await asyncio.to_thread(write)
    end = await manager.tail_cut("theirs", "st")
    async with manager.create_reader("theirs", "st", end=end) as reader:
        events = [bytes(e.data).decode() async for e in reader]
    _assert_per_key_order(events, expected)


async def test_our_transaction_is_visible_to_the_official_reader_once_committed(
    standalone: StandaloneProcess, manager: StreamManager
) -> None:
    await manager.create_scope("txn")
    await manager.create_stream("txn", "st", StreamConfiguration(ScalingPolicy.fixed(2)))
    txn_writer = manager.create_txn_writer("txn", "st")
    committed = await txn_writer.begin()
    aborted = await txn_writer.begin()
    for i in range(100):
        await committed.write_event(f"c{i}".encode(), f"key-{i % 5}")
        await aborted.write_event(f"a{i}".encode(), f"key-{i % 5}")
    await aborted.abort()
    await committed.commit()
    await txn_writer.close()
    events = await asyncio.to_thread(official_read, standalone.controller_uri, "txn", "st", "g2", 100)
    assert sorted(events) == sorted(f"c{i}" for i in range(100))


async def test_our_writer_over_more_segments_than_pooled_connections(manager: StreamManager) -> None:
    """Many segment sessions share each pooled connection: every session has its own writer id."""
    await manager.create_scope("wide")
    await manager.create_stream("wide", "st", StreamConfiguration(ScalingPolicy.fixed(16)))
    expected = _events(5000)
    async with await manager.create_writer("wide", "st") as writer:
        await writer.write_events([(event.encode(), key) for event, key in expected])
    end = await manager.tail_cut("wide", "st")
    async with manager.create_reader("wide", "st", end=end) as reader:
        events = [bytes(e.data).decode() async for e in reader]
    _assert_per_key_order(events, expected)
