"""kill -9 of a process running a segment container under load loses no acknowledged append.

Real ZooKeeper, file ledger Tier-1 (fsync on), filesystem Tier-2. A child process (this file
run as a script) runs container 0 with small flush thresholds and frequent checkpoints, so
flushes, Tier-1 truncations and rollovers happen all the time; several writers append
blocks of events concurrently and the child prints one line per acknowledged append. The
test kills it with SIGKILL at a random moment, repeats, and then recovers the container in
this process: every acknowledged append is at its acknowledged offset byte for byte, no
append appears twice, and each writer's appends are in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from segment_store.containers.config import ContainerConfig
from segment_store.containers.segment_container import SegmentContainer
from segment_store.contracts import SegmentExistsError
from segment_store.coordination.kazoo_store import KazooCoordinationStore
from segment_store.logs.config import DurableLogConfig
from segment_store.protocol import encode_events, parse_events
from segment_store.storage.chunked_storage import ChunkedSegmentStorage
from segment_store.storage.fs_chunk_storage import FsChunkStorage
from segment_store.tier1.file_ledger_config import FileLedgerLogConfig
from segment_store.tier1.file_ledger_log import FileLedgerLog
from segment_store.writer.config import WriterConfig

REPO_ROOT = Path(__file__).resolve().parents[2]
SEGMENTS = ["kill/stream/0.#epoch.0", "kill/stream/1.#epoch.0"]
WRITERS = 4
CONFIG = ContainerConfig(
    durable_log=DurableLogConfig(
        max_frame_bytes=64 * 1024,
        checkpoint_min_commit_count=20,
        checkpoint_commit_count=100,
        checkpoint_total_commit_length_bytes=512 * 1024,
    ),
    writer=WriterConfig(
        flush_threshold_bytes=96 * 1024, flush_max_age_s=0.05, retry_min_delay_s=0.01, retry_max_delay_s=0.1
    ),
)


def tier1_config(root: Path) -> FileLedgerLogConfig:
    return FileLedgerLogConfig(
        root_dir=root / "tier1", rollover_size_bytes=512 * 1024, max_append_length_bytes=72 * 1024, fsync=True
    )


async def open_container(hosts: str, root: Path) -> tuple[SegmentContainer, KazooCoordinationStore]:
    store = await KazooCoordinationStore.connect(hosts)
    chunks = FsChunkStorage(root / "tier2")
    container = SegmentContainer(
        0,
        FileLedgerLog("container-0", tier1_config(root), store),
        lambda cid, info: ChunkedSegmentStorage(chunks, cid, info),
        CONFIG,
    )
    await container.start()
    return container, store


def event(writer: int, index: int, rng: random.Random) -> bytes:
    return f"w{writer}:{index:08d}|".encode() + rng.randbytes(rng.randint(10, 300))


async def child_main(hosts: str, root: Path, run: int, ack_file: Path) -> None:
    acks = open(ack_file, "w", buffering=1)  # noqa: SIM115 -- lives until the process is killed
    container, _store = await open_container(hosts, root)
    for name in SEGMENTS:
        with contextlib.suppress(SegmentExistsError):
            await container.create_segment(name)
    acks.write("READY\n")

    async def writer(w: int) -> None:
        rng = random.Random(run * 100 + w)
        index = 0
        while True:
            count = rng.randint(1, 20)
            block = encode_events([event(w, index + i, rng) for i in range(count)])
            segment = SEGMENTS[w % len(SEGMENTS)]
            offset = await container.append(segment, block)
            acks.write(f"ACK {segment} {offset} {len(block)} {w} {index} {count}\n")
            index += count

    await asyncio.gather(*(writer(run * 10 + w) for w in range(WRITERS)))


@pytest.mark.slow
async def test_kill_9_under_load_loses_no_acknowledged_append(zk_chroot: str, tmp_path: Path) -> None:
    rng = random.Random(7)
    acked: list[tuple[str, int, int, int, int, int]] = []
    for run in range(4):
        ack_file = tmp_path / f"acks-{run}.txt"
        err_file = tmp_path / f"stderr-{run}.txt"
        with open(err_file, "wb") as err:
            child = subprocess.Popen(
                [sys.executable, __file__, zk_chroot, str(tmp_path), str(run), str(ack_file)],
                stdout=subprocess.DEVNULL,
                stderr=err,
                cwd=REPO_ROOT,
                env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
            )
        try:
            deadline = time.monotonic() + 60
            while not (ack_file.exists() and ack_file.read_text().startswith("READY")):
                assert child.poll() is None, err_file.read_text()
                assert time.monotonic() < deadline, "child did not start"
                await asyncio.sleep(0.05)
            await asyncio.sleep(rng.uniform(0.5, 2.5))
        finally:
            child.send_signal(signal.SIGKILL)  # also when the test fails: never leave a writer behind
            child.wait(10)
        assert child.returncode == -signal.SIGKILL, err_file.read_text()
        complete = ack_file.read_text().split("\n")[:-1]  # the last piece may be cut mid-line
        for line in complete:
            parts = line.split()
            if parts and parts[0] == "ACK":
                acked.append((parts[1], int(parts[2]), int(parts[3]), int(parts[4]), int(parts[5]), int(parts[6])))
    assert len(acked) > 50, "the child acknowledged too little to test anything"
    print(f"{len(acked)} acknowledged appends over 4 kills")

    container, store = await open_container(zk_chroot, tmp_path)
    try:
        contents = {}
        for name in SEGMENTS:
            info = await container.get_info(name)
            data = bytearray()
            while len(data) < info.length:
                data += (await container.read(name, len(data), info.length - len(data))).data
            contents[name] = bytes(data)
        for segment, offset, length, w, index, count in acked:
            block = contents[segment][offset : offset + length]
            got = [e.data for e in parse_events(block)]
            assert len(got) == count, f"acked append of writer {w} at {segment}:{offset} is missing or damaged"
            assert [g.split(b"|")[0] for g in got] == [f"w{w}:{index + i:08d}".encode() for i in range(count)]
        for name, data in contents.items():
            seen: dict[int, int] = {}
            for ev in parse_events(data):
                tag, number = ev.data.split(b"|")[0][1:].split(b":")
                w, i = int(tag), int(number)
                assert i > seen.get(w, -1), f"writer {w}: event {i} appears twice or out of order in {name}"
                seen[w] = i
        await container.flush_to_storage()
    finally:
        await container.stop()
        await store.close()


if __name__ == "__main__":
    asyncio.run(child_main(sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])))
