"""Delayed garbage collection of released chunks (Pravega SLTS ``GarbageCollector``).

A truncate, a segment delete or a compaction releases chunks: the journal record that drops
them from the metadata is durable, but a read may still be on its way to them (a read of this
container that looked the chunk up just before, or a Spark executor that got the chunk's
location from a stream cut). So released chunks are not deleted at once: they wait
``gc_delay_s`` in a queue, then :class:`ChunkGarbageCollector` deletes them.

Rules:

* **Never a live chunk.** Right before deleting, the collector asks for the chunks the current
  metadata references; a queued chunk that is among them is dropped from the queue, not
  deleted (chunk names are never reused, so this only catches bugs: it is logged as an error
  and counted in :attr:`ChunkGarbageCollector.skipped_live`).
* **Never as a zombie.** Before each batch, ``still_primary`` is asked (in a worker thread)
  whether this instance still owns the container's Tier-2 metadata. A newer owner's metadata
  may still reference chunks this instance released in a history the newer owner ignores
  (a zombie's compaction), so once it answers ``False`` the collector stops and drops its queue.
* **Retries.** A failed deletion is retried after ``gc_retry_min_delay_s``, doubling up to
  ``gc_retry_max_delay_s``, at most ``gc_max_attempts`` times; then the chunk is left to the
  next boot's sweep (it is unreferenced, and the sweep deletes every unreferenced data chunk).
* **No delay.** With ``gc_delay_s`` == 0, :meth:`~ChunkGarbageCollector.release` deletes before
  it returns (the chunked storage then behaves as if it deleted released chunks at once).
* **Never a pinned chunk.** A queued chunk that a live pin holds (``held``: seconds it is still held, see
  :mod:`~segment_store.storage.chunk_pins`) is not deleted: it goes back in the queue for at most
  :data:`~segment_store.storage.chunk_pins.MAX_DEFER_S` and is asked about again, so it is deleted soon after the
  pin expires or is released (counted in :attr:`ChunkGarbageCollector.deferred_pinned`).
* **Not durable.** The queue lives in memory; after a crash or :meth:`~ChunkGarbageCollector.stop`
  the boot sweep of the next owner deletes what was queued.

The collector runs on the container's event loop; deletions run in worker threads, at most
``gc_concurrency`` at a time. Its task exists only while the queue is not empty.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import time
from collections.abc import Callable, Iterable, Set
from dataclasses import dataclass, field

from segment_store.storage.chunk_pins import defer_s
from segment_store.storage.chunk_storage import ChunkNotFoundError, ChunkStorage
from segment_store.storage.storage_config import ChunkedStorageConfig

log = logging.getLogger(__name__)


@dataclass(order=True, slots=True)
class _Item:
    due: float
    order: int
    name: str = field(compare=False)
    attempts: int = field(compare=False, default=0)


class ChunkGarbageCollector:
    """Deletes released chunks of one container after a delay (see the module docstring).

    ``referenced`` returns the chunk names the current metadata references (called on the
    loop, once per batch); ``still_primary`` tells, in a worker thread, whether this instance
    still owns the metadata (it may raise; the batch is then retried later).
    """

    def __init__(
        self,
        storage: ChunkStorage,
        container_id: int,
        referenced: Callable[[], Set[str]],
        still_primary: Callable[[], bool],
        config: ChunkedStorageConfig | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        held: Callable[[str], float | None] | None = None,
    ) -> None:
        self._storage = storage
        self._cid = container_id
        self._referenced = referenced
        self._still_primary = still_primary
        self._config = config or ChunkedStorageConfig()
        self._clock = clock
        self._held = held
        self._queue: list[_Item] = []
        self._order = itertools.count()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopped = False
        self.deleted = 0
        """Chunks deleted (or found gone) so far."""
        self.skipped_live = 0
        """Queued chunks found referenced by the metadata, hence not deleted (a bug elsewhere)."""
        self.deferred_pinned = 0
        """Times a due chunk was put back because a live pin holds it."""
        self.given_up = 0
        """Chunks left to the boot sweep after ``gc_max_attempts`` failed deletions."""

    @property
    def pending(self) -> list[str]:
        """Names waiting for deletion, soonest first."""
        return [item.name for item in sorted(self._queue)]

    @property
    def stopped(self) -> bool:
        return self._stopped

    def enqueue(self, names: Iterable[str]) -> None:
        """Queue released chunks for deletion ``gc_delay_s`` from now (ignored once stopped)."""
        if self._stopped:
            return
        due = self._clock() + self._config.gc_delay_s
        added = False
        for name in names:
            heapq.heappush(self._queue, _Item(due, next(self._order), name))
            added = True
        if not added:
            return
        self._wake.set()
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name=f"chunk-gc-c{self._cid}")

    async def release(self, names: Iterable[str]) -> None:
        """Queue released chunks; with ``gc_delay_s`` == 0 delete them before returning (failures are retried later)."""
        self.enqueue(names)
        if self._config.gc_delay_s == 0:
            await self.collect()

    async def collect(self) -> int:
        """Delete every chunk that is due now; return how many were deleted (or were already gone).

        Called by the background task; tests with a manual clock call it directly.
        """
        due: list[_Item] = []
        now = self._clock()
        while self._queue and self._queue[0].due <= now:
            due.append(heapq.heappop(self._queue))
        if not due or self._stopped:
            return 0
        try:
            primary = await asyncio.to_thread(self._still_primary)
        except Exception as exc:
            log.warning("container %s: cannot check ownership before deleting chunks: %r", self._cid, exc)
            for item in due:
                self._retry(item)
            return 0
        if not primary:
            log.error(
                "container %s: a newer owner exists; not deleting %d released chunks (left to its sweep)",
                self._cid,
                len(due) + len(self._queue),
            )
            self._stop_now()
            return 0
        live = self._referenced()
        doomed: list[_Item] = []
        for item in due:
            if item.name in live:
                self.skipped_live += 1
                log.error("container %s: released chunk %r is referenced again; not deleting it", self._cid, item.name)
            elif self._held is not None and (held_s := self._held(item.name)) is not None:
                self.deferred_pinned += 1
                heapq.heappush(self._queue, _Item(now + defer_s(held_s), next(self._order), item.name, item.attempts))
            else:
                doomed.append(item)
        limit = asyncio.Semaphore(self._config.gc_concurrency)

        async def delete(item: _Item) -> int:
            async with limit:
                try:
                    await asyncio.to_thread(self._storage.delete_if_exists, item.name)
                except ChunkNotFoundError:
                    return 1  # gone meanwhile (e.g. its directory was pruned under the delete)
                except Exception as exc:
                    log.warning("container %s: cannot delete chunk %r: %r", self._cid, item.name, exc)
                    self._retry(item)
                    return 0
                return 1

        done = sum(await asyncio.gather(*(delete(item) for item in doomed)))
        self.deleted += done
        return done

    def _retry(self, item: _Item) -> None:
        item.attempts += 1
        if item.attempts >= self._config.gc_max_attempts:
            self.given_up += 1
            log.warning(
                "container %s: giving up deleting chunk %r after %d attempts (the boot sweep will)",
                self._cid,
                item.name,
                item.attempts,
            )
            return
        pause = min(self._config.gc_retry_min_delay_s * 2 ** (item.attempts - 1), self._config.gc_retry_max_delay_s)
        heapq.heappush(self._queue, _Item(self._clock() + pause, next(self._order), item.name, item.attempts))

    async def _run(self) -> None:
        while self._queue and not self._stopped:
            wait = self._queue[0].due - self._clock()
            if wait > 0:
                self._wake.clear()
                try:
                    async with asyncio.timeout(wait):
                        await self._wake.wait()  # an earlier item may have been queued meanwhile
                except TimeoutError:
                    pass
                continue
            try:
                await self.collect()
            except Exception as exc:  # a bug: keep the loop alive, the queue is retried
                log.exception("container %s: chunk garbage collection failed: %r", self._cid, exc)
                await asyncio.sleep(self._config.gc_retry_min_delay_s)

    def _stop_now(self) -> None:
        self._stopped = True
        self._queue.clear()
        self._wake.set()

    async def stop(self) -> None:
        """Stop; queued chunks are left to the next boot's sweep. Idempotent."""
        if self._queue:
            log.info("container %s: %d released chunks left to the next boot's sweep", self._cid, len(self._queue))
        self._stop_now()
        if self._task is not None and not self._task.done():
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
