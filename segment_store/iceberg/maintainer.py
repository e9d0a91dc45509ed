"""The table maintainer: keeps every opted-in stream's Iceberg table up to date with its chunk files.

Every ``commit_interval_ms`` it looks at the chunk metadata of the containers running here (the layouts the
storage writer's chunk-final records build: a chunk is final once journaled, and never changes), on the event
loop, which is cheap (no I/O: a walk of in-memory lists); then hands the result to its worker thread, which runs
one :class:`~segment_store.iceberg.sync.TableSync` pass per table and returns. A pass over a table that fails
(catalog down, file IO error) is logged and retried with backoff (doubling from the commit interval to
``retry_max_delay_ms``); meanwhile the stream's appends go on untouched (nothing in the append path waits on
the tables) and the next good pass registers everything missed: the tables catch up. After every pass each
table's status (snapshot, files, lag, failures: :mod:`.status`) is what :meth:`TableMaintainer.statuses` gives
(``segstore admin tables`` and the ``segstore_iceberg_*`` metrics).

Why a thread, and one: pyiceberg is blocking (catalog and file IO) and CPU-heavy in pure Python (a commit deep
copies the table metadata ~14 times: 30-70 ms of CPU, research in docs/iceberg.md), so it must never run on the
event loop; one worker thread makes it one committer per table (no compare-and-set conflicts with ourselves)
and bounds what the tables take to one core at most. A thread still shares the GIL with the loop: pyiceberg's
Python code yields it every switch interval (5 ms), so a commit delays the loop by small steps, not by its whole
length; a child process would remove even that, at the cost of shipping layouts and pins across (next step if
the loop-stall metrics show it).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from segment_store.iceberg.config import IcebergConfig
from segment_store.iceberg.incarnation import incarnation_of
from segment_store.iceberg.names import stream_segment
from segment_store.iceberg.status import TableStatus
from segment_store.iceberg.stream_table import ChunkFile, file_path, open_catalog
from segment_store.iceberg.sync import SyncResult, TableSync
from segment_store.storage.chunk_pins import ChunkPins
from segment_store.storage.journal.chunk_metadata import SegmentLayout
from segstore_shared.contracts import ContainerOfflineError

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

log = logging.getLogger(__name__)

TableKey = tuple[str, str]


class ChunkSource(Protocol):
    """What the maintainer needs of one container's Tier-2 storage (a
    :class:`~segment_store.storage.chunked_storage.ChunkedSegmentStorage`); used on the event loop only. A segment
    gone since :meth:`segment_names` has no layout (None); a closed storage raises ContainerOfflineError (the
    container is then left out of the pass: its tables' files stay as they are)."""

    @property
    def container_id(self) -> int: ...

    @property
    def pins(self) -> ChunkPins: ...

    def segment_names(self) -> list[str]: ...

    def layout(self, name: str) -> SegmentLayout | None: ...


@dataclass(slots=True)
class Snapshot:
    """What the segments of the containers running here held at one moment, per table."""

    chunks: dict[TableKey, dict[str, ChunkFile]] = field(default_factory=dict)
    segments: dict[TableKey, set[int]] = field(default_factory=dict)
    incarnations: dict[TableKey, int] = field(default_factory=dict)
    """The stream's incarnation where known here (:mod:`.incarnation`)."""


class TableMaintainer:
    """See the module docstring. ``sources()``: the storages of the containers running here now;
    ``location(chunk)``: the URI readers open a chunk file by (None: not reachable from outside, e.g. memory);
    ``file_io``: pyiceberg FileIO properties for opening chunk files (S3 Tier-2: :mod:`.file_io`; secrets);
    ``created_ms(segment)``: a segment's creation time (its ``CREATION_TIME`` attribute in its container's metadata,
    epoch ms; None: unknown), on the event loop: the streams' incarnations (:mod:`.incarnation`)."""

    def __init__(
        self,
        config: IcebergConfig,
        sources: Callable[[], Iterable[ChunkSource]],
        location: Callable[[str], str | None],
        file_io: Mapping[str, str] | None = None,
        created_ms: Callable[[str], int | None] = lambda _segment: None,
    ) -> None:
        self.config = config
        self._created_ms = created_ms
        self._file_io = dict(file_io or {})
        self._sources = sources
        self._location = location
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._task: asyncio.Task[None] | None = None
        self._syncs: dict[TableKey, TableSync] = {}
        self._retry: dict[TableKey, tuple[float, float]] = {}
        """Failing tables: (monotonic time of the next attempt, current delay s)."""
        self._pins: dict[int, ChunkPins] = {}
        self._catalog: Catalog | None = None
        self._unreachable_logged = False
        self.passes = 0
        self.last_results: list[SyncResult] = []
        self._status: dict[TableKey, TableStatus] = {}
        """Per table, as of the last pass (:mod:`.status`); replaced whole by the worker thread."""
        self._first_seen: dict[str, int] = {}
        """Chunk location -> epoch ms first seen, for unregistered chunks without recorded ingestion times."""

    async def start(self) -> None:
        """Start the passes in the background (the first one at once)."""
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="iceberg-tables")
        self._executor.submit(self._warm_up)  # pyiceberg's imports and the catalog: seconds, before the first table
        self._task = asyncio.create_task(self._run(), name="iceberg-tables")
        log.info("iceberg: streams %s are tables (catalog %s)", ",".join(self.config.tables),
                 self.config.catalog or f"sqlite under {self.config.home}")  # fmt: skip

    async def stop(self) -> None:
        """Stop after the pass under way (its commit is not interrupted)."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        if self._executor is not None:
            await asyncio.to_thread(self._executor.shutdown, wait=True)
            self._executor = None

    async def _run(self) -> None:
        while True:
            started = time.monotonic()
            await self.run_once()
            pause = self.config.commit_interval_ms / 1000 - (time.monotonic() - started)
            await asyncio.sleep(max(pause, 0.0))

    async def run_once(self) -> list[SyncResult]:
        """One pass over every table (due for an attempt) now; returns what each did."""
        snapshot = self.collect()
        assert self._executor is not None, "start() first"
        loop = asyncio.get_running_loop()
        results = await loop.run_in_executor(self._executor, self._sync_all, snapshot)
        self.passes += 1
        self.last_results = results
        return results

    def collect(self) -> Snapshot:
        """The chunk files of the opted-in streams' segments in the containers running here (event loop)."""
        snapshot = Snapshot()
        pins: dict[int, ChunkPins] = {}
        for source in self._sources():
            try:
                names = source.segment_names()
            except ContainerOfflineError:  # closed since the registry said it runs
                continue
            pins[source.container_id] = source.pins
            for name in names:
                where = stream_segment(name)
                if where is None or not self.config.matches(where.scope, where.stream):
                    continue
                layout = source.layout(name)
                if layout is None or layout.framing != "events":
                    continue
                key = (where.scope, where.stream)
                files = snapshot.chunks.setdefault(key, {})
                snapshot.segments.setdefault(key, set()).add(where.segment_id)
                if where.segment_id >> 32 == 0:  # epoch 0: created with the stream
                    born = incarnation_of([self._created_ms(name), snapshot.incarnations.get(key)])
                    if born is not None:
                        snapshot.incarnations[key] = born
                for chunk in layout.chunks:
                    uri = self._location(chunk.name)
                    if uri is None:
                        if not self._unreachable_logged:
                            log.error("iceberg: chunk %s has no location readers can open: no tables", chunk.name)
                            self._unreachable_logged = True
                        continue
                    location = file_path(uri)
                    cut = max(layout.start_offset - chunk.start_offset, 0)  # > 0: the truncation boundary chunk
                    files[location] = ChunkFile(location, name, where, chunk.name, chunk.start_offset,
                                                source.container_id, chunk.length - cut, chunk.min_ms, cut)  # fmt: skip
        self._pins = pins
        return snapshot

    def _sync_all(self, snapshot: Snapshot) -> list[SyncResult]:
        """One pass per due table (worker thread); a failing table is logged and retried later, never raised.
        Every table's status is measured after it (:mod:`.status`), the tables not due too."""
        results: list[SyncResult] = []
        statuses: dict[TableKey, TableStatus] = {}
        now = time.monotonic()
        for key, chunks in snapshot.chunks.items():
            due, delay = self._retry.get(key, (0.0, 0.0))
            if now < due:
                statuses[key] = self._measure(key, chunks, attempted=False)
                continue
            try:
                sync = self._syncs.get(key)
                if sync is None:
                    sync = self._syncs[key] = TableSync(self._open_catalog(), *key, self.config, self._pins.get)
                results.append(sync.sync(chunks, snapshot.segments[key], snapshot.incarnations.get(key)))
            except Exception as error:  # any catalog or IO failure: the table catches up on a later pass
                delay = min(
                    max(2 * delay, self.config.commit_interval_ms / 1000), self.config.retry_max_delay_ms / 1000
                )
                self._retry[key] = (time.monotonic() + delay, delay)
                log.warning("iceberg %s.%s: pass failed (retry in %.1f s): %r", *key, delay, error)
                if key not in self._syncs:
                    self._catalog = None  # the catalog itself may be what failed: open it again
                statuses[key] = self._measure(key, chunks, attempted=True, error=error)
                continue
            self._retry.pop(key, None)
            statuses[key] = self._measure(key, chunks, attempted=True)
        waiting = {loc for status_chunks in snapshot.chunks.values() for loc in status_chunks}
        self._first_seen = {loc: ms for loc, ms in self._first_seen.items() if loc in waiting}
        self._status = statuses  # one assignment: the event loop reads either the old dict or this one
        return results

    def _measure(
        self, key: TableKey, chunks: dict[str, ChunkFile], attempted: bool, error: Exception | None = None
    ) -> TableStatus:
        """The table's status after this pass (worker thread; no IO: see :mod:`.status`)."""
        previous = self._status.get(key) or TableStatus(*key)
        sync = self._syncs.get(key)
        pending = sync.pending(chunks) if sync is not None else list(chunks.values())
        now_ms = int(time.time() * 1000)
        oldest: int | None = None
        for chunk in pending:
            ingested = chunk.min_ms if chunk.min_ms is not None else self._first_seen.setdefault(chunk.location, now_ms)
            oldest = ingested if oldest is None else min(oldest, ingested)
        current = sync.current if sync is not None else None
        snapshot_id, committed_at_ms = (
            current if current is not None else (previous.snapshot_id, previous.committed_at_ms)
        )
        failures, failed_passes, last_error = previous.failures, previous.failed_passes, previous.last_error
        if error is not None:
            failures, failed_passes = failures + 1, failed_passes + 1
            last_error = f"{type(error).__name__}: {(str(error).strip().splitlines() or [''])[0][:300]}"
        elif attempted:
            failures, last_error = 0, ""
        return TableStatus(
            *key,
            snapshot_id=snapshot_id,
            committed_at_ms=committed_at_ms,
            data_files=sync.file_count if sync is not None else previous.data_files,
            lag_bytes=sum(c.length for c in pending),
            lag_chunks=len(pending),
            oldest_unregistered_ms=oldest,
            last_pass_at_ms=now_ms if attempted else previous.last_pass_at_ms,
            failures=failures,
            failed_passes=failed_passes,
            last_error=last_error,
        )

    def statuses(self) -> list[TableStatus]:
        """Every table of the containers running here, by name, as of the last pass (any thread)."""
        return sorted(self._status.values(), key=lambda s: s.name)

    def _warm_up(self) -> None:
        """Import pyiceberg and open the catalog (worker thread); a failure is left to the first pass."""
        try:
            self._open_catalog()
        except Exception as error:  # the first pass opens it again and says why it fails
            log.warning("iceberg: the catalog does not open yet: %r", error)

    def _open_catalog(self) -> Catalog:
        if self._catalog is None:
            self._catalog = open_catalog(self.config, self._file_io)
        return self._catalog

    def table(self, scope: str, stream: str) -> TableSync | None:
        """The sync state of a stream's table (tests, the admin tool later)."""
        return self._syncs.get((scope, stream))


__all__ = ["ChunkSource", "Snapshot", "TableMaintainer", "TableStatus"]
