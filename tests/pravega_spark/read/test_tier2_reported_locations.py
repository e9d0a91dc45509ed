"""Direct Tier-2 reads where the segment store says the chunks are (segstore's ``ListStorageChunkLocations``),
without ``tier2Location``: filesystem and S3 (moto; SeaweedFS, which checks credentials), and every way back to
the segment store: a chunk file not there or not the chunk listed, S3 without credentials or with wrong ones,
a segment store without the extension (a Pravega one closes the connection on it).

As in test_tier2_direct, the segment store runs on the test's event loop and the executor side in a worker
thread with a BlockingClient; every direct read is compared with what the segment store serves.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import shutil
import struct
from pathlib import Path
from typing import Any

import pytest
from s3_fixtures import CREDENTIALS, MotoServer, new_s3_storage, s3_server_fixture  # noqa: F401 (a fixture)
from seaweedfs_fixtures import SeaweedServer, seaweed_server_fixture  # noqa: F401 (a fixture)
from test_tier2_direct import (
    SEGMENT,
    Event,
    _between,
    _fill,
    _in_thread,
    _rows,
    _rows_of,
    _Service,
    _start,
    _store_events,
)

from pravega_spark.errors import Tier2ReadError
from pravega_spark.options.tier2_location import Tier2Location
from pravega_spark.read import tier2_direct, tier2_locations
from pravega_spark.read.tier2_direct import read_range
from pravega_spark.read.tier2_locations import s3_credentials_given, s3_uri
from segment_store.client import BlockingClient, ConnectionLostError, StorageChunkLocations
from segment_store.protocol import TIER2_FILE, TIER2_S3
from segment_store.storage.backends.filesystem import FsChunkStorage

pytestmark = pytest.mark.integration


@pytest.fixture
async def fs_service(tmp_path: Path) -> Any:
    service = await _start(FsChunkStorage(tmp_path / "tier2"))
    try:
        yield service
    finally:
        await service.stop()


def _check_direct(client: Any, events: list[Event], start: int, end: int) -> int:
    """A read without tier2Location of [start, end) + the segment store for the rest == the segment store."""
    read = read_range(client, SEGMENT, start, end)
    assert read is not None, (start, end)
    rows = _rows(read)
    assert rows == _between(events, start, read.end)
    store = getattr(client, "inner", client)
    assert rows + _store_events(store, read.end, end) == _store_events(store, start, end)
    return read.end


# -- filesystem Tier-2 ------------------------------------------------------------------------------------


def _file_ranges(endpoint: tuple[str, int], root: Path) -> None:
    with BlockingClient(endpoint) as client:
        events = _fill(client, rounds=4, per_round=500)
        length = client.get_segment_info(SEGMENT).write_offset
        located = client.list_storage_chunk_locations(SEGMENT)
        assert located.kind == TIER2_FILE and all(Path(c.path).is_relative_to(root) for c in located.chunks)
        offsets = [e[0] for e in events] + [length]
        rng = random.Random(5)
        for _ in range(30):
            start, end = sorted(rng.sample(offsets, 2))
            assert _check_direct(client, events, start, end) == end
        assert _check_direct(client, events, 0, length) == length
        truncated_at = events[100][0]
        client.truncate_segment(SEGMENT, truncated_at)
        assert read_range(client, SEGMENT, events[99][0], length) is None  # below the start: the store says so
        assert _check_direct(client, events, truncated_at, length) == length


async def test_file_chunks_are_read_where_the_segment_store_says(fs_service: _Service, tmp_path: Path) -> None:
    await _in_thread(_file_ranges, fs_service.endpoint, tmp_path / "tier2")


class _Relocated:
    """A BlockingClient whose chunk locations are rewritten by ``move`` (a chunk elsewhere on this machine)."""

    def __init__(self, inner: BlockingClient, move: Any) -> None:
        self.inner = inner
        self.move = move

    def get_segment_info(self, segment: str) -> Any:
        return self.inner.get_segment_info(segment)

    def list_storage_chunk_locations(self, segment: str, start: int, end: int) -> StorageChunkLocations:
        located = self.inner.list_storage_chunk_locations(segment, start, end)
        chunks = tuple(dataclasses.replace(c, path=self.move(c)) for c in located.chunks)
        return dataclasses.replace(located, chunks=chunks)


def _not_reachable(endpoint: tuple[str, int], root: Path, elsewhere: Path) -> None:
    with BlockingClient(endpoint) as client:
        events = _fill(client, rounds=3, per_round=300)
        length = client.get_segment_info(SEGMENT).write_offset
        chunks = client.list_storage_chunk_locations(SEGMENT).chunks
        missing = _Relocated(client, lambda c: str(elsewhere / c.chunk_name))  # not on this machine
        assert read_range(missing, SEGMENT, 0, length) is None
        # another chunk's file where the first one should be: its length says it is not the chunk listed
        swapped = _Relocated(client, lambda c: chunks[1].path if c.path == chunks[0].path else c.path)
        assert chunks[0].length != chunks[1].length
        assert read_range(swapped, SEGMENT, 0, length) is None
        # the first is there, the second is not: Tier-2 serves the first, then says where to go on from
        second_gone = _Relocated(client, lambda c: str(elsewhere / "x") if c.path == chunks[1].path else c.path)
        read = read_range(second_gone, SEGMENT, 0, length)
        assert read is not None
        rows: list[Event] = []
        with pytest.raises(Tier2ReadError) as stopped:
            for batch in read:
                rows += _rows_of(batch)
        assert stopped.value.offset == chunks[0].end_offset and rows == _between(events, 0, chunks[0].end_offset)
        # the copy of the whole Tier-2 elsewhere: with tierLocation that is what is read (it overrides)
        shutil.copytree(root, elsewhere)
        shutil.rmtree(root / "data")
        assert read_range(client, SEGMENT, 0, length) is None  # where the store says: gone
        read = read_range(client, SEGMENT, 0, length, location=Tier2Location.parse(str(elsewhere)))
        assert read is not None and _rows(read) == events


async def test_chunks_not_there_or_not_the_chunk_listed_are_read_from_the_segment_store(
    fs_service: _Service, tmp_path: Path
) -> None:
    await _in_thread(_not_reachable, fs_service.endpoint, tmp_path / "tier2", tmp_path / "elsewhere")


# -- a segment store without the extension ----------------------------------------------------------------

_HEADER = struct.Struct(">ii")


class _PravegaLike:
    """A proxy in front of our segment store that closes a connection when the client sends a command of a type
    Pravega does not know (a segstore extension), as a Pravega segment store's decoder does."""

    def __init__(self, target: tuple[str, int], unknown: set[int]) -> None:
        self.target = target
        self.unknown = unknown
        self.closed_on_unknown = 0
        self.server: asyncio.Server | None = None

    async def start(self) -> tuple[str, int]:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return "127.0.0.1", self.server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()

    async def _serve(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        server_reader, server_writer = await asyncio.open_connection(*self.target)
        back = asyncio.create_task(self._pump(server_reader, client_writer))
        try:
            while True:
                header = await client_reader.readexactly(_HEADER.size)
                code, size = _HEADER.unpack(header)
                body = await client_reader.readexactly(size)
                if code in self.unknown:
                    self.closed_on_unknown += 1
                    break
                server_writer.write(header + body)
        except asyncio.IncompleteReadError:
            pass
        finally:
            client_writer.close()
            server_writer.close()
            back.cancel()

    @staticmethod
    async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()


def _without_extension(endpoint: tuple[str, int], direct: tuple[str, int], root: Path) -> None:
    with BlockingClient(direct) as writer:
        events = _fill(writer, rounds=2, per_round=200)
        length = writer.get_segment_info(SEGMENT).write_offset
    with BlockingClient(endpoint) as client:
        with pytest.raises(ConnectionLostError):
            client.list_storage_chunk_locations(SEGMENT)
        assert tier2_locations.speaks_extension(client)
        assert read_range(client, SEGMENT, 0, length) is None  # asked once, then remembered
        assert not tier2_locations.speaks_extension(client)
        assert read_range(client, SEGMENT, 0, length) is None
        assert _store_events(client, 0, length) == events  # the segment store serves it all
        read = read_range(client, SEGMENT, 0, length, location=Tier2Location.parse(str(root)))
        assert read is not None and _rows(read) == events  # tier2Location needs no extension


async def test_a_segment_store_without_the_extension_falls_back_and_is_asked_once(
    fs_service: _Service, tmp_path: Path
) -> None:
    proxy = _PravegaLike(fs_service.endpoint, {-22, -20})
    endpoint = await proxy.start()
    try:
        await _in_thread(_without_extension, endpoint, fs_service.endpoint, tmp_path / "tier2")
    finally:
        await proxy.stop()
    assert proxy.closed_on_unknown == 2  # the call itself, then the one read_range made (never again)


# -- S3 Tier-2 ----------------------------------------------------------------------------------------------

_AWS_ENV = (
    "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
)  # fmt: skip


def _executor_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, key: str | None, secret: str | None) -> None:
    """This process as an executor given ``key``/``secret`` (None: no credentials at all); fresh filesystems."""
    for name in _AWS_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_DEFAULT_REGION", CREDENTIALS["region"])
    if key is not None and secret is not None:
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", key)
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    monkeypatch.setattr(tier2_direct, "_filesystems", {})
    monkeypatch.setattr(tier2_locations, "_refused", {})


def _s3_direct(endpoint: tuple[str, int], s3_endpoint: str, bucket: str) -> None:
    with BlockingClient(endpoint) as client:
        events = _fill(client, rounds=3, per_round=400)
        length = client.get_segment_info(SEGMENT).write_offset
        located = client.list_storage_chunk_locations(SEGMENT)
        assert (located.kind, located.endpoint, located.bucket) == (TIER2_S3, s3_endpoint, bucket)
        assert _check_direct(client, events, 0, length) == length
        offsets = [e[0] for e in events]
        rng = random.Random(9)
        for _ in range(8):
            start, end = sorted(rng.sample(offsets, 2))
            assert _check_direct(client, events, start, end) == end


def _s3_not_read(endpoint: tuple[str, int]) -> None:
    with BlockingClient(endpoint) as client:
        length = client.get_segment_info(SEGMENT).write_offset
        assert client.list_storage_chunk_locations(SEGMENT).kind == TIER2_S3
        assert read_range(client, SEGMENT, 0, length) is None


async def test_s3_chunks_are_read_with_the_executors_credentials_and_not_without(
    s3_server: MotoServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    storage = new_s3_storage(s3_server, prefix="t2/")
    service = await _start(storage)
    try:
        _executor_env(monkeypatch, tmp_path, CREDENTIALS["access_key_id"], CREDENTIALS["secret_access_key"])
        await _in_thread(_s3_direct, service.endpoint, s3_server.endpoint, storage.bucket)
        _executor_env(monkeypatch, tmp_path, None, None)
        assert not s3_credentials_given()
        await _in_thread(_s3_not_read, service.endpoint)
        assert tier2_locations.refused_stores() == set()  # not even tried
    finally:
        await service.stop()
        storage.close()


async def test_s3_that_checks_credentials_refuses_wrong_ones_and_the_segment_store_serves(
    seaweed_server: SeaweedServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    storage = new_s3_storage(seaweed_server, prefix="t2/")
    service = await _start(storage)
    try:
        _executor_env(monkeypatch, tmp_path, CREDENTIALS["access_key_id"], "not-the-secret")
        await _in_thread(_fill_only, service.endpoint)
        await _in_thread(_s3_not_read, service.endpoint)  # given, but refused: open fails, nothing read here
        refused = dict(tier2_locations._refused)
        assert {bucket for bucket, _ in refused} == {storage.bucket}  # that store is left alone a while
        await _in_thread(_s3_not_read, service.endpoint)
        assert tier2_locations._refused == refused  # not tried again
        _executor_env(monkeypatch, tmp_path, CREDENTIALS["access_key_id"], CREDENTIALS["secret_access_key"])
        await _in_thread(_s3_read_all, service.endpoint)
    finally:
        await service.stop()
        storage.close()


def _fill_only(endpoint: tuple[str, int]) -> None:
    with BlockingClient(endpoint) as client:
        _fill(client, rounds=2, per_round=300)


def _s3_read_all(endpoint: tuple[str, int]) -> None:
    with BlockingClient(endpoint) as client:
        length = client.get_segment_info(SEGMENT).write_offset
        events = _store_events(client, 0, length)
        assert _check_direct(client, events, 0, length) == length


def test_s3_endpoint_and_credentials_come_from_the_executor(tmp_path: Path) -> None:
    assert s3_uri("b", "p/k y", "") == "s3://b/p/k%20y"
    assert s3_uri("b", "k", "http://10.0.0.1:9000", {}) == "s3://b/k?endpoint_override=10.0.0.1%3A9000&scheme=http"
    given = {"AWS_ENDPOINT_URL": "https://s3.local:443", "AWS_ENDPOINT_URL_S3": "http://h:1"}
    assert s3_uri("b", "k", "http://10.0.0.1:9000", given) == "s3://b/k?endpoint_override=h%3A1&scheme=http"
    del given["AWS_ENDPOINT_URL_S3"]
    assert s3_uri("b", "k", "", given) == "s3://b/k?endpoint_override=s3.local%3A443&scheme=https"
    none = {"AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none")}
    assert not s3_credentials_given(none)
    assert not s3_credentials_given({**none, "AWS_ACCESS_KEY_ID": "k"})  # a key without its secret
    assert s3_credentials_given({**none, "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"})
    assert s3_credentials_given({**none, "AWS_PROFILE": "p"})
    (tmp_path / "credentials").write_text("[default]\n")
    assert s3_credentials_given({"AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "credentials")})


def test_only_s3_stores_that_fail_for_another_reason_than_a_missing_chunk_are_left_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(tier2_locations, "_refused", {})
    uri = "s3://b/k?endpoint_override=h%3A1&scheme=http"
    tier2_locations.note_unopenable(uri, FileNotFoundError("compacted away"))  # listed again instead
    tier2_locations.note_unopenable(uri, ValueError("not the chunk listed"))
    tier2_locations.note_unopenable("file:///t2/k", PermissionError("not readable here"))  # cheap to try again
    assert tier2_locations.refused_stores() == set()
    tier2_locations.note_unopenable(uri, OSError("AWS Error ACCESS_DENIED during HeadObject operation"))
    assert tier2_locations.refused_stores() == {("b", "endpoint_override=h%3A1&scheme=http")}
    monkeypatch.setattr(tier2_locations, "S3_RETRY_AFTER_S", -1.0)
    tier2_locations.note_unopenable(uri, OSError("NETWORK_CONNECTION"))
    assert tier2_locations.refused_stores() == set()  # a while is over: tried again
