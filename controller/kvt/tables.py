"""Key-value table workflows (the seed's "KVT Operations"; Pravega's ``TableMetadataTasks``, ``CreateTableTask``,
``DeleteTableTask``): create, delete, and the queries, in model types.

**Create** (Pravega's order): the record appears ``CREATING`` with epoch 0 - one segment per partition, numbered
from :meth:`KvtMetadataStore.first_segment_number`, with even key ranges over ``[0, 1)`` (the last ends exactly
at 1.0) - then each partition's table segment is created (``CreateTableSegment``, key length = primary +
secondary, the configuration's rollover size), then the state becomes ``ACTIVE`` and the call answers.
**Delete**: the state becomes ``DELETING``, every table segment is deleted whatever it holds, the highest
segment number is remembered, then the record goes.

Pravega runs both as tasks of an event processor so a controller that dies midway has them finished by another.
Here the RPC runs the task itself, and the task is finished by whoever touches the table next: every step is
idempotent (a segment created or deleted twice is fine, state changes are compare-and-set), a ``create``
repeated with the same configuration, or any query, finishes a table left ``CREATING``; a ``delete`` repeated,
or a ``create`` of the same name, finishes a table left ``DELETING`` (which queries already treat as gone).
Within one controller the operations on one table run one at a time (a lock per table).

Errors: :class:`~controller.kvt.errors.KvtNotFoundError`, :class:`~controller.kvt.errors.KvtNameTakenError`,
:class:`controller.errors.ScopeNotFoundError`; ``WriteConflictError`` (retriable) when another controller
changed the table meanwhile; segment store and coordination outages propagate (retriable).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable

from controller.errors import ScopeNotFoundError
from controller.kvt.errors import KvtNameTakenError, KvtNotFoundError
from controller.kvt.records import KvtEpochRecord, KvtRecord, KvtSegmentRecord, KvtState
from controller.kvt.store import KvtMetadataStore
from controller.metadata import errors as md
from controller.metadata.store_base import StoreBase
from controller.segment_ops import SegmentStoreOps
from controller_client.kvt.model import KeyValueTableConfiguration, table_segment_name, table_segment_stream
from controller_client.model import SegmentRange, even_ranges

log = logging.getLogger(__name__)
PARALLEL_SEGMENT_CALLS = 32
"""How many table segments one create or delete asks the segment stores for at once."""


class KeyValueTables:
    """Create, delete, list and describe key-value tables (see the module docstring)."""

    def __init__(self, store: KvtMetadataStore, ops: SegmentStoreOps) -> None:
        self._store = store
        self._ops = ops
        self._locks: defaultdict[tuple[str, str], asyncio.Lock] = defaultdict(asyncio.Lock)

    @classmethod
    def over(cls, streams: StoreBase, ops: SegmentStoreOps) -> KeyValueTables:
        """Tables kept beside the streams of ``streams`` (same coordination store, root and clock)."""
        return cls(KvtMetadataStore.beside(streams), ops)

    # ---- create and delete ----------------------------------------------------------------------------------
    async def create(self, scope: str, kvt: str, config: KeyValueTableConfiguration) -> bool:
        """Create the table and its table segments; False if it exists (any configuration; a table left
        ``CREATING`` with this configuration is finished and True answered)."""
        async with self._locks[(scope, kvt)]:
            while True:
                found = await self._store.get(scope, kvt)
                if found is None:
                    break
                record, version = found
                if record.state is KvtState.ACTIVE:
                    return False
                if record.state is KvtState.CREATING:
                    if record.config != config:
                        return False
                    await self._finish_create(scope, kvt, record, version)
                    return True
                await self._finish_delete(scope, kvt, record, version)
            if await self._store.stream_exists(scope, table_segment_stream(kvt)):
                raise KvtNameTakenError(scope, kvt, table_segment_stream(kvt))
            record = self._new_record(config, await self._store.first_segment_number(scope, kvt))
            try:
                if not await self._store.create(scope, kvt, record):
                    raise md.WriteConflictError("created concurrently by another controller", scope=scope, name=kvt)
            except md.ScopeNotFoundError:
                raise ScopeNotFoundError(scope) from None
            found = await self._store.get(scope, kvt)
            if found is None or found[0].table_id != record.table_id:
                raise md.WriteConflictError("changed concurrently by another controller", scope=scope, name=kvt)
            await self._finish_create(scope, kvt, *found)
            log.info("key-value table %s/%s created with %d partitions", scope, kvt, config.partition_count)
            return True

    def _new_record(self, config: KeyValueTableConfiguration, first_number: int) -> KvtRecord:
        now = self._store.now_ms()
        segments = tuple(
            KvtSegmentRecord(first_number + i, 0, now, low, high)
            for i, (low, high) in enumerate(even_ranges(config.partition_count))
        )
        return KvtRecord(uuid.uuid4(), KvtState.CREATING, config, now, KvtEpochRecord(0, 0, segments, now))

    async def _finish_create(self, scope: str, kvt: str, record: KvtRecord, version: int) -> None:
        """Create every table segment of a ``CREATING`` table, then make it ``ACTIVE`` (idempotent)."""
        key_length = record.config.total_key_length
        rollover = record.config.rollover_size_bytes
        await self._each_segment(
            record, lambda name: self._ops.create_table_segment(name, key_length, rollover), scope, kvt
        )
        await self._store.set_state(scope, kvt, record, version, KvtState.ACTIVE)

    async def delete(self, scope: str, kvt: str) -> None:
        """Delete the table's segments (whatever they hold) and its record. KvtNotFoundError."""
        async with self._locks[(scope, kvt)]:
            found = await self._store.get(scope, kvt)
            if found is None:
                raise KvtNotFoundError(scope, kvt)
            record, version = found
            if record.state is not KvtState.DELETING:
                version = await self._store.set_state(scope, kvt, record, version, KvtState.DELETING)
            await self._finish_delete(scope, kvt, record, version)
            log.info("key-value table %s/%s deleted", scope, kvt)

    async def _finish_delete(self, scope: str, kvt: str, record: KvtRecord, version: int) -> None:
        """Delete every table segment of a ``DELETING`` table, remember its numbers, remove it (idempotent)."""
        await self._each_segment(record, self._ops.delete_table_segment, scope, kvt)
        await self._store.record_deleted(scope, kvt, record.last_segment_number)
        await self._store.remove(scope, kvt, version)

    async def _each_segment(
        self, record: KvtRecord, call: Callable[[str], Awaitable[None]], scope: str, kvt: str
    ) -> None:
        gate = asyncio.Semaphore(PARALLEL_SEGMENT_CALLS)

        async def one(segment_id: int) -> None:
            async with gate:
                await call(table_segment_name(scope, kvt, segment_id))

        results = await asyncio.gather(*(one(s) for s in record.segment_ids), return_exceptions=True)
        for result in results:  # every call has ended; the first failure is the answer
            if isinstance(result, BaseException):
                raise result

    # ---- queries --------------------------------------------------------------------------------------------
    async def _active(self, scope: str, kvt: str) -> KvtRecord:
        """The table's record once ``ACTIVE`` (a table left ``CREATING`` is finished first). KvtNotFoundError
        for a table that does not exist or is being deleted."""
        found = await self._store.get(scope, kvt)
        if found is not None and found[0].state is KvtState.CREATING:
            async with self._locks[(scope, kvt)]:
                found = await self._store.get(scope, kvt)
                if found is not None and found[0].state is KvtState.CREATING:
                    await self._finish_create(scope, kvt, *found)
                    found = await self._store.get(scope, kvt)
        if found is None or found[0].state is not KvtState.ACTIVE:
            raise KvtNotFoundError(scope, kvt)
        return found[0]

    async def get_configuration(self, scope: str, kvt: str) -> KeyValueTableConfiguration:
        return (await self._active(scope, kvt)).config

    async def current_segments(self, scope: str, kvt: str) -> list[SegmentRange]:
        """The table's segments with their key ranges, sorted by key range (Pravega's active segments)."""
        record = await self._active(scope, kvt)
        return sorted((s.range for s in record.epoch.segments), key=lambda r: r.key_start)

    async def list_tables(self, scope: str, token: str, limit: int) -> tuple[list[str], str]:
        """Table names of ``scope`` after ``token`` and the next token. ScopeNotFoundError."""
        try:
            return await self._store.list_tables(scope, token, limit)
        except md.ScopeNotFoundError:
            raise ScopeNotFoundError(scope) from None
