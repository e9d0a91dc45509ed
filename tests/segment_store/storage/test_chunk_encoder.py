"""The Parquet encoder process pool: the same bytes as the in-thread encode, a worker killed mid-encode costs an
encode again (never a corrupt or lost chunk), a worker that keeps dying fails the write clearly and writes nothing."""

from __future__ import annotations

import asyncio
import functools
import os
import signal
import struct
from collections.abc import AsyncIterator, Callable
from multiprocessing import shared_memory
from pathlib import Path

import pytest
from encoder_faults import die_after_encoding, hang_first_time, wait_for_go

from segment_store.storage import chunk_encoder
from segment_store.storage.backends.memory import MemoryChunkStorage
from segment_store.storage.chunk_encoder import (
    ChunkEncodeError,
    ProcessChunkEncoder,
    ThreadChunkEncoder,
)
from segment_store.storage.chunk_storage import BufferLike
from segment_store.storage.chunked_storage import ChunkedSegmentStorage
from segment_store.storage.data_chunk_names import data_prefix
from segment_store.storage.format import parquet_chunk
from segment_store.storage.format.parquet_chunk import IngestTimes
from segment_store.storage.journal.system_journal import InMemorySnapshotInfoStore
from segment_store.storage.segment_storage import Framing
from segment_store.storage.storage_config import ChunkedStorageConfig

pytestmark = pytest.mark.integration  # worker processes

LZ4 = parquet_chunk.DEFAULT_COMPRESSION


def events(count: int, size: int, seed: int = 0) -> bytes:
    """``count`` framed events (8-byte header: type 0, length) of ``size`` varied bytes."""
    body = bytes((seed + i) % 251 for i in range(size))
    return b"".join(struct.pack(">ii", 0, size) + body[i % size :] + body[: i % size] for i in range(count))


@pytest.fixture
async def pool() -> AsyncIterator[ProcessChunkEncoder]:
    encoder = ProcessChunkEncoder(1)  # the real worker, encode_shared
    await encoder.start()
    try:
        yield encoder
    finally:
        await encoder.close()


def spy_on_blocks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the shared memory blocks the encoder makes (inputs) and takes from its workers (outputs)."""
    names: list[str] = []
    make, take = chunk_encoder._shared_copy, chunk_encoder._take_output

    def shared_copy(data: list[BufferLike]) -> tuple[shared_memory.SharedMemory, int]:
        block, size = make(data)
        names.append(block.name)
        return block, size

    def take_output(name: str, size: int) -> memoryview:
        names.append(name)
        return take(name, size)

    monkeypatch.setattr(chunk_encoder, "_shared_copy", shared_copy)
    monkeypatch.setattr(chunk_encoder, "_take_output", take_output)
    return names


async def test_process_encode_with_several_buffers_gives_the_thread_encoding_and_frees_its_memory(
    pool: ProcessChunkEncoder, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocks = spy_on_blocks(monkeypatch)
    data = events(20_000, 100)
    raw = bytes(range(256)) * 3000
    times = [(0, 1_700_000_000_000), (500_000, 1_700_000_000_500)]
    cases: list[tuple[list[BufferLike], IngestTimes, Framing]] = [
        ([data], 17, "events"),
        ([data[:12_345], memoryview(data)[12_345:]], times, "events"),
        ([raw], 5, "raw"),
    ]
    thread = ThreadChunkEncoder()
    for buffers, ingest, framing in cases:
        expected = await thread.encode(buffers, ingest, framing, LZ4)
        assert bytes(await pool.encode(buffers, ingest, framing, LZ4)) == expected
    results = [bytes(r) for r in await asyncio.gather(*(pool.encode([data], 17, "events", LZ4) for _ in range(5)))]
    assert set(results) == {await thread.encode([data], 17, "events", LZ4)}  # 5 at once: 2 run, 3 wait
    assert parquet_chunk.decode(results[0]) == data
    assert len(blocks) == 2 * 8  # an input and an output block per encode ...
    assert not [name for name in blocks if Path("/dev/shm", name).exists()]  # ... every one unlinked
    assert pool.pools_started == 1


async def test_worker_killed_mid_encode_encodes_the_chunk_again_in_a_new_pool(tmp_path: Path) -> None:
    encoder = ProcessChunkEncoder(1, worker=functools.partial(hang_first_time, str(tmp_path)))
    await encoder.start()
    try:
        data = events(5000, 300)
        encoding = asyncio.create_task(encoder.encode([data], 3, "events", LZ4))
        started = tmp_path / "started"
        deadline = asyncio.get_running_loop().time() + 60
        while not started.exists():
            assert asyncio.get_running_loop().time() < deadline, "the worker never started encoding"
            await asyncio.sleep(0.02)
        pid = int(started.read_text())
        os.kill(pid, signal.SIGKILL)
        encoded = bytes(await asyncio.wait_for(encoding, 120))
        assert encoded == parquet_chunk.encode(data, 3, "events")
        assert encoder.pools_started == 2 and pid not in encoder.worker_pids
    finally:
        await encoder.close()


@pytest.fixture
def storage_env() -> tuple[MemoryChunkStorage, InMemorySnapshotInfoStore, ChunkedStorageConfig]:
    return MemoryChunkStorage(), InMemorySnapshotInfoStore(0), ChunkedStorageConfig(retry_delay_s=0.0)


async def test_write_with_a_worker_dying_twice_fails_clearly_writes_nothing_and_the_next_write_lands(
    tmp_path: Path, storage_env: tuple[MemoryChunkStorage, InMemorySnapshotInfoStore, ChunkedStorageConfig]
) -> None:
    chunks, pointer, config = storage_env
    encoder = ProcessChunkEncoder(1, worker=functools.partial(die_after_encoding, str(tmp_path), 2))
    storage = ChunkedSegmentStorage(chunks, 0, pointer, config, encoder=encoder)
    try:
        await storage.open(1)
        await storage.create("s", "events")
        data = events(3000, 200)
        with pytest.raises(ChunkEncodeError, match="died twice"):
            await storage.write("s", 0, [data], 11)
        assert (await storage.info("s")).length == 0
        assert not list(chunks.list(data_prefix(0)))  # no chunk, not even a partial one
        assert await storage.write("s", 0, [data], 11) == len(data)  # a third worker lives
        assert await storage.read("s", 0, len(data)) == data
        assert encoder.pools_started == 3
    finally:
        await storage.close()
        await encoder.close()


async def test_write_with_a_worker_killed_once_lands_the_chunk_exactly(
    tmp_path: Path, storage_env: tuple[MemoryChunkStorage, InMemorySnapshotInfoStore, ChunkedStorageConfig]
) -> None:
    chunks, pointer, config = storage_env
    encoder = ProcessChunkEncoder(1, worker=functools.partial(die_after_encoding, str(tmp_path), 1))
    storage = ChunkedSegmentStorage(chunks, 0, pointer, config, encoder=encoder)
    try:
        await storage.open(1)
        await storage.create("s", "events")
        first, second = events(2000, 150, seed=1), events(1000, 90, seed=2)
        assert await storage.write("s", 0, [first], 11) == len(first)
        assert await storage.write("s", len(first), [second], 12) == len(first) + len(second)
        assert await storage.read("s", 0, len(first) + len(second)) == first + second
        assert len(list(chunks.list(data_prefix(0)))) == 2
    finally:
        await storage.close()
        await encoder.close()


def test_encode_processes_setting_is_checked_and_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="encode_processes"):
        ChunkedStorageConfig(encode_processes=-1)
    monkeypatch.setenv("SEGSTORE_SLTS_ENCODE_PROCESSES", "2")
    assert ChunkedStorageConfig.from_env().encode_processes == 2
    monkeypatch.setenv("SEGSTORE_SLTS_ENCODE_PROCESSES", "two")
    with pytest.raises(ValueError, match="encode_processes"):
        ChunkedStorageConfig.from_env()


async def test_worker_killed_while_idle_is_replaced_at_the_next_encode(pool: ProcessChunkEncoder) -> None:
    (pid,) = pool.worker_pids
    os.kill(pid, signal.SIGKILL)
    data = events(1000, 100)
    assert bytes(await pool.encode([data], 1, "events", LZ4)) == parquet_chunk.encode(data, 1, "events")
    assert pool.pools_started == 2 and pid not in pool.worker_pids


async def test_cancelled_encode_unlinks_the_block_its_worker_makes_after(tmp_path: Path) -> None:
    encoder = ProcessChunkEncoder(1, worker=functools.partial(wait_for_go, str(tmp_path)))
    await encoder.start()
    try:
        encoding = asyncio.create_task(encoder.encode([events(2000, 100)], 1, "events", LZ4))
        await poll(lambda: (tmp_path / "started").exists(), "the worker started")
        encoding.cancel()
        with pytest.raises(asyncio.CancelledError):
            await encoding
        (tmp_path / "go").touch()  # the worker finishes the cancelled encode: its output block must not stay
        await poll(lambda: (tmp_path / "output").exists(), "the worker finished")
        block = Path("/dev/shm", (tmp_path / "output").read_text())
        await poll(lambda: not block.exists(), f"{block} unlinked")
        data = events(500, 100)
        assert bytes(await encoder.encode([data], 2, "events", LZ4)) == parquet_chunk.encode(data, 2, "events")
    finally:
        await encoder.close()


async def poll(condition: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting until {what}"
        await asyncio.sleep(0.01)
