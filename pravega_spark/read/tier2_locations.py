"""Where a segment's Tier-2 chunks are, as the segment store reports them (no ``tier2Location`` needed).

The segment store answers segstore's wire extension ``ListStorageChunkLocations`` with the Tier-2 kind and, per
chunk, where it lives (:class:`~segment_store.client.StorageChunkLocations`). :func:`reported_chunks` turns that
into URIs this executor can open, or stops where it cannot:

* ``file``: the chunk's absolute path on the segment store's host, as a ``file://`` URI. An executor on the same
  host, or with the same mount at the same path, opens it; one without the file fails to open it and the
  reader falls back to the segment store (every opened chunk is checked against the listed length first).
* ``s3``: ``s3://<bucket>/<key>`` with the endpoint this executor is given (``AWS_ENDPOINT_URL_S3``, else
  ``AWS_ENDPOINT_URL``, as the segment store's own configuration reads them), else the one the segment store
  uses; credentials are never on the wire: the executor's own (:func:`s3_credentials_given`), as pyarrow reads
  them. Without any, nothing is read from S3 here (the segment store serves the range).
* none (in-memory Tier-2): nothing.

An S3 store whose chunk this process could not open (credentials refused, endpoint not reachable from here) is
left alone for ``S3_RETRY_AFTER_S`` (:func:`note_unopenable`), so tasks do not each wait for it to fail.

A Pravega segment store does not know the extension: it closes the connection. Then the segment is asked
something it knows (its info): if that is answered, the client is remembered as talking to a segment store
without the extension (never asked again) and nothing is read directly; if not, the ConnectionLostError is
raised (the segment store cannot be asked at all).
"""

from __future__ import annotations

import os
import time
import urllib.parse
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

from segment_store.client import ConnectionLostError, StorageChunkLocations
from segment_store.protocol import MAX_LISTED_CHUNKS, TIER2_FILE, TIER2_S3

_S3_ENDPOINT_ENV = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
S3_RETRY_AFTER_S = 300.0
"""How long this process leaves an S3 store alone after it could not open a chunk there (not for its absence)."""
_refused: dict[tuple[str, str], float] = {}
"""(bucket, pyarrow query with the endpoint) -> when to try that store again (``time.monotonic``)."""
_without_extension: weakref.WeakSet[Any] = weakref.WeakSet()
"""Clients whose segment store closed the connection on the extension but answered a plain request."""


def s3_credentials_given(env: dict[str, str] | None = None) -> bool:
    """True if this process is given S3 credentials: ``AWS_ACCESS_KEY_ID`` and ``AWS_SECRET_ACCESS_KEY``, a
    profile (``AWS_PROFILE``), web identity or container credentials, or a shared credentials file
    (``AWS_SHARED_CREDENTIALS_FILE``, default ``~/.aws/credentials``). An instance role alone does not count:
    pass ``tier2Location`` then (it uses pyarrow's whole credential chain)."""
    env = dict(os.environ) if env is None else env
    if env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY"):
        return True
    named = ("AWS_PROFILE", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI")
    if any(env.get(name) for name in (*named, "AWS_CONTAINER_CREDENTIALS_FULL_URI")):
        return True
    shared = env.get("AWS_SHARED_CREDENTIALS_FILE") or os.path.join(os.path.expanduser("~"), ".aws", "credentials")
    return os.path.isfile(shared)


def s3_uri(bucket: str, key: str, reported_endpoint: str, env: dict[str, str] | None = None) -> str:
    """The URI pyarrow opens for S3 object ``key`` in ``bucket``: through the endpoint this process is given, else
    ``reported_endpoint`` (the segment store's; "" is AWS's own)."""
    env = dict(os.environ) if env is None else env
    endpoint = next((env[name] for name in _S3_ENDPOINT_ENV if env.get(name)), reported_endpoint)
    uri = f"s3://{bucket}/{urllib.parse.quote(key, safe='/')}"
    if not endpoint:
        return uri
    parts = urllib.parse.urlsplit(endpoint)
    query = urllib.parse.urlencode({"endpoint_override": parts.netloc, "scheme": parts.scheme or "https"})
    return f"{uri}?{query}"


_Call = Callable[[str, int, int], StorageChunkLocations]


def note_unopenable(uri: str, error: BaseException) -> None:
    """Opening chunk ``uri`` failed with ``error``. For S3 other than a missing object (credentials refused, an
    endpoint this executor cannot reach, each costing a request or timeouts), the store is not tried again from
    this process for ``S3_RETRY_AFTER_S``: :func:`reported_chunks` gives no chunks there meanwhile."""
    parts = urllib.parse.urlsplit(uri)
    if parts.scheme == "s3" and isinstance(error, OSError) and not isinstance(error, FileNotFoundError):
        _refused[(parts.netloc, parts.query)] = time.monotonic() + S3_RETRY_AFTER_S


def refused_stores() -> set[tuple[str, str]]:
    """The S3 stores (bucket, query) left alone now (see :func:`note_unopenable`)."""
    now = time.monotonic()
    return {store for store, until in _refused.items() if until > now}


def _locations_call(client: Any) -> _Call | None:
    """The blocking extension call of ``client``: the ``list_storage_chunk_locations`` of a BlockingClient, of a
    ``pravega_spark.connection.StreamConnection`` (which asks the segment's owner again after a move), of a
    stand-in; None if it has none."""
    call: _Call | None = getattr(client, "list_storage_chunk_locations", None)
    return call


def speaks_extension(client: Any) -> bool:
    """False if ``client`` has no way to send the extension, or its segment store turned out not to know it."""
    return client not in _without_extension and _locations_call(client) is not None


def _is_refused(uri: str) -> bool:
    parts = urllib.parse.urlsplit(uri)
    return _refused.get((parts.netloc, parts.query), 0.0) > time.monotonic()


def _uri(located: StorageChunkLocations, path: str) -> str | None:
    if located.kind == TIER2_FILE and os.path.isabs(path):
        return Path(path).as_uri()
    if located.kind == TIER2_S3 and located.bucket:
        return s3_uri(located.bucket, path, located.endpoint)
    return None


def reported_chunks(client: Any, segment: str, start: int, end: int) -> tuple[int, list[tuple[int, int, str]]]:
    """The segment's start offset and the contiguous chunks from the one holding ``start`` on (up to ``end``)
    that this process can open, as ``(start, length, uri)`` in offset order, stopping at the first it cannot
    (see the module docstring). Needs :func:`speaks_extension`.

    Raises:
        ReplyError: the segment store's error reply (NoSuchSegmentError, AuthTokenCheckFailedError...).
        ConnectionLostError: the segment store answers nothing (not even the segment's info).
    """
    call = _locations_call(client)
    assert call is not None, "reported_chunks needs a client that speaks the extension"
    chunks: list[tuple[int, int, str]] = []
    offset = start
    while True:
        try:
            located = call(segment, offset, end)
        except ConnectionLostError:
            client.get_segment_info(segment)  # answered: that segment store does not know the extension
            _without_extension.add(client)
            return 0, []
        if located.kind == TIER2_S3 and not s3_credentials_given():
            return located.start_offset, []
        for chunk in located.chunks:
            uri = _uri(located, chunk.path)
            if uri is not None and located.kind == TIER2_S3 and _is_refused(uri):
                return located.start_offset, chunks
            if uri is None or (chunks and chunks[-1][0] + chunks[-1][1] != chunk.start_offset):
                return located.start_offset, chunks
            chunks.append((chunk.start_offset, chunk.length, uri))
        if len(located.chunks) < MAX_LISTED_CHUNKS or chunks[-1][0] + chunks[-1][1] >= end:
            return located.start_offset, chunks
        offset = chunks[-1][0] + chunks[-1][1]  # a full reply: the next ones from there


__all__ = [
    "S3_RETRY_AFTER_S",
    "note_unopenable",
    "refused_stores",
    "reported_chunks",
    "s3_credentials_given",
    "s3_uri",
    "speaks_extension",
]
