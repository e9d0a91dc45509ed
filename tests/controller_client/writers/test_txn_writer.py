"""Transactions: invisible until commit, never visible after abort, closed after either."""

from __future__ import annotations

import pytest
from fake_controller import FakeController

from controller_client.errors import StreamSealedError, TxnFailedError
from controller_client.model import ScalingPolicy, StreamConfiguration, TxnState
from controller_client.readers.stream_reader import StreamEvent
from controller_client.stream_manager import StreamManager
from controller_client.writers.txn_writer import TransactionClosedError

pytestmark = pytest.mark.integration

SCOPE = "tx"


async def _stream(manager: StreamManager, name: str, segments: int) -> None:
    await manager.create_scope(SCOPE)
    await manager.create_stream(SCOPE, name, StreamConfiguration(ScalingPolicy.fixed(segments)))


async def _read_all(manager: StreamManager, stream: str) -> list[StreamEvent]:
    end = await manager.tail_cut(SCOPE, stream)
    async with manager.create_reader(SCOPE, stream, end=end) as reader:
        return [event async for event in reader]


async def test_commit_makes_every_event_visible_in_order(manager: StreamManager, controller: FakeController) -> None:
    await _stream(manager, "commit", 3)
    async with manager.create_txn_writer(SCOPE, "commit") as writer:
        txn = await writer.begin()
        assert len(txn.segments) == 3
        payloads = [f"k{i % 31}:{i}".encode() for i in range(500)]
        for i, payload in enumerate(payloads):
            await txn.write_event(payload, f"k{i % 31}")
        await txn.flush()
        assert await _read_all(manager, "commit") == []  # stored, not visible
        assert await txn.check_status() == TxnState.OPEN
        await txn.ping(60_000)
        await txn.commit()
        assert await txn.wait_for_state() == TxnState.COMMITTED
        with pytest.raises(TransactionClosedError):
            await txn.write_event(b"late", "k0")
        with pytest.raises(TransactionClosedError):
            await txn.commit()
    events = await _read_all(manager, "commit")
    assert sorted(e.data for e in events) == sorted(payloads)
    by_key: dict[str, list[int]] = {}
    for event in events:
        key, number = event.data.decode().split(":")
        by_key.setdefault(key, []).append(int(number))
    assert all(numbers == sorted(numbers) for numbers in by_key.values())
    assert len({e.segment_id for e in events}) == 3


async def test_abort_leaves_nothing_visible(manager: StreamManager, controller: FakeController) -> None:
    await _stream(manager, "abort", 2)
    writer = manager.create_txn_writer(SCOPE, "abort")
    plain = await manager.create_writer(SCOPE, "abort")
    await (await plain.write_event(b"outside", "a"))
    txn = await writer.begin()
    for i in range(100):
        await txn.write_event(b"inside %d" % i, str(i))
    await txn.flush()
    await txn.abort()
    assert await txn.check_status() == TxnState.ABORTED
    with pytest.raises(TransactionClosedError):
        await txn.write_event(b"late")
    with pytest.raises(TxnFailedError):
        await txn.ping()
    await plain.close()
    await writer.close()
    assert [e.data for e in await _read_all(manager, "abort")] == [b"outside"]


async def test_two_transactions_commit_independently(manager: StreamManager, controller: FakeController) -> None:
    await _stream(manager, "two", 1)
    writer = manager.create_txn_writer(SCOPE, "two")
    first, second = await writer.begin(), await writer.begin()
    assert first.txn_id != second.txn_id
    await first.write_event(b"first", "k")
    await second.write_event(b"second", "k")
    await second.commit()
    assert [e.data for e in await _read_all(manager, "two")] == [b"second"]
    await first.abort()
    await writer.close()
    assert [e.data for e in await _read_all(manager, "two")] == [b"second"]


async def test_begin_on_sealed_stream_raises(manager: StreamManager) -> None:
    await _stream(manager, "sealed", 1)
    await manager.seal_stream(SCOPE, "sealed")
    writer = manager.create_txn_writer(SCOPE, "sealed")
    with pytest.raises(StreamSealedError):
        await writer.begin()
