"""Bringing one stream's table up to date with the stream's chunk files (blocking: the worker process's job).

:meth:`TableSync.sync` takes what the segments hold now (every chunk file of the segments seen, by location) and
makes the table's current snapshot hold exactly those files of those segments, in one commit:

* files new to the table are appended (``merge_append``: the manifests are merged once there are 10, so planning
  a scan reads a few manifests, not one per commit);
* files of a segment seen whose chunks no longer include them (compaction merged them, truncation dropped them
  whole) are deleted in the same snapshot (an ``overwrite`` snapshot), so no row is ever in the table twice;
* segments not seen (their container is not running here) are left alone;
* a chunk holding its segment's start offset after a truncation (``ChunkFile.cut > 0``) is held as a trimmed copy
  of its live rows, swapped for the whole chunk (or the previous copy) in one ``overwrite`` snapshot
  (:mod:`.truncation`): the table holds exactly the events at or above each segment's start offset.

Invariants:

* The table is written only here (one committer per table per segment store); the state kept between passes
  (which files the table holds) is re-read from the table whenever a commit fails, so a commit that failed
  after landing is not repeated.
* Every chunk file a kept snapshot refers to is pinned (:class:`~segment_store.storage.chunk_pins.ChunkPins`,
  pin id :data:`PIN_ID`, one pin per segment) before the commit that adds it returns, and stays pinned until the
  last kept snapshot holding it expires: the garbage collector never deletes a file a reader of a kept snapshot
  (time travel included) may open. Pins are renewed at half their life.
* Snapshots are expired every ``expire_every_commits`` commits down to the newest ``keep_snapshots``: no data
  file is deleted for it (segstore's chunk files stay segstore's); the manifest lists and manifests no kept
  snapshot refers to are (:func:`delete_unreferenced_manifests`), and so are the trimmed copies
  (:func:`~segment_store.iceberg.truncation.delete_unreferenced_copies`).
* The table holds one incarnation of the stream (:mod:`.incarnation`): a table found to belong to a deleted
  stream of the same name is renamed aside before anything is written, its pins moved to a pin id of its own
  (``iceberg-deleted-<label>``, same expiry: held as long as they would have been, never replaced by the new
  incarnation's pins on the same segment names), and a fresh table is created at a location of its own.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from segment_store.iceberg.cleanup import delete_unreferenced_files
from segment_store.iceberg.config import IcebergConfig
from segment_store.iceberg.incarnation import PROPERTY, fresh_location, predecessor, recorded, set_aside
from segment_store.iceberg.names import stream_segment
from segment_store.iceberg.stream_table import ChunkFile, data_file, load_or_create, write_version_hint
from segment_store.iceberg.truncation import delete_unreferenced_copies, trimmed_location, write_trimmed
from segment_store.storage.chunk_pins import Pin

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table

log = logging.getLogger(__name__)

PIN_ID = "iceberg"
"""The pin id holding the chunk files of the tables' kept snapshots (``segstore admin pins`` lists them)."""


class Pins(Protocol):
    """What a sync does with one container's pins: :class:`~segment_store.storage.chunk_pins.ChunkPins` (those
    methods, same meaning), or the worker process's proxy of the segment store's (:mod:`.worker`)."""

    def pin(self, pin_id: str, segment: str, chunks: frozenset[str], ttl_ms: int) -> Pin: ...

    def release(self, pin_id: str, segment: str) -> bool: ...

    def live(self) -> list[Pin]: ...


@dataclass(slots=True)
class SyncResult:
    """What one :meth:`TableSync.sync` did."""

    table: str
    added: int = 0
    removed: int = 0
    skipped: int = 0
    """Chunk files that are not format 2 events chunks (never registered)."""
    expired: int = 0
    snapshot_id: int | None = None
    commit_s: float = 0.0
    files: int = 0
    """Data files in the current snapshot after the pass."""


@dataclass(slots=True)
class _Pinned:
    chunks: frozenset[str]
    expires_at_ms: int


@dataclass(slots=True)
class TableSync:
    """One stream's table (see the module docstring). ``pins_of(container_id)``: that container's pins, None
    when it is not running here (its segments' pins are then written on a later pass)."""

    catalog: Catalog
    scope: str
    stream: str
    config: IcebergConfig
    pins_of: Callable[[int], Pins | None]
    wall_clock_ms: Callable[[], int] = field(default=lambda: int(time.time() * 1000))
    _table: Table | None = None
    _files: dict[str, DataFile] = field(default_factory=dict)
    """location -> data file, of the current snapshot."""
    _chunks: dict[str, ChunkFile] = field(default_factory=dict)
    """location -> chunk file, for the files of the current snapshot known this run (their pins)."""
    _retired: dict[str, tuple[ChunkFile, int]] = field(default_factory=dict)
    """location -> (chunk, sequence number of the snapshot that removed it): held while older snapshots are kept."""
    _skipped: set[str] = field(default_factory=set)
    _pinned: dict[tuple[int, str], _Pinned] = field(default_factory=dict)
    _commits: int = 0
    _next_location: str | None = None
    """Where to create the table if missing: next to a predecessor set aside by this run (None: the default)."""

    @property
    def name(self) -> str:
        return f"{self.scope}.{self.stream}"

    @property
    def table(self) -> Table | None:
        """The table as of the last pass (None before the first)."""
        return self._table

    @property
    def current(self) -> tuple[int, int] | None:
        """(snapshot id, commit epoch ms) of the table's current snapshot as of the last good pass; None before the
        table has one, and after a failed pass (until the next good one)."""
        snapshot = self._table.current_snapshot() if self._table is not None else None
        return None if snapshot is None else (snapshot.snapshot_id, snapshot.timestamp_ms)

    @property
    def file_count(self) -> int:
        """Data files of the current snapshot as last known."""
        return len(self._files)

    def pending(self, chunks: Mapping[str, ChunkFile]) -> list[ChunkFile]:
        """The chunks of ``chunks`` that the current snapshot as last known does not hold and that were not
        skipped: what the next good pass registers (the table's lag; no IO)."""
        home = self._table.location() if self._table is not None else None
        return [
            c
            for location, c in chunks.items()
            if (location if home is None else trimmed_location(home, c)) not in self._files
            and location not in self._skipped
        ]

    def sync(
        self, chunks: Mapping[str, ChunkFile], segment_ids: set[int], incarnation: int | None = None
    ) -> SyncResult:
        """Make the current snapshot hold exactly ``chunks`` (by location) for the segments ``segment_ids`` (see
        the module docstring), in the table of the stream's ``incarnation`` (:mod:`.incarnation`; None: not known
        here, the table is not checked). Raises what the catalog and the file IO raise (nothing is then assumed to
        have changed: the next pass re-reads the table), and
        :class:`~segment_store.iceberg.incarnation.PredecessorTableError`."""
        result = SyncResult(self.name)
        try:
            fresh = self._table is None
            table = self._load(incarnation)
            if incarnation is not None:
                containers = {c.container_id for c in chunks.values()} | {cid for cid, _ in self._pinned}
                table = self._own(table, incarnation, fresh, containers)
            added: list[tuple[ChunkFile, DataFile]] = []
            targets: set[str] = set()
            for location, chunk in chunks.items():
                target = trimmed_location(table.location(), chunk)
                targets.add(target)
                if target in self._files:
                    self._chunks.setdefault(target, chunk)  # known after a restart: its pins
                    continue
                if location in self._skipped:
                    continue
                if target != location:
                    write_trimmed(table, chunk, target)
                made = data_file(table, chunk, target)
                if made is None:
                    self._skipped.add(location)
                    result.skipped += 1
                    log.warning("iceberg %s: %s is not a format 2 events chunk; not in the table", self.name, location)
                    continue
                added.append((chunk, made))
            removed = [loc for loc, f in self._files.items() if f.partition[2] in segment_ids and loc not in targets]
            if added or removed:
                self._pin([c for c, _ in added])
                started = time.perf_counter()
                table = self._commit(table, [f for _, f in added], [self._files[loc] for loc in removed])
                result.commit_s = time.perf_counter() - started
                current = table.current_snapshot()
                sequence = (current.sequence_number if current is not None else None) or 0
                for chunk, made in added:
                    self._files[made.file_path] = made
                    self._chunks[made.file_path] = chunk
                for location in removed:
                    del self._files[location]
                    known = self._chunks.pop(location, None)
                    if known is not None:
                        self._retired[location] = (known, sequence)
                result.added, result.removed = len(added), len(removed)
                self._commits += 1
                if self._commits % self.config.expire_every_commits == 0:
                    table, result.expired = self._expire(table)
                write_version_hint(table)
                self._table = table
            self._pin([])
        except BaseException:
            self._table = None  # re-read the table (and what it holds) on the next pass
            raise
        snapshot = table.current_snapshot()
        result.snapshot_id = snapshot.snapshot_id if snapshot is not None else None
        result.files = len(self._files)
        return result

    def _load(self, incarnation: int | None) -> Table:
        if self._table is not None:
            return self._table
        properties = {PROPERTY: str(incarnation)} if incarnation is not None else {}
        table = load_or_create(self.catalog, self.scope, self.stream, properties, self._next_location)
        self._files = {task.file.file_path: task.file for task in table.scan().plan_files()}
        self._chunks = {loc: c for loc, c in self._chunks.items() if loc in self._files}
        self._table = table
        return table

    def _own(self, table: Table, incarnation: int, fresh: bool, containers: set[int]) -> Table:
        """``table`` if it belongs to the stream's ``incarnation`` (recorded on a table that has none); else, the
        fresh table created after setting ``table`` aside (:mod:`.incarnation`). ``fresh``: ``table`` was read from
        the catalog this pass (a cached one is read again first: another segment store may have set it aside
        already). ``containers``: where this stream's pins may be."""
        label = predecessor(table, self._files.values(), incarnation)
        if label is None:
            if recorded(table) is None:
                with table.transaction() as tx:
                    tx.set_properties({PROPERTY: str(incarnation)})
                log.info("iceberg %s: the table records stream incarnation %s", self.name, incarnation)
            return table
        self._hold_aside(label, containers)  # also when another store renamed it: the pins of the containers here
        self._table = None
        self._files, self._chunks, self._retired, self._skipped, self._commits = {}, {}, {}, set(), 0
        if not fresh:
            return self._own(self._load(incarnation), incarnation, True, containers)
        aside = set_aside(self.catalog, self.scope, self.stream, label)
        self._next_location = fresh_location(table.location(), incarnation)
        log.warning(
            "iceberg %s: the table belongs to a deleted stream of the same name (incarnation %s): renamed to %s.%s; "
            "stream incarnation %s gets a new table %s at %s",
            self.name, label, self.scope, aside, incarnation, self.name, self._next_location,
        )  # fmt: skip
        return self._load(incarnation)

    def _hold_aside(self, label: str, containers: set[int]) -> None:
        """Move this stream's pins to pin id ``iceberg-deleted-<label>``, expiring when they would have."""
        now = self.wall_clock_ms()
        for cid in sorted(containers):
            pins = self.pins_of(cid)
            for pin in pins.live() if pins is not None else []:
                where = stream_segment(pin.segment)
                if pin.pin_id != PIN_ID or where is None or (where.scope, where.stream) != (self.scope, self.stream):
                    continue
                assert pins is not None
                pins.pin(f"{PIN_ID}-deleted-{label}", pin.segment, pin.chunks, max(pin.expires_at_ms - now, 1))
                pins.release(PIN_ID, pin.segment)
        self._pinned.clear()

    def _commit(self, table: Table, add: list[DataFile], remove: list[DataFile]) -> Table:
        with table.transaction() as tx:
            snapshot = tx.update_snapshot()
            with snapshot.overwrite() if remove else snapshot.merge_append() as update:
                for gone in remove:
                    update.delete_data_file(gone)
                for new in add:
                    update.append_data_file(new)
        return table

    def _expire(self, table: Table) -> tuple[Table, int]:
        """Expire all but the newest ``keep_snapshots`` snapshots; release the retired files no kept snapshot holds."""
        snapshots = sorted(table.metadata.snapshots, key=lambda s: s.sequence_number or 0)
        old = [s.snapshot_id for s in snapshots[: -self.config.keep_snapshots]]
        if not old:
            return table, 0
        table.maintenance.expire_snapshots().by_ids(old).commit()
        oldest = min((s.sequence_number or 0) for s in table.metadata.snapshots)
        self._retired = {loc: held for loc, held in self._retired.items() if held[1] > oldest}
        delete_unreferenced_manifests(table)
        delete_unreferenced_copies(table)
        return table, len(old)

    def _pin(self, adding: list[ChunkFile]) -> None:
        """Pin, per segment, the chunks of the current snapshot, ``adding`` and the retired ones still in a kept
        snapshot, where that set changed or its pin is past half its life."""
        wanted: dict[tuple[int, str], set[str]] = {}
        for chunk in [*self._chunks.values(), *adding, *(c for c, _ in self._retired.values())]:
            wanted.setdefault((chunk.container_id, chunk.segment), set()).add(chunk.chunk)
        now = self.wall_clock_ms()
        ttl = self.config.pin_ttl_ms
        for key in set(wanted) | set(self._pinned):
            chunks = frozenset(wanted.get(key, ()))
            held = self._pinned.get(key)
            if held is not None and held.chunks == chunks and held.expires_at_ms - now > ttl // 2:
                continue
            pins = self.pins_of(key[0])
            if pins is None:
                continue
            if chunks:
                pin = pins.pin(PIN_ID, key[1], chunks, ttl)
                self._pinned[key] = _Pinned(chunks, pin.expires_at_ms)
            else:
                pins.release(PIN_ID, key[1])
                self._pinned.pop(key, None)


def delete_unreferenced_manifests(table: Table) -> int:
    """Delete the manifest lists and manifests under the table's metadata directory that no kept snapshot refers
    to (expiry deletes none: they would pile up, several per commit), wherever the table's FileIO can list
    (:mod:`.cleanup`: a local directory, S3, ...); only ``.avro`` files, and only while no commit of ours is under
    way (the worker process is the table's one committer). Returns how many were deleted."""

    def referenced() -> set[str]:
        names: set[str] = set()
        for snapshot in table.metadata.snapshots:
            names.add(os.path.basename(snapshot.manifest_list))
            names.update(os.path.basename(m.manifest_path) for m in snapshot.manifests(table.io))
        return names

    return delete_unreferenced_files(table.io, table.metadata_location.rsplit("/", 1)[0], ".avro", referenced)


__all__ = ["PIN_ID", "Pins", "SyncResult", "TableSync", "delete_unreferenced_manifests"]
