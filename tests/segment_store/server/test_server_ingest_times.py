"""segstore's ``ReadIngestTimes`` against a real segment store: the ingestion times of a range as ``(offset, ms)``
runs, from memory (the ingest-time index) and from Tier-2 (the chunks' ``ingest_time_ms``), the same before and
after a flush; a merged transaction's rule; a range cut by ``MAX_INGEST_TIME_RUNS``; errors; its READ token check.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from pathlib import Path

import pytest
from wire_peer import WirePeer

from segment_store.client import NoSuchSegmentError, SegmentClient, SegmentIsTruncatedError
from segment_store.protocol import (
    AuthTokenCheckFailed,
    AuthTokenErrorCode,
    CreateSegment,
    IngestTimesRead,
    NoSuchSegment,
    ReadIngestTimes,
    SegmentCreated,
    encode_events,
)
from segment_store.server.config import ServerConfig
from segment_store.server.service import SegmentStoreService, ServiceConfig
from segment_store.storage.backends.filesystem import FsChunkStorage
from segment_store.tier1.memory_log import InMemoryDurableDataLogFactory
from segstore_shared.auth import acl
from segstore_shared.auth.acl import Permission
from segstore_shared.auth.tokens import TokenSigner

pytestmark = pytest.mark.integration

SEGMENT = "sc/st/3.#epoch.0"
TXN = SEGMENT + "#transaction." + "b" * 32
KEY = "ingest-times-test-key"


async def _service(tmp_path: Path, signing_key: str | None = None) -> SegmentStoreService:
    server = dataclasses.replace(ServerConfig(), host="127.0.0.1", port=0, auth_token_signing_key=signing_key)
    service = SegmentStoreService(
        ServiceConfig(server=server, container_count=1), InMemoryDurableDataLogFactory(), FsChunkStorage(tmp_path)
    )
    await service.start()
    return service


async def _storage_length(service: SegmentStoreService) -> int:
    return (await service.registry.for_segment(SEGMENT).get_info(SEGMENT)).storage_length


def _now_ms() -> int:
    return int(time.time() * 1000)


def _after(ms: int) -> None:
    """Return once the wall clock is past ``ms`` (a busy wait of at most a millisecond: no synchronization)."""
    while _now_ms() <= ms:
        pass


async def _write(client: SegmentClient, segment: str, payloads: list[bytes]) -> tuple[int, int]:
    """Append ``payloads`` (one append: one ingestion time); the wall clock (ms) before and after."""
    before = _now_ms()
    async with client.writer(segment) as writer:
        await (await writer.write_many(payloads))
    after = _now_ms()
    _after(after)  # the next append gets a later millisecond
    return before, after


def _check_runs(end: int, runs: list[tuple[int, int]], start: int, length: int) -> None:
    assert end == length and runs[0][0] == start
    assert [at for at, _ in runs] == sorted({at for at, _ in runs})
    assert all(a[1] != b[1] for a, b in itertools.pairwise(runs))


async def test_runs_from_memory_and_from_tier2_agree(tmp_path: Path) -> None:
    service = await _service(tmp_path)
    try:
        async with SegmentClient(service.endpoint) as client:
            await client.create_segment(SEGMENT)
            events = [[b"a" * 10] * 3, [b"bb"] * 2, [b"c" * 100]]
            bounds = [await _write(client, SEGMENT, payloads) for payloads in events]
            sizes = [len(encode_events(p)) for p in events]
            starts = [0, sizes[0], sizes[0] + sizes[1]]
            length = sum(sizes)
            end, runs = await client.ingest_times(SEGMENT, 0, 2**63 - 1)
            _check_runs(end, runs, 0, length)
            assert [at for at, _ in runs] == starts
            for (_, ms), (lo, hi) in zip(runs, bounds, strict=True):
                assert lo <= ms <= hi
            assert await client.ingest_times(SEGMENT, starts[1] + 8, starts[2]) == (
                starts[2],
                [(starts[1] + 8, runs[1][1])],
            )
            assert await client.ingest_times(SEGMENT, length, length + 5) == (length, [])

            await client.flush_to_storage(0)
            assert await _storage_length(service) == length
            assert await client.ingest_times(SEGMENT, 0, 2**63 - 1) == (end, runs)  # now from the chunks
            tail = await _write(client, SEGMENT, [b"d"])
            both = await client.ingest_times(SEGMENT, starts[1], length + 100)
            assert both[0] == length + 9 and both[1][:2] == runs[1:]
            assert both[1][2][0] == length and tail[0] <= both[1][2][1] <= tail[1]

            await client.truncate_segment(SEGMENT, starts[1])
            with pytest.raises(SegmentIsTruncatedError):
                await client.ingest_times(SEGMENT, 0, length)
            with pytest.raises(NoSuchSegmentError):
                await client.ingest_times("sc/st/404.#epoch.0", 0, 10)
    finally:
        await service.stop()


async def test_a_merged_transaction_takes_its_merge_time_in_memory_and_in_tier2(tmp_path: Path) -> None:
    """Every event of a transaction takes the time of its merge (the commit), from the read index and from Tier-2
    alike: times never go back along a segment (segment_store/reading/ingest_times.py)."""
    service = await _service(tmp_path)
    try:
        async with SegmentClient(service.endpoint) as client:
            await client.create_segment(SEGMENT)
            await client.create_segment(TXN)
            await _write(client, TXN, [b"t" * 20] * 4)
            before = await _write(client, SEGMENT, [b"x"])
            await client.seal_segment(TXN)
            merging = _now_ms()
            await client.merge_segments(SEGMENT, TXN)
            merged_at = _now_ms()
            first, merged = 9, len(encode_events([b"t" * 20] * 4))
            end, runs = await client.ingest_times(SEGMENT, 0, 2**63 - 1)
            assert end == first + merged and [at for at, _ in runs] == [0, first]
            assert before[0] <= runs[0][1] <= before[1] and merging <= runs[1][1] <= merged_at
            _after(merged_at)
            after = await _write(client, SEGMENT, [b"y"])
            end, runs = await client.ingest_times(SEGMENT, 0, 2**63 - 1)
            assert end == first + merged + 9 and [at for at, _ in runs] == [0, first, first + merged]
            assert after[0] <= runs[2][1] <= after[1]  # non-decreasing along the segment

            await client.flush_to_storage(0)
            assert await _storage_length(service) == end
            _, stored = await client.ingest_times(SEGMENT, 0, 2**63 - 1)
            assert stored == runs  # Tier-2 gives the times the read index gave
    finally:
        await service.stop()


async def test_a_long_range_is_answered_in_parts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("segment_store.server.requests.MAX_INGEST_TIME_RUNS", 2)
    service = await _service(tmp_path)
    try:
        async with SegmentClient(service.endpoint) as client:
            await client.create_segment(SEGMENT)
            for i in range(5):
                await _write(client, SEGMENT, [bytes([i])])
            parts = []
            for _ in range(2):  # from memory, then from Tier-2
                end, runs = await client.ingest_times(SEGMENT, 0, 2**63 - 1)
                assert (end, [at for at, _ in runs]) == (18, [0, 9])
                rest = await client.ingest_times(SEGMENT, end, 2**63 - 1)
                assert (rest[0], [at for at, _ in rest[1]]) == (36, [18, 27])
                last = await client.ingest_times(SEGMENT, 36, 2**63 - 1)
                assert (last[0], [at for at, _ in last[1]]) == (45, [36])
                parts.append(runs + rest[1] + last[1])
                await client.flush_to_storage(0)
                assert await _storage_length(service) == 45
            assert parts[0] == parts[1]
    finally:
        await service.stop()


async def test_ingest_times_need_read_on_the_stream_as_a_read_does(tmp_path: Path) -> None:
    service = await _service(tmp_path, signing_key=KEY)
    signer = TokenSigner(KEY)
    peer = await WirePeer.connect(service.endpoint)
    try:
        master = signer.sign(acl.raw_stream("sc", "st"), Permission.READ_UPDATE)
        assert await peer.request(CreateSegment(1, SEGMENT, 0, 0, master, 0)) == SegmentCreated(1, SEGMENT)
        read = signer.sign(acl.raw_stream("sc", "st"), Permission.READ)
        other = signer.sign(acl.raw_stream("sc", "other"), Permission.READ_UPDATE)
        for token in ("", other, "not.a.token"):
            reply = await peer.request(ReadIngestTimes(2, SEGMENT, 0, 100, token))
            assert isinstance(reply, AuthTokenCheckFailed)
            assert reply.error_code == AuthTokenErrorCode.TOKEN_CHECK_FAILED and reply.request_id == 2
        assert await peer.request(ReadIngestTimes(3, SEGMENT, 0, 100, read)) == IngestTimesRead(3, SEGMENT, 0, ())
        missing = await peer.request(ReadIngestTimes(4, "sc/st/7.#epoch.0", 0, 100, read))
        assert isinstance(missing, NoSuchSegment)
    finally:
        await peer.close()
        await service.stop()
