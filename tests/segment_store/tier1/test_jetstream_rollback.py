"""Rollback detection of the JetStream log against a real NATS server: a stream restored from an earlier copy
of the server's store directory is refused on ``initialize``; restarts of the log and of the NATS server
(clean and kill -9) are not.

Each test starts its own server under ``tmp_path`` (the store directory is copied and restored while it is
stopped). The coordination store is the in-process one, kept across the server's restarts. The segment store
process killed with kill -9 is in ``tests/segment_store/containers/test_tier1_rollback_kill.py``.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from segment_store.tier1.jetstream.config import JetStreamLogConfig
from segment_store.tier1.jetstream.factory import JetStreamLogFactory
from segment_store.tier1.jetstream.log import JetStreamLog
from segment_store.tier1.jetstream.nats_server import EmbeddedNatsServer, NatsServerConfig
from segment_store.tier1.log import DataLogCorruptedError
from segstore_shared.coordination.memory_store import MemoryCoordinationServer
from segstore_shared.coordination.zookeeper_server import free_port

pytestmark = pytest.mark.integration


class Harness:
    """One NATS server under ``tmp_path``, an in-process coordination store, and a log factory per phase."""

    def __init__(self, tmp_path: Path) -> None:
        self.server = EmbeddedNatsServer(
            NatsServerConfig(data_dir=tmp_path / "nats", port=free_port(), http_port=free_port())
        )
        self.store_dir = tmp_path / "nats" / "jetstream"
        self.coordination = MemoryCoordinationServer()
        self.config = JetStreamLogConfig(servers=(self.server.url,), replicas=1, stream_ready_timeout_s=30)

    def phase(self, body: Callable[[JetStreamLogFactory], Coroutine[Any, Any, None]]) -> None:
        """Run ``body`` with a fresh factory (its own NATS connection) against the running server."""

        async def run() -> None:
            store = self.coordination.connect()
            factory = JetStreamLogFactory(self.config, store)
            await factory.initialize()
            try:
                await body(factory)
            finally:
                await factory.close()
                await store.close()

        asyncio.run(asyncio.wait_for(run(), 60))

    def stream_dir(self, root: Path, stream: str) -> Path:
        (found,) = root.glob(f"**/streams/{stream}")  # jetstream/<account>/streams/<name>
        return found


async def open_log(factory: JetStreamLogFactory, log_id: int) -> JetStreamLog:
    log = factory.create_log(log_id)
    await log.initialize(timeout=30)
    return log


async def read_payloads(log: JetStreamLog) -> list[bytes]:
    return [item.payload async for item in log.read()]


@pytest.mark.timeout(240)
def test_stream_restored_from_an_earlier_copy_is_refused_and_others_are_not(tmp_path: Path) -> None:
    harness = Harness(tmp_path)
    copy = tmp_path / "copy"
    streams: dict[int, str] = {}
    acknowledged: dict[str, int | None] = {}

    async def early(factory: JetStreamLogFactory) -> None:
        for log_id in (0, 1):
            log = await open_log(factory, log_id)
            await asyncio.gather(*(log.append(b"early %d" % i) for i in range(10)))
            streams[log_id] = log.stream
            await log.close()

    async def later(factory: JetStreamLogFactory) -> None:
        for log_id in (0, 1):
            log = await open_log(factory, log_id)
            assert await read_payloads(log) == [b"early %d" % i for i in range(10)]
            addresses = await asyncio.gather(*(log.append(b"later %d" % i) for i in range(20)))
            await log.truncate(addresses[4])  # records the last acknowledged record
            assert log.metadata.acknowledged == addresses[-1].ledger_id
            await asyncio.gather(*(log.append(b"tail %d" % i) for i in range(5)))
            acknowledged[log.name] = log.metadata.acknowledged
            await log.close()

    async def restored(factory: JetStreamLogFactory) -> None:
        rolled_back = factory.create_log(0)
        with pytest.raises(DataLogCorruptedError) as caught:
            await rolled_back.initialize(timeout=30)
        await rolled_back.close()
        message = str(caught.value)
        assert f"log container-0: stream {streams[0]} ends at sequence" in message
        assert f"but sequence {acknowledged['container-0']} was acknowledged" in message
        assert "rolled back" in message
        again = factory.create_log(0)  # still refused: the refused owner's epoch carried the mark on
        with pytest.raises(DataLogCorruptedError, match="rolled back"):
            await again.initialize(timeout=30)
        await again.close()
        intact = await open_log(factory, 1)  # the other log, not restored, recovers as usual
        expected = [b"later %d" % i for i in range(5, 20)] + [b"tail %d" % i for i in range(5)]
        assert await read_payloads(intact) == expected
        await intact.close()

    harness.server.start()
    try:
        harness.phase(early)
        harness.server.stop()
        shutil.copytree(harness.store_dir, copy)  # the "backup", taken while the server is stopped
        harness.server.start()
        harness.phase(later)
        harness.server.stop()
        current = harness.stream_dir(harness.store_dir, streams[0])
        shutil.rmtree(current)
        shutil.copytree(harness.stream_dir(copy, streams[0]), current)  # container-0's stream restored from it
        harness.server.start()
        harness.phase(restored)
    finally:
        harness.server.stop()


@pytest.mark.timeout(240)
def test_restarts_of_log_and_server_are_not_refused(tmp_path: Path) -> None:
    """Reopen after close and after truncations, with the NATS server stopped cleanly or killed (kill -9,
    ``sync_interval: always``) in between: every reopen recovers what was acknowledged, none is refused."""
    harness = Harness(tmp_path)
    expected: list[bytes] = []

    def round_of(number: int) -> Callable[[JetStreamLogFactory], Coroutine[Any, Any, None]]:
        async def body(factory: JetStreamLogFactory) -> None:
            log = await open_log(factory, 0)
            assert await read_payloads(log) == expected
            addresses = await asyncio.gather(*(log.append(b"%d-%d" % (number, i)) for i in range(8)))
            expected.extend(b"%d-%d" % (number, i) for i in range(8))
            if number % 2 == 1:
                await log.truncate(addresses[2])
                del expected[: len(expected) - 5]
            await log.close()

        return body

    harness.server.start()
    try:
        for number in range(5):
            harness.phase(round_of(number))
            if number % 2 == 0:
                harness.server.kill()
            else:
                harness.server.stop()
            harness.server.start()
        harness.phase(round_of(5))
    finally:
        harness.server.stop()


@pytest.mark.timeout(120)
def test_metadata_written_without_the_mark_opens_and_then_records_one(tmp_path: Path) -> None:
    """Backward compatibility: a record an older version wrote (no ``acknowledged``) is not checked; the next
    owner records its fence, so the check applies from then on."""
    harness = Harness(tmp_path)
    path = f"{harness.config.metadata_root}/container-0"

    async def write(factory: JetStreamLogFactory) -> None:
        log = await open_log(factory, 0)
        await asyncio.gather(*(log.append(b"%d" % i) for i in range(6)))
        await log.close()
        store = harness.coordination.connect()
        node = await store.get(path)
        old = json.loads(node.data)
        del old["acknowledged"]
        await store.compare_and_set(path, json.dumps(old).encode(), node.version)
        await store.close()

    async def reopen(factory: JetStreamLogFactory) -> None:
        log = await open_log(factory, 0)
        assert await read_payloads(log) == [b"%d" % i for i in range(6)]
        fence = log.metadata.acknowledged
        assert fence is not None and fence > 2, log.metadata
        await log.close()

    harness.server.start()
    try:
        harness.phase(write)
        harness.phase(reopen)
    finally:
        harness.server.stop()


@pytest.mark.timeout(180)
def test_a_stream_rolled_back_under_its_running_owner_fails_it_and_stays_refused(tmp_path: Path) -> None:
    """The NATS store restored from an earlier copy while the log's owner runs (a quorum's power loss): the
    owner's next append is refused by the stream (wrong last sequence) and its re-fence finds the stream ending
    before what it had acknowledged: the append fails with ``DataLogCorruptedError`` instead of going on after
    the gap (which a later recovery would read without the lost entries), and the next owner refuses the log."""
    harness = Harness(tmp_path)
    copy = tmp_path / "copy"

    async def body() -> None:
        store = harness.coordination.connect()
        factory = JetStreamLogFactory(harness.config, store)
        await factory.initialize()
        try:
            log = await open_log(factory, 0)
            await asyncio.gather(*(log.append(b"early %d" % i) for i in range(10)))
            await asyncio.to_thread(harness.server.stop)
            await asyncio.to_thread(shutil.copytree, harness.store_dir, copy)
            await asyncio.to_thread(harness.server.start)
            later = await asyncio.gather(*(log.append(b"later %d" % i) for i in range(20)))
            await asyncio.to_thread(harness.server.kill)  # power loss: the store comes back as the copy
            await asyncio.to_thread(shutil.rmtree, harness.store_dir)
            await asyncio.to_thread(shutil.copytree, copy, harness.store_dir)
            await asyncio.to_thread(harness.server.start)
            with pytest.raises(DataLogCorruptedError, match="rolled back") as caught:
                await log.append(b"after the rollback")
            assert f"but sequence {later[-1].ledger_id} was acknowledged" in str(caught.value)
            await log.close()
            again = factory.create_log(0)  # the mark the re-fence recorded refuses the next owner too
            with pytest.raises(DataLogCorruptedError, match="rolled back"):
                await again.initialize(timeout=30)
            await again.close()
        finally:
            await factory.close()
            await store.close()

    harness.server.start()
    try:
        asyncio.run(asyncio.wait_for(body(), 120))
    finally:
        harness.server.stop()
