"""Deleting the files of a table directory that no kept snapshot refers to (manifests after snapshot expiry,
trimmed copies), wherever the table's FileIO reaches: a local directory, S3, GCS, HDFS, ...

Blocking pyiceberg code: only in the table's one committer, the maintainer's worker process (:mod:`.worker`).

pyiceberg's FileIO opens, writes and deletes files but lists none, so the listing goes to the filesystem under it:
a ``PyArrowFileIO``'s pyarrow filesystem for the URL's scheme and bucket (the one its reads and writes use: same
endpoint, region, credentials), or an ``FsspecFileIO``'s fsspec filesystem; the deleting goes through the FileIO.
A directory is listed as the FileIO resolves the URL (no percent-decoding: where the FileIO wrote the files).
A table whose FileIO is neither keeps its unreferenced files (said once per FileIO class, at INFO).
"""

from __future__ import annotations

import contextlib
import logging
import urllib.parse
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyiceberg.io import FileIO

log = logging.getLogger(__name__)

_UNLISTABLE: set[str] = set()
"""FileIO classes already said (at INFO) to list nothing."""


def list_file_names(io: FileIO, directory_url: str) -> list[str] | None:
    """Names of the files directly in ``directory_url`` (not recursive; ``[]`` for a directory that does not
    exist), or None when ``io`` cannot list. Raises what the filesystem raises (OSError) for any other failure."""
    from pyiceberg.io.fsspec import FsspecFileIO
    from pyiceberg.io.pyarrow import PyArrowFileIO

    if isinstance(io, PyArrowFileIO):
        from pyarrow.fs import FileSelector, FileType

        scheme, netloc, path = io.parse_location(directory_url, io.properties)
        infos = io.fs_by_scheme(scheme, netloc).get_file_info(FileSelector(path, allow_not_found=True))
        return [info.base_name for info in infos if info.type == FileType.File]
    if isinstance(io, FsspecFileIO):
        parts = urllib.parse.urlsplit(directory_url)
        try:
            entries = io.get_fs(parts.scheme or "file", parts.hostname).ls(directory_url, detail=True)
        except FileNotFoundError:
            return []
        return [str(e["name"]).rstrip("/").rsplit("/", 1)[-1] for e in entries if e.get("type") == "file"]
    kind = f"{type(io).__module__}.{type(io).__qualname__}"
    if kind not in _UNLISTABLE:
        _UNLISTABLE.add(kind)
        log.info("iceberg: FileIO %s cannot list a directory: unreferenced manifests and copies stay", kind)
    return None


def delete_unreferenced_files(io: FileIO, directory_url: str, suffix: str, referenced: Callable[[], set[str]]) -> int:
    """Delete the files ``*suffix`` directly in ``directory_url`` (any URL ``io`` reaches, or a local path) whose
    names ``referenced()`` leaves out; ``referenced`` is called only when there is such a file. Nothing when ``io``
    cannot list (:func:`list_file_names`). Only on the table's committer thread. Returns how many were deleted."""
    names = list_file_names(io, directory_url)
    found = [name for name in names or () if name.endswith(suffix)]
    if not found:
        return 0
    kept = referenced()
    deleted = 0
    for name in found:
        if name not in kept:
            with contextlib.suppress(FileNotFoundError):  # gone meanwhile: nothing to do
                io.delete(f"{directory_url.rstrip('/')}/{name}")
                deleted += 1
    return deleted


__all__ = ["delete_unreferenced_files", "list_file_names"]
