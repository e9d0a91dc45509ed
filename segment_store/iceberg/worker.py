"""The table maintainer's worker process: every pyiceberg call of the tables runs here, not in the segment store.

Why a process: pyiceberg is CPU-heavy pure Python (a commit deep copies the table metadata ~14 times). On a thread
of the segment store it held the interpreter lock in bursts, and the store's event loop waited for the lock ~50
times in 30 s at 1,000 events/s (acknowledgement p99 28 ms with tables, 5 ms without: docs/iceberg.md). In a
process of its own it shares no lock with the appends; the segment store keeps what must stay there: the look at
the chunk metadata (:meth:`~.maintainer.TableMaintainer.collect`, on its event loop) and the pins, which its
garbage collector consults (:class:`~segment_store.storage.chunk_pins.ChunkPins`).

The conversation, over one duplex pipe of pickled tuples, one pass at a time, the parent driving
(:mod:`.worker_process` is the parent's end):

* parent -> child ``("pass", change, containers, previous)``: one pass over every table due (:class:`TableWorker`);
  ``change`` is the :class:`Snapshot` as a :class:`SnapshotChange` from the one this process holds (the last pass's:
  a pass costs the segment store what changed, not every chunk of every table), ``containers`` the ids whose pins
  the parent holds, ``previous`` the statuses after the last pass (their counters carry on through a restart).
* child -> parent, during a pass: ``("call", container_id, method, args)``, a pin operation (``pin``, ``release``,
  ``live``) on that container's pins in the parent, answered ``("reply", True, value)`` or ``("reply", False,
  error)`` before the pass goes on (a pin is durable before the commit that needs it); ``("log", record)``, a
  log record the parent emits as its own (this process configures no logging of its own).
* child -> parent ``("done", results, statuses)`` ends the pass.
* parent -> child ``("stop",)``, or the pipe closing (the segment store gone, even by kill -9): the process exits.

Invariant: nothing here must outlive the process. A table's sync re-reads its table on the first pass after a
restart (as after a segment store restart); a commit cut short by a kill either landed (found by that re-read) or
did not (redone); pins are the parent's. Interrupts are blocked from the start and ignored here (SIGINT: a Ctrl-C
reaches the whole process group): the parent stops this process, and it ends with :func:`os._exit` (no teardown).
"""

from __future__ import annotations

import logging
import logging.handlers
import os
import signal
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from segment_store.iceberg.config import IcebergConfig
from segment_store.iceberg.status import TableStatus
from segment_store.iceberg.stream_table import ChunkFile, open_catalog
from segment_store.iceberg.sync import Pins, SyncResult, TableSync
from segment_store.storage.chunk_pins import Pin

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

log = logging.getLogger(__name__)

TableKey = tuple[str, str]


@dataclass(slots=True)
class Snapshot:
    """What the segments of the containers running here held at one moment, per table."""

    chunks: dict[TableKey, dict[str, ChunkFile]] = field(default_factory=dict)
    segments: dict[TableKey, set[int]] = field(default_factory=dict)
    incarnations: dict[TableKey, int] = field(default_factory=dict)
    """The stream's incarnation where known here (:mod:`.incarnation`)."""


@dataclass(slots=True)
class SnapshotChange:
    """A :class:`Snapshot` as the change from ``held``, the chunk files the worker holds (:func:`change_of`)."""

    full: bool
    """The worker holds nothing: ``added`` has every chunk file."""
    added: dict[TableKey, dict[str, ChunkFile]]
    """Per table of the snapshot (every one, maybe with nothing added): its chunk files new or changed since."""
    gone: dict[TableKey, list[str]]
    """Per table: the locations of its chunk files no longer there."""
    segments: dict[TableKey, set[int]]
    incarnations: dict[TableKey, int]


def change_of(snapshot: Snapshot, held: Mapping[TableKey, Mapping[str, ChunkFile]] | None) -> SnapshotChange:
    """``snapshot`` as the change from ``held`` (None: nothing held). A chunk file is unchanged when it is the same
    object (the maintainer's collect reuses unchanged ones), so this walks the chunk files without comparing them."""
    added: dict[TableKey, dict[str, ChunkFile]] = {}
    gone: dict[TableKey, list[str]] = {}
    for key, files in snapshot.chunks.items():
        before = held.get(key) if held is not None else None
        if before is None:
            added[key] = files
            continue
        added[key] = {location: file for location, file in files.items() if before.get(location) is not file}
        gone[key] = [location for location in before if location not in files]
    return SnapshotChange(held is None, added, gone, snapshot.segments, snapshot.incarnations)


def apply_change(change: SnapshotChange, held: dict[TableKey, dict[str, ChunkFile]]) -> Snapshot:
    """Bring ``held`` to the snapshot ``change`` describes (in place); that snapshot."""
    if change.full:
        held.clear()
    for key in [key for key in held if key not in change.added]:
        del held[key]
    for key, files in change.added.items():
        table = held.setdefault(key, {})
        for location in change.gone.get(key, ()):
            table.pop(location, None)
        table.update(files)
    return Snapshot(held, change.segments, change.incarnations)


class Channel:
    """This process's end of the pipe: sends from any thread (pyiceberg logs from its own), receives on the main
    thread only."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self._lock = threading.Lock()

    def send(self, message: tuple[Any, ...]) -> None:
        with self._lock:
            self.connection.send(message)

    def call(self, container_id: int, method: str, args: tuple[Any, ...]) -> Any:
        """Run ``method(*args)`` on the parent's pins of ``container_id``; its value, or raises its error."""
        self.send(("call", container_id, method, args))
        kind, ok, value = self.connection.recv()
        assert kind == "reply", f"expected a reply, got {kind!r}"
        if not ok:
            raise value
        return value


class RemotePins:
    """One container's pins, held by the parent: the :class:`~segment_store.storage.chunk_pins.ChunkPins` methods a
    :class:`~.sync.TableSync` calls, each a round trip."""

    def __init__(self, channel: Channel, container_id: int) -> None:
        self._channel = channel
        self._cid = container_id

    def pin(self, pin_id: str, segment: str, chunks: frozenset[str], ttl_ms: int) -> Pin:
        pin: Pin = self._channel.call(self._cid, "pin", (pin_id, segment, frozenset(chunks), ttl_ms))
        return pin

    def release(self, pin_id: str, segment: str) -> bool:
        return bool(self._channel.call(self._cid, "release", (pin_id, segment)))

    def live(self) -> list[Pin]:
        pins: list[Pin] = self._channel.call(self._cid, "live", ())
        return pins


class TableWorker:
    """The passes' state in the worker process: one :class:`~.sync.TableSync` per table, the catalog, the tables
    backing off after failures. ``pins_of(container_id)``: that container's pins (None: not running here)."""

    def __init__(
        self, config: IcebergConfig, file_io: Mapping[str, str], pins_of: Callable[[int], Pins | None]
    ) -> None:
        self.config = config
        self._file_io = dict(file_io)
        self._pins_of = pins_of
        self._syncs: dict[TableKey, TableSync] = {}
        self._retry: dict[TableKey, tuple[float, float]] = {}
        """Failing tables: (monotonic time of the next attempt, current delay s)."""
        self._catalog: Catalog | None = None
        self._first_seen: dict[str, int] = {}
        """Chunk location -> epoch ms first seen, for unregistered chunks without recorded ingestion times."""

    def warm_up(self) -> None:
        """Import pyiceberg and open the catalog; a failure is left to the first pass."""
        try:
            self._open_catalog()
        except Exception as error:  # the first pass opens it again and says why it fails
            log.warning("iceberg: the catalog does not open yet: %r", error)

    def run_pass(
        self, snapshot: Snapshot, previous: Mapping[TableKey, TableStatus]
    ) -> tuple[list[SyncResult], dict[TableKey, TableStatus]]:
        """One sync per due table; a failing table is logged and retried later, never raised. Every table's status
        is measured after it (:mod:`.status`), the tables not due too."""
        results: list[SyncResult] = []
        statuses: dict[TableKey, TableStatus] = {}
        now = time.monotonic()
        for key, chunks in snapshot.chunks.items():
            due, delay = self._retry.get(key, (0.0, 0.0))
            if now < due:
                statuses[key] = self._measure(key, chunks, previous.get(key), attempted=False)
                continue
            try:
                sync = self._syncs.get(key)
                if sync is None:
                    sync = self._syncs[key] = TableSync(self._open_catalog(), *key, self.config, self._pins_of)
                results.append(sync.sync(chunks, snapshot.segments[key], snapshot.incarnations.get(key)))
            except Exception as error:  # any catalog, IO or pin failure: the table catches up on a later pass
                delay = min(
                    max(2 * delay, self.config.commit_interval_ms / 1000), self.config.retry_max_delay_ms / 1000
                )
                self._retry[key] = (time.monotonic() + delay, delay)
                log.warning("iceberg %s.%s: pass failed (retry in %.1f s): %r", *key, delay, error)
                if key not in self._syncs:
                    self._catalog = None  # the catalog itself may be what failed: open it again
                statuses[key] = self._measure(key, chunks, previous.get(key), attempted=True, error=error)
                continue
            self._retry.pop(key, None)
            statuses[key] = self._measure(key, chunks, previous.get(key), attempted=True)
        waiting = {loc for table_chunks in snapshot.chunks.values() for loc in table_chunks}
        self._first_seen = {loc: ms for loc, ms in self._first_seen.items() if loc in waiting}
        return results, statuses

    def _measure(
        self,
        key: TableKey,
        chunks: dict[str, ChunkFile],
        previous: TableStatus | None,
        attempted: bool,
        error: Exception | None = None,
    ) -> TableStatus:
        """The table's status after this pass (no IO: see :mod:`.status`)."""
        previous = previous or TableStatus(*key)
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
        status = TableStatus(
            *key,
            snapshot_id=snapshot_id,
            committed_at_ms=committed_at_ms,
            data_files=sync.file_count if sync is not None else previous.data_files,
            lag_bytes=sum(c.length for c in pending),
            lag_chunks=len(pending),
            oldest_unregistered_ms=oldest,
            last_pass_at_ms=now_ms if attempted else previous.last_pass_at_ms,
            failures=previous.failures if error is not None or not attempted else 0,
            failed_passes=previous.failed_passes,
            last_error=previous.last_error if error is not None or not attempted else "",
        )
        return status if error is None else status.failed(error_line(error), now_ms)

    def _open_catalog(self) -> Catalog:
        if self._catalog is None:
            self._catalog = open_catalog(self.config, self._file_io)
        return self._catalog


def error_line(error: BaseException) -> str:
    """``Type: first line of the message`` (at most 300 characters of it): a status's ``last_error``."""
    return f"{type(error).__name__}: {(str(error).strip().splitlines() or [''])[0][:300]}"


class _ToParent(logging.handlers.QueueHandler):
    """Log records, formatted here (arguments merged, traceback as text), sent to the parent."""

    def __init__(self, channel: Channel) -> None:
        super().__init__(None)  # type: ignore[arg-type]  # enqueue is ours: no queue
        self._channel = channel

    def enqueue(self, record: logging.LogRecord) -> None:
        self._channel.send(("log", record))


def serve(connection: Connection, config: IcebergConfig, file_io: Mapping[str, str], log_level: int) -> None:
    """The worker process's main function (see the module docstring): passes until told to stop or orphaned."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    channel = Channel(connection)
    root = logging.getLogger()
    root.handlers[:] = [_ToParent(channel)]
    root.setLevel(log_level)
    containers: set[int] = set()

    def pins_of(container_id: int) -> RemotePins | None:
        return RemotePins(channel, container_id) if container_id in containers else None

    worker = TableWorker(config, file_io, pins_of)
    held: dict[TableKey, dict[str, ChunkFile]] = {}
    try:
        worker.warm_up()
        while True:
            message = connection.recv()
            if message[0] == "stop":
                break
            _, change, running, previous = message
            containers.clear()
            containers.update(running)
            results, statuses = worker.run_pass(apply_change(change, held), previous)
            channel.send(("done", results, statuses))
    except (EOFError, BrokenPipeError, ConnectionResetError):
        pass  # the segment store is gone
    os._exit(0)  # nothing to flush (logs went through the pipe): no teardown of pyiceberg and pyarrow, which takes long


__all__ = [
    "RemotePins",
    "Snapshot",
    "SnapshotChange",
    "TableWorker",
    "apply_change",
    "change_of",
    "error_line",
    "serve",
]
