"""Contract of the Tier-1 port, after Pravega's DurableDataLogTestBase.

Run against the in-memory log, the file ledger log over the in-process coordination store
(fast, no fsync), the file ledger log over real ZooKeeper with fsync on, and the JetStream
log on a real NATS server (one replica, in-process coordination store) and on a real
3-node NATS cluster (three replicas, real ZooKeeper). The file ledger logs use small
ledgers so that the tests cross several rollovers.
"""

from __future__ import annotations

import asyncio
import functools
import random
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from jetstream_helpers import delete_streams, log_config

from segment_store.tier1.file.config import FileLedgerLogConfig
from segment_store.tier1.file.factory import FileLedgerLogFactory
from segment_store.tier1.jetstream.factory import JetStreamLogFactory
from segment_store.tier1.jetstream.nats_server import NatsCluster
from segment_store.tier1.log import (
    DataLogClosedError,
    DataLogNotInitializedError,
    DataLogWriterNotPrimaryError,
    DurableDataLog,
    DurableDataLogFactory,
    LogAddress,
    ReadItem,
    WriteTooLongError,
)
from segment_store.tier1.memory_log import InMemoryDurableDataLogFactory
from segstore_shared.coordination.kazoo_store import KazooCoordinationStore
from segstore_shared.coordination.memory_store import MemoryCoordinationServer
from segstore_shared.coordination.store import CoordinationStore

pytestmark = pytest.mark.contract

TEST_TIMEOUT_S = 60.0
MAX_APPEND = 16 * 1024
LOG_ID = 7


class Env:
    """A factory shared by every instance of the log under test; closes them at the end."""

    def __init__(self, factory: DurableDataLogFactory) -> None:
        self.factory = factory
        self.logs: list[DurableDataLog] = []

    def new_log(self, log_id: int = LOG_ID) -> DurableDataLog:
        log = self.factory.create_log(log_id)
        self.logs.append(log)
        return log

    async def open_log(self, log_id: int = LOG_ID) -> DurableDataLog:
        log = self.new_log(log_id)
        await log.initialize(timeout=30)
        return log


MakeEnv = Callable[[], AbstractAsyncContextManager[Env]]


@pytest.fixture(params=["memory", "file-memstore", "file-zookeeper", "jetstream-r1", "jetstream-r3"])
def make_env(request: pytest.FixtureRequest, tmp_path: Path) -> MakeEnv:
    kind: str = request.param
    hosts: str | None = request.getfixturevalue("zk_chroot") if kind in ("file-zookeeper", "jetstream-r3") else None
    nats: NatsCluster | None = None
    prefix = ""
    if kind.startswith("jetstream"):
        nats = request.getfixturevalue("nats_single" if kind == "jetstream-r1" else "nats_cluster")
        prefix = request.getfixturevalue("stream_prefix")

    @asynccontextmanager
    async def env() -> AsyncIterator[Env]:
        store: CoordinationStore | None = None
        factory: DurableDataLogFactory
        if kind == "memory":
            factory = InMemoryDurableDataLogFactory(max_append_length=MAX_APPEND)
        else:
            if hosts is None:
                store = MemoryCoordinationServer().connect()
            else:
                store = await KazooCoordinationStore.connect(hosts)
            if nats is not None:
                replicas = len(nats.nodes)
                factory = JetStreamLogFactory(
                    log_config(nats.urls, prefix, replicas, max_append_length_bytes=MAX_APPEND), store
                )
            else:
                config = FileLedgerLogConfig(
                    root_dir=tmp_path / "tier1",
                    rollover_size_bytes=4 * MAX_APPEND,
                    max_append_length_bytes=MAX_APPEND,
                    max_batch_bytes=2 * MAX_APPEND,
                    fsync=hosts is not None,
                )
                factory = FileLedgerLogFactory(config, store)
        await factory.initialize()
        environment = Env(factory)
        try:
            yield environment
        finally:
            for log in environment.logs:
                await log.close()
            await factory.close()
            if store is not None:
                await store.close()
            if nats is not None:
                await delete_streams(nats.urls, prefix)

    return env


def run(body: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(asyncio.wait_for(body(), TEST_TIMEOUT_S))


def payloads(count: int, seed: int = 0, min_size: int = 20, max_size: int = 2000) -> list[bytes]:
    rng = random.Random(seed)
    return [rng.randbytes(rng.randint(min_size, max_size)) for _ in range(count)]


async def populate(log: DurableDataLog, count: int, seed: int = 0) -> list[ReadItem]:
    """Append ``count`` entries, all in flight at once; returns them with their addresses."""
    data = payloads(count, seed)
    futures = [log.append(item) for item in data]
    addresses = await asyncio.gather(*futures)
    return [ReadItem(address, item) for address, item in zip(addresses, data, strict=True)]


async def read_all(log: DurableDataLog) -> list[ReadItem]:
    return [item async for item in log.read()]


async def assert_reads(log: DurableDataLog, expected: list[ReadItem]) -> None:
    actual = await read_all(log)
    assert [item.address for item in actual] == [item.address for item in expected]
    assert [item.payload for item in actual] == [item.payload for item in expected]


def test_append_with_sequential_writes(make_env: MakeEnv) -> None:
    async def body() -> None:
        async with make_env() as env:
            log = await env.open_log()
            previous: LogAddress | None = None
            written = []
            for item in payloads(60):
                address = await log.append(item)
                if previous is not None:
                    assert address > previous
                    assert address.sequence > previous.sequence
                assert address.epoch == log.epoch
                previous = address
                written.append(ReadItem(address, item))
            await log.close()
            await assert_reads(await env.open_log(), written)

    run(body)


def test_append_with_many_in_flight(make_env: MakeEnv) -> None:
    async def body() -> None:
        async with make_env() as env:
            log = await env.open_log()
            data = payloads(300, seed=1)
            completed: list[int] = []
            futures = []

            def record(index: int, _: asyncio.Future[LogAddress]) -> None:
                completed.append(index)

            for index, item in enumerate(data):
                future = log.append(item)
                future.add_done_callback(functools.partial(record, index))
                futures.append(future)
            addresses = await asyncio.gather(*futures)
            assert completed == list(range(len(data)))
            assert addresses == sorted(addresses)
            assert len(set(addresses)) == len(addresses)
            await log.close()
            reader = await env.open_log()
            await assert_reads(reader, [ReadItem(a, d) for a, d in zip(addresses, data, strict=True)])

    run(body)


def test_read_with_reopen_after_each_round(make_env: MakeEnv) -> None:
    async def body() -> None:
        async with make_env() as env:
            expected: list[ReadItem] = []
            epochs = []
            for round_number in range(4):
                log = await env.open_log()
                epochs.append(log.epoch)
                await assert_reads(log, expected)
                expected += await populate(log, 40, seed=round_number)
                await log.close()
            await assert_reads(await env.open_log(), expected)
            assert epochs == sorted(set(epochs))

    run(body)


def test_read_with_entries_of_this_instance(make_env: MakeEnv) -> None:
    async def body() -> None:
        async with make_env() as env:
            log = await env.open_log()
            expected = await populate(log, 30)
            await assert_reads(log, expected)

    run(body)


def test_truncate_with_each_address_across_rollovers(make_env: MakeEnv) -> None:
    async def body() -> None:
        async with make_env() as env:
            writer = await env.open_log()
            expected = await populate(writer, 80)
            await writer.close()
            log = await env.open_log()
            for index in range(0, len(expected), 7):
                await log.truncate(expected[index].address)
                await assert_reads(log, expected[index + 1 :])
            await log.truncate(expected[3].address)  # behind the truncation point: no change
            remaining = expected[index + 1 :]
            await assert_reads(log, remaining)
            more = await populate(log, 20, seed=5)
            await log.close()
            reopened = await env.open_log()
            await assert_reads(reopened, remaining + more)
            await reopened.truncate(more[-1].address)
            await assert_reads(reopened, [])

    run(body)


def test_truncate_with_address_beyond_last_entry(make_env: MakeEnv) -> None:
    async def body() -> None:
        async with make_env() as env:
            log = await env.open_log()
            written = await populate(log, 3)
            last = written[-1].address
            beyond = LogAddress(ledger_id=last.ledger_id, entry_id=last.entry_id + 10, epoch=last.epoch)
            with pytest.raises(ValueError):
                await log.truncate(beyond)

    run(body)


def test_initialize_with_second_instance_fences_first(make_env: MakeEnv) -> None:
    async def body() -> None:
        async with make_env() as env:
            first = await env.open_log()
            acknowledged = await populate(first, 25)
            second = await env.open_log()
            assert second.epoch > first.epoch
            with pytest.raises(DataLogWriterNotPrimaryError):
                await first.append(b"from the zombie")
            with pytest.raises(DataLogWriterNotPrimaryError):
                await first.append(b"again")
            with pytest.raises(DataLogWriterNotPrimaryError):
                await first.truncate(acknowledged[0].address)
            await assert_reads(second, acknowledged)
            more = await populate(second, 10, seed=2)
            await second.close()
            third = await env.open_log()
            assert third.epoch > second.epoch
            await assert_reads(third, acknowledged + more)

    run(body)


def test_append_with_oversize_entry(make_env: MakeEnv) -> None:
    async def body() -> None:
        async with make_env() as env:
            log = await env.open_log()
            with pytest.raises(WriteTooLongError):
                await log.append(b"x" * (log.max_append_length + 1))
            largest = b"y" * log.max_append_length
            address = await log.append(largest)
            empty = await log.append(b"")
            assert empty > address
            await assert_reads(log, [ReadItem(address, largest), ReadItem(empty, b"")])

    run(body)


def test_append_with_closed_log(make_env: MakeEnv) -> None:
    async def body() -> None:
        async with make_env() as env:
            log = await env.open_log()
            written = await populate(log, 5)
            await log.close()
            await log.close()
            with pytest.raises(DataLogClosedError):
                await log.append(b"late")
            await assert_reads(await env.open_log(), written)

    run(body)


def test_read_with_empty_log(make_env: MakeEnv) -> None:
    async def body() -> None:
        async with make_env() as env:
            log = await env.open_log()
            assert log.epoch >= 1
            assert await read_all(log) == []
            await log.close()
            again = await env.open_log()
            assert await read_all(again) == []
            other = await env.open_log(log_id=LOG_ID + 1)
            assert await read_all(other) == []

    run(body)


def test_calls_before_initialize(make_env: MakeEnv) -> None:
    async def body() -> None:
        async with make_env() as env:
            log = env.new_log()
            with pytest.raises(DataLogNotInitializedError):
                log.append(b"x")
            with pytest.raises(DataLogNotInitializedError):
                await read_all(log)
            with pytest.raises(DataLogNotInitializedError):
                _ = log.epoch
            with pytest.raises(DataLogNotInitializedError):
                await log.truncate(LogAddress(ledger_id=1, entry_id=0, epoch=1))

    run(body)


def test_logs_with_different_ids_are_independent(make_env: MakeEnv) -> None:
    async def body() -> None:
        async with make_env() as env:
            first = await env.open_log(1)
            second = await env.open_log(2)
            one = await populate(first, 10, seed=1)
            two = await populate(second, 10, seed=2)
            await first.close()
            await second.close()
            await assert_reads(await env.open_log(1), one)
            await assert_reads(await env.open_log(2), two)

    run(body)
