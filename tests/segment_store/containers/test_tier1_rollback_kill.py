"""kill -9 of a segment store process, then its Tier-1 rolled back under it: the container whose log came back
shorter than what was acknowledged stays offline (``DataLogCorruptedError`` in the log, ``WrongHost`` on the
wire), the process keeps serving its other container; the kill -9 restarts before the rollback are not refused.

The server is a child process running ``SegmentStoreService.start_durable`` (what ``segstore segmentstore``
runs) with two containers on the session's ZooKeeper: this file is the child's script (:func:`server_main`).
Two Tier-1 kinds: file ledgers (container 0's closed ledger file cut to its header; or, after appends under load
until a Tier-1 truncation recorded the rollback mark, its open ledger file cut below the mark) and JetStream on a
real ``nats-server`` (container 0's stream directory restored from a copy taken after the first run). The
log-level cases (metadata without the mark, restarts with truncations) are in
``tests/segment_store/tier1/test_file_ledger_rollback.py`` and ``test_jetstream_rollback.py``.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import sys
import uuid
from pathlib import Path

import pytest
from crash_support import SMALL_DURABLE_LOG, log_metadata, payloads

from segment_store.containers.config import ContainerConfig
from segment_store.protocol import (
    AppendSetup,
    CreateSegment,
    DataAppended,
    FrameDecoder,
    GetStreamSegmentInfo,
    NoSuchSegment,
    SegmentCreated,
    SetupAppend,
    WireCommand,
    WrongHost,
    build_append_block_end,
    encode,
    local_hello,
)
from segment_store.tier1.file.ledger_file import FILE_HEADER, ledger_file_name
from segment_store.tier1.jetstream.nats_server import EmbeddedNatsServer, NatsServerConfig
from segment_store.tier1.log_metadata import LogMetadata
from segment_store.writer.config import WriterConfig
from segstore_shared.cluster.container_mapping import container_of
from segstore_shared.coordination.kazoo_store import KazooCoordinationStore
from segstore_shared.coordination.zookeeper_server import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO_ROOT = Path(__file__).resolve().parents[3]
FIXTURES = REPO_ROOT / "tests" / "fixtures"
CONTAINERS = 2
START_TIMEOUT_S = 90.0  # a busy 2-core machine: interpreter, pyarrow and ZooKeeper sessions
SEGMENT_OF = {cid: next(f"rb/s/{n}.#epoch.0" for n in range(100) if container_of(f"rb/s/{n}.#epoch.0", 2) == cid)
              for cid in range(CONTAINERS)}  # fmt: skip


async def server_main(data_dir: Path, zookeeper: str, nats: str) -> None:
    """The child: the durable service with file Tier-1 (``nats`` empty) or JetStream on ``nats``."""
    from segment_store.server.config import ServerConfig
    from segment_store.server.service import SegmentStoreService, ServiceConfig
    from segment_store.tier1.config import Tier1Config

    tier1 = Tier1Config(backend="jetstream", nats=(nats,), replicas=1) if nats else Tier1Config()
    config = ServiceConfig(
        server=ServerConfig(host="127.0.0.1", port=0),
        container=ContainerConfig(durable_log=SMALL_DURABLE_LOG, writer=WriterConfig(flush_max_age_s=0.2)),
        container_count=CONTAINERS,
        data_dir=data_dir,
        zookeeper=zookeeper,
        tier1=tier1,
    )
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    service = await SegmentStoreService.start_durable(config)
    running = ",".join(map(str, service.registry.running))
    print(f"ready on port {service.endpoint[1]} running {running} readyz {int(service.ready())}", flush=True)
    await stop.wait()
    await service.stop()


class Server:
    """One start of the child; its stderr goes to a file the assertions read."""

    def __init__(self, process: asyncio.subprocess.Process, stderr: Path) -> None:
        self.process, self.stderr = process, stderr
        self.port = 0
        self.running: list[int] = []
        self.ready = False  # what /readyz answers: every configured container recovered

    @classmethod
    async def start(cls, data_dir: Path, zookeeper: str, nats: str, run: int) -> Server:
        stderr = data_dir.parent / f"server-{run}.stderr"
        with open(stderr, "wb") as err:
            process = await asyncio.create_subprocess_exec(
                sys.executable, __file__, str(data_dir), zookeeper, nats,
                stdout=asyncio.subprocess.PIPE, stderr=err, cwd=REPO_ROOT,
                env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(FIXTURES)])},
            )  # fmt: skip
        server = cls(process, stderr)
        assert process.stdout is not None
        line = (await asyncio.wait_for(process.stdout.readline(), START_TIMEOUT_S)).decode()
        assert line.startswith("ready on port "), f"server did not start: {line!r}\n{stderr.read_text()}"
        words = line.split()
        server.port = int(words[3])
        server.running = [int(cid) for cid in words[5].split(",") if cid]
        server.ready = words[7] == "1"
        return server

    async def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        await asyncio.wait_for(self.process.wait(), 30)

    async def segment_info(self, segment: str) -> object:
        """The reply to ``GetStreamSegmentInfo`` for ``segment`` on a fresh connection."""
        connection = await Connection.open(self.port)
        try:
            return await connection.request(GetStreamSegmentInfo(7, segment, ""))
        finally:
            connection.close()


class Connection:
    """A raw wire connection after the Hello exchange; one request at a time."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer, self.decoder = reader, writer, FrameDecoder()
        self.pending: list[object] = []

    @classmethod
    async def open(cls, port: int) -> Connection:
        connection = cls(*await asyncio.open_connection("127.0.0.1", port))
        await connection.request(local_hello())
        return connection

    async def request(self, command: WireCommand) -> object:
        self.writer.write(encode(command))
        while not self.pending:
            if (data := await asyncio.wait_for(self.reader.read(1 << 16), 30)) == b"":
                raise ConnectionError("the server closed the connection")
            self.decoder.feed(data)
            self.pending.extend(self.decoder)
        return self.pending.pop(0)

    def close(self) -> None:
        self.writer.close()


async def append_until_truncated(server: Server, store: KazooCoordinationStore) -> tuple[int, int]:
    """Append to a segment of container 0 until its log recorded a rollback mark in its own (open) ledger;
    returns the mark (ledger id, entry id)."""
    segment, writer_id = SEGMENT_OF[0], uuid.UUID(int=0x5E65)
    connection = await Connection.open(server.port)
    try:
        assert isinstance(await connection.request(CreateSegment(1, segment, 0, 0, "", 0)), SegmentCreated)
        assert isinstance(await connection.request(SetupAppend(2, writer_id, segment, "")), AppendSetup)
        event = 0
        while True:
            metadata = await log_metadata(store, 0)
            assert metadata is not None
            mark, last = metadata.acknowledged, metadata.ledgers[-1]
            if mark is not None and last.is_open and mark[0] == last.ledger_id and mark[1] >= 0:
                return mark
            events = payloads(0, event + 1, 50)
            event += len(events)
            reply = await connection.request(build_append_block_end(writer_id, events, event, event))
            assert isinstance(reply, DataAppended), reply
    finally:
        connection.close()


async def check_offline_and_serving(server: Server, stderr_says: list[str]) -> None:
    """Container 0 refused and offline, container 1 serving, the process alive."""
    assert server.running == [1], server.running
    assert not server.ready, "/readyz must say 503 while a container is offline"
    assert server.process.returncode is None
    text = server.stderr.read_text()
    assert "container 0 stays offline: its Tier-1 log was refused" in text, text
    for phrase in stderr_says:
        assert phrase in text, f"{phrase!r} not in:\n{text}"
    assert isinstance(await server.segment_info(SEGMENT_OF[0]), WrongHost)
    assert isinstance(await server.segment_info(SEGMENT_OF[1]), NoSuchSegment)


async def test_file_ledger_cut_short_after_kill_9_keeps_its_container_offline(zk_chroot: str, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    server = None
    for run in range(3):  # kill -9 restarts: never refused
        server = await Server.start(data_dir, zk_chroot, "", run)
        assert server.running == [0, 1] and server.ready, server.stderr.read_text()
        await server.kill()
    store = await KazooCoordinationStore.connect(zk_chroot)
    try:
        metadata = LogMetadata.parse((await store.get("/segstore/tier1/logs/container-0")).data)
    finally:
        await store.close()
    closed = [ledger for ledger in metadata.ledgers if ledger.last_entry is not None and ledger.last_entry >= 0]
    assert closed, f"container 0 wrote no entry before its second start: {metadata}"
    ledger = closed[0]
    path = data_dir / "tier1" / "container-0" / ledger_file_name(ledger.ledger_id, ledger.epoch)
    os.truncate(path, FILE_HEADER.size)  # its entries 0..last_entry are gone

    server = await Server.start(data_dir, zk_chroot, "", 3)
    try:
        await check_offline_and_serving(
            server,
            [f"log container-0: ledger {path.name}: entry 0", f"closed at entry {ledger.last_entry}"],
        )
    finally:
        await server.kill()


async def test_file_ledger_open_ledger_cut_below_the_mark_after_kill_9(zk_chroot: str, tmp_path: Path) -> None:
    """Under load, a Tier-1 truncation records the last acknowledged entry; after kill -9 the open ledger file is
    cut below it: refused, although a torn tail would have been accepted there."""
    data_dir = tmp_path / "data"
    server = await Server.start(data_dir, zk_chroot, "", 0)
    store = await KazooCoordinationStore.connect(zk_chroot)
    try:
        mark = await asyncio.wait_for(append_until_truncated(server, store), 120)
        await server.kill()
        metadata = await log_metadata(store, 0)
    finally:
        await store.close()
    assert metadata is not None
    ledger = metadata.ledger(mark[0])
    assert ledger is not None and ledger.is_open
    path = data_dir / "tier1" / "container-0" / ledger_file_name(ledger.ledger_id, ledger.epoch)
    os.truncate(path, FILE_HEADER.size)  # every entry gone, those up to the mark included

    server = await Server.start(data_dir, zk_chroot, "", 1)
    try:
        await check_offline_and_serving(
            server, [f"log container-0: ledger file {path} ends at entry -1, but entry {mark[1]} of ledger"]
        )
    finally:
        await server.kill()


async def test_jetstream_stream_restored_after_kill_9_keeps_its_container_offline(
    zk_chroot: str, tmp_path: Path
) -> None:
    nats = EmbeddedNatsServer(NatsServerConfig(data_dir=tmp_path / "nats", port=free_port(), http_port=free_port()))
    store_dir = tmp_path / "nats" / "jetstream"
    data_dir = tmp_path / "data"
    stream = "segstore-tier1-container-0"

    def stream_dir(root: Path) -> Path:
        (found,) = root.glob(f"**/streams/{stream}")
        return found

    await asyncio.to_thread(nats.start)
    try:
        server = await Server.start(data_dir, zk_chroot, nats.url, 0)
        assert server.running == [0, 1] and server.ready, server.stderr.read_text()
        await server.kill()
        await asyncio.to_thread(nats.stop)
        await asyncio.to_thread(shutil.copytree, stream_dir(store_dir), tmp_path / "copy")  # the early copy
        await asyncio.to_thread(nats.start)
        for run in (1, 2):  # kill -9 restarts (each fences again, recording its fence): never refused
            server = await Server.start(data_dir, zk_chroot, nats.url, run)
            assert server.running == [0, 1] and server.ready, server.stderr.read_text()
            await server.kill()
        await asyncio.to_thread(nats.stop)
        current = stream_dir(store_dir)
        await asyncio.to_thread(shutil.rmtree, current)
        await asyncio.to_thread(shutil.copytree, tmp_path / "copy", current)  # restored from the early copy
        await asyncio.to_thread(nats.start)

        server = await Server.start(data_dir, zk_chroot, nats.url, 3)
        try:
            await check_offline_and_serving(
                server, [f"log container-0: stream {stream} ends at sequence", "was acknowledged", "rolled back"]
            )
        finally:
            await server.kill()
    finally:
        await asyncio.to_thread(nats.stop)


if __name__ == "__main__":
    asyncio.run(server_main(Path(sys.argv[1]), sys.argv[2], sys.argv[3]))
