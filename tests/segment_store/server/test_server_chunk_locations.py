"""segstore's ``ListStorageChunkLocations`` against a real segment store: per Tier-2 kind (filesystem, S3 on a moto
server, memory), where each chunk of a segment lives, checked against the chunks themselves; its READ token check.
"""

from __future__ import annotations

import dataclasses
import os
import random
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from s3_fixtures import CREDENTIALS, MotoServer, new_s3_storage, s3_server_fixture  # noqa: F401 (a fixture)
from wire_peer import WirePeer

from segment_store.client import NoSuchSegmentError, SegmentClient, StorageChunkLocations
from segment_store.protocol import (
    MAX_LISTED_CHUNKS,
    TIER2_FILE,
    TIER2_NONE,
    TIER2_S3,
    AuthTokenCheckFailed,
    AuthTokenErrorCode,
    ChunkLocation,
    CreateSegment,
    ListStorageChunkLocations,
    ListStorageChunks,
    NoSuchSegment,
    SegmentCreated,
    StorageChunkLocationsListed,
    StorageChunksListed,
    encode,
)
from segment_store.server.chunk_locations import locations_reply
from segment_store.server.config import ServerConfig
from segment_store.server.service import SegmentStoreService, ServiceConfig
from segment_store.storage.backends.filesystem import FsChunkStorage
from segment_store.storage.backends.memory import MemoryChunkStorage
from segment_store.storage.chunk_storage import ChunkStorage
from segment_store.storage.format import parquet_chunk
from segment_store.storage.segment_storage import ChunkRef
from segment_store.tier1.memory_log import InMemoryDurableDataLogFactory
from segstore_shared.auth import acl
from segstore_shared.auth.acl import Permission
from segstore_shared.auth.tokens import TokenSigner

pytestmark = pytest.mark.integration

SEGMENT = "sc/st/3.#epoch.0"
KEY = "chunk-locations-test-key"


async def _service(chunks: ChunkStorage, signing_key: str | None = None) -> SegmentStoreService:
    server = dataclasses.replace(ServerConfig(), host="127.0.0.1", port=0, auth_token_signing_key=signing_key)
    service = SegmentStoreService(
        ServiceConfig(server=server, container_count=1), InMemoryDurableDataLogFactory(), chunks
    )
    await service.start()
    return service


async def _fill(client: SegmentClient, rounds: int) -> bytes:
    """Create the segment and write ``rounds`` flushed runs of events (a Tier-2 chunk each); its bytes."""
    rng = random.Random(4)
    await client.create_segment(SEGMENT)
    for _ in range(rounds):
        async with client.writer(SEGMENT) as writer:
            await (await writer.write_many([rng.randbytes(rng.randrange(0, 200)) for _ in range(300)]))
        await client.flush_to_storage(0)
    length = (await client.get_segment_info(SEGMENT)).write_offset
    data = bytearray()
    while len(data) < length:
        data += (await client.read_segment(SEGMENT, len(data), length - len(data))).data
    return bytes(data)


def _check_tiles(located: StorageChunkLocations, data: bytes, start_offset: int = 0) -> None:
    """The chunks tile the segment from (at most) its start to its storage length: here, all of ``data``."""
    assert located.segment == SEGMENT and located.start_offset == start_offset
    assert located.chunks[0].start_offset <= start_offset
    for before, after in zip(located.chunks, located.chunks[1:], strict=False):
        assert before.end_offset == after.start_offset
    assert located.chunks[-1].end_offset == len(data)


async def test_file_tier2_answers_each_chunks_path(tmp_path: Path) -> None:
    storage = FsChunkStorage(tmp_path / "tier2")
    service = await _service(storage)
    try:
        async with SegmentClient(service.endpoint) as client:
            await client.create_segment("sc/st/9.#epoch.0")
            nothing = await client.list_storage_chunk_locations("sc/st/9.#epoch.0")
            assert nothing.kind == TIER2_NONE and nothing.chunks == ()  # nothing in Tier-2 yet: no kind either
            data = await _fill(client, rounds=3)
            located = await client.list_storage_chunk_locations(SEGMENT)
            assert (located.kind, located.endpoint, located.bucket) == (TIER2_FILE, "", "")
            assert len(located.chunks) == 3
            _check_tiles(located, data)
            names = [c.chunk_name for c in await client.list_storage_chunks(SEGMENT)]
            assert [c.chunk_name for c in located.chunks] == names
            for chunk in located.chunks:
                assert os.path.isabs(chunk.path) and Path(chunk.path).as_uri() == storage.location(chunk.chunk_name)
                piece = parquet_chunk.decode_range(Path(chunk.path).read_bytes(), 0, chunk.length)
                assert piece == data[chunk.start_offset : chunk.end_offset]

            first, second, third = located.chunks
            inside = await client.list_storage_chunk_locations(SEGMENT, first.end_offset - 1, second.end_offset)
            assert inside.chunks == (first, second)  # those holding bytes of the range
            assert (await client.list_storage_chunk_locations(SEGMENT, second.end_offset)).chunks == (third,)
            above = await client.list_storage_chunk_locations(SEGMENT, third.end_offset, third.end_offset + 100)
            assert above.chunks == () and above.start_offset == 0

            await client.truncate_segment(SEGMENT, located.chunks[1].start_offset + 8)
            truncated = await client.list_storage_chunk_locations(SEGMENT)
            _check_tiles(truncated, data, start_offset=located.chunks[1].start_offset + 8)
            assert truncated.chunks[-2:] == located.chunks[1:]  # the first one goes once Tier-2 is truncated too
            with pytest.raises(NoSuchSegmentError):
                await client.list_storage_chunk_locations("sc/st/404.#epoch.0")
    finally:
        await service.stop()


async def test_s3_tier2_answers_bucket_keys_and_endpoint_never_credentials(
    s3_server: MotoServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage = new_s3_storage(s3_server, prefix="pre/fix/")
    service = await _service(storage)
    s3 = s3_server.client()
    try:
        async with SegmentClient(service.endpoint) as client:
            data = await _fill(client, rounds=2)
            located = await client.list_storage_chunk_locations(SEGMENT)
            assert (located.kind, located.endpoint, located.bucket) == (TIER2_S3, s3_server.endpoint, storage.bucket)
            _check_tiles(located, data)
            for chunk in located.chunks:
                assert chunk.path.startswith("pre/fix/") and chunk.path.endswith(chunk.chunk_name)
                body = s3.get_object(Bucket=located.bucket, Key=chunk.path)["Body"].read()
                assert parquet_chunk.decode_range(body, 0, chunk.length) == data[chunk.start_offset : chunk.end_offset]
        peer = await WirePeer.connect(service.endpoint)
        reply = await peer.request(ListStorageChunkLocations(5, SEGMENT, 0, 2**63 - 1, ""))
        await peer.close()
        assert isinstance(reply, StorageChunkLocationsListed) and reply.request_id == 5
        wire = encode(reply)
        for secret in (CREDENTIALS["access_key_id"], CREDENTIALS["secret_access_key"]):
            assert secret.encode() not in wire
    finally:
        await service.stop()
        storage.close()


async def test_memory_tier2_lists_chunks_without_a_place() -> None:
    service = await _service(MemoryChunkStorage())
    try:
        async with SegmentClient(service.endpoint) as client:
            data = await _fill(client, rounds=2)
            located = await client.list_storage_chunk_locations(SEGMENT)
            assert (located.kind, located.endpoint, located.bucket) == (TIER2_NONE, "", "")
            _check_tiles(located, data)
            assert {c.path for c in located.chunks} == {""}
    finally:
        await service.stop()


def test_a_reply_lists_at_most_max_listed_chunks_of_the_range_and_one_kind() -> None:
    refs = [ChunkRef(f"c{i}", 10 * i, 10, f"file:///t2/c{i}") for i in range(MAX_LISTED_CHUNKS + 5)]
    reply = locations_reply(1, SEGMENT, 0, refs, 15, 2**63 - 1)
    assert len(reply.chunks) == MAX_LISTED_CHUNKS and reply.chunks[0] == ChunkLocation(10, 10, "c1", "/t2/c1")
    rest = locations_reply(1, SEGMENT, 0, refs, reply.chunks[-1].start_offset + 10, 2**63 - 1)
    assert [c.chunk_name for c in rest.chunks] == [f"c{i}" for i in range(MAX_LISTED_CHUNKS + 1, MAX_LISTED_CHUNKS + 5)]
    s3 = [ChunkRef("a", 0, 5, "s3://b/p/a%20x?endpoint_override=h%3A9&scheme=http"), ChunkRef("b", 5, 5, "s3://b/p/b")]
    mixed = locations_reply(1, SEGMENT, 0, s3, 0, 10)  # two endpoints: not described at all
    assert (mixed.kind, [c.path for c in mixed.chunks]) == (TIER2_NONE, ["", ""])
    one = locations_reply(1, SEGMENT, 3, s3[:1], 0, 10)
    assert (one.kind, one.endpoint, one.bucket, one.chunks[0].path) == (TIER2_S3, "http://h:9", "b", "p/a x")


@pytest.fixture
async def authenticated(tmp_path: Path) -> AsyncIterator[WirePeer]:
    service = await _service(FsChunkStorage(tmp_path / "tier2"), signing_key=KEY)
    peer = await WirePeer.connect(service.endpoint)
    master = TokenSigner(KEY).sign_master()
    assert isinstance(await peer.request(CreateSegment(1, SEGMENT, 0, 0, master, 0)), SegmentCreated)
    try:
        yield peer
    finally:
        await peer.close()
        await service.stop()


async def test_locations_need_read_on_the_stream_as_a_read_does(authenticated: WirePeer) -> None:
    peer = authenticated
    read = TokenSigner(KEY).sign(acl.raw_stream("sc", "st"), Permission.READ)
    other = TokenSigner(KEY).sign(acl.raw_stream("sc", "other"), Permission.READ_UPDATE)
    for token in ("", other, "not.a.token"):
        reply = await peer.request(ListStorageChunkLocations(2, SEGMENT, 0, 100, token))
        assert isinstance(reply, AuthTokenCheckFailed) and reply.error_code == AuthTokenErrorCode.TOKEN_CHECK_FAILED
        assert reply.request_id == 2
        assert isinstance(await peer.request(ListStorageChunks(SEGMENT, token, 3)), AuthTokenCheckFailed)  # alike
    reply = await peer.request(ListStorageChunkLocations(4, SEGMENT, 0, 100, read))
    assert reply == StorageChunkLocationsListed(4, SEGMENT, 0, TIER2_NONE, "", "", ())
    assert isinstance(await peer.request(ListStorageChunks(SEGMENT, read, 5)), StorageChunksListed)
    missing = await peer.request(ListStorageChunkLocations(6, "sc/st/7.#epoch.0", 0, 100, read))
    assert isinstance(missing, NoSuchSegment)
