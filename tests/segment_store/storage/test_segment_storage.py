"""Contract suite of the SegmentStorage port (ChunkedSegmentStorage), run over every chunk backend.

Add a backend by adding one ``pytest.param`` to ``BACKENDS``: a factory taking the test's
``tmp_path`` and returning a fresh, empty chunk storage. "Reopen" means a new instance with a
higher epoch on the same chunk storage and snapshot pointer store, as a new container owner.
"""

from __future__ import annotations

import asyncio
import inspect
import struct
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from segment_store.storage.backends.faulty import FaultyChunkStorage
from segment_store.storage.backends.filesystem import FsChunkStorage
from segment_store.storage.backends.memory import MemoryChunkStorage
from segment_store.storage.chunk_storage import ChunkStorage, validate_chunk_name
from segment_store.storage.chunked_storage import ChunkedSegmentStorage
from segment_store.storage.data_chunk_names import data_prefix
from segment_store.storage.format import parquet_chunk
from segment_store.storage.journal.system_journal import InMemorySnapshotInfoStore, StorageNotPrimaryError
from segment_store.storage.segment_storage import SegmentStorage, StorageSegmentInfo
from segment_store.storage.storage_config import ChunkedStorageConfig
from segstore_shared.contracts import (
    BadOffsetError,
    ContainerOfflineError,
    InvalidOffsetError,
    SegmentExistsError,
    SegmentNotExistsError,
    SegmentSealedError,
    SegmentTruncatedError,
)

pytestmark = pytest.mark.contract

Factory = Callable[[Path], ChunkStorage]
CID = 7
CONFIG = ChunkedStorageConfig(retry_delay_s=0.0, snapshot_every_records=8, gc_delay_s=0)

BACKENDS = [
    pytest.param(lambda tmp: MemoryChunkStorage(), id="memory"),
    pytest.param(lambda tmp: FsChunkStorage(tmp / "tier2", durable=False), id="fs"),
    pytest.param(lambda tmp: FaultyChunkStorage(FsChunkStorage(tmp / "tier2", durable=False)), id="faulty-fs"),
]


class Tier2:
    """One container's Tier-2 as owners see it across restarts: chunk storage + pointer store."""

    def __init__(self, chunks: ChunkStorage, config: ChunkedStorageConfig = CONFIG) -> None:
        self.chunks = chunks
        self.pointer = InMemorySnapshotInfoStore(CID)
        self.config = config
        self.instances: list[ChunkedSegmentStorage] = []

    async def open(self, epoch: int, config: ChunkedStorageConfig | None = None) -> ChunkedSegmentStorage:
        storage = ChunkedSegmentStorage(self.chunks, CID, self.pointer, config or self.config)
        self.instances.append(storage)
        await storage.open(epoch)
        return storage

    def data_chunks(self) -> set[str]:
        return set(self.chunks.list(data_prefix(CID)))

    async def close(self) -> None:
        for storage in self.instances:
            await storage.close()


@pytest.fixture(params=BACKENDS)
def chunks(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ChunkStorage]:
    factory: Factory = request.param
    backend = factory(tmp_path)
    try:
        yield backend
    finally:
        backend.close()


@pytest.fixture
async def tier2(chunks: ChunkStorage) -> AsyncIterator[Tier2]:
    env = Tier2(chunks)
    try:
        yield env
    finally:
        await env.close()


@pytest.fixture
async def storage(tier2: Tier2) -> ChunkedSegmentStorage:
    return await tier2.open(1)


def payload(size: int, seed: int = 0) -> bytes:
    return bytes((i * 131 + seed * 7 + (i >> 8)) & 0xFF for i in range(size))


def frames(*payloads: bytes) -> bytes:
    return b"".join(struct.pack(">ii", 0, len(p)) + p for p in payloads)


async def fill(storage: ChunkedSegmentStorage, name: str, sizes: list[int], framing: str = "raw") -> bytes:
    """Create ``name`` and write one chunk per size; return all bytes written."""
    await storage.create(name, framing)  # type: ignore[arg-type]
    data = b""
    for i, size in enumerate(sizes):
        piece = payload(size, seed=i + 1)
        assert await storage.write(name, len(data), [piece], 1000 + i) == len(data) + size
        data += piece
    return data


async def state_of(storage: ChunkedSegmentStorage, names: list[str]) -> dict[str, object]:
    out: dict[str, object] = {}
    for name in names:
        if not await storage.exists(name):
            out[name] = None
            continue
        info = await storage.info(name)
        refs = [(c.chunk_name, c.start_offset, c.length) for c in await storage.chunks(name)]
        content = await storage.read(name, info.start_offset, info.length - info.start_offset)
        out[name] = (info, refs, content)
    return out


# -- shape -----------------------------------------------------------------------------------


def test_implements_every_protocol_method_with_its_signature() -> None:
    for name, member in inspect.getmembers(SegmentStorage, inspect.isfunction):
        if name.startswith("_"):
            continue
        impl = getattr(ChunkedSegmentStorage, name)
        assert inspect.iscoroutinefunction(impl), name
        assert list(inspect.signature(impl).parameters) == list(inspect.signature(member).parameters), name


# -- create / info ---------------------------------------------------------------------------


async def test_create_then_info_and_exists(storage: ChunkedSegmentStorage) -> None:
    assert not await storage.exists("s/t/0")
    await storage.create("s/t/0", "events")
    assert await storage.exists("s/t/0")
    assert await storage.info("s/t/0") == StorageSegmentInfo("s/t/0", 0, 0, False, "events", 0)
    assert await storage.chunks("s/t/0") == []
    assert await storage.read("s/t/0", 0, 0) == b""


async def test_create_with_existing_name_raises(storage: ChunkedSegmentStorage) -> None:
    await storage.create("a", "raw")
    with pytest.raises(SegmentExistsError):
        await storage.create("a", "events")
    assert (await storage.info("a")).framing == "raw"


@pytest.mark.parametrize(("name", "framing"), [("", "raw"), ("a", "parquet")])
async def test_create_with_bad_name_or_framing_raises_value_error(
    storage: ChunkedSegmentStorage, name: str, framing: str
) -> None:
    with pytest.raises(ValueError):
        await storage.create(name, framing)  # type: ignore[arg-type]
    assert not await storage.exists("a")


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.info("nope"),
        lambda s: s.chunks("nope"),
        lambda s: s.read("nope", 0, 0),
        lambda s: s.write("nope", 0, [b"x"], 1),
        lambda s: s.seal("nope"),
        lambda s: s.truncate("nope", 0),
        lambda s: s.delete("nope"),
        lambda s: s.concat("nope", 0, "sealed"),
        lambda s: s.concat("sealed", 0, "nope"),
    ],
    ids=["info", "chunks", "read", "write", "seal", "truncate", "delete", "concat-target", "concat-source"],
)
async def test_call_with_missing_segment_raises_not_exists(
    storage: ChunkedSegmentStorage, call: Callable[[ChunkedSegmentStorage], object]
) -> None:
    await storage.create("sealed", "raw")
    await storage.seal("sealed")
    with pytest.raises(SegmentNotExistsError):
        await call(storage)  # type: ignore[misc]


# -- write / read ----------------------------------------------------------------------------


async def test_write_then_read_back_exact(storage: ChunkedSegmentStorage, tier2: Tier2) -> None:
    data = await fill(storage, "seg", [100, 1, 5000, 37])
    info = await storage.info("seg")
    assert (info.length, info.chunk_count, info.start_offset) == (len(data), 4, 0)
    assert await storage.read("seg", 0, len(data)) == data
    refs = await storage.chunks("seg")
    assert [(r.start_offset, r.length) for r in refs] == [(0, 100), (100, 1), (101, 5000), (5101, 37)]
    assert {r.chunk_name for r in refs} == tier2.data_chunks()


async def test_write_with_several_buffers_concatenates_them(storage: ChunkedSegmentStorage) -> None:
    await storage.create("seg", "raw")
    parts = [b"abc", bytearray(b"def"), memoryview(b"xghi")[1:]]
    assert await storage.write("seg", 0, parts, 5) == 9
    assert await storage.read("seg", 0, 9) == b"abcdefghi"
    assert (await storage.info("seg")).chunk_count == 1


@pytest.mark.parametrize("offset", [0, 9, 11, -1])
async def test_write_with_wrong_offset_raises_bad_offset_and_changes_nothing(
    storage: ChunkedSegmentStorage, tier2: Tier2, offset: int
) -> None:
    data = await fill(storage, "seg", [10])
    before = tier2.data_chunks()
    with pytest.raises(BadOffsetError) as caught:
        await storage.write("seg", offset, [b"more"], 1)
    assert (caught.value.expected_offset, caught.value.actual_length) == (offset, 10)
    assert (await storage.info("seg")).length == 10
    assert tier2.data_chunks() == before
    assert await storage.read("seg", 0, 10) == data


async def test_write_with_empty_data_changes_nothing(storage: ChunkedSegmentStorage, tier2: Tier2) -> None:
    await fill(storage, "seg", [10])
    assert await storage.write("seg", 10, [b"", b""], 1) == 10
    assert (await storage.info("seg")).chunk_count == 1
    assert len(tier2.data_chunks()) == 1


async def test_write_above_max_chunk_bytes_raises_value_error(tier2: Tier2) -> None:
    storage = await tier2.open(1, ChunkedStorageConfig(max_chunk_bytes=1000, retry_delay_s=0.0))
    await storage.create("seg", "raw")
    assert await storage.write("seg", 0, [payload(1000)], 1) == 1000
    with pytest.raises(ValueError, match="max_chunk_bytes"):
        await storage.write("seg", 1000, [payload(600), payload(401)], 1)
    assert (await storage.info("seg")).length == 1000


async def test_write_with_bad_ingest_pairs_raises_value_error(storage: ChunkedSegmentStorage, tier2: Tier2) -> None:
    await storage.create("seg", "raw")
    with pytest.raises(ValueError):
        await storage.write("seg", 0, [b"abcdef"], [(2, 100)])  # must start at 0
    assert (await storage.info("seg")).length == 0
    assert tier2.data_chunks() == set()


async def test_write_to_sealed_segment_raises_and_changes_nothing(storage: ChunkedSegmentStorage) -> None:
    await fill(storage, "seg", [10])
    await storage.seal("seg")
    with pytest.raises(SegmentSealedError):
        await storage.write("seg", 10, [b"x"], 1)
    info = await storage.info("seg")
    assert (info.length, info.sealed) == (10, True)


async def test_seal_is_idempotent(storage: ChunkedSegmentStorage) -> None:
    await storage.create("seg", "raw")
    await storage.seal("seg")
    records = storage.journal.records_written
    await storage.seal("seg")
    assert storage.journal.records_written == records
    assert (await storage.info("seg")).sealed


@pytest.mark.parametrize(
    ("offset", "length", "error"),
    [
        (-1, 1, InvalidOffsetError),
        (0, -1, InvalidOffsetError),
        (5, 26, InvalidOffsetError),
        (30, 1, InvalidOffsetError),
        (31, 0, InvalidOffsetError),
        (4, 1, SegmentTruncatedError),
        (0, 30, SegmentTruncatedError),
    ],
)
async def test_read_outside_live_range_raises(
    storage: ChunkedSegmentStorage, offset: int, length: int, error: type[Exception]
) -> None:
    await fill(storage, "seg", [10, 10, 10])
    await storage.truncate("seg", 5)
    with pytest.raises(error):
        await storage.read("seg", offset, length)


async def test_read_at_bounds(storage: ChunkedSegmentStorage) -> None:
    data = await fill(storage, "seg", [10, 10])
    await storage.truncate("seg", 5)
    assert await storage.read("seg", 5, 0) == b""
    assert await storage.read("seg", 20, 0) == b""
    assert await storage.read("seg", 5, 15) == data[5:]
    assert await storage.read("seg", 19, 1) == data[19:]


def test_read_random_ranges_across_chunk_boundaries(chunks: ChunkStorage) -> None:
    sizes = [1, 7, 300, 64, 2, 1500, 9, 120]

    with asyncio.Runner() as runner:
        env = Tier2(chunks)
        storage = runner.run(env.open(1))
        data = runner.run(fill(storage, "seg", sizes, framing="events"))
        reopened = runner.run(env.open(2))
        total = len(data)

        @settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
        @given(st.data())
        def check(draw: st.DataObject) -> None:
            offset = draw.draw(st.integers(0, total))
            length = draw.draw(st.integers(0, total - offset))
            assert runner.run(reopened.read("seg", offset, length)) == data[offset : offset + length]

        try:
            check()
        finally:
            runner.run(env.close())


# -- Parquet chunks --------------------------------------------------------------------------


async def test_event_segment_chunks_hold_one_row_per_event(storage: ChunkedSegmentStorage, tier2: Tier2) -> None:
    events = [b"first", b"", b"x" * 300, b"last"]
    data = frames(*events)
    await storage.create("stream/0", "events")
    first_len = 8 + len(events[0])
    await storage.write("stream/0", 0, [data], [(0, 111), (first_len, 222)])
    [ref] = await storage.chunks("stream/0")
    table = parquet_chunk.read_events(tier2.chunks.read_all(ref.chunk_name))
    assert table.column("event").to_pylist() == events
    assert table.column("framed").to_pylist() == [True] * 4
    assert table.column("ingest_time_ms").to_pylist() == [111, 222, 222, 222]
    assert await storage.read("stream/0", 0, len(data)) == data


async def test_raw_segment_chunks_hold_raw_rows(storage: ChunkedSegmentStorage, tier2: Tier2) -> None:
    data = frames(b"looks like an event")
    await storage.create("table/0", "raw")
    await storage.write("table/0", 0, [data], 5)
    [ref] = await storage.chunks("table/0")
    table = parquet_chunk.read_events(tier2.chunks.read_all(ref.chunk_name))
    assert table.column("framed").to_pylist() == [False]
    assert parquet_chunk.chunk_info(tier2.chunks.read_all(ref.chunk_name)).framing == "raw"


async def test_chunk_locations_are_readable_from_outside(storage: ChunkedSegmentStorage, tier2: Tier2) -> None:
    data = await fill(storage, "seg", [100, 50], framing="events")
    refs = await storage.chunks("seg")
    for ref in refs:
        assert ref.location == tier2.chunks.location(ref.chunk_name)
        if ref.location is not None:
            assert ref.location.startswith("file://")
            table = pq.read_table(ref.location)
            assert table.num_rows >= 1
    whole = b"".join(parquet_chunk.decode(tier2.chunks.read_all(r.chunk_name)) for r in refs)
    assert whole == data


async def test_segment_names_are_escaped_into_valid_chunk_names(storage: ChunkedSegmentStorage, tier2: Tier2) -> None:
    names = [
        "scope/stream/3.#epoch.0",
        "_system/containers/metadata_1",
        ".hidden/..",
        "back\\slash and space",
        "a/b",
        "a%2Fb",
        "流/段",
        "x" * 600,
        "x" * 599 + "y",
    ]
    for i, name in enumerate(names):
        await fill(storage, name, [3 + i])
    listed = tier2.data_chunks()
    assert len(listed) == len(names)
    dirs = {n.rsplit("/", 1)[0] for n in listed}
    assert len(dirs) == len(names)  # one directory per segment, no two segments share one
    for chunk in listed:
        validate_chunk_name(chunk)
        assert chunk.startswith(f"data/c{CID}/") and chunk.count("/") == 3
    for i, name in enumerate(names):
        assert await storage.read(name, 0, 3 + i) == payload(3 + i, seed=1)


# -- concat ----------------------------------------------------------------------------------


async def test_concat_relinks_source_chunks_without_copying(storage: ChunkedSegmentStorage, tier2: Tier2) -> None:
    target = await fill(storage, "t", [10, 20])
    source = await fill(storage, "s", [5, 7, 9], framing="events")
    await storage.seal("s")
    source_refs = await storage.chunks("s")
    before = tier2.data_chunks()
    await storage.concat("t", 30, "s")
    assert tier2.data_chunks() == before
    assert not await storage.exists("s")
    info = await storage.info("t")
    assert (info.length, info.chunk_count, info.sealed) == (51, 5, False)
    refs = await storage.chunks("t")
    moved = [(r.chunk_name, r.start_offset + 30) for r in source_refs]
    assert [(r.chunk_name, r.start_offset) for r in refs[2:]] == moved
    whole = target + source
    assert await storage.read("t", 0, 51) == whole
    assert await storage.read("t", 25, 12) == whole[25:37]
    assert await storage.write("t", 51, [b"tail"], 1) == 55
    assert await storage.read("t", 45, 10) == (whole + b"tail")[45:55]


async def test_concat_with_empty_source(storage: ChunkedSegmentStorage) -> None:
    await fill(storage, "t", [10])
    await storage.create("s", "raw")
    await storage.seal("s")
    await storage.concat("t", 10, "s")
    assert not await storage.exists("s")
    assert (await storage.info("t")).length == 10


@pytest.mark.parametrize(
    ("setup", "offset", "error"),
    [
        ("source-not-sealed", 10, InvalidOffsetError),
        ("source-truncated", 10, InvalidOffsetError),
        ("target-sealed", 10, SegmentSealedError),
        ("ok", 9, BadOffsetError),
        ("ok", 11, BadOffsetError),
    ],
)
async def test_concat_with_bad_arguments_raises_and_changes_nothing(
    storage: ChunkedSegmentStorage, tier2: Tier2, setup: str, offset: int, error: type[Exception]
) -> None:
    await fill(storage, "t", [10])
    await fill(storage, "s", [4, 4])
    if setup == "source-truncated":
        await storage.truncate("s", 1)
    if setup != "source-not-sealed":
        await storage.seal("s")
    if setup == "target-sealed":
        await storage.seal("t")
    before = await state_of(storage, ["t", "s"])
    chunks_before = tier2.data_chunks()
    with pytest.raises(error):
        await storage.concat("t", offset, "s")
    assert await state_of(storage, ["t", "s"]) == before
    assert tier2.data_chunks() == chunks_before


async def test_concat_into_itself_raises(storage: ChunkedSegmentStorage) -> None:
    await fill(storage, "t", [10])
    with pytest.raises(InvalidOffsetError):
        await storage.concat("t", 10, "t")
    await storage.seal("t")
    with pytest.raises(SegmentSealedError):
        await storage.concat("t", 10, "t")


# -- truncate / delete -----------------------------------------------------------------------


async def test_truncate_deletes_only_chunks_wholly_below_start(storage: ChunkedSegmentStorage, tier2: Tier2) -> None:
    data = await fill(storage, "seg", [10, 10, 10, 10])
    names = [r.chunk_name for r in await storage.chunks("seg")]
    await storage.truncate("seg", 10)  # chunk 0 ends exactly at 10: wholly below
    assert tier2.data_chunks() == set(names[1:])
    await storage.truncate("seg", 25)  # inside chunk 2: chunk 1 goes, chunk 2 stays
    assert tier2.data_chunks() == set(names[2:])
    info = await storage.info("seg")
    assert (info.start_offset, info.length, info.chunk_count) == (25, 40, 2)
    assert [r.chunk_name for r in await storage.chunks("seg")] == names[2:]
    assert await storage.read("seg", 25, 15) == data[25:]
    with pytest.raises(SegmentTruncatedError) as caught:
        await storage.read("seg", 24, 2)
    assert caught.value.start_offset == 25


async def test_truncate_with_offset_not_above_start_is_a_no_op(storage: ChunkedSegmentStorage, tier2: Tier2) -> None:
    await fill(storage, "seg", [10, 10])
    await storage.truncate("seg", 15)
    records = storage.journal.records_written
    await storage.truncate("seg", 15)
    await storage.truncate("seg", 3)
    assert storage.journal.records_written == records
    assert (await storage.info("seg")).start_offset == 15
    assert len(tier2.data_chunks()) == 1


@pytest.mark.parametrize("offset", [-1, 21])
async def test_truncate_outside_segment_raises(storage: ChunkedSegmentStorage, offset: int) -> None:
    await fill(storage, "seg", [10, 10])
    with pytest.raises(InvalidOffsetError):
        await storage.truncate("seg", offset)
    assert (await storage.info("seg")).start_offset == 0


async def test_truncate_at_length_of_sealed_segment_releases_every_chunk(
    storage: ChunkedSegmentStorage, tier2: Tier2
) -> None:
    await fill(storage, "seg", [10, 10])
    await storage.seal("seg")
    await storage.truncate("seg", 20)
    info = await storage.info("seg")
    assert (info.start_offset, info.length, info.chunk_count, info.sealed) == (20, 20, 0, True)
    assert tier2.data_chunks() == set()
    assert await storage.read("seg", 20, 0) == b""


async def test_delete_removes_segment_and_its_chunks(storage: ChunkedSegmentStorage, tier2: Tier2) -> None:
    await fill(storage, "gone", [10, 10])
    kept = await fill(storage, "kept", [5])
    await storage.delete("gone")
    assert not await storage.exists("gone")
    assert tier2.data_chunks() == {r.chunk_name for r in await storage.chunks("kept")}
    await storage.create("gone", "events")
    assert await storage.info("gone") == StorageSegmentInfo("gone", 0, 0, False, "events", 0)
    assert await storage.read("kept", 0, 5) == kept


# -- lifecycle -------------------------------------------------------------------------------


async def test_reopen_with_higher_epoch_sees_same_state(storage: ChunkedSegmentStorage, tier2: Tier2) -> None:
    await fill(storage, "a", [10, 20, 30])
    await fill(storage, "b", [7], framing="events")
    await fill(storage, "c", [3, 3])
    await storage.seal("c")
    await storage.concat("a", 60, "c")
    await storage.truncate("a", 15)
    await fill(storage, "d", [4])
    await storage.delete("d")
    await storage.create("empty", "raw")
    await storage.seal("b")
    names = ["a", "b", "c", "d", "empty"]
    before = await state_of(storage, names)
    chunks_before = tier2.data_chunks()
    await storage.close()

    second = await tier2.open(2)
    assert await state_of(second, names) == before
    assert tier2.data_chunks() == chunks_before
    assert await second.write("a", 66, [b"more"], 1) == 70  # and it keeps working
    with pytest.raises(StorageNotPrimaryError):
        await tier2.open(1)


async def test_reopen_after_crash_without_close_sees_acknowledged_changes(tier2: Tier2) -> None:
    first = await tier2.open(3)
    data = await fill(first, "seg", [10, 11, 12])
    await first.truncate("seg", 12)
    # no close(): the instance is dropped as in a crash
    second = await tier2.open(4)
    info = await second.info("seg")
    assert (info.start_offset, info.length) == (12, 33)
    assert await second.read("seg", 12, 21) == data[12:]


async def test_calls_before_open_and_after_close_raise_container_offline(tier2: Tier2) -> None:
    storage = ChunkedSegmentStorage(tier2.chunks, CID, tier2.pointer, CONFIG)
    with pytest.raises(ContainerOfflineError):
        await storage.create("a", "raw")
    await storage.open(1)
    await storage.create("a", "raw")
    await storage.close()
    for call in (storage.exists("a"), storage.read("a", 0, 0), storage.write("a", 0, [b"x"], 1), storage.seal("a")):
        with pytest.raises(ContainerOfflineError):
            await call


async def test_concurrent_changes_on_many_segments(storage: ChunkedSegmentStorage, tier2: Tier2) -> None:
    names = [f"seg-{i}" for i in range(12)]
    results = await asyncio.gather(*(fill(storage, n, [5 + i, 9]) for i, n in enumerate(names)))
    await asyncio.gather(*(storage.seal(n) for n in names[::2]), *(storage.truncate(n, 3) for n in names[1::2]))
    before = await state_of(storage, names)
    for i, name in enumerate(names):
        offset = 3 if i % 2 else 0
        assert await storage.read(name, offset, len(results[i]) - offset) == results[i][offset:]
    reopened = await tier2.open(2)
    assert await state_of(reopened, names) == before
