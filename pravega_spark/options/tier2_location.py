"""Option ``tier2Location``: the Tier-2 root as an executor sees it, under which chunk names resolve.

Parsed where the read options are (:mod:`pravega_spark.options.read`, errors naming the option) and used by the
executors' direct Tier-2 reads (:mod:`pravega_spark.read.tier2_direct`).
"""

from __future__ import annotations

import os
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from pravega_spark.errors import SegstoreOptionError


@dataclass(frozen=True, slots=True)
class Tier2Location:
    """The Tier-2 root as an executor sees it; chunk names resolve under it like the chunk storages do.

    ``file`` root: ``<root>/<chunk name>`` (:class:`~segment_store.storage.backends.filesystem.FsChunkStorage`);
    ``s3``: ``s3://<bucket>/<prefix><chunk name>`` plus the query (endpoint override, scheme), as
    :meth:`~segment_store.storage.backends.s3.S3ChunkStorage.location` builds it.
    """

    scheme: str
    """``file`` or ``s3``."""
    root: str
    """``file``: the absolute directory; ``s3``: the bucket."""
    prefix: str = ""
    """``s3``: key prefix, ``""`` or ending in ``/``."""
    query: str = ""
    """``s3``: pyarrow's URI options, encoded as the S3 storage does: ``endpoint_override=h%3A9000&scheme=http``."""

    @classmethod
    def parse(cls, text: str, option: str = "tier2Location") -> Tier2Location:
        """Parse an absolute path, ``file:///dir`` or ``s3://bucket[/prefix][?endpoint_override=...]``.

        Raises:
            SegstoreOptionError: naming ``option``, for anything else.
        """
        value = text.strip()
        parts = urllib.parse.urlsplit(value)
        if parts.scheme == "s3":
            if not parts.netloc:
                raise SegstoreOptionError(option, f"s3 location needs a bucket: {text!r}")
            prefix = urllib.parse.unquote(parts.path).lstrip("/")
            if prefix and not prefix.endswith("/"):
                prefix += "/"
            query = urllib.parse.urlencode(urllib.parse.parse_qsl(parts.query, keep_blank_values=True))
            return cls("s3", parts.netloc, prefix, query)
        if parts.scheme == "file":
            if parts.netloc not in ("", "localhost"):
                raise SegstoreOptionError(option, f"file location must be file:///absolute/dir: {text!r}")
            value = urllib.request.url2pathname(parts.path)
        elif parts.scheme:
            raise SegstoreOptionError(option, f"must be an absolute path, file:/// or s3:// URI, got {text!r}")
        if not os.path.isabs(value):
            raise SegstoreOptionError(option, f"must be an absolute path, file:/// or s3:// URI, got {text!r}")
        return cls("file", os.path.normpath(value))

    def chunk_uri(self, chunk_name: str) -> str:
        """The URI of chunk ``chunk_name`` (what the segment store's chunk storage reports)."""
        if self.scheme == "file":
            return Path(self.root).joinpath(*chunk_name.split("/")).as_uri()
        uri = f"s3://{self.root}/{urllib.parse.quote(self.prefix + chunk_name, safe='/')}"
        return f"{uri}?{self.query}" if self.query else uri
