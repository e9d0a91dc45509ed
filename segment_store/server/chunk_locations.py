"""The reply to ``ListStorageChunkLocations`` (segstore extension): where each Tier-2 chunk of a segment lives.

The chunk storage gives each chunk's location as a URI (``ChunkStorage.location``): ``file:///abs/path`` for
the filesystem, ``s3://bucket/key[?endpoint_override=host:port&scheme=http]`` for S3, None when nobody outside
the segment store can open it (memory). This module turns those into the reply's fields: the Tier-2 kind once
(and, with S3, the bucket and the endpoint the segment store uses), a path or key per chunk. Never credentials:
S3 URIs carry none (readers bring their own).
"""

from __future__ import annotations

import urllib.parse
import urllib.request
from collections.abc import Sequence

from segment_store.protocol import (
    MAX_LISTED_CHUNKS,
    TIER2_FILE,
    TIER2_NONE,
    TIER2_S3,
    ChunkLocation,
    StorageChunkLocationsListed,
)
from segment_store.storage.segment_storage import ChunkRef


def _place(uri: str | None) -> tuple[str, str, str, str]:
    """``(kind, endpoint, bucket, path)`` of one chunk location URI (kind ``TIER2_NONE`` if not openable)."""
    if uri is None:
        return TIER2_NONE, "", "", ""
    parts = urllib.parse.urlsplit(uri)
    if parts.scheme == "file":
        return TIER2_FILE, "", "", urllib.request.url2pathname(parts.path)
    if parts.scheme == "s3" and parts.netloc:
        query = dict(urllib.parse.parse_qsl(parts.query))
        override = query.get("endpoint_override", "")
        endpoint = f"{query.get('scheme', 'https')}://{override}" if override else ""
        return TIER2_S3, endpoint, parts.netloc, urllib.parse.unquote(parts.path)[1:]
    return TIER2_NONE, "", "", ""


def locations_reply(
    request_id: int, segment: str, start_offset: int, chunks: Sequence[ChunkRef], from_offset: int, to_offset: int
) -> StorageChunkLocationsListed:
    """The reply for ``segment`` whose first readable offset is ``start_offset`` and whose Tier-2 chunks are
    ``chunks`` (in offset order): those holding bytes of ``[from_offset, to_offset)``, at most
    ``MAX_LISTED_CHUNKS``. Chunks of different kinds, buckets or endpoints (no chunk storage makes such) are
    answered as not openable from outside rather than half described."""
    chunks = [c for c in chunks if c.start_offset + c.length > from_offset and c.start_offset < to_offset]
    chunks = chunks[:MAX_LISTED_CHUNKS]
    places = [_place(chunk.location) for chunk in chunks]
    stores = {place[:3] for place in places}
    if len(stores) > 1 or (places and places[0][0] == TIER2_NONE):
        kind, endpoint, bucket = TIER2_NONE, "", ""
        paths = [""] * len(chunks)
    else:
        kind, endpoint, bucket = stores.pop() if stores else (TIER2_NONE, "", "")
        paths = [place[3] for place in places]
    listed = tuple(
        ChunkLocation(chunk.start_offset, chunk.length, chunk.chunk_name, path)
        for chunk, path in zip(chunks, paths, strict=True)
    )
    return StorageChunkLocationsListed(request_id, segment, start_offset, kind, endpoint, bucket, listed)
