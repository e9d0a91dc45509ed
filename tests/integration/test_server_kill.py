"""kill -9 of a segment store process during a load: after a restart on the same data dir, every
acknowledged event is there exactly once, in order per writer, and writers resume exactly where the
server says they stopped (SetupAppend's last event number), sending nothing twice.

The server is `segstore segmentstore` in a subprocess (file Tier-1 with fsync, filesystem Tier-2,
the session's real ZooKeeper). The load comes from raw wire peers in this process.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from segment_store.coordination.zookeeper_server import free_port
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
    parse_events,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
SEGMENTS = [f"killtest/stream/{i}.#epoch.0" for i in range(3)]


def start_server(data_dir: Path, zookeeper: str, port: int) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "segment_store.cli",
            "segmentstore",
            "--data-dir",
            str(data_dir),
            "--zookeeper",
            zookeeper,
            "--port",
            str(port),
            "--log-level",
            "warning",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    assert "ready" in line, f"server did not start: {line!r}"
    return process


class Peer:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer, self.decoder = reader, writer, FrameDecoder()
        self.replies: asyncio.Queue[object] = asyncio.Queue()
        self.task = asyncio.create_task(self._pump())

    @classmethod
    async def connect(cls, port: int) -> Peer:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        peer = cls(reader, writer)
        peer.writer.write(encode(local_hello()))
        await peer.replies.get()
        return peer

    async def _pump(self) -> None:
        try:
            while data := await self.reader.read(1 << 20):
                self.decoder.feed(data)
                for command in self.decoder:
                    self.replies.put_nowait(command)
        except ConnectionError:
            pass
        self.replies.put_nowait(ConnectionError("closed"))

    async def request(self, command: object) -> object:
        self.writer.write(encode(command))  # type: ignore[arg-type]
        reply = await asyncio.wait_for(self.replies.get(), 30)
        if isinstance(reply, Exception):
            raise reply
        return reply

    def close(self) -> None:
        self.task.cancel()
        self.writer.close()


async def write_load(port: int, segment: str, writer_id: uuid.UUID, acked: list[int], stop: asyncio.Event) -> None:
    """Pipelined appends of numbered events; ``acked`` gets every event number the server acknowledged."""
    rng = random.Random(writer_id.int)
    peer = await Peer.connect(port)
    try:
        setup = await peer.request(SetupAppend(1, writer_id, segment, ""))
        assert isinstance(setup, AppendSetup)
        next_event = max(setup.last_event_number, 0) + 1
        in_flight = 0
        while not stop.is_set():
            while in_flight < 8:
                count = rng.randint(1, 30)
                payloads = [f"{writer_id.hex[:8]}:{next_event + i}|".encode() + rng.randbytes(50) for i in range(count)]
                next_event += count
                peer.writer.write(encode(build_append_block_end(writer_id, payloads, next_event - 1, next_event)))
                in_flight += 1
            reply = await peer.replies.get()
            if isinstance(reply, Exception):
                return
            assert isinstance(reply, DataAppended), reply
            acked.append(reply.event_number)
            in_flight -= 1
    finally:
        peer.close()


async def read_segment(port: int, segment: str) -> bytes:
    peer = await Peer.connect(port)
    try:
        info = await peer.request(GetStreamSegmentInfo(1, segment, ""))
        assert isinstance(info, StreamSegmentInfo)
        data = bytearray()
        while len(data) < info.write_offset:
            reply = await peer.request(ReadSegment(segment, len(data), 1 << 20, "", 2))
            assert isinstance(reply, SegmentRead), reply
            data += reply.data
        return bytes(data)
    finally:
        peer.close()


@pytest.mark.slow
async def test_kill_9_during_load_keeps_every_acknowledged_event_exactly_once(zk_chroot: str, tmp_path: Path) -> None:
    port = free_port()
    writers = {uuid.uuid4(): SEGMENTS[i % len(SEGMENTS)] for i in range(6)}
    acked: dict[uuid.UUID, list[int]] = {w: [] for w in writers}
    server = start_server(tmp_path, zk_chroot, port)
    try:
        admin = await Peer.connect(port)
        for i, segment in enumerate(SEGMENTS):
            assert isinstance(await admin.request(CreateSegment(i, segment, 0, 0, "", 0)), SegmentCreated)
        admin.close()
        for _round in range(3):
            stop = asyncio.Event()
            loads = [asyncio.create_task(write_load(port, s, w, acked[w], stop)) for w, s in writers.items()]
            await asyncio.sleep(random.uniform(1.0, 2.5))
            server.send_signal(signal.SIGKILL)
            server.wait(10)
            stop.set()
            await asyncio.gather(*loads, return_exceptions=True)
            server = start_server(tmp_path, zk_chroot, port)
            admin = await Peer.connect(port)
            for i, segment in enumerate(SEGMENTS):  # the segments survived the kill
                assert isinstance(await admin.request(CreateSegment(i, segment, 0, 0, "", 0)), SegmentAlreadyExists)
            admin.close()
        total = sum(len(a) for a in acked.values())
        assert total > 100, "too little load was acknowledged to test anything"
        seen: dict[str, list[int]] = {w.hex[:8]: [] for w in writers}
        for segment in SEGMENTS:
            for event in parse_events(await read_segment(port, segment)):
                tag, number = event.data.split(b"|", 1)[0].split(b":")
                seen[tag.decode()].append(int(number))
        for writer_id, numbers in acked.items():
            stored = seen[writer_id.hex[:8]]
            assert stored == sorted(stored), f"writer {writer_id}: events out of order"
            assert len(stored) == len(set(stored)), f"writer {writer_id}: an event is stored twice"
            assert stored == list(range(1, len(stored) + 1)), f"writer {writer_id}: a gap in the stored events"
            if numbers:
                assert max(numbers) <= len(stored), f"writer {writer_id}: acknowledged events are missing"
    finally:
        server.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            server.wait(20)
        if server.poll() is None:
            server.kill()
