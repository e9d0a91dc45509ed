"""Parquet encoding of data chunks, where it runs: a worker thread of this process, or a pool of worker processes.

:class:`ChunkEncoder` is the port :class:`~segment_store.storage.chunked_storage.ChunkedSegmentStorage` encodes
through (``ChunkedStorageConfig.encode_processes`` chooses; the service makes one encoder per process, shared by its
containers):

* :class:`ThreadChunkEncoder` (``encode_processes = 0``, the default): :func:`parquet_chunk.encode` in a worker
  thread. pyarrow and numpy hold the GIL in parts of it, so a large chunk can make the event loop late
  (10-27 ms measured for an 8.6 MB chunk).
* :class:`ProcessChunkEncoder` (``encode_processes = N``): a pool of N spawned worker processes, started once
  (:meth:`~ProcessChunkEncoder.start`, which also imports pyarrow in each), so no encode holds this process's GIL.
  The chunk's bytes are copied once, into a POSIX shared memory block the worker encodes from (the copy the
  thread path makes anyway to join the buffers); the worker puts the encoded chunk in a new block, which this
  process copies out and unlinks. Both copies are numpy's, which release the GIL (a ``memoryview`` assignment or
  a pickled result would hold it for the copy and the page faults: 25-50 ms per 8 MB on a busy machine).

Invariants of the process pool:

* bounded: at most ``2 * processes`` encodes are submitted at once (so at most that many shared memory blocks
  exist); more wait their turn;
* a worker that dies (killed, out of memory) breaks the pool: it is replaced by a new one (once per broken pool,
  whichever encode sees it first) and every encode that was in it is encoded again, once; an encode whose second
  attempt also loses its worker raises :class:`ChunkEncodeError` (retriable). Encoding is deterministic and a
  worker names its output block only once the encode has finished and the block holds all of it, so a chunk is
  never written half encoded, and a failed encode writes nothing: the storage writer retries the flush;
* a worker idle for 5 s returns the memory its encodes freed to the OS (:func:`release_memory`);
* shared memory blocks are unlinked when their encode ends, whatever the outcome (a cancelled encode unlinks its
  output when the worker is done; a worker killed between making its output block and returning leaves it to
  the multiprocessing resource tracker, which unlinks it when this process exits); :meth:`close` stops the
  workers.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import multiprocessing
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import shared_memory
from typing import Protocol

import numpy as np

from segment_store.storage.chunk_storage import BufferLike, as_buffers
from segment_store.storage.format import parquet_chunk
from segment_store.storage.format.parquet_chunk import IngestTimes
from segment_store.storage.segment_storage import Framing
from segstore_shared.errors import SegstoreError
from segstore_shared.loop_stalls import ACTIVITY
from segstore_shared.memory_release import release_memory

ENCODE_IN_PROCESS = "parquet_encode_process"
"""The activity noted for an encode in a worker process (it cannot hold the loop: not a loop holder)."""


class ChunkEncodeError(SegstoreError):
    """A chunk could not be encoded: its worker process died twice. Nothing was written; retry later."""

    retriable = True


class ChunkEncoder(Protocol):
    """Encodes segment bytes as a Parquet chunk (:func:`parquet_chunk.encode`); raises what it raises (ValueError
    on bad input) and :class:`ChunkEncodeError` if the encoding could not run. Encodes may run concurrently;
    each result is exactly the in-thread encoding of its input."""

    async def start(self) -> None:
        """Get ready (start workers); encoding before it is allowed (it starts them then)."""

    async def encode(
        self, data: Sequence[BufferLike], ingest_times: IngestTimes, framing: Framing, compression: str
    ) -> bytes | memoryview: ...

    async def close(self) -> None:
        """Stop the workers; no encode may run after."""


class ThreadChunkEncoder:
    """Encodes in a worker thread of this process (see module docstring)."""

    async def start(self) -> None:
        return None  # the service's start encodes a tiny chunk in a thread already (pyarrow's lazy imports)

    async def encode(
        self, data: Sequence[BufferLike], ingest_times: IngestTimes, framing: Framing, compression: str
    ) -> bytes | memoryview:
        encode = functools.partial(parquet_chunk.encode, compression=compression)
        return await asyncio.to_thread(ACTIVITY.timed, "parquet_encode", encode, data, ingest_times, framing)

    async def close(self) -> None:
        return None


Worker = Callable[[str, int, IngestTimes, Framing, str], tuple[str, int]]
"""What a worker process runs: ``(input block name, size, ingest times, framing, compression)`` -> ``(output block
name, size)``: the encoded chunk in a new shared memory block, which the caller unlinks."""


def encode_shared(
    name: str, size: int, ingest_times: IngestTimes, framing: Framing, compression: str
) -> tuple[str, int]:
    """In a worker process: encode the first ``size`` bytes of shared memory block ``name`` into a new block."""
    try:
        return shared_output(encode_input(name, size, ingest_times, framing, compression))
    finally:
        _WORKER_IDLE.encoded()


class _IdleRelease:
    """In a worker process: once it has encoded nothing for ``after_s``, return its freed memory to the OS (the
    pyarrow pool and the C heap keep what the encodes freed: ~190 MB RSS idle after 8 MB chunks, without)."""

    def __init__(self, after_s: float = 5.0) -> None:
        self.after_s = after_s
        self._last = 0.0
        self._dirty = False
        self._lock = threading.Lock()

    def encoded(self) -> None:
        with self._lock:
            self._last, self._dirty = time.monotonic(), True

    def run(self) -> None:
        while True:
            time.sleep(self.after_s / 2)  # a worker's background timer, not a wait for a condition
            with self._lock:
                due = self._dirty and time.monotonic() - self._last >= self.after_s
                self._dirty = self._dirty and not due
            if due:
                release_memory()


_WORKER_IDLE = _IdleRelease()


def _worker_started() -> None:
    """The pool's initializer, in each worker: the idle memory release runs beside the encodes."""
    threading.Thread(target=_WORKER_IDLE.run, name="idle-memory-release", daemon=True).start()


def encode_input(name: str, size: int, ingest_times: IngestTimes, framing: Framing, compression: str) -> bytes:
    """In a worker process: the chunk encoding the first ``size`` bytes of shared memory block ``name``."""
    block = shared_memory.SharedMemory(name=name)
    try:
        assert block.buf is not None
        return parquet_chunk.encode(block.buf[:size], ingest_times, framing, compression=compression)
    finally:
        block.close()


def shared_output(encoded: bytes) -> tuple[str, int]:
    """In a worker process: ``encoded`` in a new shared memory block (left for the caller to unlink)."""
    block, size = _shared_copy([encoded])
    name = block.name
    block.close()
    return name, size


def _warm_up() -> int:
    parquet_chunk.encode(b"warm-up", 0, "raw")
    return multiprocessing.current_process().pid or 0


class ProcessChunkEncoder:
    """Encodes in a pool of ``processes`` worker processes (see module docstring). ``worker``: what they run
    (a module-level function; tests wrap :func:`encode_shared` to inject faults)."""

    def __init__(self, processes: int, worker: Worker = encode_shared, start_method: str = "spawn") -> None:
        if processes < 1:
            raise ValueError("encode_processes: a process pool needs at least 1 process")
        self.processes = processes
        self._worker = worker
        self._context = multiprocessing.get_context(start_method)
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None
        self._slots: asyncio.Semaphore | None = None
        self._closed = False
        self.pools_started = 0
        """Pools started so far (1 + the replacements of broken ones)."""

    @property
    def worker_pids(self) -> list[int]:
        """The pids of the current pool's workers (tests kill them)."""
        pool = self._pool
        return [] if pool is None else list(getattr(pool, "_processes", {}) or {})

    def _current_pool(self) -> concurrent.futures.ProcessPoolExecutor:
        if self._closed:
            raise ChunkEncodeError("the chunk encoder is closed")
        if self._pool is None:
            self._pool = concurrent.futures.ProcessPoolExecutor(
                self.processes, mp_context=self._context, initializer=_worker_started
            )
            self.pools_started += 1
        return self._pool

    def _replace(self, broken: concurrent.futures.ProcessPoolExecutor) -> None:
        """``broken`` lost a worker: the next encode starts a new pool (unless another encode already did)."""
        if self._pool is broken:
            self._pool = None
            broken.shutdown(wait=False, cancel_futures=True)

    async def start(self) -> None:
        """Start the workers and import pyarrow in each (a worker's first encode would take ~1 s more)."""
        loop = asyncio.get_running_loop()
        pool = self._current_pool()
        await asyncio.gather(*(loop.run_in_executor(pool, _warm_up) for _ in range(self.processes)))

    async def encode(
        self, data: Sequence[BufferLike], ingest_times: IngestTimes, framing: Framing, compression: str
    ) -> bytes | memoryview:
        if self._slots is None:
            self._slots = asyncio.Semaphore(2 * self.processes)
        async with self._slots:
            started = time.perf_counter()
            copying = asyncio.ensure_future(asyncio.to_thread(_shared_copy, data))
            try:
                block, size = await asyncio.shield(copying)
            except asyncio.CancelledError:
                copying.add_done_callback(_discard_input)  # the copy goes on in its thread: its block must go
                raise
            try:
                output, length = await self._encode_block(block, size, ingest_times, framing, compression)
            finally:
                block.close()
                block.unlink()
            try:
                return await asyncio.to_thread(_take_output, output, length)
            finally:
                ACTIVITY.note(ENCODE_IN_PROCESS, started, time.perf_counter())

    async def _encode_block(
        self,
        block: shared_memory.SharedMemory,
        size: int,
        ingest_times: IngestTimes,
        framing: Framing,
        compression: str,
    ) -> tuple[str, int]:
        for attempt in (1, 2):
            pool = self._current_pool()
            try:  # submit raises too if a worker died while the pool was idle
                done = pool.submit(self._worker, block.name, size, ingest_times, framing, compression)
                return await asyncio.shield(asyncio.wrap_future(done))
            except BrokenProcessPool as exc:
                self._replace(pool)
                if attempt == 2:
                    raise ChunkEncodeError(f"a chunk encoder process died twice encoding {size} bytes") from exc
            except asyncio.CancelledError:
                done.add_done_callback(_discard_output)  # the worker may still finish: its block must go
                raise
        raise AssertionError("unreachable")

    async def close(self) -> None:
        self._closed = True
        pool, self._pool = self._pool, None
        if pool is not None:
            await asyncio.to_thread(pool.shutdown, wait=True, cancel_futures=True)


def _shared_copy(data: Sequence[BufferLike]) -> tuple[shared_memory.SharedMemory, int]:
    """A new shared memory block holding the buffers back to back (the one copy of the chunk's bytes), and
    their size (the block has at least one byte)."""
    views = as_buffers(data)
    size = sum(v.nbytes for v in views)
    block = shared_memory.SharedMemory(create=True, size=max(size, 1))
    assert block.buf is not None
    # numpy copies without the GIL (a memoryview assignment holds it, page faults of the new block included:
    # ~50 ms for 8 MB on a busy machine, longer than the encode it moves away)
    target = np.frombuffer(block.buf, dtype=np.uint8, count=size)
    position = 0
    for view in views:
        np.copyto(target[position : position + view.nbytes], np.frombuffer(view, dtype=np.uint8))
        position += view.nbytes
    del target
    return block, size


def _take_output(name: str, size: int) -> memoryview:
    """The encoded chunk out of the worker's block (copied without the GIL into memory of this process), and the
    block unlinked."""
    block = shared_memory.SharedMemory(name=name)
    try:
        assert block.buf is not None
        chunk = np.empty(size, dtype=np.uint8)
        np.copyto(chunk, np.frombuffer(block.buf, dtype=np.uint8, count=size))
        return chunk.data
    finally:
        block.close()
        block.unlink()


def _discard_output(done: concurrent.futures.Future[tuple[str, int]]) -> None:
    """An encode was cancelled: unlink the block its worker made, if it made one."""
    if done.cancelled() or done.exception() is not None:
        return
    name, _ = done.result()
    with contextlib.suppress(FileNotFoundError):
        block = shared_memory.SharedMemory(name=name)
        block.close()
        block.unlink()


def _discard_input(copying: asyncio.Future[tuple[shared_memory.SharedMemory, int]]) -> None:
    """An encode was cancelled while its input was copied: unlink the block the copy made, if it made one."""
    if copying.cancelled() or copying.exception() is not None:
        return
    block, _ = copying.result()
    block.close()
    block.unlink()


def chunk_encoder(encode_processes: int) -> ChunkEncoder:
    """The encoder ``ChunkedStorageConfig.encode_processes`` asks for: 0 = in a thread, N = N worker processes."""
    return ThreadChunkEncoder() if encode_processes == 0 else ProcessChunkEncoder(encode_processes)
