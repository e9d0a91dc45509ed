"""Filesystem chunk storage: one file per chunk under a root directory (the default Tier-2).

Chunk ``"scope/stream/0.#epoch.0.E-1-O-0.c0"`` is the file ``<root>/scope/stream/0.#epoch.0.E-1-O-0.c0``.
A write goes to a hidden temporary file in the target directory, is fsync'd, and is published
with ``link(2)``, which fails instead of replacing an existing name; the directory is fsync'd
afterwards. So a chunk is visible whole or not at all, an existing chunk is never overwritten,
and a returned write survives a crash. A crash between the temporary write and the link leaves
a hidden ``.<name>.<uuid>.tmp`` file that no listing shows; :meth:`FsChunkStorage.sweep_temp_files`
removes old ones.

Several processes (segment store processes on one host, or hosts sharing NFS) may use one root:
every operation is a single system call on its own name, and directory creation and pruning
tolerate each other.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import stat
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from segment_store.storage.chunk_storage import (
    ChunkAlreadyExistsError,
    ChunkData,
    ChunkInfo,
    ChunkNotFoundError,
    ChunkStorageError,
    ChunkStorageFullError,
    ChunkStorageUnavailableError,
    InvalidChunkNameError,
    as_buffers,
    check_read_range,
    validate_chunk_name,
)
from segstore_shared.loop_stalls import ACTIVITY

_log = logging.getLogger(__name__)

_TEMP_SUFFIX = ".tmp"
_TEMP_STEM_BYTES = 120
_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
_OUTAGE_ERRNOS = frozenset(
    {
        errno.EIO,
        errno.ESTALE,
        errno.ETIMEDOUT,
        errno.EAGAIN,
        errno.EBUSY,
        errno.EINTR,
        errno.ENOLCK,
        errno.EROFS,
        errno.ENETDOWN,
        errno.ENETUNREACH,
        errno.EHOSTDOWN,
        errno.EHOSTUNREACH,
        errno.ECONNRESET,
        errno.ECONNREFUSED,
    }
)
_NO_LINK_ERRNOS = frozenset({errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK})
_MKDIR_ATTEMPTS = 5


def map_os_error(name: str, exc: OSError) -> ChunkStorageError:
    """Translate an ``OSError`` about chunk ``name`` into the port's error tree.

    Missing file (or a parent that is a file) -> :class:`ChunkNotFoundError`; no space ->
    :class:`ChunkStorageFullError`; I/O, network-filesystem and timeout errors ->
    :class:`ChunkStorageUnavailableError` (retriable); anything else (permissions, ...) ->
    :class:`ChunkStorageError`.
    """
    detail = f"{exc.strerror or exc} (errno {exc.errno})"
    if exc.errno in (errno.ENOENT, errno.ENOTDIR):
        return ChunkNotFoundError(name)
    if exc.errno in _FULL_ERRNOS:
        return ChunkStorageFullError(name, f"no space left: {detail}")
    if exc.errno in _OUTAGE_ERRNOS:
        return ChunkStorageUnavailableError(name, f"storage unavailable: {detail}")
    return ChunkStorageError(name, f"storage error: {detail}")


class FsChunkStorage:
    """A :class:`~segment_store.storage.chunk_storage.ChunkStorage` on a local or network filesystem.

    Thread-safe and multi-process-safe (see the module docstring). ``durable=False`` skips the
    fsyncs: for tests and benchmarks only, a crash may then lose acknowledged chunks.

    Raises (constructor): :class:`ChunkStorageError` if ``root`` cannot be created.
    """

    def __init__(self, root: str | os.PathLike[str], *, durable: bool = True) -> None:
        self._root = Path(root).absolute()
        self._durable = durable
        self._use_link = True
        self._fallback_lock = threading.Lock()
        try:
            self._root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise map_os_error(str(self._root), exc) from exc

    @property
    def root(self) -> Path:
        """The root directory (absolute)."""
        return self._root

    def write_chunk(self, name: str, data: ChunkData) -> ChunkInfo:
        """Write ``data`` to a temporary file, fsync it, publish it with ``link``, fsync the directory.

        Raises:
            ChunkAlreadyExistsError: the name exists; its content is untouched.
            InvalidChunkNameError: bad name, or the name clashes with a directory/file of another chunk.
            ChunkStorageUnavailableError: I/O error or outage; no chunk was published, unless
                only the final directory fsync failed (then it is visible, durability unknown).
            ChunkStorageFullError: no space left; no chunk was published.
        """
        path = self._path(name)
        views = as_buffers(data)
        if os.path.lexists(path):
            raise self._exists_error(name, path)
        length = sum(v.nbytes for v in views)
        stem = path.name.encode()[:_TEMP_STEM_BYTES].decode(errors="ignore")  # stay under 255 bytes
        temp = path.parent / f".{stem}.{uuid.uuid4().hex}{_TEMP_SUFFIX}"
        try:
            fd = self._create_temp(name, temp)
            published = False
            try:
                try:
                    _write_all(fd, views)
                    if self._durable:
                        started = time.perf_counter()
                        os.fsync(fd)
                        ACTIVITY.note("tier2_fsync", started, time.perf_counter())
                finally:
                    os.close(fd)
                self._before_publish(name, str(temp))
                self._publish(name, temp, path)
                published = True
            finally:
                if not published or self._use_link:
                    self._remove_temp(temp)
            if self._durable:
                _fsync_dir(path.parent)
        except OSError as exc:
            raise map_os_error(name, exc) from exc
        return ChunkInfo(name, length)

    def read(self, name: str, offset: int, length: int) -> bytes:
        """Read exactly ``length`` bytes from ``offset`` with ``pread``.

        Raises:
            ChunkNotFoundError: no such chunk.
            ChunkRangeError: the range is not inside the chunk.
        """
        path = self._path(name)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                size = _regular_size(name, os.fstat(fd))
                check_read_range(name, offset, length, size)
                return _pread_exact(name, fd, offset, length)
            finally:
                os.close(fd)
        except OSError as exc:
            raise map_os_error(name, exc) from exc

    def read_all(self, name: str) -> bytes:
        """Read the whole chunk. Raises :class:`ChunkNotFoundError` if missing."""
        path = self._path(name)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                size = _regular_size(name, os.fstat(fd))
                return _pread_exact(name, fd, 0, size)
            finally:
                os.close(fd)
        except OSError as exc:
            raise map_os_error(name, exc) from exc

    def info(self, name: str) -> ChunkInfo:
        """Return the chunk's length. Raises :class:`ChunkNotFoundError` if missing."""
        path = self._path(name)
        try:
            return ChunkInfo(name, _regular_size(name, os.stat(path)))
        except OSError as exc:
            raise map_os_error(name, exc) from exc

    def exists(self, name: str) -> bool:
        """Tell whether the chunk exists as a regular file."""
        try:
            self.info(name)
        except ChunkNotFoundError:
            return False
        return True

    def delete(self, name: str) -> None:
        """Unlink the chunk, fsync and prune now-empty parent directories.

        Raises:
            ChunkNotFoundError: no such chunk.
        """
        if not self.delete_if_exists(name):
            raise ChunkNotFoundError(name)

    def delete_if_exists(self, name: str) -> bool:
        """Unlink the chunk if present; return whether it was."""
        path = self._path(name)
        try:
            try:
                os.unlink(path)
            except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
                return False
            except PermissionError:
                if path.is_dir():  # unlink(2) on a directory fails with EPERM on some systems
                    return False
                raise
            if self._durable:
                # a racing delete may have emptied and removed the directory: our entry went with it
                with contextlib.suppress(FileNotFoundError):
                    _fsync_dir(path.parent)
        except OSError as exc:
            raise map_os_error(name, exc) from exc
        self._prune_dirs(path.parent)
        return True

    def list(self, prefix: str = "") -> Iterator[str]:
        """Yield chunk names starting with ``prefix`` in code-point order, lazily.

        Directories are walked in an order where a directory sorts as its name plus '/', which
        gives exactly the order of the full names. Hidden (temporary) files are skipped.
        """
        directory, _, _ = prefix.rpartition("/")
        if directory:
            try:
                validate_chunk_name(directory)
            except InvalidChunkNameError:
                return iter(())  # no valid name can start with this prefix
        start = self._root.joinpath(*directory.split("/")) if directory else self._root
        return self._walk(start, directory, prefix)

    def location(self, name: str) -> str | None:
        """Return the ``file://`` URI of the chunk (percent-encoded; pyarrow decodes it)."""
        return self._path(name).as_uri()

    def close(self) -> None:
        """Nothing to release."""

    def sweep_temp_files(self, older_than_s: float = 3600.0) -> int:
        """Delete temporary files of crashed writes older than ``older_than_s``; return how many.

        Younger ones may belong to a write in progress (in any process) and are kept.
        """
        cutoff = time.time() - older_than_s
        removed = 0
        for dirpath, _dirs, files in os.walk(self._root):
            for file in files:
                if not (file.startswith(".") and file.endswith(_TEMP_SUFFIX)):
                    continue
                full = os.path.join(dirpath, file)
                with contextlib.suppress(FileNotFoundError):
                    if os.stat(full).st_mtime < cutoff:
                        os.unlink(full)
                        removed += 1
        return removed

    # -- hooks and helpers ----------------------------------------------------------------

    def _before_publish(self, name: str, temp_path: str) -> None:
        """Called after the temporary file is written and synced, before it is linked.

        A no-op; fault tests override it to fail or kill the process at that point.
        """

    def _path(self, name: str) -> Path:
        validate_chunk_name(name)
        return self._root.joinpath(*name.split("/"))

    def _exists_error(self, name: str, path: Path) -> ChunkStorageError:
        if path.is_dir():
            return InvalidChunkNameError(name, "chunk name is a directory holding other chunks")
        return ChunkAlreadyExistsError(name)

    def _create_temp(self, name: str, temp: Path) -> int:
        """Create parents and open ``temp`` exclusively; retry if a concurrent delete pruned a parent."""
        for attempt in range(_MKDIR_ATTEMPTS):
            self._make_dirs(name, temp.parent)
            try:
                return os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            except FileNotFoundError:
                if attempt == _MKDIR_ATTEMPTS - 1:
                    raise
        raise AssertionError("unreachable")

    def _make_dirs(self, name: str, directory: Path) -> None:
        """Create ``directory`` and missing parents below the root, fsyncing each new entry."""
        missing: list[Path] = []
        current = directory
        while current != self._root and not current.is_dir():
            missing.append(current)
            current = current.parent
        for new_dir in reversed(missing):
            try:
                os.mkdir(new_dir)
            except FileExistsError:
                if not new_dir.is_dir():
                    raise InvalidChunkNameError(name, f"{new_dir.name!r} is a chunk, not a directory") from None
                continue
            except NotADirectoryError:
                raise InvalidChunkNameError(name, "a parent of the chunk name is a chunk") from None
            if self._durable:
                _fsync_dir(new_dir.parent)

    def _publish(self, name: str, temp: Path, path: Path) -> None:
        """Make ``temp`` visible as ``path`` without ever replacing an existing ``path``."""
        if self._use_link:
            try:
                os.link(temp, path)
                return
            except FileExistsError:
                raise self._exists_error(name, path) from None
            except OSError as exc:
                if exc.errno not in _NO_LINK_ERRNOS:
                    raise
                _log.warning("hard links unsupported under %s (%s); using checked rename", self._root, exc)
                self._use_link = False
        # Fallback for filesystems without hard links: atomic publish, but the no-overwrite check
        # only holds against writers in this process (names are unique by construction anyway).
        with self._fallback_lock:
            if os.path.lexists(path):
                raise self._exists_error(name, path)
            os.rename(temp, path)

    def _remove_temp(self, temp: Path) -> None:
        """Remove a temporary file; a failure is logged, not raised (the file is hidden and swept)."""
        try:
            os.unlink(temp)
        except FileNotFoundError:
            pass
        except OSError as exc:
            _log.warning("could not remove temporary file %s: %s", temp, exc)

    def _prune_dirs(self, directory: Path) -> None:
        """Remove empty directories from ``directory`` up to (not including) the root."""
        current = directory
        while current != self._root:
            try:
                os.rmdir(current)
            except OSError:
                return  # not empty (or already gone, or raced with a writer): stop
            current = current.parent

    def _walk(self, directory: Path, rel: str, prefix: str) -> Iterator[str]:
        try:
            with os.scandir(directory) as it:
                entries = [(e.name, e.is_dir()) for e in it if not e.name.startswith(".")]
        except (FileNotFoundError, NotADirectoryError):
            return
        except OSError as exc:
            raise map_os_error(prefix, exc) from exc
        entries.sort(key=lambda e: e[0] + "/" if e[1] else e[0])
        for entry_name, is_dir in entries:
            full = f"{rel}/{entry_name}" if rel else entry_name
            if is_dir:
                below = full + "/"
                if below.startswith(prefix) or prefix.startswith(below):
                    yield from self._walk(directory / entry_name, full, prefix)
            elif full.startswith(prefix):
                yield full


def _write_all(fd: int, views: list[memoryview]) -> None:
    for view in views:
        while view.nbytes:
            written = os.write(fd, view)
            view = view[written:]


def _pread_exact(name: str, fd: int, offset: int, length: int) -> bytes:
    data = os.pread(fd, length, offset)
    if len(data) == length:
        return data
    parts = [data]
    got = len(data)
    while got < length:
        more = os.pread(fd, length - got, offset + got)
        if not more:
            raise ChunkStorageError(name, f"chunk shrank while reading ({got} of {length} bytes)")
        parts.append(more)
        got += len(more)
    return b"".join(parts)


def _regular_size(name: str, st: os.stat_result) -> int:
    if not stat.S_ISREG(st.st_mode):
        raise ChunkNotFoundError(name, "not a chunk (a directory)")
    return st.st_size


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
