"""Read helpers of the chunked segment storage for backends without a local path (S3, memory).

* :class:`ChunkCache`: an LRU of whole chunks (sequential reads of one chunk fetch it once), plus
  a small LRU of chunk *tails* (size and the last bytes, which hold the Parquet footer).
* :class:`RangedChunkFile`: a read-only, seekable file over one chunk, for chunks too big to keep
  whole: pyarrow reads the footer (served from the tail cache after the first time) and the row
  groups it needs, each one ranged read. So a read of a large S3 chunk costs one GET, not
  HEAD + footer GET + data GET.

Both are thread-safe; reads run in worker threads.
"""

from __future__ import annotations

import io
import threading
from collections import OrderedDict
from typing import Any

from segment_store.storage.chunk_storage import ChunkStorage

TAIL_CACHE_BYTES = 8 * 1024 * 1024
"""Budget of cached chunk tails (a footer read is 64 KiB: about 128 chunks)."""
MAX_TAIL_BYTES = 1024 * 1024
"""Largest read at the end of a chunk kept as its tail."""


class ChunkCache:
    """A thread-safe LRU of chunk bytes with a byte budget (chunks above it are not kept), and of tails."""

    def __init__(self, max_bytes: int, tail_bytes: int = TAIL_CACHE_BYTES) -> None:
        self._max = max_bytes
        self._items: OrderedDict[str, bytes] = OrderedDict()
        self._size = 0
        self._tail_max = tail_bytes
        self._tails: OrderedDict[str, tuple[int, int, bytes]] = OrderedDict()
        self._tail_size = 0
        self._lock = threading.Lock()

    def get(self, name: str) -> bytes | None:
        with self._lock:
            data = self._items.get(name)
            if data is not None:
                self._items.move_to_end(name)
            return data

    def put(self, name: str, data: bytes) -> None:
        if len(data) > self._max:
            return
        with self._lock:
            old = self._items.pop(name, None)
            if old is not None:
                self._size -= len(old)
            self._items[name] = data
            self._size += len(data)
            while self._size > self._max:
                _, evicted = self._items.popitem(last=False)
                self._size -= len(evicted)

    def get_tail(self, name: str) -> tuple[int, int, bytes] | None:
        """``(chunk size, offset of the tail, tail bytes)`` of chunk ``name``, if cached."""
        with self._lock:
            tail = self._tails.get(name)
            if tail is not None:
                self._tails.move_to_end(name)
            return tail

    def put_tail(self, name: str, size: int, offset: int, data: bytes) -> None:
        if len(data) > min(MAX_TAIL_BYTES, self._tail_max) or offset + len(data) != size:
            return
        with self._lock:
            old = self._tails.pop(name, None)
            if old is not None:
                self._tail_size -= len(old[2])
            self._tails[name] = (size, offset, data)
            self._tail_size += len(data)
            while self._tail_size > self._tail_max:
                _, (_, _, evicted) = self._tails.popitem(last=False)
                self._tail_size -= len(evicted)

    def discard(self, name: str) -> None:
        with self._lock:
            old = self._items.pop(name, None)
            if old is not None:
                self._size -= len(old)
            tail = self._tails.pop(name, None)
            if tail is not None:
                self._tail_size -= len(tail[2])

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._size = 0
            self._tails.clear()
            self._tail_size = 0


class RangedChunkFile(io.RawIOBase):
    """A read-only, seekable file over chunk ``name`` fetching only the ranges read (worker threads).

    Raises the chunk storage's errors (ChunkNotFoundError from the constructor if the chunk is gone).
    """

    def __init__(self, storage: ChunkStorage, name: str, cache: ChunkCache) -> None:
        super().__init__()
        self._storage = storage
        self._name = name
        self._cache = cache
        self._tail = cache.get_tail(name)
        self._size = self._tail[0] if self._tail is not None else storage.info(name).length
        self._position = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self._size}[whence]
        self._position = max(base + offset, 0)
        return self._position

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        start = self._position
        count = max(min(view.nbytes, self._size - start), 0)
        if count == 0:
            return 0
        tail = self._tail
        if tail is not None and start >= tail[1]:
            view[:count] = memoryview(tail[2])[start - tail[1] : start - tail[1] + count]
        else:
            data = self._storage.read(self._name, start, count)
            view[:count] = data
            if start + count == self._size:
                self._cache.put_tail(self._name, self._size, start, data)
        self._position = start + count
        return count
