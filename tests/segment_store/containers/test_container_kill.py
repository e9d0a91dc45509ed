"""kill -9 of a process running a segment container, under load, in the middle of recovery and while it
catches up a backlog, loses no acknowledged append.

Real ZooKeeper, file ledger Tier-1 (fsync on, 512 KiB ledgers), filesystem Tier-2. A child process (this
file run as a script, :func:`child_main`) runs container 0 with small flush thresholds and frequent
checkpoints; its writers append blocks of ``crash_support.payload(writer, number)`` events, one append at a
time each, and the child logs every append before it is made (SEND) and once acknowledged (ACK, with its
offset). The runs, each a new child killed with SIGKILL:

- ``load``: killed once every writer has new acknowledgements, both segments new Tier-2 chunks and the
  Tier-1 log a later truncation point (so kills cross flushes and truncations; each waited for by deadline);
- ``tier2-down``: Tier-2 refuses data chunks, so Tier-1 keeps a backlog of more than 1 MiB;
- ``pause-replay``: recovery of that backlog stops half way (a wrapper around the Tier-1 log stops reading
  and says so) and is killed there;
- ``catch-up``: killed as soon as the recovered container's first flush of the backlog lands in Tier-2;
- ``load`` again.

Then this process recovers the container and checks every segment byte for byte: each acknowledged append
is at its acknowledged offset exactly as sent, each writer's events are stored once, in order, with no gap,
and nothing is stored that was not sent.
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
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

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
from segment_store.containers.segment_container import SegmentContainer
from segment_store.protocol import encode_events
from segment_store.storage.backends.faulty import FaultyChunkStorage
from segment_store.storage.backends.filesystem import FsChunkStorage
from segment_store.storage.chunked_storage import ChunkedSegmentStorage
from segment_store.tier1.file.config import FileLedgerLogConfig
from segment_store.tier1.file.ledger_file import parse_ledger_file_name
from segment_store.tier1.file.ledger_log import FileLedgerLog
from segment_store.tier1.log import ReadItem
from segment_store.writer.config import WriterConfig
from segstore_shared.contracts import SegmentExistsError
from segstore_shared.coordination.kazoo_store import KazooCoordinationStore

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[3]
FIXTURES = REPO_ROOT / "tests" / "fixtures"
SEGMENTS = ["kill/stream/0.#epoch.0", "kill/stream/1.#epoch.0"]
WRITERS = 4  # per run; writer ids run * 10 + w, writer w appends to SEGMENTS[w % 2]
CONFIG = ContainerConfig(
    durable_log=SMALL_DURABLE_LOG,
    writer=WriterConfig(
        flush_threshold_bytes=96 * 1024,
        max_flush_bytes=128 * 1024,  # a backlog takes many flushes to catch up
        flush_max_age_s=0.05,
        retry_min_delay_s=0.01,
        retry_max_delay_s=0.1,
    ),
)
RUNS = ("load", "load", "tier2-down", "pause-replay", "catch-up", "load")
BACKLOG_BYTES = 1024 * 1024  # what the tier2-down run leaves in Tier-1 at least
START_TIMEOUT_S = 60.0
RUN_TIMEOUT_S = 60.0


def tier1_config(root: Path) -> FileLedgerLogConfig:
    return FileLedgerLogConfig(
        root_dir=root / "tier1", rollover_size_bytes=512 * 1024, max_append_length_bytes=72 * 1024, fsync=True
    )


class PausingLog:
    """The Tier-1 log, except that recovery stops for good once ``pause_bytes`` are replayed, after telling
    ``report``: the test kills the process there, in the middle of a replay."""

    def __init__(self, inner: FileLedgerLog, pause_bytes: int, report: Callable[[str], object]) -> None:
        self._inner, self._pause_bytes, self._report = inner, pause_bytes, report

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def read(self) -> AsyncIterator[ReadItem]:
        replayed = 0
        async for item in self._inner.read():
            yield item
            replayed += len(item.payload)
            if replayed >= self._pause_bytes:
                self._report(f"REPLAYING {replayed}\n")
                await asyncio.Event().wait()


async def open_container(
    hosts: str, root: Path, chunks: Any = None, pause_bytes: int = 0, report: Callable[[str], object] = print
) -> tuple[SegmentContainer, KazooCoordinationStore]:
    store = await KazooCoordinationStore.connect(hosts)
    chunks = chunks if chunks is not None else FsChunkStorage(root / "tier2")
    log: Any = FileLedgerLog("container-0", tier1_config(root), store)
    if pause_bytes:
        log = PausingLog(log, pause_bytes, report)
    container = SegmentContainer(0, log, lambda cid, info: ChunkedSegmentStorage(chunks, cid, info), CONFIG)
    await container.start()
    return container, store


async def child_main(hosts: str, root: Path, run: int, mode: str, pause_bytes: int, ack_file: Path) -> None:
    acks = open(ack_file, "w", buffering=1)  # noqa: SIM115 -- lives until the process is killed
    chunks = FaultyChunkStorage(FsChunkStorage(root / "tier2"))
    if mode == "tier2-down":
        chunks.inject(lambda op, name: name.startswith("data/"), ops=["write_chunk"])
    container, _store = await open_container(hosts, root, chunks, pause_bytes, acks.write)
    for name in SEGMENTS:
        with contextlib.suppress(SegmentExistsError):
            await container.create_segment(name)
    acks.write("READY\n")

    async def writer(w: int) -> None:
        rng = random.Random(w)
        number = 1
        segment = SEGMENTS[w % len(SEGMENTS)]
        while True:
            count = rng.randint(1, 20)
            block = encode_events(payloads(w, number, count))
            acks.write(f"SEND {w} {number + count - 1}\n")
            offset = await container.append(segment, block)
            acks.write(f"ACK {segment} {offset} {len(block)} {w} {number} {count}\n")
            number += count

    await asyncio.gather(*(writer(run * 10 + w) for w in range(WRITERS)))


class Child:
    """One run of the child: its log of sends and acknowledgements, read as it grows."""

    def __init__(self, hosts: str, root: Path, run: int, mode: str, pause_bytes: int) -> None:
        self.ack_file, self.err_file = root / f"acks-{run}.txt", root / f"stderr-{run}.txt"
        self.ack_file.touch()
        with open(self.err_file, "wb") as err:
            self.process = subprocess.Popen(
                [sys.executable, __file__, hosts, str(root), str(run), mode, str(pause_bytes), str(self.ack_file)],
                stdout=subprocess.DEVNULL,
                stderr=err,
                cwd=REPO_ROOT,
                env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(FIXTURES)])},
            )
        self._read = 0
        self.lines: list[list[str]] = []

    def poll(self) -> list[list[str]]:
        """The complete lines written since the last poll (split into words); fails if the child exited."""
        assert self.process.poll() is None, f"child exited ({self.process.returncode}):\n{self.err_file.read_text()}"
        return self._take()

    def _take(self) -> list[list[str]]:
        with open(self.ack_file, "rb") as f:
            f.seek(self._read)
            data = f.read()
        complete = data[: data.rfind(b"\n") + 1]  # the last piece may be cut mid-line by the kill
        self._read += len(complete)
        new = [line.split() for line in complete.decode().splitlines()]
        self.lines += new
        return new

    def seen(self, marker: str) -> bool:
        return any(line[:1] == [marker] for line in self.lines)

    async def kill(self) -> list[list[str]]:
        """SIGKILL (also when the test fails: never leave a writer behind); the lines written meanwhile."""
        self.process.send_signal(signal.SIGKILL)
        await asyncio.to_thread(self.process.wait, 30)
        assert self.process.returncode == -signal.SIGKILL, self.err_file.read_text()
        return self._take()


class Run:
    """What one child did, as its log tells: per writer, sends and acknowledgements."""

    def __init__(self, run: int, writers: dict[int, WriterRecord], blocks: list[tuple[str, int, int, int, int, int]]):
        self.run, self.writers, self.blocks = run, writers, blocks
        for w in range(WRITERS):
            writers[run * 10 + w] = WriterRecord(SEGMENTS[w % len(SEGMENTS)])
        self.acked_bytes = 0

    def take(self, lines: list[list[str]]) -> None:
        for line in lines:
            if line[0] == "SEND":
                self.writers[int(line[1])].sent = int(line[2])
            elif line[0] == "ACK":
                segment, offset, length, w, first, count = line[1], *map(int, line[2:])
                assert self.writers[w].segment == segment
                self.writers[w].acknowledge(first + count - 1, offset + length)
                self.blocks.append((segment, offset, length, w, first, count))
                self.acked_bytes += length

    def lagging(self, target: int) -> dict[int, int]:
        ids = range(self.run * 10, self.run * 10 + WRITERS)
        return {w: self.writers[w].acked for w in ids if self.writers[w].acked < target}


async def current_epoch(store: KazooCoordinationStore) -> int:
    metadata = await log_metadata(store, 0)
    return metadata.epoch if metadata is not None else 0


async def chunks_of_epoch(root: Path, epoch: int) -> dict[str, int]:
    def scan() -> dict[str, int]:
        return {s: sum(e == epoch for e in data_chunks(root / "tier2", 0, s).values()) for s in SEGMENTS}

    return await asyncio.to_thread(scan)


async def check_ledger_files(root: Path, store: KazooCoordinationStore) -> None:
    """The ledger files on disk are exactly those of the log's metadata: truncation deleted whole ledgers,
    and files a kill left behind between a truncation and its deletion were collected by the next owner."""
    metadata = await log_metadata(store, 0)
    assert metadata is not None and metadata.ledgers[0].ledger_id > 1, "Tier-1 never dropped a whole ledger"
    referenced = {(ledger.ledger_id, ledger.epoch) for ledger in metadata.ledgers}
    on_disk = {parse_ledger_file_name(f.name) for f in (root / "tier1" / "container-0").iterdir()} - {None}
    assert on_disk == referenced, (
        f"ledger files not in the metadata: {on_disk - referenced}, missing: {referenced - on_disk}"
    )


async def run_child(
    hosts: str, root: Path, store: KazooCoordinationStore, run: Run, mode: str, target: int, pause_bytes: int
) -> str:
    """Start the child in ``mode``, wait (by deadline) for the moment that mode kills it at, kill it."""
    metadata_before = await log_metadata(store, 0)
    epoch_before = metadata_before.epoch if metadata_before is not None else 0
    before = metadata_before.truncation_address() if metadata_before is not None else (0, 0)
    child = Child(hosts, root, run.run, mode, pause_bytes)

    async def fenced() -> int | None:
        epoch = await current_epoch(store)
        return epoch if epoch > epoch_before else None

    async def missing() -> str | None:
        run.take(child.poll())
        if mode == "pause-replay":
            if child.seen("READY"):
                raise AssertionError(f"recovery ended before replaying {pause_bytes} bytes")
            return None if child.seen("REPLAYING") else "recovery has not reached the pause"
        epoch = await fenced()
        if epoch is None:
            return "the container has not fenced Tier-1 yet"
        chunks = await chunks_of_epoch(root, epoch)
        if mode == "catch-up":
            return None if any(chunks.values()) else "no flush of the backlog yet"
        if lagging := run.lagging(target):
            return f"writers with fewer than {target} acknowledged events: {lagging}"
        if mode == "tier2-down":
            assert not any(chunks.values()), f"a data chunk was written while Tier-2 was down: {chunks}"
            return None if run.acked_bytes >= BACKLOG_BYTES else f"{run.acked_bytes} bytes acknowledged"
        if unflushed := [s for s, n in chunks.items() if n == 0]:
            return f"no Tier-2 chunk yet of {unflushed}"
        metadata = await log_metadata(store, 0)
        assert metadata is not None
        if metadata.truncation_address() <= before:
            return f"no Tier-1 truncation yet (at {metadata.truncation_address()})"
        return None

    try:
        took = await wait_until(missing, START_TIMEOUT_S + RUN_TIMEOUT_S, f"run {run.run} ({mode})")
        if mode == "pause-replay":  # frozen after fencing Tier-1 and collecting its garbage: nothing moves
            await check_ledger_files(root, store)
    finally:
        last = await child.kill()
    run.take(last)
    return f"{mode}: killed after {took:.2f} s, {run.acked_bytes} bytes acknowledged"


@pytest.mark.slow
async def test_kill_9_under_load_and_in_recovery_loses_no_acknowledged_append(zk_chroot: str, tmp_path: Path) -> None:
    rng = random.Random(22)
    writers: dict[int, WriterRecord] = {}
    blocks: list[tuple[str, int, int, int, int, int]] = []
    store = await KazooCoordinationStore.connect(zk_chroot)
    started = time.monotonic()
    backlog = 0
    try:
        for number, mode in enumerate(RUNS):
            run = Run(number, writers, blocks)
            target = rng.randint(50, 300)
            pause_bytes = backlog // 2 if mode == "pause-replay" else 0
            print(f"run {number}:", await run_child(zk_chroot, tmp_path, store, run, mode, target, pause_bytes))
            if mode == "tier2-down":
                backlog = run.acked_bytes
    finally:
        await store.close()

    container, store = await open_container(zk_chroot, tmp_path)
    try:
        contents = {}
        for name in SEGMENTS:
            info = await container.get_info(name)
            data = bytearray()
            while len(data) < info.length:
                data += (await container.read(name, len(data), info.length - len(data))).data
            contents[name] = bytes(data)
        for segment, offset, length, w, first, count in blocks:
            block = contents[segment][offset : offset + length]
            assert block == encode_events(payloads(w, first, count)), f"writer {w}'s append at {segment}:{offset}"
        check_segments(contents, writers)
        await container.flush_to_storage()
    finally:
        await container.stop()
        await store.close()
    print(f"{len(blocks)} acknowledged appends over {len(RUNS)} kills in {time.monotonic() - started:.1f} s")


if __name__ == "__main__":
    asyncio.run(
        child_main(sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5]), Path(sys.argv[6]))
    )
