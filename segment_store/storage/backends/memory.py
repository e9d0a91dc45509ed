"""In-memory chunk storage: for unit tests and the in-memory service builder only.

Data is lost with the process. It enforces the same name rules as the filesystem backend
(including "a chunk cannot also be a directory") so tests catch names that would fail on disk.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator

from segment_store.storage.chunk_storage import (
    ChunkAlreadyExistsError,
    ChunkData,
    ChunkInfo,
    ChunkNotFoundError,
    InvalidChunkNameError,
    as_buffers,
    check_read_range,
    validate_chunk_name,
)


class MemoryChunkStorage:
    """A :class:`~segment_store.storage.chunk_storage.ChunkStorage` kept in a dict.

    Thread-safe (one lock around every call); writes are atomic because the chunk is built
    in full before it is put into the dict under the lock. :meth:`location` is ``None``:
    outside readers cannot reach it.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._chunks: dict[str, bytes] = {}
        self._dirs: Counter[str] = Counter()  # directory prefix -> number of chunks below it

    def write_chunk(self, name: str, data: ChunkData) -> ChunkInfo:
        """Store ``data`` under ``name``; see the port for the contract.

        Raises:
            ChunkAlreadyExistsError: the name exists; the old content is kept.
            InvalidChunkNameError: bad name, or a file/directory clash with another chunk.
        """
        validate_chunk_name(name)
        content = b"".join(as_buffers(data))
        parents = _parents(name)
        with self._lock:
            if name in self._chunks:
                raise ChunkAlreadyExistsError(name)
            if name in self._dirs:
                raise InvalidChunkNameError(name, "chunk name is a directory prefix of other chunks")
            clash = next((p for p in parents if p in self._chunks), None)
            if clash is not None:
                raise InvalidChunkNameError(name, f"chunk name is below existing chunk {clash!r}")
            self._chunks[name] = content
            self._dirs.update(parents)
        return ChunkInfo(name, len(content))

    def read(self, name: str, offset: int, length: int) -> bytes:
        """Return ``length`` bytes from ``offset``.

        Raises:
            ChunkNotFoundError: no such chunk.
            ChunkRangeError: the range is not inside the chunk.
        """
        content = self._get(name)
        check_read_range(name, offset, length, len(content))
        return content[offset : offset + length]

    def read_all(self, name: str) -> bytes:
        """Return the whole chunk. Raises :class:`ChunkNotFoundError` if missing."""
        return self._get(name)

    def info(self, name: str) -> ChunkInfo:
        """Return the chunk's length. Raises :class:`ChunkNotFoundError` if missing."""
        return ChunkInfo(name, len(self._get(name)))

    def exists(self, name: str) -> bool:
        """Tell whether the chunk exists."""
        validate_chunk_name(name)
        with self._lock:
            return name in self._chunks

    def delete(self, name: str) -> None:
        """Delete the chunk. Raises :class:`ChunkNotFoundError` if missing."""
        if not self.delete_if_exists(name):
            raise ChunkNotFoundError(name)

    def delete_if_exists(self, name: str) -> bool:
        """Delete the chunk if present; return whether it was."""
        validate_chunk_name(name)
        with self._lock:
            if self._chunks.pop(name, None) is None:
                return False
            self._dirs.subtract(_parents(name))
            for parent in _parents(name):
                if self._dirs[parent] <= 0:
                    del self._dirs[parent]
            return True

    def list(self, prefix: str = "") -> Iterator[str]:
        """Yield names starting with ``prefix`` in sorted order (a snapshot taken at the call)."""
        with self._lock:
            names = sorted(n for n in self._chunks if n.startswith(prefix))
        return iter(names)

    def location(self, name: str) -> str | None:
        """Return ``None``: in-memory chunks are not reachable from outside the process."""
        validate_chunk_name(name)
        return None

    def close(self) -> None:
        """Nothing to release; the data stays readable (tests may inspect it)."""

    def _get(self, name: str) -> bytes:
        validate_chunk_name(name)
        with self._lock:
            content = self._chunks.get(name)
        if content is None:
            raise ChunkNotFoundError(name)
        return content


def _parents(name: str) -> list[str]:
    """Directory prefixes of ``name``: ``"a/b/c"`` -> ``["a", "a/b"]``."""
    parts = name.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]
