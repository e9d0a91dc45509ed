"""Compaction: planning, the byte-exact merge, the journaled switch, crashes at every step, reads throughout."""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Awaitable, Callable

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from segment_store.protocol import encode_events
from segment_store.storage.backends.faulty import FaultyChunkStorage
from segment_store.storage.backends.memory import MemoryChunkStorage
from segment_store.storage.chunk_storage import ChunkStorage, ChunkStorageUnavailableError
from segment_store.storage.chunked_storage import ChunkedSegmentStorage
from segment_store.storage.compaction import merge_chunks, plan_runs
from segment_store.storage.data_chunk_names import data_prefix
from segment_store.storage.format import parquet_chunk
from segment_store.storage.journal.chunk_metadata import ChunkEntry, SegmentLayout
from segment_store.storage.journal.records import system_prefix
from segment_store.storage.journal.system_journal import InMemorySnapshotInfoStore
from segment_store.storage.storage_config import ChunkedStorageConfig
from segstore_shared.chunk_format import FILE_SCHEMA, as_reader_schema

pytestmark = pytest.mark.unit

CID = 4
DATA = data_prefix(CID)
JOURNAL = system_prefix(CID, "journal")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Env:
    def __init__(self, inner: ChunkStorage | None = None, **config: object) -> None:
        self.faulty = FaultyChunkStorage(inner or MemoryChunkStorage())
        self.pointer = InMemorySnapshotInfoStore(CID)
        self.clock = Clock()
        settings: dict[str, object] = {
            "retry_delay_s": 0.0,
            "gc_delay_s": 60.0,
            "compaction_enabled": False,
            "compaction_small_chunk_bytes": 1000,
            "compaction_min_chunks": 3,
            "compaction_target_bytes": 4000,
        }
        settings.update(config)
        self.config = ChunkedStorageConfig(**settings)  # type: ignore[arg-type]
        self.epoch = 0

    async def open(self) -> ChunkedSegmentStorage:
        self.epoch += 1
        storage = ChunkedSegmentStorage(self.faulty, CID, self.pointer, self.config, clock=self.clock)
        await storage.open(self.epoch)
        return storage

    def data(self) -> set[str]:
        return set(self.faulty.inner.list(DATA))


def events(count: int, seed: int) -> bytes:
    rng = random.Random(seed)
    return encode_events([rng.randbytes(rng.randint(1, 90)) for _ in range(count)])


async def seeded(env: Env, pieces: int = 8) -> tuple[ChunkedSegmentStorage, bytes]:
    """Segment "s" (events) of ``pieces`` small chunks, each with a distinct ingestion time."""
    storage = await env.open()
    await storage.create("s", "events")
    data = b""
    for i in range(pieces):
        piece = events(5, i)
        await storage.write("s", len(data), [piece], 1_000 + i)
        data += piece
    return storage, data


def chunk_names(storage: ChunkedSegmentStorage, segment: str = "s") -> list[str]:
    layout = storage.layout(segment)
    assert layout is not None
    return [c.name for c in layout.chunks]


async def check_consistent(env: Env, storage: ChunkedSegmentStorage, data: bytes, *, swept: bool = False) -> None:
    assert await storage.read("s", 0, len(data)) == data
    referenced = storage.journal.metadata.referenced_chunks()
    assert referenced <= env.data(), "a referenced chunk is missing"
    if swept:
        assert env.data() == referenced, "an unreferenced chunk survived boot"


# -- planning and merging --------------------------------------------------------------------


def layout(*lengths: int) -> SegmentLayout:
    seg = SegmentLayout("s", "raw")
    offset = 0
    for i, length in enumerate(lengths):
        seg.append(ChunkEntry(f"c{i}", offset, length))
        offset += length
    return seg


@pytest.mark.parametrize(
    ("lengths", "runs"),
    [
        ((10, 10, 10), [["c0", "c1", "c2"]]),
        ((10, 10), []),  # too few
        ((10, 10, 5000, 10, 10, 10), [["c3", "c4", "c5"]]),  # a big chunk splits runs
        ((900, 900, 900, 900, 900, 900, 900), [["c0", "c1", "c2", "c3"], ["c4", "c5", "c6"]]),  # target 4000
        ((900, 900, 900, 900, 900, 900), [["c0", "c1", "c2", "c3"]]),  # the rest is too short a run
        ((), []),
    ],
)
def test_plan_runs_with_various_layouts(lengths: tuple[int, ...], runs: list[list[str]]) -> None:
    planned = plan_runs(layout(*lengths), small_bytes=1000, target_bytes=4000, min_chunks=3)
    assert [[c.name for c in run] for run in planned] == runs


def test_merge_chunks_keeps_every_row_with_shifted_offsets() -> None:
    framed = events(20, 1)
    garbage = b"\x00\x00\x00\x07\x00\x00\xff\xff not a whole frame"  # ends as raw rows
    parts = [
        (parquet_chunk.encode(framed, 111, "events"), len(framed)),
        (parquet_chunk.encode(garbage, 222, "events"), len(garbage)),
        (parquet_chunk.encode(framed[:50], [(0, 333), (10, 444)], "events"), 50),
    ]
    merged = merge_chunks(parts, "events", row_group_bytes=256)
    info = parquet_chunk.chunk_info(merged)
    assert (info.length, info.framing) == (len(framed) + len(garbage) + 50, "events")
    assert info.row_groups > 1
    assert parquet_chunk.decode(merged) == framed + garbage + framed[:50]
    expected = []
    base = 0
    for source, length in parts:
        table = parquet_chunk.read_events(source).to_pylist()
        expected += [{**row, "offset": row["offset"] + base} for row in table]
        base += length
    assert parquet_chunk.read_events(merged).to_pylist() == expected  # raw rows stay raw, times stay
    for offset, length in [(0, 1), (len(framed) - 3, 40), (base - 7, 7), (100, 200)]:
        assert (
            parquet_chunk.decode_range(merged, offset, length)
            == (framed + garbage + framed[:50])[offset : offset + length]
        )
    assert parquet_chunk.read_events(merged).schema == parquet_chunk.SCHEMA


def test_merge_chunks_with_wrong_length_raises() -> None:
    chunk = parquet_chunk.encode(b"abc", 1, "raw")
    with pytest.raises(parquet_chunk.ChunkFormatError):
        merge_chunks([(chunk, 4)], "raw")
    with pytest.raises(ValueError):
        merge_chunks([], "raw")


# -- the switch --------------------------------------------------------------------------------


async def test_compact_segment_merges_runs_and_releases_old_chunks_to_gc() -> None:
    env = Env()
    storage, data = await seeded(env)
    old = chunk_names(storage)
    assert await storage.compactor.compact_segment("s") == 1
    [merged] = chunk_names(storage)
    info = await storage.info("s")
    assert (info.length, info.chunk_count) == (len(data), 1)
    assert sorted(storage.gc.pending) == sorted(old)
    assert set(old) < env.data()  # still there for reads in flight
    await check_consistent(env, storage, data)
    rows = parquet_chunk.read_events(env.faulty.inner.read_all(merged), ["ingest_time_ms"]).column(0).to_pylist()
    assert sorted(set(rows)) == [1_000 + i for i in range(8)]  # ingestion times survive the merge
    env.clock.now += 60
    assert await storage.gc.collect() == len(old)
    assert env.data() == {merged}
    reopened = await env.open()
    await check_consistent(env, reopened, data, swept=True)
    assert chunk_names(reopened) == [merged]


async def test_compact_segment_keeps_truncation_and_tail_writes() -> None:
    env = Env()
    storage, data = await seeded(env)
    await storage.truncate("s", 30)
    await storage.compactor.compact_segment("s")
    more = events(3, 99)
    await storage.write("s", len(data), [more], 5)
    data += more
    info = await storage.info("s")
    assert info.start_offset == 30
    assert await storage.read("s", 30, len(data) - 30) == data[30:]
    reopened = await env.open()
    assert await reopened.info("s") == info
    assert await reopened.read("s", 30, len(data) - 30) == data[30:]


async def test_compaction_aborts_when_truncate_takes_part_of_the_run_meanwhile() -> None:
    env = Env(gc_delay_s=0)
    storage, data = await seeded(env)
    old = chunk_names(storage)
    switch = storage.replace_chunks

    async def truncate_first(segment: str, run: list[ChunkEntry], chunk: str) -> bool:
        await storage.truncate("s", run[1].start_offset)  # lands between the merge and the switch
        return await switch(segment, run, chunk)

    storage.replace_chunks = truncate_first  # type: ignore[method-assign]
    assert await storage.compactor.compact_segment("s") == 0
    assert storage.compactor.aborted_runs == 1
    assert chunk_names(storage) == old[1:]
    assert env.data() == set(old[1:])  # the merged chunk was deleted at once, never referenced
    start = (await storage.info("s")).start_offset
    assert await storage.read("s", start, len(data) - start) == data[start:]


async def test_compaction_of_deleted_segment_is_aborted() -> None:
    env = Env(gc_delay_s=0)
    storage, _ = await seeded(env)
    switch = storage.replace_chunks

    async def delete_first(segment: str, run: list[ChunkEntry], chunk: str) -> bool:
        await storage.delete(segment)
        return await switch(segment, run, chunk)

    storage.replace_chunks = delete_first  # type: ignore[method-assign]
    assert await storage.compactor.compact_segment("s") == 0
    assert env.data() == set()


# -- crashes at every step ---------------------------------------------------------------------


def merged_writes(op: str, name: str) -> bool:
    return op == "write_chunk" and name.startswith(DATA)


def journal_writes(op: str, name: str) -> bool:
    return op == "write_chunk" and name.startswith(JOURNAL)


async def crash_merged_chunk_write_fails(env: Env, storage: ChunkedSegmentStorage) -> None:
    env.faulty.inject(merged_writes, after=True, times=1)  # it landed, the writer saw an error
    with pytest.raises(ChunkStorageUnavailableError):
        await storage.compactor.compact_segment("s")


async def crash_record_fails(env: Env, storage: ChunkedSegmentStorage) -> None:
    env.faulty.inject(journal_writes)
    with pytest.raises(ChunkStorageUnavailableError):
        await storage.compactor.compact_segment("s")


async def crash_record_fails_and_merged_chunk_stays(env: Env, storage: ChunkedSegmentStorage) -> None:
    env.faulty.inject(journal_writes)
    env.faulty.inject(lambda op, name: name.startswith(DATA), ops=["delete_if_exists"])
    with pytest.raises(ChunkStorageUnavailableError):
        await storage.compactor.compact_segment("s")


async def crash_record_landed_but_reported_failed(env: Env, storage: ChunkedSegmentStorage) -> None:
    env.faulty.inject(journal_writes, after=True)
    env.faulty.inject(lambda op, name: name.startswith(JOURNAL), ops=["delete_if_exists"])
    with pytest.raises(ChunkStorageUnavailableError):
        await storage.compactor.compact_segment("s")


async def crash_after_switch_before_gc(env: Env, storage: ChunkedSegmentStorage) -> None:
    assert await storage.compactor.compact_segment("s") == 1


CRASHES: dict[str, tuple[Callable[[Env, ChunkedSegmentStorage], Awaitable[None]], bool]] = {
    # step -> (how, whether the switch is in effect after the next boot)
    "merged-chunk-write": (crash_merged_chunk_write_fails, False),
    "record-write": (crash_record_fails, False),
    "record-write-and-cleanup": (crash_record_fails_and_merged_chunk_stays, False),
    "record-landed-unknown": (crash_record_landed_but_reported_failed, True),
    "after-switch": (crash_after_switch_before_gc, True),
}


@pytest.mark.parametrize("step", list(CRASHES))
async def test_crash_at_any_step_of_compaction_leaves_a_consistent_state(step: str) -> None:
    env = Env()
    storage, data = await seeded(env)
    old = chunk_names(storage)
    crash, switched = CRASHES[step]
    await crash(env, storage)
    if step != "after-switch":
        assert chunk_names(storage) == old  # not acknowledged: this instance still uses the old chunks
    await check_consistent(env, storage, data)
    env.faulty.clear()
    successor = await env.open()  # the instance is dropped: a crash
    await check_consistent(env, successor, data, swept=True)
    after = chunk_names(successor)
    assert (after != old) == switched
    assert len(after) == (1 if switched else len(old))
    assert await successor.compactor.compact_segment("s") == (0 if switched else 1)  # and it can go on
    await check_consistent(env, successor, data)


# -- reads throughout --------------------------------------------------------------------------


async def test_reads_are_byte_exact_while_compaction_writes_and_gc_run_concurrently() -> None:
    env = Env(gc_delay_s=0, chunk_cache_bytes=0, compaction_min_chunks=2)
    storage, data = await seeded(env, pieces=4)
    stop = asyncio.Event()
    checked = 0

    async def reader() -> None:
        nonlocal checked
        rng = random.Random(5)
        while not stop.is_set():
            length = len(data)
            offset = rng.randrange(length)
            size = rng.randint(0, length - offset)
            assert await storage.read("s", offset, size) == data[offset : offset + size]
            checked += 1
            await asyncio.sleep(0)

    readers = [asyncio.create_task(reader()) for _ in range(3)]
    for i in range(30):
        piece = events(4, 100 + i)
        await storage.write("s", len(data), [piece], 2_000 + i)
        data += piece
        if i % 3 == 2:
            await storage.compactor.compact_all()
        await asyncio.sleep(0.001)
    stop.set()
    await asyncio.gather(*readers)
    assert storage.compactor.merged_runs >= 5
    assert checked > 50
    await check_consistent(env, storage, data, swept=True)


class PausingStorage(MemoryChunkStorage):
    """Pauses the first read_all of ``pause_on`` until ``go`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.pause_on = ""
        self.reached, self.go = threading.Event(), threading.Event()

    def read_all(self, name: str) -> bytes:
        if name == self.pause_on and not self.reached.is_set():
            self.reached.set()
            self.go.wait(10)
        return super().read_all(name)


async def test_read_in_flight_when_its_chunks_are_compacted_and_collected_rereads_new_chunk() -> None:
    inner = PausingStorage()
    env = Env(inner, gc_delay_s=0, chunk_cache_bytes=0)
    storage, data = await seeded(env)
    inner.pause_on = chunk_names(storage)[2]
    read = asyncio.create_task(storage.read("s", 10, len(data) - 10))
    await asyncio.to_thread(inner.reached.wait, 10)
    await storage.compactor.compact_segment("s")  # gc_delay 0: the old chunks are gone at once
    inner.go.set()
    assert await read == data[10:]


async def test_background_compactor_merges_without_being_asked_and_stops_on_close() -> None:
    env = Env(compaction_enabled=True, compaction_interval_s=0.02, compaction_min_chunks=2)
    storage = ChunkedSegmentStorage(env.faulty, CID, env.pointer, env.config)  # real sleep
    await storage.open(1)
    await storage.create("s", "raw")
    for i in range(6):
        await storage.write("s", i * 10, [bytes([i]) * 10], i)
    for _ in range(500):  # it may merge the first chunks before the last are written, then the rest
        if storage.compactor.merged_runs and (await storage.info("s")).chunk_count == 1:
            break
        await asyncio.sleep(0.01)
    assert (await storage.info("s")).chunk_count == 1
    assert await storage.read("s", 0, 60) == b"".join(bytes([i]) * 10 for i in range(6))
    await storage.close()
    runs = storage.compactor.merged_runs
    await asyncio.sleep(0.1)
    assert storage.compactor.merged_runs == runs


def test_merged_chunk_is_readable_by_pyarrow_as_events() -> None:
    first, second = events(10, 3), events(6, 4)
    sources = [
        (parquet_chunk.encode(first, 7, "events"), len(first)),
        (parquet_chunk.encode(second, 8, "events"), len(second)),
    ]
    merged = merge_chunks(sources, "events", compression="zstd")
    table = pq.read_table(pa.BufferReader(merged))
    assert table.schema == FILE_SCHEMA
    table = as_reader_schema(table)
    assert table.num_rows == 16 and all(table.column("framed").to_pylist())
    assert table.column("ingest_time_ms").to_pylist() == [7] * 10 + [8] * 6


def test_merge_chunks_with_format_1_and_2_sources_writes_format_2() -> None:
    first, second = events(5, 5), events(4, 6)
    v2 = parquet_chunk.encode(first, 11, "events")
    pf = pq.ParquetFile(pa.BufferReader(parquet_chunk.encode(second, 12, "events")))
    sink = pa.BufferOutputStream()
    with pq.ParquetWriter(sink, parquet_chunk.SCHEMA, store_schema=False) as writer:  # as format 1 wrote it
        writer.write_table(as_reader_schema(pf.read()))
        writer.add_key_value_metadata({**pf.metadata.metadata, parquet_chunk.META_VERSION: b"1"})
    v1 = sink.getvalue().to_pybytes()
    assert parquet_chunk.chunk_info(v1).version == 1
    merged = merge_chunks([(v1, len(second)), (v2, len(first))], "events")
    assert parquet_chunk.chunk_info(merged).version == 2
    assert parquet_chunk.decode(merged) == second + first
    assert parquet_chunk.read_events(merged).column("ingest_time_ms").to_pylist() == [12] * 4 + [11] * 5
