"""S3 chunk storage: one object per chunk under ``s3://{bucket}/{prefix}{chunk name}`` (boto3).

The port's guarantees map onto S3 like this:

* **Atomic publish.** A ``PutObject`` is atomic; a chunk of ``multipart_threshold_bytes`` or more
  is sent as a multipart upload, whose parts are invisible until ``CompleteMultipartUpload``
  (a failed upload is aborted; one cut short by a crash is never visible either, and an S3
  lifecycle rule ``AbortIncompleteMultipartUpload`` should reclaim its parts).
* **No overwrite.** Both calls carry ``If-None-Match: *`` (S3 conditional writes, 2024): the
  write of an existing key fails with 412, raised as :class:`ChunkAlreadyExistsError`. No
  read-then-write race, across processes too.
* **Read-your-writes.** S3 is strongly consistent (since December 2020).
* **Durability.** S3's, once the call returned.

Reads are ranged ``GetObject`` calls. ``delete`` and ``delete_if_exists`` ask ``HeadObject``
first (S3's ``DeleteObject`` succeeds on a missing key): a chunk deleted by someone else in
between is reported as present, which the callers (the GC, the boot sweep, cleanups) do not
mind. Unlike a filesystem, S3 lets ``a`` and ``a/b`` both be chunks (no directory clash
check; segstore never makes such names).

Errors: connection errors, timeouts, 5xx and throttling (``SlowDown``...) raise
:class:`ChunkStorageUnavailableError`; a missing key :class:`ChunkNotFoundError`; anything else
(``AccessDenied``, ``NoSuchBucket``) a plain :class:`ChunkStorageError` (not retriable: a
configuration problem). botocore's own retries (``max_attempts``) run first.

The boto3 client is synchronous and thread-safe; the chunked storage calls this class from
worker threads. Multipart parts are sent ``part_concurrency`` at a time.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import urllib.parse
from collections.abc import Iterator, Sequence
from typing import Any

import botocore.exceptions
from botocore.config import Config

from segment_store.storage.chunk_storage import (
    MAX_NAME_BYTES,
    ChunkAlreadyExistsError,
    ChunkData,
    ChunkInfo,
    ChunkNotFoundError,
    ChunkRangeError,
    ChunkStorageError,
    ChunkStorageUnavailableError,
    InvalidChunkNameError,
    as_buffers,
    check_read_range,
    validate_chunk_name,
)

log = logging.getLogger(__name__)

MIB = 1024 * 1024
MIN_PART_BYTES = 5 * MIB
"""S3's smallest multipart part (but the last)."""
_NOT_FOUND = frozenset({"NoSuchKey", "404", "NotFound"})
_UNAVAILABLE = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "RequestTimeout",
        "RequestTimeTooSkewed",
        "InternalError",
        "ServiceUnavailable",
        "OperationAborted",
    }
)
_CONNECTION_ERRORS = (
    botocore.exceptions.ConnectionError,  # endpoint unreachable, connect/read timeouts, connection closed
    botocore.exceptions.HTTPClientError,
    botocore.exceptions.ResponseStreamingError,
    botocore.exceptions.IncompleteReadError,
    OSError,
)


def make_s3_client(
    *,
    endpoint_url: str | None = None,
    region: str | None = None,
    access_key_id: str | None = None,
    secret_access_key: str | None = None,
    session_token: str | None = None,
    connect_timeout_s: float = 5.0,
    read_timeout_s: float = 30.0,
    max_attempts: int = 3,
    max_pool_connections: int = 16,
    session: Any = None,
) -> Any:
    """A boto3 S3 client. Credentials left ``None`` come from boto3's default chain
    (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/``AWS_SESSION_TOKEN``, ``~/.aws``, instance role).
    A custom ``endpoint_url`` (MinIO, moto) uses path-style addressing. Clients of one
    ``boto3.session.Session`` share its loaded service model (a new client costs ~10 ms, not ~150)."""
    import boto3  # deferred: boto3 takes ~0.3 s to import and filesystem-only runs never need it

    config = Config(
        connect_timeout=connect_timeout_s,
        read_timeout=read_timeout_s,
        retries={"mode": "standard", "total_max_attempts": max_attempts},
        max_pool_connections=max_pool_connections,
        s3={"addressing_style": "path" if endpoint_url else "auto"},
    )
    return (session or boto3.session.Session()).client(
        "s3",
        endpoint_url=endpoint_url,
        region_name=region,
        aws_access_key_id=access_key_id,
        aws_secret_access_key=secret_access_key,
        aws_session_token=session_token,
        config=config,
    )


def map_s3_error(name: str, exc: BaseException) -> ChunkStorageError:
    """Translate a botocore/connection error about chunk ``name`` into the port's error tree."""
    if isinstance(exc, ChunkStorageError):
        return exc
    if isinstance(exc, botocore.exceptions.ClientError):
        error = exc.response.get("Error", {})
        code = str(error.get("Code", ""))
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        detail = f"S3 {code or status}: {error.get('Message', '')}"
        if code in _NOT_FOUND:
            return ChunkNotFoundError(name)
        if code == "PreconditionFailed" or status == 412:
            return ChunkAlreadyExistsError(name)
        if code == "InvalidRange" or status == 416:
            return ChunkRangeError(name, detail)
        if code in _UNAVAILABLE or status >= 500 or status == 429:
            return ChunkStorageUnavailableError(name, detail)
        return ChunkStorageError(name, detail)
    if isinstance(exc, _CONNECTION_ERRORS):
        return ChunkStorageUnavailableError(name, f"S3 unreachable: {exc!r}")
    return ChunkStorageError(name, f"S3 call failed: {exc!r}")


class S3ChunkStorage:
    """A :class:`~segment_store.storage.chunk_storage.ChunkStorage` in an S3 bucket (see module docstring).

    Args:
        client: a boto3 S3 client (:func:`make_s3_client`); closed by :meth:`close`.
        bucket: an existing bucket (:meth:`check_bucket` verifies or creates it).
        prefix: key prefix of every chunk (``""`` or ending in ``/``; a missing ``/`` is added).
        endpoint_url: the custom endpoint, if any: :meth:`location` puts it in the URI for pyarrow.
        multipart_threshold_bytes: chunks of this size or more go as multipart uploads.
        part_bytes: multipart part size (at least 5 MiB).
        part_concurrency: parts uploaded at once per chunk.

    Raises:
        ValueError: a bad prefix or sizes.
    """

    def __init__(
        self,
        client: Any,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        multipart_threshold_bytes: int = 16 * MIB,
        part_bytes: int = 8 * MIB,
        part_concurrency: int = 4,
    ) -> None:
        if prefix and not prefix.endswith("/"):
            prefix += "/"
        if prefix.startswith("/") or "//" in prefix:
            raise ValueError(f"prefix: {prefix!r} must not start with '/' or hold '//'")
        if part_bytes < MIN_PART_BYTES:
            raise ValueError(f"part_bytes: must be at least {MIN_PART_BYTES} (S3's minimum part)")
        if multipart_threshold_bytes < part_bytes:
            raise ValueError("multipart_threshold_bytes: must be >= part_bytes")
        if part_concurrency < 1:
            raise ValueError("part_concurrency: must be at least 1")
        self._client = client
        self._bucket = bucket
        self._prefix = prefix
        self._endpoint = endpoint_url
        self._threshold = multipart_threshold_bytes
        self._part_bytes = part_bytes
        self._part_concurrency = part_concurrency
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()

    @property
    def bucket(self) -> str:
        return self._bucket

    @property
    def prefix(self) -> str:
        return self._prefix

    def check_bucket(self, *, create: bool = False, region: str | None = None) -> None:
        """Check that the bucket is reachable; with ``create``, create it if missing.

        Raises:
            ChunkStorageError: no such bucket (and not ``create``), or no access.
            ChunkStorageUnavailableError: S3 is unreachable.
        """
        try:
            self._client.head_bucket(Bucket=self._bucket)
            return
        except Exception as exc:
            error = map_s3_error(self._bucket, exc)
            if not (create and isinstance(error, ChunkNotFoundError)):
                if isinstance(error, ChunkNotFoundError):
                    raise ChunkStorageError(self._bucket, "no such S3 bucket") from exc
                raise error from exc
        kwargs: dict[str, Any] = {"Bucket": self._bucket}
        if region and region != "us-east-1":
            kwargs["CreateBucketConfiguration"] = {"LocationConstraint": region}
        try:
            self._client.create_bucket(**kwargs)
        except botocore.exceptions.ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "BucketAlreadyOwnedByYou":  # created meanwhile by us
                raise map_s3_error(self._bucket, exc) from exc
        except Exception as exc:
            raise map_s3_error(self._bucket, exc) from exc

    def _key(self, name: str) -> str:
        validate_chunk_name(name)
        key = self._prefix + name
        if len(key.encode("utf-8")) > MAX_NAME_BYTES:
            raise InvalidChunkNameError(name, f"prefix + chunk name longer than {MAX_NAME_BYTES} bytes (S3 key limit)")
        return key

    # -- writes ---------------------------------------------------------------------------

    def write_chunk(self, name: str, data: ChunkData) -> ChunkInfo:
        """Create the object, failing if it exists (``If-None-Match: *``); multipart above the threshold."""
        key = self._key(name)
        views = as_buffers(data)
        size = sum(v.nbytes for v in views)
        try:
            if size < self._threshold:
                body = views[0].obj if len(views) == 1 and _is_whole_bytes(views[0]) else b"".join(views)
                self._client.put_object(Bucket=self._bucket, Key=key, Body=body, IfNoneMatch="*")
            else:
                self._multipart(name, key, views, size)
        except Exception as exc:
            error = map_s3_error(name, exc)
            if isinstance(error, ChunkAlreadyExistsError) and not self.exists(name):
                # Refused, yet no such object: a store with real directories (SeaweedFS) refuses a key that
                # names a directory of other keys, as the filesystem backend does.
                raise InvalidChunkNameError(name, "it names a directory of other chunks on this S3 store") from exc
            raise error from exc
        return ChunkInfo(name, size)

    def _multipart(self, name: str, key: str, views: list[memoryview], size: int) -> None:
        upload_id = self._client.create_multipart_upload(Bucket=self._bucket, Key=key)["UploadId"]
        try:
            ranges = [(start, min(start + self._part_bytes, size)) for start in range(0, size, self._part_bytes)]

            def upload(number: int, start: int, end: int) -> dict[str, Any]:
                body = _slice(views, start, end)
                reply = self._client.upload_part(
                    Bucket=self._bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=body
                )
                part = {"PartNumber": number, "ETag": reply["ETag"]}
                for field in ("ChecksumCRC32", "ChecksumCRC32C", "ChecksumSHA1", "ChecksumSHA256"):
                    if reply.get(field):
                        part[field] = reply[field]
                return part

            futures = [self._executor().submit(upload, i + 1, s, e) for i, (s, e) in enumerate(ranges)]
            parts = [f.result() for f in futures]  # the first failure is raised (the rest still finish)
            self._before_complete(name)
            self._client.complete_multipart_upload(
                Bucket=self._bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": parts}, IfNoneMatch="*"
            )
        except BaseException:
            try:
                self._client.abort_multipart_upload(Bucket=self._bucket, Key=key, UploadId=upload_id)
            except Exception as exc:
                log.warning("cannot abort multipart upload of %r (a lifecycle rule reclaims it): %r", key, exc)
            raise

    def _before_complete(self, name: str) -> None:
        """Test hook: runs after every part is uploaded, before the upload is completed."""

    def _executor(self) -> concurrent.futures.ThreadPoolExecutor:
        with self._pool_lock:
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(self._part_concurrency, "s3-part")
            return self._pool

    # -- reads ----------------------------------------------------------------------------

    def read(self, name: str, offset: int, length: int) -> bytes:
        """Ranged GET of ``[offset, offset + length)``; a range past the end raises ChunkRangeError."""
        key = self._key(name)
        if offset < 0 or length < 0:
            raise ChunkRangeError(name, f"negative offset {offset} or length {length}")
        if length == 0:
            check_read_range(name, offset, length, self.info(name).length)
            return b""
        try:
            reply = self._client.get_object(Bucket=self._bucket, Key=key, Range=f"bytes={offset}-{offset + length - 1}")
            data: bytes = reply["Body"].read()
        except Exception as exc:
            error = map_s3_error(name, exc)
            if isinstance(error, ChunkRangeError):  # the range starts at or past the end
                check_read_range(name, offset, length, self.info(name).length)
            raise error from exc
        if len(data) != length:
            total = _total_length(reply.get("ContentRange"))
            check_read_range(name, offset, length, total if total is not None else offset + len(data))
            raise ChunkStorageUnavailableError(name, f"short read: {len(data)} of {length} bytes")
        return data

    def read_all(self, name: str) -> bytes:
        key = self._key(name)
        try:
            reply = self._client.get_object(Bucket=self._bucket, Key=key)
            data: bytes = reply["Body"].read()
        except Exception as exc:
            raise map_s3_error(name, exc) from exc
        if len(data) != reply.get("ContentLength", len(data)):
            raise ChunkStorageUnavailableError(name, f"short read: {len(data)} of {reply['ContentLength']} bytes")
        return data

    def info(self, name: str) -> ChunkInfo:
        key = self._key(name)
        try:
            reply = self._client.head_object(Bucket=self._bucket, Key=key)
        except Exception as exc:
            raise map_s3_error(name, exc) from exc
        return ChunkInfo(name, int(reply["ContentLength"]))

    def exists(self, name: str) -> bool:
        try:
            self.info(name)
        except ChunkNotFoundError:
            return False
        return True

    def list(self, prefix: str = "") -> Iterator[str]:
        """Keys under ``prefix + prefix`` in UTF-8 byte order (1,000 keys per S3 call).

        AWS S3 lists in that order, but not every S3-compatible store does (SeaweedFS walks its directory
        tree: ``a/b`` before ``a-b``), so the whole listing is read, then sorted.
        """
        paginator = self._client.get_paginator("list_objects_v2")
        names: list[str] = []
        try:
            for page in paginator.paginate(Bucket=self._bucket, Prefix=self._prefix + prefix):
                for item in page.get("Contents", ()):
                    name = item["Key"][len(self._prefix) :]
                    if name and not name.endswith("/"):  # "folder" markers made by consoles are not chunks
                        names.append(name)
        except Exception as exc:
            raise map_s3_error(prefix, exc) from exc
        names.sort(key=lambda name: name.encode("utf-8", "surrogatepass"))
        yield from names

    # -- deletes --------------------------------------------------------------------------

    def delete(self, name: str) -> None:
        if not self.delete_if_exists(name):
            raise ChunkNotFoundError(name)

    def delete_if_exists(self, name: str) -> bool:
        if not self.exists(name):
            return False
        try:
            self._client.delete_object(Bucket=self._bucket, Key=self._key(name))
        except Exception as exc:
            raise map_s3_error(name, exc) from exc
        return True

    # -- the rest -------------------------------------------------------------------------

    def location(self, name: str) -> str | None:
        """``s3://bucket/key`` (key percent-encoded); with a custom endpoint, pyarrow's
        ``?endpoint_override=host:port&scheme=http(s)`` too. Credentials come from the reader's environment."""
        uri = f"s3://{self._bucket}/{urllib.parse.quote(self._key(name), safe='/')}"
        if self._endpoint:
            parsed = urllib.parse.urlsplit(self._endpoint)
            query = urllib.parse.urlencode({"endpoint_override": parsed.netloc, "scheme": parsed.scheme or "https"})
            uri += f"?{query}"
        return uri

    def close(self) -> None:
        with self._pool_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)
        close = getattr(self._client, "close", None)
        if close is not None:
            close()


def _is_whole_bytes(view: memoryview) -> bool:
    return isinstance(view.obj, bytes) and view.nbytes == len(view.obj)


def _slice(views: Sequence[memoryview], start: int, end: int) -> bytes:
    """Bytes ``[start, end)`` of the concatenation of ``views``."""
    out: list[memoryview] = []
    position = 0
    for view in views:
        lo, hi = max(start - position, 0), min(end - position, view.nbytes)
        if lo < hi:
            out.append(view[lo:hi])
        position += view.nbytes
        if position >= end:
            break
    return b"".join(out)


def _total_length(content_range: str | None) -> int | None:
    """The total of a ``bytes a-b/total`` header, if known."""
    if not content_range or "/" not in content_range:
        return None
    total = content_range.rpartition("/")[2]
    return int(total) if total.isdigit() else None
