"""Direct Tier-2 reads (pravega_spark.read.tier2_direct) against a real segment store, no SparkSession.

The segment store runs on the test's event loop (in-memory Tier-1, filesystem / S3 / memory Tier-2);
the executor-side code runs in a worker thread with a BlockingClient, as in a Spark Python worker.
Every direct read is compared with what the segment store itself serves for the same range.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from s3_fixtures import CREDENTIALS, MotoServer, new_s3_storage, s3_server_fixture  # noqa: F401 (a fixture)

from pravega_spark.errors import SegstoreOptionError, Tier2ReadError
from pravega_spark.options.tier2_location import Tier2Location
from pravega_spark.read.tier2_direct import SCHEMA, Tier2Read, arrow_schema, read_range
from segment_store.client import BlockingClient
from segment_store.server.config import ServerConfig
from segment_store.server.service import SegmentStoreService, ServiceConfig
from segment_store.storage.backends.filesystem import FsChunkStorage
from segment_store.storage.backends.memory import MemoryChunkStorage
from segment_store.storage.chunk_storage import ChunkStorage
from segment_store.storage.chunked_storage import ChunkedSegmentStorage
from segment_store.storage.format import parquet_chunk
from segment_store.storage.journal.system_journal import SnapshotInfoStore
from segment_store.storage.segment_storage import SegmentStorage
from segment_store.storage.storage_config import ChunkedStorageConfig
from segment_store.tier1.memory_log import InMemoryDurableDataLogFactory

pytestmark = pytest.mark.integration

SEGMENT = "sc/st/2.#epoch.1"
SEGMENT_ID = (1 << 32) | 2
Event = tuple[int, bytes]  # (segment offset, payload)


class _Service(SegmentStoreService):
    """A one-container segment store whose Tier-2 runs with a given chunk storage config."""

    storage_config = ChunkedStorageConfig(compaction_enabled=False)

    def _storage(self, container_id: int, snapshot_info: SnapshotInfoStore) -> SegmentStorage:
        return ChunkedSegmentStorage(self.chunks, container_id, snapshot_info, self.storage_config)


async def _start(chunks: ChunkStorage, storage_config: ChunkedStorageConfig | None = None) -> _Service:
    config = ServiceConfig(server=dataclasses.replace(ServerConfig(), host="127.0.0.1", port=0), container_count=1)
    service = _Service(config, InMemoryDurableDataLogFactory(), chunks)
    if storage_config is not None:
        service.storage_config = storage_config
    await service.start()
    return service


@pytest.fixture
async def fs_service(tmp_path: Path) -> AsyncIterator[_Service]:
    service = await _start(FsChunkStorage(tmp_path / "tier2"))
    try:
        yield service
    finally:
        await service.stop()


def _payloads(rng: random.Random, count: int) -> list[bytes]:
    """Events of 0..300 bytes (some empty, some 12-13 bytes: Arrow's inline view limit)."""
    return [rng.randbytes(rng.choice((0, 12, 13, rng.randrange(1, 300)))) for _ in range(count)]


def _write(client: BlockingClient, payloads: list[bytes], start: int) -> list[Event]:
    with client.writer(SEGMENT) as writer:
        writer.write_many(payloads).result(30)
    events = []
    for payload in payloads:
        events.append((start, payload))
        start += 8 + len(payload)
    return events


def _fill(client: BlockingClient, rounds: int, per_round: int, seed: int = 7) -> list[Event]:
    """Create the segment and write ``rounds`` flushed runs of events (one Tier-2 chunk each)."""
    rng = random.Random(seed)
    client.create_segment(SEGMENT)
    events: list[Event] = []
    for _ in range(rounds):
        events += _write(client, _payloads(rng, per_round), events[-1][0] + 8 + len(events[-1][1]) if events else 0)
        client.flush_to_storage(0)
    return events


def _store_events(client: BlockingClient, start: int, end: int) -> list[Event]:
    """What the segment store serves for [start, end): the reference."""
    with client.reader(SEGMENT, start, end) as reader:
        return [(event.offset, event.data) for event in reader]


def _rows(read: Tier2Read) -> list[Event]:
    rows: list[Event] = []
    for batch in read:
        assert batch.schema == read.schema
        assert batch.column("scope").to_pylist() == ["sc"] * batch.num_rows
        assert batch.column("stream").to_pylist() == ["st"] * batch.num_rows
        assert batch.column("segment_id").to_pylist() == [SEGMENT_ID] * batch.num_rows
        rows += zip(batch.column("offset").to_pylist(), batch.column("event").to_pylist(), strict=True)
    return rows


def _between(events: list[Event], start: int, end: int) -> list[Event]:
    return [e for e in events if start <= e[0] < end]


def _chunk_bounds(client: BlockingClient) -> list[int]:
    chunks = client._run(client.client.list_storage_chunks(SEGMENT))
    return [c.start_offset for c in chunks] + [chunks[-1].start_offset + chunks[-1].length_in_metadata]


def _check_range(client: BlockingClient, location: Tier2Location, events: list[Event], start: int, end: int) -> int:
    """Direct read of [start, end) + the segment store for the rest == the segment store's answer."""
    read = read_range(client, SEGMENT, start, end, location=location)
    assert read is not None, (start, end)
    assert start < read.end <= end
    rows = _rows(read)
    assert rows == _between(events, start, read.end)
    assert read.position == read.end
    assert rows + _store_events(client, read.end, end) == _store_events(client, start, end)
    return read.end


async def _in_thread(function: Callable[..., Any], *args: Any) -> Any:
    return await asyncio.to_thread(function, *args)


# -- filesystem Tier-2 --------------------------------------------------------------------------


def _random_ranges(endpoint: tuple[str, int], root: Path) -> None:
    location = Tier2Location.parse(str(root))
    with BlockingClient(endpoint) as client:
        events = _fill(client, rounds=6, per_round=700)
        length = client.get_segment_info(SEGMENT).write_offset
        assert _store_events(client, 0, length) == events
        bounds = _chunk_bounds(client)
        assert len(bounds) == 7 and bounds[-1] == length  # one chunk per flush, all of it in Tier-2
        offsets = [e[0] for e in events] + [length]
        rng = random.Random(11)
        for _ in range(60):
            start, end = sorted(rng.sample(offsets, 2))
            assert _check_range(client, location, events, start, end) == end
        for bound in bounds[1:-1]:  # ranges starting, ending and crossing at chunk boundaries
            i = offsets.index(bound)
            for start, end in [(offsets[i - 1], bound), (bound, offsets[i + 1]), (offsets[i - 3], offsets[i + 3])]:
                assert _check_range(client, location, events, start, end) == end
        assert _check_range(client, location, events, 0, length) == length
        read = read_range(client, SEGMENT, 0, length, location=location, ingest_time=True, batch_bytes=1)
        assert read is not None
        batches = list(read)
        assert batches[0].schema == arrow_schema(ingest_time=True)
        times = pa.concat_arrays([b.column("ingest_time_ms") for b in batches]).to_pylist()
        assert len(times) == len(events) and min(times) > 1_600_000_000_000 and times == sorted(times)


async def test_random_ranges_match_the_segment_store(fs_service: _Service, tmp_path: Path) -> None:
    await _in_thread(_random_ranges, fs_service.endpoint, tmp_path / "tier2")


def _above_storage_length(endpoint: tuple[str, int], root: Path) -> None:
    location = Tier2Location.parse(root.as_uri())
    with BlockingClient(endpoint) as client:
        events = _fill(client, rounds=2, per_round=300)
        flushed = client.get_segment_info(SEGMENT).write_offset
        events += _write(client, _payloads(random.Random(3), 200), flushed)  # not flushed: maybe Tier-1 only
        length = client.get_segment_info(SEGMENT).write_offset
        middle = events[100][0]
        covered = _check_range(client, location, events, middle, length)
        assert flushed <= covered <= length
        assert covered in _chunk_bounds(client)
        assert read_range(client, SEGMENT, length, length, location=location) is None
        client.flush_to_storage(0)
        assert _check_range(client, location, events, flushed, length) == length
        read = read_range(client, SEGMENT, 0, length, location=location, batch_bytes=1 << 30)
        assert read is not None and read.end == length
        read.close()  # opened, never iterated
        with pytest.raises(RuntimeError, match="closed"):
            iter(read)


async def test_range_partly_above_storage_length_stops_at_what_tier2_holds(
    fs_service: _Service, tmp_path: Path
) -> None:
    await _in_thread(_above_storage_length, fs_service.endpoint, tmp_path / "tier2")


def _unreachable(endpoint: tuple[str, int], root: Path, elsewhere: Path) -> None:
    with BlockingClient(endpoint) as client:
        assert read_range(client, SEGMENT, 0, 10, location=Tier2Location.parse(str(root))) is None  # no segment
        events = _fill(client, rounds=2, per_round=100)
        length = client.get_segment_info(SEGMENT).write_offset
        assert read_range(client, "sc/st/404.#epoch.1", 0, length) is None  # no segment (asked by the extension)
        reported = read_range(client, SEGMENT, 0, length)  # where the segment store says they are: here
        assert reported is not None and _rows(reported) == events
        # tier2Location overrides what the segment store says: a root where the chunks are not is not read
        assert read_range(client, SEGMENT, 0, length, location=Tier2Location.parse(str(elsewhere))) is None
        client.truncate_segment(SEGMENT, events[50][0])
        location = Tier2Location.parse(str(root))
        assert read_range(client, SEGMENT, events[49][0], length, location=location) is None  # truncated
        assert _check_range(client, location, events, events[50][0], length) == length


async def test_unreachable_chunks_missing_segment_and_truncated_start_give_none(
    fs_service: _Service, tmp_path: Path
) -> None:
    await _in_thread(_unreachable, fs_service.endpoint, tmp_path / "tier2", tmp_path / "not-here")


def _memory(endpoint: tuple[str, int]) -> None:
    with BlockingClient(endpoint) as client:
        events = _fill(client, rounds=2, per_round=100)
        assert len(_chunk_bounds(client)) == 3  # chunks are in (memory) Tier-2, but nobody outside can open them
        assert read_range(client, SEGMENT, 0, events[-1][0]) is None


async def test_in_memory_tier2_has_no_location() -> None:
    service = await _start(MemoryChunkStorage())
    try:
        await _in_thread(_memory, service.endpoint)
    finally:
        await service.stop()


# -- chunks compacted and collected while reading --------------------------------------------------


def _on_loop(loop: asyncio.AbstractEventLoop, coroutine: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run_coroutine_threadsafe(coroutine, loop).result(30)


class _CompactingClient:
    """A BlockingClient whose first chunk listing is followed by a compaction (and GC) of the segment,
    so the listing the reader got names chunks that no longer exist."""

    def __init__(self, client: BlockingClient, compact: Callable[[], int]) -> None:
        self._client = client
        self._compact = compact
        self.listings = 0

    def get_segment_info(self, segment: str) -> Any:
        return self._client.get_segment_info(segment)

    def list_storage_chunks(self, segment: str) -> list[Any]:
        chunks = self._client._run(self._client.client.list_storage_chunks(segment))
        self.listings += 1
        if self.listings == 1:
            assert self._compact() == 1
        return list(chunks)


def _compaction(endpoint: tuple[str, int], root: Path, compact: Callable[[], int]) -> None:
    location = Tier2Location.parse(str(root))
    with BlockingClient(endpoint) as client:
        events = _fill(client, rounds=5, per_round=400)
        length = client.get_segment_info(SEGMENT).write_offset
        old = _chunk_bounds(client)
        start = events[10][0]

        wrapped = _CompactingClient(client, compact)  # compacted between listing and opening
        read = read_range(wrapped, SEGMENT, start, length, location=location)
        assert read is not None and wrapped.listings == 2 and read.relists == 1
        assert _rows(read) == _between(events, start, length)
        assert _chunk_bounds(client) == [0, length]

        # compacted while iterating: the later chunks are gone when the reader gets to them
        events = _more_chunks(client, events, rounds=4)
        length = client.get_segment_info(SEGMENT).write_offset
        read = read_range(client, SEGMENT, start, length, location=location, batch_bytes=1)
        assert read is not None
        iterator = iter(read)
        rows = _rows_of(next(iterator))
        assert compact() == 1
        for batch in iterator:
            rows += _rows_of(batch)
        assert rows == _between(events, start, length)
        assert read.relists == 1 and _chunk_bounds(client) == [0, length]
        assert old != _chunk_bounds(client)


def _more_chunks(client: BlockingClient, events: list[Event], rounds: int) -> list[Event]:
    rng = random.Random(5)
    for _ in range(rounds):
        events = events + _write(client, _payloads(rng, 3000), events[-1][0] + 8 + len(events[-1][1]))
        client.flush_to_storage(0)
    return events


def _rows_of(batch: pa.RecordBatch) -> list[Event]:
    return list(zip(batch.column("offset").to_pylist(), batch.column("event").to_pylist(), strict=True))


async def test_chunks_compacted_and_collected_while_reading_are_read_again(tmp_path: Path) -> None:
    config = ChunkedStorageConfig(compaction_enabled=False, gc_delay_s=0, compaction_min_chunks=2)
    service = await _start(FsChunkStorage(tmp_path / "tier2"), config)
    loop = asyncio.get_running_loop()

    def compact() -> int:
        storage = service.registry.get(0).storage
        assert isinstance(storage, ChunkedSegmentStorage)
        return int(_on_loop(loop, storage.compactor.compact_segment(SEGMENT)))

    try:
        await _in_thread(_compaction, service.endpoint, tmp_path / "tier2", compact)
    finally:
        await service.stop()


# -- S3 Tier-2 (moto) ------------------------------------------------------------------------------


def _s3(endpoint: tuple[str, int], location: Tier2Location, storage: ChunkStorage) -> None:
    with BlockingClient(endpoint) as client:
        events = _fill(client, rounds=3, per_round=500)
        length = client.get_segment_info(SEGMENT).write_offset
        name = client._run(client.client.list_storage_chunks(SEGMENT))[1].chunk_name
        assert location.chunk_uri(name) == storage.location(name)
        offsets = [e[0] for e in events]
        rng = random.Random(2)
        for _ in range(10):
            start, end = sorted(rng.sample(offsets, 2))
            assert _check_range(client, location, events, start, end) == end
        assert _check_range(client, location, events, 0, length) == length
        wrong = dataclasses.replace(location, root=location.root + "-missing")
        assert read_range(client, SEGMENT, 0, length, location=wrong) is None


async def test_s3_tier2_is_read_directly(s3_server: MotoServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", CREDENTIALS["access_key_id"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", CREDENTIALS["secret_access_key"])
    monkeypatch.setenv("AWS_DEFAULT_REGION", CREDENTIALS["region"])
    storage = new_s3_storage(s3_server, prefix="tier2/")
    location = Tier2Location.parse(
        f"s3://{storage.bucket}/tier2?endpoint_override=127.0.0.1:{s3_server.port}&scheme=http"
    )
    service = await _start(storage)
    try:
        await _in_thread(_s3, service.endpoint, location, storage)
    finally:
        await service.stop()
        storage.close()


# -- unit: locations, chunk contents the segment store would reject --------------------------------


def test_location_parse_and_chunk_uris(tmp_path: Path) -> None:
    fs = FsChunkStorage(tmp_path)
    name = "data/c0/sc%2Fst%2F2.%23epoch.1/e1-2.parquet"
    for text in (str(tmp_path), tmp_path.as_uri(), f" {tmp_path}/ "):
        assert Tier2Location.parse(text).chunk_uri(name) == fs.location(name)
    s3 = Tier2Location.parse("s3://bucket/pre/fix?endpoint_override=h:9000&scheme=http")
    assert s3 == Tier2Location("s3", "bucket", "pre/fix/", "endpoint_override=h%3A9000&scheme=http")
    assert s3.chunk_uri(name) == (
        "s3://bucket/pre/fix/data/c0/sc%252Fst%252F2.%2523epoch.1/e1-2.parquet?endpoint_override=h%3A9000&scheme=http"
    )
    assert Tier2Location.parse("s3://bucket").chunk_uri("a b") == "s3://bucket/a%20b"
    for bad in ("relative/dir", "hdfs://x/y", "s3:///key", "file://host/dir", ""):
        with pytest.raises(SegstoreOptionError, match=r"^option 'tier2Location'"):
            Tier2Location.parse(bad)
    assert SCHEMA.names == ["event", "scope", "stream", "segment_id", "offset"]


@dataclasses.dataclass
class _Listed:
    start_offset: int
    length_in_metadata: int
    chunk_name: str
    location: str


@dataclasses.dataclass
class _Info:
    exists: bool = True
    deleted: bool = False
    start_offset: int = 0


class _Lister:
    """Stands in for the segment store's chunk listing (a chunk info that carries its location)."""

    def __init__(self, chunks: list[_Listed]) -> None:
        self.chunks = chunks

    def get_segment_info(self, segment: str) -> _Info:
        return _Info()

    def list_storage_chunks(self, segment: str) -> list[_Listed]:
        return self.chunks


def _framed(payloads: list[bytes]) -> bytes:
    return b"".join(b"\0\0\0\0" + len(p).to_bytes(4, "big") + p for p in payloads)


def _chunk_file(path: Path, data: bytes, framing: parquet_chunk.Framing = "events") -> _Listed:
    path.write_bytes(parquet_chunk.encode(data, 1_700_000_000_000, framing, row_group_bytes=100))
    return _Listed(0, len(data), path.name, path.as_uri())


def test_raw_bytes_end_the_direct_read_after_the_events_before_them(tmp_path: Path) -> None:
    good = _framed([b"a" * 40, b"b" * 70, b""])
    listed = _chunk_file(tmp_path / "c1", good + b"\0\0\0\7partial")  # a partial frame becomes a raw row
    lister = _Lister([listed])
    read = read_range(lister, SEGMENT, 0, listed.length_in_metadata)  # type: ignore[arg-type]
    assert read is not None
    rows: list[Event] = []
    with pytest.raises(Tier2ReadError) as error:
        for batch in read:
            rows += _rows_of(batch)
    assert rows == [(0, b"a" * 40), (48, b"b" * 70), (126, b"")]
    assert error.value.offset == read.position == len(good)

    raw = _chunk_file(tmp_path / "c2", good, framing="raw")
    assert read_range(_Lister([raw]), SEGMENT, 0, len(good)) is None  # type: ignore[arg-type]


def test_a_range_not_starting_at_an_event_boundary_is_refused(tmp_path: Path) -> None:
    data = _framed([b"x" * 30] * 20)
    lister = _Lister([_chunk_file(tmp_path / "c", data)])
    read = read_range(lister, SEGMENT, 5, len(data))  # type: ignore[arg-type]
    assert read is not None
    with pytest.raises(Tier2ReadError, match="not an event boundary") as error:
        list(read)
    assert error.value.offset == 5
    with pytest.raises(ValueError, match="range"):
        read_range(lister, SEGMENT, 5, 4)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="segment"):
        read_range(lister, "not-a-stream-segment", 0, 4)  # type: ignore[arg-type]


def test_a_gap_in_the_listing_ends_tier2_coverage_there(tmp_path: Path) -> None:
    one = _framed([b"1" * 10] * 5)
    first = _chunk_file(tmp_path / "c1", one)
    second = _chunk_file(tmp_path / "c2", one)
    second.start_offset = len(one) + 18  # 18 bytes nobody listed
    read = read_range(_Lister([first, second]), SEGMENT, 0, 10_000)  # type: ignore[arg-type]
    assert read is not None and read.end == len(one)
    assert [o for o, _ in _rows(read)] == [i * 18 for i in range(5)]
