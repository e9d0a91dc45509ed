"""Blocking forms of :class:`~controller_client.kvt.table.KeyValueTable` and its iterators, for threads
without an event loop; made by ``BlockingStreamManager.key_value_table`` and run on its loop thread (see
:mod:`controller_client.blocking.streams`). Every method blocks until the coroutine ends and re-raises its error;
iterating pulls one item at a time from the loop."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
from typing import TypeVar

from controller_client.kvt.iterator import KeyValueTableIterator
from controller_client.kvt.model import KeyValueTableConfiguration, TableEntry, TableKey, TableModification, Version
from controller_client.kvt.table import KeyValueTable
from segstore_shared.loop_thread import BlockingFacade, LoopThread

_I = TypeVar("_I")


class BlockingKeyValueTableIterator(BlockingFacade):
    """Blocking face of a :class:`KeyValueTableIterator`: ``keys()`` and ``entries()`` are plain iterators."""

    def __init__(self, runner: LoopThread, iterator: KeyValueTableIterator) -> None:
        super().__init__(runner)
        self.iterator = iterator

    def keys(self) -> Iterator[TableKey]:
        return self._pull(self.iterator.keys())

    def entries(self) -> Iterator[TableEntry]:
        return self._pull(self.iterator.entries())

    def _pull(self, items: AsyncIterator[_I]) -> Iterator[_I]:
        while (item := self._run(_next(items))) is not None:
            yield item


async def _next(items: AsyncIterator[_I]) -> _I | None:
    return await anext(items, None)


class BlockingIteratorBuilder(BlockingFacade):
    def __init__(self, runner: LoopThread, table: KeyValueTable, max_iteration_size: int) -> None:
        super().__init__(runner)
        self._builder = table.iterator(max_iteration_size)

    def for_primary_key(
        self, primary_key: bytes, from_secondary: bytes | None = None, to_secondary: bytes | None = None
    ) -> BlockingKeyValueTableIterator:
        return self._wrap(self._builder.for_primary_key(primary_key, from_secondary, to_secondary))

    def for_primary_key_prefix(self, primary_key: bytes, secondary_prefix: bytes) -> BlockingKeyValueTableIterator:
        return self._wrap(self._builder.for_primary_key_prefix(primary_key, secondary_prefix))

    def for_range(
        self, from_primary: bytes | None = None, to_primary: bytes | None = None
    ) -> BlockingKeyValueTableIterator:
        return self._wrap(self._builder.for_range(from_primary, to_primary))

    def for_prefix(self, primary_prefix: bytes) -> BlockingKeyValueTableIterator:
        return self._wrap(self._builder.for_prefix(primary_prefix))

    def all(self) -> BlockingKeyValueTableIterator:
        return self._wrap(self._builder.all())

    def _wrap(self, iterator: KeyValueTableIterator) -> BlockingKeyValueTableIterator:
        return BlockingKeyValueTableIterator(self._runner, iterator)


class BlockingKeyValueTable(BlockingFacade):
    """Blocking face of a :class:`KeyValueTable` (same methods, same errors)."""

    def __init__(self, runner: LoopThread, table: KeyValueTable) -> None:
        super().__init__(runner)
        self.table = table

    @property
    def config(self) -> KeyValueTableConfiguration:
        return self.table.config

    def put(self, key: TableKey, value: bytes, version: Version | None = None) -> Version:
        return self._run(self.table.put(key, value, version))

    def put_if_absent(self, key: TableKey, value: bytes) -> Version:
        return self._run(self.table.put_if_absent(key, value))

    def replace(self, key: TableKey, value: bytes, version: Version) -> Version:
        return self._run(self.table.replace(key, value, version))

    def remove(self, key: TableKey, version: Version | None = None) -> None:
        self._run(self.table.remove(key, version))

    def update(self, modifications: Sequence[TableModification]) -> list[Version]:
        return self._run(self.table.update(modifications))

    def exists(self, key: TableKey) -> bool:
        return self._run(self.table.exists(key))

    def get(self, key: TableKey) -> TableEntry | None:
        return self._run(self.table.get(key))

    def get_all(self, keys: Sequence[TableKey]) -> list[TableEntry | None]:
        return self._run(self.table.get_all(keys))

    def iterator(self, max_iteration_size: int = 10) -> BlockingIteratorBuilder:
        return BlockingIteratorBuilder(self._runner, self.table, max_iteration_size)
