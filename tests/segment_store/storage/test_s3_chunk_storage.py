"""S3 chunk storage beyond the contract suite: multipart uploads, never-visible partial writes, error
mapping, an S3 outage, and the chunked segment storage over S3 (ranged reads, direct Parquet reads)."""

from __future__ import annotations

import os
from typing import Any

import botocore.exceptions
import pyarrow.parquet as pq
import pytest
from s3_fixtures import CREDENTIALS, MotoServer, new_s3_storage, s3_server_fixture  # noqa: F401 (a fixture)
from seaweedfs_fixtures import SeaweedServer, seaweed_server_fixture  # noqa: F401 (a fixture)

from segment_store.storage.backends.faulty import FaultyChunkStorage
from segment_store.storage.backends.s3 import MIB, S3ChunkStorage, map_s3_error
from segment_store.storage.chunk_storage import (
    ChunkAlreadyExistsError,
    ChunkNotFoundError,
    ChunkRangeError,
    ChunkStorageError,
    ChunkStorageUnavailableError,
    InvalidChunkNameError,
)
from segment_store.storage.chunked_storage import ChunkedSegmentStorage
from segment_store.storage.format import parquet_chunk
from segment_store.storage.journal.system_journal import InMemorySnapshotInfoStore
from segment_store.storage.storage_config import ChunkedStorageConfig

pytestmark = pytest.mark.integration

SMALL_PARTS = {"multipart_threshold_bytes": 5 * MIB, "part_bytes": 5 * MIB}


def uploads_in_progress(storage: S3ChunkStorage) -> list[Any]:
    return list(storage._client.list_multipart_uploads(Bucket=storage.bucket).get("Uploads", []))


class PartCounter:
    """A boto3 client proxy counting calls (and failing the n-th upload_part if asked)."""

    def __init__(self, client: Any, fail_part: int | None = None) -> None:
        self._client = client
        self.fail_part = fail_part
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            if name == "upload_part" and kwargs.get("PartNumber") == self.fail_part:
                raise botocore.exceptions.EndpointConnectionError(endpoint_url="http://127.0.0.1:1")
            return attr(*args, **kwargs)

        return call


def test_write_chunk_above_threshold_uses_multipart_and_leaves_no_upload(s3_server: MotoServer) -> None:
    counter = PartCounter(s3_server.client())
    storage = new_s3_storage(s3_server, client=counter, **SMALL_PARTS)
    data = os.urandom(12 * MIB + 3)
    parts = [memoryview(data)[: 3 * MIB], memoryview(data)[3 * MIB :]]  # buffers that do not match part bounds
    assert storage.write_chunk("big", parts).length == len(data)
    assert counter.calls.count("upload_part") == 3
    assert counter.calls.count("complete_multipart_upload") == 1
    assert storage.read_all("big") == data
    assert storage.read("big", 5 * MIB - 2, 4) == data[5 * MIB - 2 : 5 * MIB + 2]
    assert uploads_in_progress(storage) == []
    with pytest.raises(ChunkAlreadyExistsError):
        storage.write_chunk("big", os.urandom(6 * MIB))  # the conditional complete refuses it
    assert storage.read_all("big") == data
    assert uploads_in_progress(storage) == []
    storage.close()


def test_write_chunk_below_threshold_is_one_put(s3_server: MotoServer) -> None:
    counter = PartCounter(s3_server.client())
    storage = new_s3_storage(s3_server, client=counter, **SMALL_PARTS)
    storage.write_chunk("small", [b"a" * 100, b"b" * 100])
    assert counter.calls.count("put_object") == 1 and "create_multipart_upload" not in counter.calls
    assert storage.read_all("small") == b"a" * 100 + b"b" * 100


class VisibilityProbe(S3ChunkStorage):
    """Looks at the chunk after every part is uploaded, before completing, then fails (a crash there)."""

    seen: tuple[bool, list[str]] | None = None

    def _before_complete(self, name: str) -> None:
        self.seen = (self.exists(name), list(self.list()))
        raise ChunkStorageUnavailableError(name, "injected: crash before completing the upload")


def test_multipart_chunk_is_invisible_until_complete_and_aborted_on_failure(s3_server: MotoServer) -> None:
    plain = new_s3_storage(s3_server)
    storage = VisibilityProbe(
        s3_server.client(), plain.bucket, plain.prefix, endpoint_url=s3_server.endpoint, **SMALL_PARTS
    )
    with pytest.raises(ChunkStorageUnavailableError):
        storage.write_chunk("partial", os.urandom(11 * MIB))
    assert storage.seen == (False, [])  # every part was uploaded, yet nothing is visible
    assert not storage.exists("partial")
    assert uploads_in_progress(storage) == []  # the upload was aborted


def test_failed_part_upload_leaves_nothing_and_is_retriable(s3_server: MotoServer) -> None:
    storage = new_s3_storage(s3_server, client=PartCounter(s3_server.client(), fail_part=2), **SMALL_PARTS)
    with pytest.raises(ChunkStorageUnavailableError) as caught:
        storage.write_chunk("c", os.urandom(11 * MIB))
    assert caught.value.retriable
    assert not storage.exists("c") and uploads_in_progress(storage) == []


def test_outage_raises_unavailable_and_recovers(s3_server: MotoServer) -> None:
    client = s3_server.client(connect_timeout_s=0.5, read_timeout_s=0.5)
    storage = new_s3_storage(s3_server, client=client)
    storage.write_chunk("before", b"x")
    with s3_server.outage():
        for call in (
            lambda: storage.write_chunk("during", b"y"),
            lambda: storage.read_all("before"),
            lambda: storage.read("before", 0, 1),
            lambda: storage.exists("before"),
            lambda: list(storage.list()),
            lambda: storage.delete_if_exists("before"),
        ):
            with pytest.raises(ChunkStorageUnavailableError):
                call()
    assert storage.read_all("before") == b"x"
    storage.write_chunk("after", b"z")  # "during" may have landed late: the port allows either
    assert {"before", "after"} <= set(storage.list())


def test_missing_bucket_is_a_configuration_error(s3_server: MotoServer) -> None:
    storage = S3ChunkStorage(s3_server.client(), "no-such-bucket-here")
    with pytest.raises(ChunkStorageError) as caught:
        storage.check_bucket()
    assert not caught.value.retriable
    with pytest.raises(ChunkStorageError) as caught:
        storage.read_all("x")
    assert not isinstance(caught.value, ChunkNotFoundError | ChunkStorageUnavailableError)


def test_bucket_created_by_another_process_meanwhile_is_fine(seaweed_server: SeaweedServer) -> None:
    """Segment stores starting together with ``--s3-create-bucket`` race to create the bucket; SeaweedFS (like AWS
    outside us-east-1) answers the losers ``BucketAlreadyOwnedByYou``, which means the bucket is there."""
    client = seaweed_server.client()
    client.create_bucket(Bucket="raced")
    storage = S3ChunkStorage(client, "raced")
    missing = botocore.exceptions.ClientError({"Error": {"Code": "404", "Message": "Not Found"}}, "HeadBucket")

    def not_yet(**_: Any) -> None:  # this process looked before the other created it
        raise missing

    storage._client = PartCounter(client)
    storage._client.head_bucket = not_yet  # type: ignore[method-assign]
    storage.check_bucket(create=True)
    storage.write_chunk("works", b"1")
    assert storage.read_all("works") == b"1"


def test_read_ranges_past_the_end_raise_range_error(s3_server: MotoServer) -> None:
    storage = new_s3_storage(s3_server)
    storage.write_chunk("r", b"0123456789")
    storage.write_chunk("empty", b"")
    for name, offset, length in [("r", 10, 1), ("r", 8, 3), ("r", 11, 0), ("r", 100, 5), ("empty", 0, 1)]:
        with pytest.raises(ChunkRangeError):
            storage.read(name, offset, length)
    assert storage.read("r", 10, 0) == b""


def test_prefix_and_key_length(s3_server: MotoServer) -> None:
    storage = new_s3_storage(s3_server, prefix="a/b")
    assert storage.prefix == "a/b/"
    storage.write_chunk("c", b"1")
    assert storage._client.get_object(Bucket=storage.bucket, Key="a/b/c")["Body"].read() == b"1"
    assert list(storage.list()) == ["c"]
    with pytest.raises(InvalidChunkNameError):
        storage.write_chunk("/".join(["d" * 200] * 5) + "xxxxxxxxxxxxxxxxx", b"2")  # fits alone, not with the prefix
    location = storage.location("s p/a#b")
    assert (
        location == f"s3://{storage.bucket}/a/b/s%20p/a%23b?endpoint_override=127.0.0.1%3A{s3_server.port}&scheme=http"
    )
    with pytest.raises(ValueError):
        S3ChunkStorage(None, "b", "/abs")
    with pytest.raises(ValueError):
        S3ChunkStorage(None, "b", part_bytes=MIB)


def client_error(code: str, status: int) -> botocore.exceptions.ClientError:
    return botocore.exceptions.ClientError(
        {"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}}, "Op"
    )


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (client_error("NoSuchKey", 404), ChunkNotFoundError),
        (client_error("404", 404), ChunkNotFoundError),
        (client_error("PreconditionFailed", 412), ChunkAlreadyExistsError),
        (client_error("InvalidRange", 416), ChunkRangeError),
        (client_error("SlowDown", 503), ChunkStorageUnavailableError),
        (client_error("InternalError", 500), ChunkStorageUnavailableError),
        (client_error("RequestTimeout", 400), ChunkStorageUnavailableError),
        (client_error("Whatever", 502), ChunkStorageUnavailableError),
        (client_error("TooManyRequests", 429), ChunkStorageUnavailableError),
        (botocore.exceptions.EndpointConnectionError(endpoint_url="x"), ChunkStorageUnavailableError),
        (botocore.exceptions.ReadTimeoutError(endpoint_url="x"), ChunkStorageUnavailableError),
        (botocore.exceptions.ConnectTimeoutError(endpoint_url="x"), ChunkStorageUnavailableError),
        (ConnectionResetError(), ChunkStorageUnavailableError),
    ],
)
def test_map_s3_error(error: BaseException, expected: type[ChunkStorageError]) -> None:
    mapped = map_s3_error("n", error)
    assert type(mapped) is expected
    assert mapped.chunk_name == "n"


@pytest.mark.parametrize("code", ["AccessDenied", "NoSuchBucket", "InvalidAccessKeyId"])
def test_map_s3_error_with_configuration_problem_is_not_retriable(code: str) -> None:
    mapped = map_s3_error("n", client_error(code, 403))
    assert type(mapped) is ChunkStorageError and not mapped.retriable


# -- the chunked segment storage over S3 -------------------------------------------------------


async def test_chunked_storage_over_s3_round_trip_with_gc_compaction_and_reopen(s3_server: MotoServer) -> None:
    chunks = new_s3_storage(s3_server)
    pointer = InMemorySnapshotInfoStore(1)
    config = ChunkedStorageConfig(
        retry_delay_s=0.0,
        gc_delay_s=0,
        compaction_enabled=False,
        compaction_min_chunks=3,
        compaction_small_chunk_bytes=4096,
    )
    storage = ChunkedSegmentStorage(chunks, 1, pointer, config)
    await storage.open(1)
    await storage.create("scope/stream/0.#epoch.0", "raw")
    data = b""
    for i in range(6):
        piece = os.urandom(1000)
        await storage.write("scope/stream/0.#epoch.0", len(data), [piece], i)
        data += piece
    assert await storage.compactor.compact_segment("scope/stream/0.#epoch.0") == 1
    await storage.truncate("scope/stream/0.#epoch.0", 100)
    assert await storage.read("scope/stream/0.#epoch.0", 100, len(data) - 100) == data[100:]
    [ref] = await storage.chunks("scope/stream/0.#epoch.0")
    assert ref.location is not None and ref.location.startswith(f"s3://{chunks.bucket}/segstore/data/c1/")
    await storage.close()
    reopened = ChunkedSegmentStorage(chunks, 1, pointer, config)
    await reopened.open(2)
    assert await reopened.read("scope/stream/0.#epoch.0", 100, len(data) - 100) == data[100:]
    assert set(chunks.list("data/")) == {ref.chunk_name}
    await reopened.close()


async def test_large_chunk_is_read_by_ranges_and_directly_by_pyarrow(
    s3_server: MotoServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    faulty = FaultyChunkStorage(new_s3_storage(s3_server))
    config = ChunkedStorageConfig(retry_delay_s=0.0, chunk_cache_bytes=1 * MIB, compaction_enabled=False)
    storage = ChunkedSegmentStorage(faulty, 2, InMemorySnapshotInfoStore(2), config)
    await storage.open(1)
    await storage.create("s", "raw")
    data = os.urandom(9 * MIB)
    await storage.write("s", 0, [data], 5)
    reader = ChunkedSegmentStorage(faulty, 2, storage._info_store, config)  # cold: nothing cached
    await reader.open(2)
    faulty.calls.clear()
    assert await reader.read("s", 4 * MIB + 17, 1000) == data[4 * MIB + 17 : 4 * MIB + 1017]
    ops = [op for op, _ in faulty.calls]
    assert "read_all" not in ops and 1 <= ops.count("read") <= 4  # footer and one or two row groups
    [ref] = await reader.chunks("s")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", CREDENTIALS["access_key_id"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", CREDENTIALS["secret_access_key"])
    assert ref.location is not None
    assert parquet_chunk.decode_range(ref.location, 123, 456) == data[123:579]  # an executor's direct read
    assert pq.read_metadata(ref.location).num_rows == 9
    await reader.close()
