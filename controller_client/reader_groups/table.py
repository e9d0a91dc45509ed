"""A reader group's shared state: a mirror of its table segment and optimistic updates over it (issue 25).

This is the official Rust client's ``Synchronizer`` (``src/sync/synchronizer.rs``), byte-compatible through
:mod:`controller_client.reader_groups.format`, so that its readers and ours can share one group:

* The mirror follows the table with ``ReadTableEntriesDelta`` from the last position it read; it keeps every key
  it has seen with its version, tombstones included (a tombstone's version is what a reused key is conditioned
  on). ``should_clear`` (the table was compacted past our position) rebuilds the mirror from position 0.
* :meth:`GroupTable.update` runs an update function on the mirror and sends all its writes in one
  ``UpdateTableEntries`` (no offset condition). Each written key is conditioned on the version last seen for it
  (``NOT_EXISTS`` if never seen), and each written outer map's version blob (``"<len><outer>"``) on its own: the
  outer map is the unit of concurrency, exactly as the official client writes it. On a failed condition nothing
  was written: the mirror is brought up to date and the function runs again on it.

Invariants: an update function sees a mirror at least as new as every write this table made; a write that
returns has been applied atomically on exactly the state the function saw (for the outer maps it wrote; a map
it only read may have changed meanwhile unless the function writes it too -- write what you depend on).

Values of types this module does not know (an extension another client wrote) are kept as bytes and ignored by
:meth:`GroupTable.state`.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Protocol, TypeVar

from controller_client.reader_groups.format import (
    TYPE_ASSIGNED,
    TYPE_BLOB,
    TYPE_CONFIG,
    TYPE_DISTANCE,
    TYPE_FUTURE,
    TYPE_OFFSET,
    TYPE_TOMBSTONE,
    ReaderGroupState,
    TableValue,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    state_from_entries,
)
from segment_store.client import (
    NOT_EXISTS,
    DeltaPage,
    SegmentAlreadyExistsError,
    SegmentClient,
    TableKeyBadVersionReplyError,
    TableKeyDoesNotExistReplyError,
)

_log = logging.getLogger(__name__)
_T = TypeVar("_T")
_R = TypeVar("_R")

DELTA_PAGE = 1000
MAX_CONFLICTS = 1000
"""Failed conditions in a row before an update gives up (each one means another member wrote first)."""


class SegmentCaller(Protocol):
    """Runs one call on a segment, repeating it where that is safe (``StreamManager``'s segment call)."""

    async def __call__(self, segment: str, call: Callable[[], Awaitable[_T]]) -> _T: ...


class UpdateConflictError(RuntimeError):
    """An update lost the race to other members :data:`MAX_CONFLICTS` times in a row."""


@dataclass(frozen=True, slots=True)
class MirroredEntry:
    """One key of the table as last seen: its decoded ``(outer, inner)``, its value, its version."""

    outer: str
    inner: str | None
    value: TableValue
    version: int
    raw_key: bytes
    raw_value: bytes

    @property
    def live(self) -> bool:
        return self.inner is not None and self.value.type_id != TYPE_TOMBSTONE


@dataclass(frozen=True, slots=True)
class _Write:
    outer: str
    inner: str
    value: TableValue


class Update:
    """What an update function sees (the mirror) and writes (staged until the function returns)."""

    def __init__(self, entries: dict[tuple[str, str | None], MirroredEntry]) -> None:
        self._entries = entries
        self._writes: dict[tuple[str, str], _Write] = {}

    def live(self, outer: str) -> Iterator[MirroredEntry]:
        """The live entries of ``outer`` (tombstones left out), as the mirror holds them before this update."""
        for (o, _), entry in self._entries.items():
            if o == outer and entry.live:
                yield entry

    def contains(self, outer: str, inner: str) -> bool:
        """Whether ``outer/inner`` is live, counting this update's own writes."""
        staged = self._writes.get((outer, inner))
        if staged is not None:
            return staged.value.type_id != TYPE_TOMBSTONE
        entry = self._entries.get((outer, inner))
        return entry is not None and entry.live

    def version(self, outer: str, inner: str) -> int | None:
        """The version of ``outer/inner`` in the mirror (tombstones too); None if never seen."""
        entry = self._entries.get((outer, inner))
        return None if entry is None else entry.version

    def put(self, outer: str, inner: str, type_id: str, data: bytes) -> None:
        """Stage ``outer/inner`` = ``Value{type_id, data}`` (``data`` already serialized)."""
        self._writes[(outer, inner)] = _Write(outer, inner, TableValue(type_id, data))

    def tombstone(self, outer: str, inner: str) -> None:
        """Stage the deletion of ``outer/inner`` (a tombstone value, as the official client deletes)."""
        self._writes[(outer, inner)] = _Write(outer, inner, TableValue(TYPE_TOMBSTONE, b"\xa0"))

    @property
    def writes(self) -> list[_Write]:
        return list(self._writes.values())


class GroupTable:
    """The mirror of one reader group's table segment ``segment`` (see the module docstring).

    Use from one event loop; concurrent :meth:`update` calls of one instance are serialized by the caller.
    """

    def __init__(self, client: SegmentClient, segment: str, call: SegmentCaller) -> None:
        self.segment = segment
        self._client = client
        self._call = call
        self._entries: dict[tuple[str, str | None], MirroredEntry] = {}
        self._position = 0

    async def create(self) -> bool:
        """Create the table segment; False if it existed already."""
        try:
            await self._call(self.segment, lambda: self._client.create_table_segment(self.segment))
        except SegmentAlreadyExistsError:
            return False
        return True

    async def delete(self) -> None:
        """Delete the table segment (NoSuchSegmentError if it is gone)."""
        await self._call(self.segment, lambda: self._client.delete_table_segment(self.segment))
        self._entries.clear()
        self._position = 0

    async def fetch(self) -> int:
        """Bring the mirror up to date; returns how many entries changed. NoSuchSegmentError: the group is gone."""
        changed = 0
        while True:
            page = await self._call(self.segment, functools.partial(self._read_delta, self._position))
            if page.should_clear:
                self._entries.clear()
                self._position = 0
                continue
            for entry in page.entries:
                self._remember(entry.key, entry.value, entry.version)
                changed += 1
            self._position = page.last_position
            if page.reached_end or not page.entries:
                return changed

    def _remember(self, raw_key: bytes, raw_value: bytes, version: int) -> None:
        outer, inner = decode_key(raw_key)
        old = self._entries.get((outer, inner))
        if old is not None and old.version > version:
            return  # an older change read after a newer one we wrote
        value = decode_value(raw_value)
        self._entries[(outer, inner)] = MirroredEntry(outer, inner, value, version, raw_key, raw_value)

    @property
    def entries(self) -> dict[tuple[str, str | None], MirroredEntry]:
        """Every key of the mirror (read-only use)."""
        return self._entries

    def state(self) -> ReaderGroupState:
        """The official client's view of the mirror (live entries of its five maps)."""
        known = (e for e in self._entries.values() if e.live and e.value.type_id in _KNOWN_TYPES)
        return state_from_entries((e.raw_key, e.raw_value) for e in known)

    async def update(self, function: Callable[[Update], _R], fetch_first: bool = True) -> _R:
        """Run ``function`` on an up-to-date mirror and write what it staged, atomically and conditionally.

        The function may run several times (after a lost race); it must decide from what it sees only. Its
        result is returned once its writes are in (or when it staged none).
        """
        if fetch_first:
            await self.fetch()
        for _ in range(MAX_CONFLICTS):
            update = Update(self._entries)
            result = function(update)
            writes = update.writes
            if not writes:
                return result
            batch = self._batch(writes)
            try:
                versions = await self._call(self.segment, functools.partial(self._write, batch))
            except (TableKeyBadVersionReplyError, TableKeyDoesNotExistReplyError):
                _log.debug("reader group table %s: lost a race, retrying on fresh state", self.segment)
                await self.fetch()
                continue
            for (key, value, _), version in zip(batch, versions, strict=True):
                self._remember(key, value, version)
            return result
        raise UpdateConflictError(f"reader group table {self.segment}: {MAX_CONFLICTS} conflicting updates in a row")

    async def _read_delta(self, position: int) -> DeltaPage:
        return await self._client.read_table_entries_delta(self.segment, position, DELTA_PAGE)

    async def _write(self, batch: list[tuple[bytes, bytes, int]]) -> list[int]:
        return await self._client.update_table_entries(self.segment, batch)

    def _batch(self, writes: list[_Write]) -> list[tuple[bytes, bytes, int]]:
        batch: list[tuple[bytes, bytes, int]] = []
        outers: list[str] = []
        for write in writes:
            key = encode_key(write.outer, write.inner)
            old = self._entries.get((write.outer, write.inner))
            batch.append((key, encode_value(write.value), NOT_EXISTS if old is None else old.version))
            if write.outer not in outers:
                outers.append(write.outer)
        for outer in outers:
            blob = self._entries.get((outer, None))
            batch.append((encode_key(outer), encode_value(TableValue(TYPE_BLOB, b"\x00")), _version(blob)))
        return batch


def _version(entry: MirroredEntry | None) -> int:
    return NOT_EXISTS if entry is None else entry.version


_KNOWN_TYPES = frozenset({TYPE_CONFIG, TYPE_OFFSET, TYPE_ASSIGNED, TYPE_FUTURE, TYPE_DISTANCE})
