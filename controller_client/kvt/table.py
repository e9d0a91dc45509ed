"""A key-value table client with Pravega's semantics (Java's ``KeyValueTableImpl``).

A :class:`KeyValueTable` is opened once per table (``StreamManager.key_value_table``): it asks the controller for
the configuration and the partitions (table segments with key ranges) and then talks to the segment stores only.
Each key goes to the partition of its primary key (:mod:`controller_client.kvt.routing`); on its table segment the
key is primary + secondary (:mod:`controller_client.kvt.model`).

Operations, all coroutines:

* ``put(key, value, version=None)`` - set; with a version only if the key still has it; returns the new version;
* ``put_if_absent(key, value)`` - set only if the key does not exist (``BadKeyVersionError`` if it does);
* ``replace(key, value, version)`` - set only if the key has ``version`` (``BadKeyVersionError`` if it has another,
  ``NoSuchKeyError`` if it is gone);
* ``remove(key, version=None)`` - remove; with a version only if the key has it;
* ``update([Put | Insert | Remove, ...])`` - a batch, applied atomically: all or nothing. Atomic because all its
  keys share one primary key and so one table segment; a batch naming two primary keys, or mixing removals with
  puts (Java's rule), is refused before anything is sent (InvalidModelError). Returns the new versions of puts;
* ``get(key)`` / ``get_all(keys)`` - entries (None for a missing key), from every partition concurrently;
* ``exists(key)``;
* ``iterator(max_iteration_size)`` - keys or entries of one primary key (all, a secondary key range, or a secondary
  key prefix), of a primary key range or prefix, or of all: in key order (unsigned bytes, primary then secondary);
  one primary key reads one segment, the others merge every segment's ordered reads.

Versions carry their table segment's id: a version read from one table is refused for a key of another segment
(``BadKeyVersionError``, as Java's "Wrong TableSegment"). A failed condition writes nothing of its batch. A table
deleted under an open client raises :class:`~controller_client.kvt.errors.KeyValueTableNotFoundError`.

Retries: calls go through the manager's segment call (a ``WrongHost`` or a lost connection re-resolves the segment
store and repeats). A conditional update whose reply was lost is repeated too and may then report a failed
condition for a write that did apply (Pravega's clients have the same ambiguity); read the key to find out.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from typing import Protocol, TypeVar, runtime_checkable

from controller_client.kvt.errors import BadKeyVersionError, KeyValueTableNotFoundError, NoSuchKeyError
from controller_client.kvt.iterator import KeyValueTableIteratorBuilder
from controller_client.kvt.model import (
    MAX_VALUE_LENGTH,
    NO_SEGMENT_ID,
    NO_VERSION,
    NOT_EXISTS,
    Insert,
    KeyValueTableConfiguration,
    Put,
    Remove,
    TableEntry,
    TableKey,
    TableModification,
    Version,
    table_segment_name,
)
from controller_client.kvt.routing import Partitions
from controller_client.model import InvalidModelError, SegmentRange
from segment_store.client import (
    NoSuchSegmentError,
    SegmentClient,
    TableKeyBadVersionReplyError,
    TableKeyDoesNotExistReplyError,
    VersionedEntry,
)

_T = TypeVar("_T")
GET_BATCH_KEYS = 32
"""Keys per ``ReadTable`` request (Java's ``MAX_GET_KEY_BATCH_SIZE``: a reply of that many longest entries fits)."""


class SegmentCaller(Protocol):
    """Runs one call on a segment, repeating it where that is safe (``StreamManager``'s segment call)."""

    async def __call__(self, segment: str, call: Callable[[], Awaitable[_T]]) -> _T: ...


async def _direct(segment: str, call: Callable[[], Awaitable[_T]]) -> _T:
    return await call()


@runtime_checkable
class KvtControllerApi(Protocol):
    """The controller calls of key-value tables (``ControllerClient`` has them)."""

    async def create_key_value_table(self, scope: str, kvt: str, config: KeyValueTableConfiguration) -> bool: ...

    async def delete_key_value_table(self, scope: str, kvt: str) -> bool: ...

    def list_key_value_tables(self, scope: str) -> AsyncIterator[str]: ...

    async def get_key_value_table_configuration(self, scope: str, kvt: str) -> KeyValueTableConfiguration: ...

    async def get_current_segments_key_value_table(self, scope: str, kvt: str) -> list[SegmentRange]: ...


class KeyValueTable:
    """One key-value table; see the module docstring. Make it with :meth:`open` (or ``StreamManager``)."""

    def __init__(
        self,
        scope: str,
        name: str,
        config: KeyValueTableConfiguration,
        segments: Iterable[SegmentRange],
        client: SegmentClient,
        call: SegmentCaller | None = None,
    ) -> None:
        self.scope = scope
        self.name = name
        self.config = config
        self.partitions = Partitions(segments)
        if len(self.partitions.segments) != config.partition_count:
            raise InvalidModelError(
                f"key-value table {scope}/{name}: {len(self.partitions.segments)} segments for "
                f"{config.partition_count} partitions"
            )
        self.client = client
        self._call: SegmentCaller = call or _direct

    @classmethod
    async def open(
        cls,
        controller: KvtControllerApi,
        client: SegmentClient,
        scope: str,
        name: str,
        call: SegmentCaller | None = None,
    ) -> KeyValueTable:
        """The table as the controller describes it now. Raises KeyValueTableNotFoundError."""
        config = await controller.get_key_value_table_configuration(scope, name)
        segments = await controller.get_current_segments_key_value_table(scope, name)
        return cls(scope, name, config, segments, client, call)

    @property
    def scoped_name(self) -> str:
        return f"{self.scope}/{self.name}"

    # ---- keys and segments ----------------------------------------------------------------------------------
    def check_key(self, key: TableKey) -> bytes:
        """The key as stored on its table segment (primary + secondary); InvalidModelError for wrong lengths."""
        config = self.config
        if len(key.primary) != config.primary_key_length:
            raise InvalidModelError(f"primary key: must be {config.primary_key_length} bytes, not {len(key.primary)}")
        if len(key.secondary) != config.secondary_key_length:
            raise InvalidModelError(
                f"secondary key: must be {config.secondary_key_length} bytes, not {len(key.secondary)}"
            )
        return bytes(key.primary) + bytes(key.secondary)

    def split_key(self, stored: bytes) -> TableKey:
        length = self.config.primary_key_length
        if len(stored) != self.config.total_key_length:
            raise InvalidModelError(f"key read back: {len(stored)} bytes, not {self.config.total_key_length}")
        return TableKey(stored[:length], stored[length:])

    def segment_of(self, key: TableKey) -> SegmentRange:
        return self.partitions.segment_for(bytes(key.primary))

    def segment_name(self, segment: SegmentRange) -> str:
        return table_segment_name(self.scope, self.name, segment.segment_id)

    def entry(self, segment: SegmentRange, found: VersionedEntry) -> TableEntry:
        return TableEntry(self.split_key(found.key), Version(segment.segment_id, found.version), found.value)

    def _condition(self, segment: SegmentRange, version: Version) -> int:
        if version.segment_id not in (NO_SEGMENT_ID, segment.segment_id):
            raise BadKeyVersionError(
                self.scoped_name,
                f"version {version} is of table segment {version.segment_id}, not {segment.segment_id}",
            )
        return version.segment_version

    async def run(self, segment: SegmentRange, call: Callable[[str], Awaitable[_T]]) -> _T:
        """``call(segment name)`` through the segment caller, with the replies' errors as this table's."""
        name = self.segment_name(segment)
        try:
            return await self._call(name, lambda: call(name))
        except TableKeyBadVersionReplyError as error:
            raise BadKeyVersionError(self.scoped_name, str(error)) from error
        except TableKeyDoesNotExistReplyError as error:
            raise NoSuchKeyError(self.scoped_name, str(error)) from error
        except NoSuchSegmentError as error:
            raise KeyValueTableNotFoundError(self.scope, self.name) from error

    # ---- updates --------------------------------------------------------------------------------------------
    async def put(self, key: TableKey, value: bytes, version: Version | None = None) -> Version:
        """Set ``key`` to ``value``; with ``version``, only if the key has it. The key's new version."""
        return (await self.update([Put(key, value, version or NO_VERSION)]))[0]

    async def put_if_absent(self, key: TableKey, value: bytes) -> Version:
        """Set ``key`` only if it does not exist (Java's ``Insert``). BadKeyVersionError if it does."""
        return (await self.update([Insert(key, value)]))[0]

    async def replace(self, key: TableKey, value: bytes, version: Version) -> Version:
        """Set ``key`` only if it has ``version``. BadKeyVersionError, NoSuchKeyError."""
        return (await self.update([Put(key, value, version)]))[0]

    async def remove(self, key: TableKey, version: Version | None = None) -> None:
        """Remove ``key`` (missing: no error); with ``version``, only if the key has it."""
        await self.update([Remove(key, version or NO_VERSION)])

    async def update(self, modifications: Sequence[TableModification]) -> list[Version]:
        """Apply a batch atomically (see the module docstring); the new versions of its puts, in order."""
        if not modifications:
            return []
        first = modifications[0]
        removal = isinstance(first, Remove)
        for change in modifications[1:]:
            if change.key.primary != first.key.primary:
                raise InvalidModelError(
                    "a batch is atomic only within one primary key: all its keys must have the same primary key"
                )
            if isinstance(change, Remove) != removal:
                raise InvalidModelError("a batch cannot combine removals with puts")
        segment = self.segment_of(first.key)
        if removal:
            keys = [(self.check_key(c.key), self._condition(segment, c.version)) for c in modifications]
            await self.run(segment, lambda name: self.client.remove_table_keys(name, keys))
            return []
        entries: list[tuple[bytes, bytes, int]] = []
        for change in modifications:
            assert not isinstance(change, Remove)
            if len(change.value) > MAX_VALUE_LENGTH:
                raise InvalidModelError(f"value: at most {MAX_VALUE_LENGTH} bytes, not {len(change.value)}")
            entries.append((self.check_key(change.key), bytes(change.value), self._condition(segment, change.version)))
        versions = await self.run(segment, lambda name: self.client.update_table_entries(name, entries))
        return [Version(segment.segment_id, v) for v in versions]

    # ---- reads ----------------------------------------------------------------------------------------------
    async def exists(self, key: TableKey) -> bool:
        """Whether ``key`` exists (a removal conditioned on its absence, as Java's: no value is read)."""
        try:
            await self.remove(key, NOT_EXISTS)
        except BadKeyVersionError:
            return True
        return False

    async def get(self, key: TableKey) -> TableEntry | None:
        return (await self.get_all([key]))[0]

    async def get_all(self, keys: Sequence[TableKey]) -> list[TableEntry | None]:
        """The entry of each key, in order (None for a missing key); every partition is asked concurrently."""
        by_segment: dict[int, tuple[SegmentRange, list[int]]] = {}
        stored = [self.check_key(k) for k in keys]
        for index, key in enumerate(keys):
            segment = self.segment_of(key)
            by_segment.setdefault(segment.segment_id, (segment, []))[1].append(index)
        result: list[TableEntry | None] = [None] * len(keys)

        async def read(segment: SegmentRange, indexes: list[int]) -> None:
            wanted = [stored[i] for i in indexes]
            found = await self.run(segment, lambda name: self.client.read_table(name, wanted))
            for index, entry in zip(indexes, found, strict=True):
                result[index] = None if entry is None else self.entry(segment, entry)

        reads = [
            read(segment, indexes[start : start + GET_BATCH_KEYS])
            for segment, indexes in by_segment.values()
            for start in range(0, len(indexes), GET_BATCH_KEYS)
        ]
        for outcome in await asyncio.gather(*reads, return_exceptions=True):
            if isinstance(outcome, BaseException):  # every read has ended; the first failure is the answer
                raise outcome
        return result

    def iterator(self, max_iteration_size: int = 10) -> KeyValueTableIteratorBuilder:
        """Build an iteration of keys or entries (see :mod:`controller_client.kvt.iterator`); each read of a table
        segment asks for ``max_iteration_size`` items."""
        return KeyValueTableIteratorBuilder(self, max_iteration_size)
