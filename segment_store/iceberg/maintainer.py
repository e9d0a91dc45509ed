"""The table maintainer: keeps every opted-in stream's Iceberg table up to date with its chunk files.

Every ``commit_interval_ms`` it looks at the chunk metadata of the containers running here (the layouts the
storage writer's chunk-final records build: a chunk is final once journaled, and never changes), on the event
loop, which is cheap (no I/O: a walk of in-memory lists); then hands the result to its worker process
(:mod:`.worker`), which runs one :class:`~segment_store.iceberg.sync.TableSync` pass per table and returns, asking
the segment store for each pin it needs (the pins stay here, where the garbage collector consults them). A pass
over a table that fails (catalog down, file IO error) is logged and retried with backoff (doubling from the commit
interval to ``retry_max_delay_ms``); meanwhile the stream's appends go on untouched (nothing in the append path
waits on the tables) and the next good pass registers everything missed: the tables catch up. After every pass
each table's status (snapshot, files, lag, failures: :mod:`.status`) is what :meth:`TableMaintainer.statuses`
gives (``segstore admin tables`` and the ``segstore_iceberg_*`` metrics).

Why a process, and one: pyiceberg is blocking (catalog and file IO) and CPU-heavy pure Python (a commit deep
copies the table metadata ~14 times: 30-70 ms of CPU, docs/iceberg.md); on a thread here it held the interpreter
lock in bursts that stalled the appends' event loop. One process makes it one committer per table (no
compare-and-set conflicts with ourselves) and bounds what the tables take to one core at most. A process that
dies or hangs (``pass_timeout_ms``) fails its pass for every table, is started again after a pause (doubling like
a table's retry) and catches up (:mod:`.worker_process`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from segment_store.iceberg.config import IcebergConfig
from segment_store.iceberg.incarnation import incarnation_of
from segment_store.iceberg.names import stream_segment
from segment_store.iceberg.status import TableStatus
from segment_store.iceberg.stream_table import ChunkFile, file_path
from segment_store.iceberg.sync import SyncResult
from segment_store.iceberg.worker import Snapshot, TableKey, error_line
from segment_store.iceberg.worker_process import WorkerFailedError, WorkerProcess
from segment_store.storage.chunk_pins import ChunkPins
from segment_store.storage.journal.chunk_metadata import SegmentLayout
from segstore_shared.contracts import ContainerOfflineError

log = logging.getLogger(__name__)


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
        self._worker = WorkerProcess(config, self._file_io, config.pass_timeout_ms / 1000)
        self._task: asyncio.Task[None] | None = None
        self._pins: dict[int, ChunkPins] = {}
        self._known: dict[str, ChunkFile] = {}
        """Chunk name -> its file as the last pass collected it."""
        self._unreachable_logged = False
        self._restart_delay_s = 0.0
        """After a failed worker process: the pause before the next pass (doubling, like a table's retry)."""
        self.passes = 0
        self.last_results: list[SyncResult] = []
        self._status: dict[TableKey, TableStatus] = {}
        """Per table, as of the last pass (:mod:`.status`); replaced whole after each pass."""

    @property
    def worker(self) -> WorkerProcess:
        """The worker process (its pid, how many were started)."""
        return self._worker

    async def start(self) -> None:
        """Start the passes in the background (the first one at once: it starts the worker process, which imports
        pyiceberg and opens the catalog before its first table)."""
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="iceberg-tables")
        self._task = asyncio.create_task(self._run(), name="iceberg-tables")
        log.info("iceberg: streams %s are tables (catalog %s)", ",".join(self.config.tables),
                 self.config.catalog or f"sqlite under {self.config.home}")  # fmt: skip

    async def stop(self) -> None:
        """Stop at once: a pass under way is cut short (its worker process killed; a commit either landed or did not,
        and the next start catches up: :mod:`.worker_process`)."""
        self._worker.interrupt()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        if self._executor is not None:
            await asyncio.to_thread(self._executor.shutdown, wait=True)
            self._executor = None
        await asyncio.to_thread(self._worker.stop)

    async def _run(self) -> None:
        while True:
            started = time.monotonic()
            await self.run_once()
            pause = max(self.config.commit_interval_ms / 1000, self._restart_delay_s) - (time.monotonic() - started)
            await asyncio.sleep(max(pause, 0.0))

    async def run_once(self) -> list[SyncResult]:
        """One pass over every table (due for an attempt) now; returns what each did."""
        snapshot = self.collect()
        assert self._executor is not None, "start() first"
        loop = asyncio.get_running_loop()
        try:
            results, self._status = await loop.run_in_executor(
                self._executor, self._worker.run_pass, snapshot, self._pins, dict(self._status)
            )
        except WorkerFailedError as error:
            now_ms = int(time.time() * 1000)
            line = error_line(error)
            self._status = {
                key: self._status.get(key, TableStatus(*key)).failed(line, now_ms) for key in snapshot.chunks
            }
            self._restart_delay_s = min(max(2 * self._restart_delay_s, self.config.commit_interval_ms / 1000),
                                        self.config.retry_max_delay_ms / 1000)  # fmt: skip
            return []
        self._restart_delay_s = 0.0
        self.passes += 1
        self.last_results = results
        return results

    def collect(self) -> Snapshot:
        """The chunk files of the opted-in streams' segments in the containers running here (event loop). A chunk
        file seen by the pass before, unchanged, is the very same :class:`ChunkFile` (the worker is sent only what
        changed: :mod:`.worker_process`)."""
        snapshot = Snapshot()
        pins: dict[int, ChunkPins] = {}
        known, self._known = self._known, {}
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
                    cut = max(layout.start_offset - chunk.start_offset, 0)  # > 0: the truncation boundary chunk
                    file = known.get(chunk.name)
                    if (
                        file is None
                        or file.cut != cut
                        or file.segment != name
                        or file.chunk_start != chunk.start_offset
                    ):
                        uri = self._location(chunk.name)
                        if uri is None:
                            if not self._unreachable_logged:
                                log.error("iceberg: chunk %s has no location readers can open: no tables", chunk.name)
                                self._unreachable_logged = True
                            continue
                        file = ChunkFile(file_path(uri), name, where, chunk.name, chunk.start_offset,
                                         source.container_id, chunk.length - cut, chunk.min_ms, cut)  # fmt: skip
                    self._known[chunk.name] = file
                    files[file.location] = file
        self._pins = pins
        return snapshot

    def statuses(self) -> list[TableStatus]:
        """Every table of the containers running here, by name, as of the last pass (any thread)."""
        return sorted(self._status.values(), key=lambda s: s.name)


__all__ = ["ChunkSource", "Snapshot", "TableMaintainer", "TableStatus"]
