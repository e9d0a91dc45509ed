"""kill -9 of a segment store process under load, and again while it recovers: after a restart on the same
data every acknowledged event is stored exactly once, byte for byte as sent, in order per writer, at the
offset its acknowledgement named; nothing is stored that was not sent; writers resume exactly where the
server says they stopped (SetupAppend's last event number, never below what was acknowledged).

The server is a child process running the composition root ``segstore segmentstore`` runs
(``SegmentStoreService.start_durable``: file ledger Tier-1 with fsync, filesystem Tier-2, the session's real
ZooKeeper) with two containers and small flush and checkpoint settings, so that Tier-2 flushes and Tier-1
truncations happen all the time; the command line has no flags for those, so this file is the child's script
(:func:`server_main`). The load comes from raw wire peers in this process, whose events are
``crash_support.payload(writer, number)``.

Each load round waits, with a deadline, until every writer has new acknowledgements, every segment has new
Tier-2 chunks and every container's Tier-1 log has been truncated further, and only then kills: every kill
crosses flushes and truncations. One round kills the restarted server as soon as it has fenced its first
container's log, before it reports ready (recovery interrupted), and the next start recovers from that.
"""

from __future__ import annotations

import asyncio
import collections
import os
import random
import signal
import sys
import time
import uuid
from pathlib import Path

import pytest
from crash_support import (
    SMALL_DURABLE_LOG,
    WriterRecord,
    check_segments,
    data_chunks,
    log_metadata,
    payloads,
    wait_until,
)

from segment_store.containers.config import ContainerConfig
from segment_store.protocol import (
    AppendSetup,
    CreateSegment,
    DataAppended,
    FrameDecoder,
    GetStreamSegmentInfo,
    ReadSegment,
    SegmentAlreadyExists,
    SegmentCreated,
    SegmentRead,
    SetupAppend,
    StreamSegmentInfo,
    build_append_block_end,
    encode,
    local_hello,
)
from segment_store.writer.config import WriterConfig
from segstore_shared.cluster.container_mapping import container_of
from segstore_shared.coordination.kazoo_store import KazooCoordinationStore

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[3]
FIXTURES = REPO_ROOT / "tests" / "fixtures"
CONTAINERS = 2
SEGMENTS = ["killtest/stream/0.#epoch.0", "killtest/stream/1.#epoch.0", "killtest/stream/5.#epoch.0"]
WRITERS = 6  # writer w appends to SEGMENTS[w % 3]
CONTAINER_CONFIG = ContainerConfig(
    durable_log=SMALL_DURABLE_LOG,
    writer=WriterConfig(
        flush_threshold_bytes=128 * 1024,
        max_flush_bytes=256 * 1024,
        flush_max_age_s=0.2,
        retry_min_delay_s=0.01,
        retry_max_delay_s=0.1,
    ),
)
ROUNDS = ("load", "load", "kill while recovering", "load")
START_TIMEOUT_S = 60.0  # a busy 2-core machine: interpreter, pyarrow and ZooKeeper sessions
ROUND_TIMEOUT_S = 60.0


async def server_main(data_dir: Path, zookeeper: str) -> None:
    """The child: the service ``segstore segmentstore`` builds, with CONTAINER_CONFIG, on a free port."""
    from segment_store.server.config import ServerConfig
    from segment_store.server.gc_policy import settle_after_start
    from segment_store.server.service import SegmentStoreService, ServiceConfig

    config = ServiceConfig(
        server=ServerConfig(host="127.0.0.1", port=0),
        container=CONTAINER_CONFIG,
        container_count=CONTAINERS,
        data_dir=data_dir,
        zookeeper=zookeeper,
    )
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    service = await SegmentStoreService.start_durable(config)
    settle_after_start()
    print(f"ready on port {service.endpoint[1]}", flush=True)
    await stop.wait()
    await service.stop()


class ServerProcess:
    """One start of the server child; its stderr goes to a file the failure messages quote."""

    def __init__(self, process: asyncio.subprocess.Process, stderr: Path) -> None:
        self.process, self.stderr = process, stderr
        self.port = 0

    @classmethod
    async def start(cls, data_dir: Path, zookeeper: str, run: int) -> ServerProcess:
        stderr = data_dir.parent / f"server-{run}.stderr"
        with open(stderr, "wb") as err:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                __file__,
                str(data_dir),
                zookeeper,
                stdout=asyncio.subprocess.PIPE,
                stderr=err,
                cwd=REPO_ROOT,
                env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(FIXTURES)])},
            )
        return cls(process, stderr)

    async def ready(self) -> None:
        assert self.process.stdout is not None
        line = (await asyncio.wait_for(self.process.stdout.readline(), START_TIMEOUT_S)).decode()
        assert line.startswith("ready on port "), f"server did not start: {line!r}\n{self.stderr.read_text()}"
        self.port = int(line.split()[-1])

    async def kill(self) -> None:
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGKILL)
        await asyncio.wait_for(self.process.wait(), 30)

    async def remaining_output(self) -> str:
        assert self.process.stdout is not None and self.process.returncode is not None
        return (await self.process.stdout.read()).decode()

    async def stop(self) -> None:
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.process.wait(), 20)
            except TimeoutError:
                await self.kill()


class Peer:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer, self.decoder = reader, writer, FrameDecoder()
        self.replies: asyncio.Queue[object] = asyncio.Queue()
        self.task = asyncio.create_task(self._pump())

    @classmethod
    async def connect(cls, port: int) -> Peer:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        peer = cls(reader, writer)
        await peer.request(local_hello())
        return peer

    async def _pump(self) -> None:
        try:
            while data := await self.reader.read(1 << 20):
                self.decoder.feed(data)
                for command in self.decoder:
                    self.replies.put_nowait(command)
            self.replies.put_nowait(ConnectionError("the server closed the connection"))
        except ConnectionError as exc:
            self.replies.put_nowait(exc)

    async def request(self, command: object) -> object:
        self.writer.write(encode(command))  # type: ignore[arg-type]
        reply = await asyncio.wait_for(self.replies.get(), 30)
        if isinstance(reply, Exception):
            raise reply
        return reply

    def close(self) -> None:
        self.task.cancel()
        self.writer.close()


def writer_uuid(writer: int) -> uuid.UUID:
    return uuid.UUID(int=(0x5E65 << 112) | writer)


async def write_load(port: int, writer: int, record: WriterRecord, killed: asyncio.Event) -> None:
    """Pipelined blocks of ``payload(writer, n)`` events, resuming after the last one the server stored, until
    the connection is lost after ``killed`` is set; anything else (a reply that is not an acknowledgement, a
    lost connection while the server should be up) raises."""
    writer_id = writer_uuid(writer)
    peer = await Peer.connect(port)
    try:
        setup = await peer.request(SetupAppend(1, writer_id, record.segment, ""))
        assert isinstance(setup, AppendSetup), f"writer {writer}: {setup!r}"
        stored = max(setup.last_event_number, 0)
        assert record.acked <= stored <= record.sent, (
            f"writer {writer}: the server says it stored up to event {setup.last_event_number}, "
            f"but {record.acked} was acknowledged and {record.sent} sent"
        )
        rng = random.Random(writer * 1_000_003 + stored)
        next_event = stored + 1
        in_flight: collections.deque[int] = collections.deque()  # the last event number of each block sent
        while True:
            while len(in_flight) < 8:
                count = rng.randint(1, 30)
                record.sent = last = next_event + count - 1
                block = build_append_block_end(writer_id, payloads(writer, next_event, count), last, last)
                peer.writer.write(encode(block))
                in_flight.append(last)
                next_event = last + 1
            reply = await peer.replies.get()
            if isinstance(reply, ConnectionError):
                if killed.is_set():
                    return
                raise AssertionError(f"writer {writer}: connection lost while the server was up") from reply
            assert isinstance(reply, DataAppended), f"writer {writer}: unexpected reply {reply!r}"
            record.acknowledge(reply.event_number, reply.current_segment_write_offset)
            while in_flight and in_flight[0] <= reply.event_number:
                in_flight.popleft()
    finally:
        peer.close()


async def read_segment(peer: Peer, segment: str) -> bytes:
    info = await peer.request(GetStreamSegmentInfo(1, segment, ""))
    assert isinstance(info, StreamSegmentInfo), info
    data = bytearray()
    while len(data) < info.write_offset:
        reply = await peer.request(ReadSegment(segment, len(data), 1 << 20, "", 2))
        assert isinstance(reply, SegmentRead), reply
        data += reply.data
    return bytes(data)


async def create_segments(port: int, expected: type) -> None:
    admin = await Peer.connect(port)
    try:
        for i, segment in enumerate(SEGMENTS):
            reply = await admin.request(CreateSegment(i, segment, 0, 0, "", 0))
            assert isinstance(reply, expected), f"{segment}: {reply!r}"
    finally:
        admin.close()


class Tiers:
    """What the server did to Tier-1 (log metadata in ZooKeeper) and Tier-2 (data chunks on disk)."""

    def __init__(self, store: KazooCoordinationStore, data_dir: Path) -> None:
        self.store, self.data_dir = store, data_dir
        self.containers = sorted({container_of(s, CONTAINERS) for s in SEGMENTS})

    async def truncations(self) -> dict[int, tuple[int, int]]:
        result = {}
        for cid in self.containers:
            metadata = await log_metadata(self.store, cid)
            result[cid] = metadata.truncation_address() if metadata is not None else (0, 0)
        return result

    async def chunks(self) -> dict[str, set[str]]:
        def scan() -> dict[str, set[str]]:
            tier2 = self.data_dir / "tier2"
            return {s: set(data_chunks(tier2, container_of(s, CONTAINERS), s)) for s in SEGMENTS}

        return await asyncio.to_thread(scan)


async def load_round(
    server: ServerProcess, tiers: Tiers, writers: dict[int, WriterRecord], target: int
) -> tuple[float, int]:
    """Load until every writer has ``target`` new acknowledged events, every segment new Tier-2 chunks and
    every container a later Tier-1 truncation; then kill -9. Returns (seconds, events acknowledged)."""
    acked_before = {w: r.acked for w, r in writers.items()}
    truncated_before = await tiers.truncations()
    chunks_before = await tiers.chunks()
    killed = asyncio.Event()
    loads = [asyncio.create_task(write_load(server.port, w, r, killed)) for w, r in writers.items()]

    async def missing() -> str | None:
        for task in loads:
            if task.done():
                task.result()  # a writer's failure fails the test with its cause
                raise AssertionError("a writer stopped while the server was up")
        lagging = {w: r.acked - acked_before[w] for w, r in writers.items() if r.acked - acked_before[w] < target}
        if lagging:
            return f"writers with fewer than {target} new acknowledged events: {lagging}"
        truncated = await tiers.truncations()
        if stale := [cid for cid in tiers.containers if truncated[cid] <= truncated_before[cid]]:
            return f"no Tier-1 truncation yet in containers {stale} (at {truncated})"
        chunks = await tiers.chunks()
        if unflushed := [s for s in SEGMENTS if not chunks[s] - chunks_before[s]]:
            return f"no new Tier-2 chunk yet of {unflushed}"
        return None

    try:
        took = await wait_until(missing, ROUND_TIMEOUT_S, "load round")
    finally:
        killed.set()
        await server.kill()
        _, pending = await asyncio.wait(loads, timeout=30)
        for task in pending:
            task.cancel()
    assert not pending, "writers did not notice the kill"
    for task in loads:
        task.result()  # only a connection lost after the kill ends a writer without an error
    return took, sum(r.acked - acked_before[w] for w, r in writers.items())


async def kill_while_recovering(server: ServerProcess, store: KazooCoordinationStore, epoch_before: int) -> bool:
    """kill -9 as soon as the server fenced container 0's log (it starts its containers in order, so the
    others are still to recover, 0.1-0.3 s of work); whether it had not reported ready by then."""

    async def missing() -> str | None:
        assert server.process.returncode is None, f"server exited: {server.stderr.read_text()}"
        metadata = await log_metadata(store, 0)
        if metadata is None or metadata.epoch <= epoch_before:
            return f"container 0 not fenced yet (epoch {None if metadata is None else metadata.epoch})"
        return None

    try:
        await wait_until(missing, START_TIMEOUT_S, "restart fencing container 0")
    finally:
        await server.kill()
    return "ready" not in await server.remaining_output()


@pytest.mark.slow
async def test_kill_9_during_load_and_recovery_keeps_every_acknowledged_event_exactly_once(
    zk_chroot: str, tmp_path: Path
) -> None:
    assert len({container_of(s, CONTAINERS) for s in SEGMENTS}) == CONTAINERS, "every container holds a segment"
    rng = random.Random(22)
    data_dir = tmp_path / "data"
    writers = {w: WriterRecord(SEGMENTS[w % len(SEGMENTS)]) for w in range(WRITERS)}
    store = await KazooCoordinationStore.connect(zk_chroot)
    tiers = Tiers(store, data_dir)
    started = time.monotonic()
    server: ServerProcess | None = None
    try:
        for run, kind in enumerate(ROUNDS):
            if kind == "kill while recovering":
                for attempt in range(1, 4):  # a busy machine may let the server finish first: start it again
                    metadata = await log_metadata(store, 0)
                    assert metadata is not None
                    server = await ServerProcess.start(data_dir, zk_chroot, run * 10 + attempt)
                    if await kill_while_recovering(server, store, metadata.epoch):
                        break
                else:
                    raise AssertionError("3 kills meant for recovery all landed after the server was ready")
                print(f"round {run}: killed while recovering (attempt {attempt}), having fenced container 0's log")
                continue
            begun = time.monotonic()
            server = await ServerProcess.start(data_dir, zk_chroot, run)
            await server.ready()
            ready_s = time.monotonic() - begun
            await create_segments(server.port, SegmentCreated if run == 0 else SegmentAlreadyExists)
            took, count = await load_round(server, tiers, writers, target=rng.randint(300, 3000))
            print(f"round {run}: ready after {ready_s:.2f} s; {count} events acknowledged in {took:.2f} s, then killed")

        server = await ServerProcess.start(data_dir, zk_chroot, len(ROUNDS))
        await server.ready()
        await create_segments(server.port, SegmentAlreadyExists)
        peer = await Peer.connect(server.port)
        try:
            last_stored = {}
            for w, record in writers.items():
                setup = await peer.request(SetupAppend(w + 2, writer_uuid(w), record.segment, ""))
                assert isinstance(setup, AppendSetup), setup
                last_stored[w] = setup.last_event_number
            contents = {segment: await read_segment(peer, segment) for segment in SEGMENTS}
        finally:
            peer.close()
        stored = check_segments(contents, writers)
        assert last_stored == stored, "the writers' last event numbers differ from the events stored"
        for cid in tiers.containers:
            metadata = await log_metadata(store, cid)
            assert metadata is not None and metadata.truncation is not None
            assert metadata.acknowledged is not None, f"container {cid}: no rollback mark recorded at truncation"
            assert metadata.ledgers[0].ledger_id > 1, f"container {cid}: Tier-1 never dropped a whole ledger"
        acked = sum(r.acked for r in writers.values())
        print(f"{acked} events acknowledged, {sum(stored.values())} stored, in {time.monotonic() - started:.1f} s")
    finally:
        if server is not None:
            await server.stop()
        await store.close()


if __name__ == "__main__":
    asyncio.run(server_main(Path(sys.argv[1]), sys.argv[2]))
