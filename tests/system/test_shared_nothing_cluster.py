"""A shared-nothing cluster under faults: no host's loss loses an acknowledged event.

ZooKeeper, ``segstore controller``, three ``segstore segmentstore --cluster`` processes each with its own data
dir, Tier-1 on a 3-node NATS JetStream cluster (R3), Tier-2 on S3 (a moto server, and SeaweedFS). Writers of our client
library write numbered events under 20 routing keys to an 8-segment stream while the test breaks something:

- kill -9 of a segment store and the loss of its disk (its data dir deleted): its containers move to the
  others, which recover their logs from JetStream; the host later comes back with an empty disk;
- kill -9 of one NATS server: the streams it led elect new leaders; appends continue;
- SIGSTOP of a segment store past its ZooKeeper session, SIGCONT while writers keep writing: the zombie's
  containers are fenced in JetStream and it acknowledges nothing the new owners cannot read.

Every event the writers had acknowledged (all of them: ``close`` flushes, and a writer that failed fails the
test) is read back from the head of the stream exactly once, each routing key in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from s3_fixtures import s3_server_fixture  # noqa: F401 (a fixture)
from seaweedfs_fixtures import seaweed_server_fixture  # noqa: F401 (a fixture)
from shared_nothing import SESSION_TIMEOUT_MS, SharedNothingCluster

from controller_client import ControllerClient, ScalingPolicy, StreamConfiguration, StreamManager
from controller_client.model import qualified_segment_name
from controller_client.writers.event_writer import EventStreamWriter
from segment_store.client import ClientConfig, ConnectionLostError, SegmentClient, SegmentStatus, WrongHostError
from segment_store.client.retry import RetryPolicy
from segment_store.tier1.jetstream.nats_server import NatsCluster

pytestmark = [pytest.mark.integration, pytest.mark.slow]

KEYS = 20
SEGMENTS = 8
_buckets = itertools.count()


@pytest.fixture(params=["moto", "seaweedfs"])
def cluster(zk_chroot: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[SharedNothingCluster]:
    """The cluster, its Tier-2 on moto or on SeaweedFS (a real S3-compatible server)."""
    s3 = request.getfixturevalue("s3_server" if request.param == "moto" else "seaweed_server")
    nats = NatsCluster.on_free_ports(tmp_path / "nats", 3)
    nats.start()
    system = SharedNothingCluster(tmp_path / "hosts", zk_chroot, s3, nats, bucket=f"sn-{next(_buckets)}")
    try:
        system.start()
        yield system
    finally:
        system.stop()
        nats.stop()


class Load:
    """Numbered events under ``KEYS`` routing keys, written as fast as a small pause allows."""

    def __init__(self, writer: EventStreamWriter) -> None:
        self.writer = writer
        self.written = 0
        self.acked = [0] * KEYS  # per routing key
        self.stop = asyncio.Event()

    def _count(self, key: int, future: asyncio.Future[None]) -> None:
        if not future.cancelled() and future.exception() is None:
            self.acked[key] += 1

    async def run(self) -> None:
        for number in itertools.count():
            if self.stop.is_set():
                return
            key = number % KEYS
            future = await self.writer.write_event(f"k{key:02d}:{number // KEYS:06d}".encode(), f"key-{key}")
            future.add_done_callback(functools.partial(self._count, key))
            self.written += 1
            await asyncio.sleep(0.001)

    async def progress(self, events_per_key: int, timeout_s: float, what: str) -> None:
        """Wait until every routing key has ``events_per_key`` more events acknowledged than now: every segment,
        so every container, takes writes."""
        targets = [count + events_per_key for count in self.acked]
        async with asyncio.timeout(timeout_s):
            while any(count < target for count, target in zip(self.acked, targets, strict=True)):
                assert self.writer.failure is None, f"the writer failed {what}: {self.writer.failure!r}"
                await asyncio.sleep(0.05)


async def read_back(manager: StreamManager) -> list[str]:
    end = await manager.tail_cut("sn", "events")
    async with manager.create_reader("sn", "events", end=end) as reader:
        return [event.data.decode() async for event in reader]


def check(events: list[str], written: int) -> None:
    assert len(events) == written, f"{len(events)} events read, {written} written and acknowledged"
    last: dict[str, int] = {}
    for event in events:
        key, number = event.split(":")
        assert int(number) == last.get(key, -1) + 1, f"{key}: {number} after {last.get(key)}"
        last[key] = int(number)


async def under_load(cluster: SharedNothingCluster, fault: Callable[[Load], object]) -> None:
    """Write while ``fault`` breaks something, then check every acknowledged event."""
    async with (
        await ControllerClient.connect(cluster.controller_uri) as controller,
        StreamManager(controller) as manager,
    ):
        await manager.create_scope("sn")
        await manager.create_stream("sn", "events", StreamConfiguration(ScalingPolicy.fixed(SEGMENTS)))
        writer = await manager.create_writer("sn", "events")
        load = Load(writer)
        task = asyncio.create_task(load.run())
        try:
            await load.progress(100, 60, "before the fault")
            outcome = fault(load)
            if asyncio.iscoroutine(outcome):
                await outcome
            await load.progress(100, 90, "after the fault")
        finally:
            load.stop.set()
            await task
        async with asyncio.timeout(60):
            await writer.close()  # flushes: everything written is acknowledged, or the writer failed
        assert writer.failure is None
        check(await read_back(manager), load.written)


@pytest.mark.timeout(240)
def test_kill_9_of_a_segment_store_and_loss_of_its_disk(cluster: SharedNothingCluster) -> None:
    async def fault(load: Load) -> None:
        cluster.kill("ss1")
        cluster.wipe("ss1")
        await load.progress(100, 90, "after the kill")  # every key: the other hosts took its containers
        await asyncio.to_thread(cluster.restart_segmentstore, "ss1")  # a new host with an empty disk

    asyncio.run(under_load(cluster, fault))


@pytest.mark.timeout(240)
def test_kill_9_of_a_nats_server(cluster: SharedNothingCluster) -> None:
    asyncio.run(under_load(cluster, lambda load: cluster.nats.nodes[0].kill()))


@pytest.mark.timeout(240)
def test_zombie_segment_store_paused_past_its_session(cluster: SharedNothingCluster) -> None:
    """The writers' connections to the frozen process stay open (their silent-peer timeout, 30 s, is longer than
    the pause), so appends wait in its socket buffers; resumed, it races its own news that the session expired."""

    async def fault(load: Load) -> None:
        cluster.pause("ss2")
        with contextlib.ExitStack() as resume:
            resume.callback(cluster.resume, "ss2")
            await asyncio.sleep(3 * SESSION_TIMEOUT_MS / 1000)  # its session expires; its containers move

    asyncio.run(under_load(cluster, fault))


@pytest.mark.timeout(240)
@pytest.mark.parametrize("cluster", ["moto"], indirect=True)
def test_a_zombie_answers_nothing_from_its_stale_state_when_it_runs_again(cluster: SharedNothingCluster) -> None:
    """Requests queued in a frozen segment store's socket while its containers moved are answered, once it runs
    again, with WrongHost (or a closed connection), never with a segment's length from before the move: the new
    owners took appends meanwhile, so such a length would be a tail cut without acknowledged events. The
    self-test's zombie fault counted 1,664 such events 'late' before the session lease."""

    async def fault(load: Load) -> None:
        segments = [qualified_segment_name("sn", "events", segment) for segment in range(SEGMENTS)]
        config = ClientConfig(read_retry=RetryPolicy(max_attempts=1))
        async with SegmentClient(("127.0.0.1", cluster.ports["ss2"]), config) as zombie:
            await asyncio.gather(*(zombie.get_segment_info(name) for name in segments), return_exceptions=True)
            cluster.pause("ss2")
            with contextlib.ExitStack() as resume:
                resume.callback(cluster.resume, "ss2")
                await asyncio.sleep(3 * SESSION_TIMEOUT_MS / 1000)  # its session expires; its containers move
                await load.progress(20, 60, "with the zombie frozen")  # the new owners take appends
                queued = [asyncio.create_task(zombie.get_segment_info(name)) for name in segments]
                await asyncio.sleep(0.5)  # the requests reach its socket buffer
            answers = await asyncio.gather(*queued, return_exceptions=True)
        stale = [answer for answer in answers if isinstance(answer, SegmentStatus)]
        assert stale == [], f"the zombie answered from its stale state: {stale}"
        assert all(isinstance(answer, (WrongHostError, ConnectionLostError)) for answer in answers), answers

    asyncio.run(under_load(cluster, fault))


@pytest.mark.timeout(240)
@pytest.mark.parametrize("cluster", ["moto"], indirect=True)
def test_official_client_with_kill_9_of_a_segment_store_and_a_fresh_disk(cluster: SharedNothingCluster) -> None:
    """The official Pravega client writes while a segment store is killed and its disk lost; a replacement host
    comes up on its address with an empty disk (the official client retries the address ``getURI`` gave it
    until it answers, as Pravega's segment stores restart under a supervisor). The events in flight at the kill
    are flushed before more are written: pravega-client 0.3.8 panics ("must have connection",
    ``segment/writer.rs``) when an event is written to a segment writer whose reconnection has just failed
    (its own race, which CI met once: it is not the server's to fix)."""
    import pravega_client  # the official Pravega client (a test dependency)

    manager = pravega_client.StreamManager(cluster.controller_uri)
    manager.create_scope("official")
    manager.create_stream("official", "orders", SEGMENTS)
    writer = manager.create_writer("official", "orders", 200)
    written: list[str] = []
    for i in range(6000):
        event = f"k{i % KEYS:02d}:{i // KEYS:05d}"
        writer.write_event(event, f"key-{i % KEYS}")
        written.append(event)
        if i == 3000:
            cluster.kill("ss1")
            cluster.wipe("ss1")
            cluster.launch_segmentstore("ss1", delay_s=4.0)
            writer.flush()  # across the outage: the writer reconnects to the replacement and sends them again
    writer.flush()  # returns once every event is acknowledged
    cluster.wait_ready("ss1")
    reader = manager.create_reader_group("audit", "official", "orders").create_reader("r")
    events: list[str] = []

    async def consume() -> None:
        while len(events) < len(written):
            segment_slice = await reader.get_segment_slice_async()
            events.extend(e.data().decode() for e in segment_slice)
            reader.release_segment(segment_slice)

    try:
        asyncio.run(asyncio.wait_for(consume(), 120))
    finally:
        reader.reader_offline()
    check(events, len(written))
