"""Every request command other than appends (Pravega's ``PravegaRequestProcessor``).

:meth:`RequestHandler.handle` answers one request with one reply command, or None when the
connection must close (see :func:`~segment_store.server.replies.error_reply`). Segments are
routed to their container by name; a container not running here answers ``WrongHost``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from segment_store.containers.registry import ContainerRegistry
from segment_store.containers.segment_container import SegmentContainer
from segment_store.iceberg.status import TableStatus
from segment_store.protocol import (
    MAX_INGEST_TIME_RUNS,
    ChunkPinsListed,
    ChunksPinned,
    ChunksUnpinned,
    CreateSegment,
    CreateTableSegment,
    CreateTransientSegment,
    DeleteSegment,
    DeleteTableSegment,
    ErrorMessage,
    ErrorMessageCode,
    FlushToStorage,
    GetSegmentAttribute,
    GetStreamSegmentInfo,
    GetTableSegmentInfo,
    IcebergTableInfo,
    IcebergTablesListed,
    IngestTimeRun,
    IngestTimesRead,
    ListChunkPins,
    ListIcebergTables,
    ListStorageChunkLocations,
    ListStorageChunks,
    LocateOffset,
    LocateOffsetAtTime,
    LocateOffsetBeforeTime,
    MergeSegments,
    MergeSegmentsBatch,
    NoSuchSegment,
    OffsetAtTimeLocated,
    OffsetBeforeTimeLocated,
    OffsetLocated,
    OperationUnsupported,
    PinChunks,
    PinInfo,
    ReadIngestTimes,
    ReadSegment,
    ReadTable,
    ReadTableEntries,
    ReadTableEntriesDelta,
    ReadTableKeys,
    RemoveTableKeys,
    SealSegment,
    SegmentAttribute,
    SegmentAttributeUpdated,
    SegmentCreated,
    SegmentDeleted,
    SegmentPolicyUpdated,
    SegmentRead,
    SegmentsBatchMerged,
    SegmentSealed,
    SegmentsMerged,
    SegmentTruncated,
    StorageChunksListed,
    StorageFlushed,
    StreamSegmentInfo,
    TableEntriesDeltaRead,
    TableEntriesRead,
    TableEntriesUpdated,
    TableKeysRead,
    TableKeysRemoved,
    TableRead,
    TableSegmentInfo,
    TruncateSegment,
    UnpinChunks,
    UpdateSegmentAttribute,
    UpdateSegmentPolicy,
    UpdateTableEntries,
)
from segment_store.protocol import ChunkInfo as WireChunkInfo
from segment_store.protocol import TableEntry as WireEntry
from segment_store.protocol import TableKey as WireKey
from segment_store.protocol import TableValue as WireValue
from segment_store.protocol.registry import WireCommand
from segment_store.server.chunk_locations import locations_reply
from segment_store.server.config import ServerConfig
from segment_store.server.replies import error_reply
from segment_store.server.token_gate import TokenGate
from segment_store.storage.chunk_pins import ChunkPins, PinError
from segment_store.storage.chunked_storage import ChunkedSegmentStorage
from segment_store.tables.entries import NOT_EXISTS, TableEntry, TableKey
from segment_store.tables.table_store import TableStore
from segstore_shared.auth.tokens import TokenVerifier
from segstore_shared.cluster.container_mapping import TRANSIENT_DELIMITER
from segstore_shared.contracts import (
    CREATION_TIME,
    EVENT_COUNT,
    NULL_ATTRIBUTE_VALUE,
    ROLLOVER_SIZE,
    SCALE_POLICY_RATE,
    SCALE_POLICY_TYPE,
    AttributeUpdate,
    AttributeUpdateType,
    BadAttributeUpdateError,
    SegmentNotExistsError,
    SegmentType,
)

log = logging.getLogger(__name__)

_ENTRY_OVERHEAD = 24  # per entry in a table reply: key/value lengths, version


def _segment_of(command: WireCommand) -> str:
    for field in ("segment", "segment_name", "target", "target_segment_id", "parent_segment"):
        value = getattr(command, field, None)
        if isinstance(value, str):
            return value
    return ""


async def _exists(container: SegmentContainer, name: str) -> bool:
    """``name`` exists in the container's *committed* state: a segment whose merge or delete is still in flight (and
    may yet fail) still exists."""
    try:
        await container.get_info(name)
    except SegmentNotExistsError:
        return False
    return True


class RequestHandler:
    """Answers non-append requests for the containers in ``registry`` (shared by all connections)."""

    def __init__(
        self,
        registry: ContainerRegistry,
        tables: Callable[[SegmentContainer], TableStore],
        config: ServerConfig,
        iceberg_tables: Callable[[], list[TableStatus] | None] = lambda: None,
    ) -> None:
        """``iceberg_tables``: the Iceberg tables' statuses now (None: this segment store keeps no tables)."""
        self._registry = registry
        self._iceberg_tables = iceberg_tables
        self._tables = tables
        self._config = config
        key = config.auth_token_signing_key
        self.gate = TokenGate(TokenVerifier(key) if key is not None else None)
        self._handlers: dict[type, Callable[[Any], Awaitable[WireCommand]]] = {
            ReadSegment: self._read_segment,
            GetStreamSegmentInfo: self._segment_info,
            CreateSegment: self._create_segment,
            CreateTransientSegment: self._create_transient,
            UpdateSegmentPolicy: self._update_policy,
            SealSegment: self._seal,
            TruncateSegment: self._truncate,
            DeleteSegment: self._delete,
            MergeSegments: self._merge,
            MergeSegmentsBatch: self._merge_batch,
            GetSegmentAttribute: self._get_attribute,
            UpdateSegmentAttribute: self._update_attribute,
            FlushToStorage: self._flush,
            ListStorageChunks: self._list_chunks,
            ListStorageChunkLocations: self._list_chunk_locations,
            LocateOffsetAtTime: self._offset_at_time,
            LocateOffsetBeforeTime: self._offset_before_time,
            ReadIngestTimes: self._ingest_times,
            CreateTableSegment: self._create_table,
            DeleteTableSegment: self._delete_table,
            UpdateTableEntries: self._update_table,
            RemoveTableKeys: self._remove_keys,
            ReadTable: self._read_table,
            ReadTableKeys: self._read_keys,
            ReadTableEntries: self._read_entries,
            ReadTableEntriesDelta: self._read_delta,
            GetTableSegmentInfo: self._table_info,
            LocateOffset: self._locate_offset,
            PinChunks: self._pin_chunks,
            UnpinChunks: self._unpin_chunks,
            ListChunkPins: self._list_pins,
            ListIcebergTables: self._list_iceberg_tables,
        }

    def handles(self, command: WireCommand) -> bool:
        return type(command) in self._handlers

    async def handle(self, command: WireCommand) -> WireCommand | None:
        """The reply to ``command``, or None if the connection must close."""
        request_id = getattr(command, "request_id", -1)
        handler = self._handlers.get(type(command))
        if handler is None:
            return OperationUnsupported(request_id, type(command).__name__, "")
        refusal = self.gate.refusal(command)
        if refusal is not None:
            return refusal
        try:
            return await handler(command)
        except Exception as exc:
            offset = getattr(command, "offset", -1)
            return error_reply(exc, request_id, _segment_of(command), offset if isinstance(offset, int) else -1)

    def _container(self, segment: str) -> SegmentContainer:
        return self._registry.for_segment(segment)

    # ---- segments -------------------------------------------------------------------------------------------
    async def _read_segment(self, c: ReadSegment) -> WireCommand:
        container = self._container(c.segment)
        length = max(1, min(c.suggested_length, self._config.max_read_bytes))
        result = await container.read(c.segment, c.offset, length, self._config.read_tail_wait_s)
        at_tail = result.offset + len(result.data) >= container.length(c.segment)
        return SegmentRead(c.segment, c.offset, at_tail, result.end_of_segment, result.data, c.request_id)

    async def _segment_info(self, c: GetStreamSegmentInfo) -> WireCommand:
        info = await self._container(c.segment_name).get_info(c.segment_name)  # missing: NoSuchSegment, as Java
        return StreamSegmentInfo(
            c.request_id,
            c.segment_name,
            True,
            info.sealed,
            info.deleted,
            info.last_modified_ms,
            info.length,
            info.start_offset,
        )

    async def _create_segment(self, c: CreateSegment) -> WireCommand:
        attributes = {
            CREATION_TIME: int(time.time() * 1000),
            SCALE_POLICY_TYPE: int(c.scale_type),
            SCALE_POLICY_RATE: c.target_rate,
            ROLLOVER_SIZE: c.rollover_size_bytes,
        }
        await self._container(c.segment).create_segment(c.segment, SegmentType.STREAM, attributes)
        return SegmentCreated(c.request_id, c.segment)

    async def _create_transient(self, c: CreateTransientSegment) -> WireCommand:
        name = f"{c.parent_segment}{TRANSIENT_DELIMITER}{c.writer_id.hex}"
        attributes = {CREATION_TIME: int(time.time() * 1000)}
        await self._container(name).create_segment(name, SegmentType.STREAM | SegmentType.TRANSIENT, attributes)
        return SegmentCreated(c.request_id, name)

    async def _update_policy(self, c: UpdateSegmentPolicy) -> WireCommand:
        await self._container(c.segment).update_attributes(
            c.segment,
            [
                AttributeUpdate(SCALE_POLICY_TYPE, AttributeUpdateType.REPLACE, int(c.scale_type)),
                AttributeUpdate(SCALE_POLICY_RATE, AttributeUpdateType.REPLACE, c.target_rate),
            ],
        )
        return SegmentPolicyUpdated(c.request_id, c.segment)

    async def _seal(self, c: SealSegment) -> WireCommand:
        await self._container(c.segment).seal(c.segment)
        return SegmentSealed(c.request_id, c.segment)

    async def _truncate(self, c: TruncateSegment) -> WireCommand:
        await self._container(c.segment).truncate(c.segment, c.truncation_offset)
        return SegmentTruncated(c.request_id, c.segment)

    async def _delete(self, c: DeleteSegment) -> WireCommand:
        await self._container(c.segment).delete_segment(c.segment)
        return SegmentDeleted(c.request_id, c.segment)

    async def _merge(self, c: MergeSegments) -> WireCommand:
        updates = [
            AttributeUpdate(u.attribute_id.int, AttributeUpdateType(u.attribute_update_type), u.new_value, u.old_value)
            for u in c.attribute_updates
        ]
        container = self._container(c.target)
        try:
            events = (await container.get_attributes(c.source, [EVENT_COUNT]))[EVENT_COUNT]
            if events != NULL_ATTRIBUTE_VALUE:
                updates.append(AttributeUpdate(EVENT_COUNT, AttributeUpdateType.ACCUMULATE, events))
            result = await container.merge(c.target, c.source, updates)
        except BadAttributeUpdateError:
            return SegmentAttributeUpdated(c.request_id, False)  # a condition on the target failed: not merged
        except SegmentNotExistsError:
            if not container.was_merged(c.source):
                # Name the missing one: the controller takes a missing source as merged already, a missing target as
                # an error. Only a source gone for good is named (committed): one whose merge by an earlier attempt is
                # still in flight (it may fail) answers as a missing target, and the controller retries.
                if not await _exists(container, c.source):
                    return NoSuchSegment(c.request_id, c.source, "", -1)
                raise
            info = await container.get_info(c.target)  # merged by an earlier attempt: answer as Pravega does
            return SegmentsMerged(c.request_id, c.target, c.source, info.length)
        return SegmentsMerged(c.request_id, c.target, c.source, result.target_length)

    async def _merge_batch(self, c: MergeSegmentsBatch) -> WireCommand:
        container = self._container(c.target_segment_id)
        offsets = []
        for source in c.source_segment_ids:
            try:
                offsets.append((await container.merge(c.target_segment_id, source)).target_length)
            except SegmentNotExistsError:  # merged by an earlier attempt of this batch: report the current length
                offsets.append((await container.get_info(c.target_segment_id)).length)
        return SegmentsBatchMerged(c.request_id, c.target_segment_id, c.source_segment_ids, tuple(offsets))

    async def _get_attribute(self, c: GetSegmentAttribute) -> WireCommand:
        values = await self._container(c.segment_name).get_attributes(c.segment_name, [c.attribute_id.int])
        return SegmentAttribute(c.request_id, values[c.attribute_id.int])

    async def _update_attribute(self, c: UpdateSegmentAttribute) -> WireCommand:
        update = AttributeUpdate(
            c.attribute_id.int, AttributeUpdateType.REPLACE_IF_EQUALS, c.new_value, c.expected_value
        )
        try:
            await self._container(c.segment_name).update_attributes(c.segment_name, [update])
        except BadAttributeUpdateError:
            return SegmentAttributeUpdated(c.request_id, False)
        return SegmentAttributeUpdated(c.request_id, True)

    async def _flush(self, c: FlushToStorage) -> WireCommand:
        await self._registry.get(c.container_id).flush_to_storage()
        return StorageFlushed(c.request_id)

    async def _list_chunks(self, c: ListStorageChunks) -> WireCommand:
        container = self._container(c.segment)
        info = await container.get_info(c.segment)
        chunks = [] if info.storage_length == 0 else await container.storage.chunks(c.segment)
        return StorageChunksListed(
            c.request_id,
            tuple(WireChunkInfo(ch.length, ch.length, ch.start_offset, ch.chunk_name, True) for ch in chunks),
        )

    async def _list_chunk_locations(self, c: ListStorageChunkLocations) -> WireCommand:
        container = self._container(c.segment)
        info = await container.get_info(c.segment)
        in_tier2 = c.from_offset < info.storage_length and c.from_offset < c.to_offset  # a tail read: nothing there
        chunks = await container.storage.chunks(c.segment) if in_tier2 else []
        return locations_reply(c.request_id, c.segment, info.start_offset, chunks, c.from_offset, c.to_offset)

    @staticmethod
    def _pins(container: SegmentContainer) -> ChunkPins | None:
        """The container's pins; None for a Tier-2 without chunk files (the request is then unsupported)."""
        return container.storage.pins if isinstance(container.storage, ChunkedSegmentStorage) else None

    async def _pin_chunks(self, c: PinChunks) -> WireCommand:
        container = self._container(c.segment)
        await container.get_info(c.segment)  # missing: NoSuchSegment
        pins = self._pins(container)
        if pins is None:
            return OperationUnsupported(c.request_id, "PinChunks", "")
        current = {chunk.chunk_name for chunk in await container.storage.chunks(c.segment)}
        gone = set(c.chunks) - current - pins.held()  # deleted, or about to be: a pin could not keep them
        if gone:
            raise PinError(f"{len(gone)} chunks are neither in {c.segment} nor pinned (e.g. {min(gone)}): list again")
        pin = await asyncio.to_thread(pins.pin, c.pin_id, c.segment, c.chunks, c.ttl_ms)
        return ChunksPinned(c.request_id, c.pin_id, pin.expires_at_ms)

    async def _unpin_chunks(self, c: UnpinChunks) -> WireCommand:
        pins = self._pins(self._container(c.segment))
        if pins is None:
            return OperationUnsupported(c.request_id, "UnpinChunks", "")
        return ChunksUnpinned(c.request_id, c.pin_id, await asyncio.to_thread(pins.release, c.pin_id, c.segment))

    async def _list_pins(self, c: ListChunkPins) -> WireCommand:
        pins = self._pins(self._registry.get(c.container_id))
        if pins is None:
            return OperationUnsupported(c.request_id, "ListChunkPins", "")
        listed = tuple(PinInfo(p.pin_id, p.segment, p.expires_at_ms, len(p.chunks)) for p in pins.live())
        return ChunkPinsListed(c.request_id, listed)

    async def _list_iceberg_tables(self, c: ListIcebergTables) -> WireCommand:
        statuses = self._iceberg_tables()
        if statuses is None:
            return IcebergTablesListed(c.request_id, False, ())
        now_ms = int(time.time() * 1000)
        listed = tuple(
            IcebergTableInfo(
                s.name,
                -1 if s.snapshot_id is None else s.snapshot_id,
                -1 if s.committed_at_ms is None else s.committed_at_ms,
                s.data_files,
                s.lag_bytes,
                s.lag_chunks,
                s.lag_age_ms(now_ms),
                s.last_pass_at_ms,
                s.failures,
                s.failed_passes,
                s.last_error,
            )
            for s in statuses
        )
        return IcebergTablesListed(c.request_id, True, listed)

    async def _locate_offset(self, c: LocateOffset) -> WireCommand:
        # Pravega answers from its index segment (a boundary at or after the target); this store knows the first.
        offset = await self._container(c.segment).event_start_at_or_after(c.segment, c.target_offset)
        return OffsetLocated(c.request_id, c.segment, offset)

    async def _offset_at_time(self, c: LocateOffsetAtTime) -> WireCommand:
        offset = await self._container(c.segment).offset_at_time(c.segment, c.timestamp_ms)
        return OffsetAtTimeLocated(c.request_id, c.segment, offset)

    async def _offset_before_time(self, c: LocateOffsetBeforeTime) -> WireCommand:
        offset = await self._container(c.segment).end_offset_before_time(c.segment, c.timestamp_ms)
        return OffsetBeforeTimeLocated(c.request_id, c.segment, -1 if offset is None else offset)

    async def _ingest_times(self, c: ReadIngestTimes) -> WireCommand:
        container = self._container(c.segment)
        end, runs = await container.ingest_time_runs(c.segment, c.from_offset, c.to_offset, MAX_INGEST_TIME_RUNS)
        return IngestTimesRead(c.request_id, c.segment, end, tuple(IngestTimeRun(at, ms) for at, ms in runs))

    # ---- tables ---------------------------------------------------------------------------------------------
    def _table(self, segment: str) -> TableStore:
        return self._tables(self._container(segment))

    async def _create_table(self, c: CreateTableSegment) -> WireCommand:
        await self._table(c.segment).create_segment(c.segment, c.key_length, c.rollover_size_bytes)
        return SegmentCreated(c.request_id, c.segment)

    async def _delete_table(self, c: DeleteTableSegment) -> WireCommand:
        await self._table(c.segment).delete_segment(c.segment, c.must_be_empty)
        return SegmentDeleted(c.request_id, c.segment)

    async def _update_table(self, c: UpdateTableEntries) -> WireCommand:
        entries = [TableEntry(e.key.data, e.value.data, e.key.key_version) for e in c.entries]
        versions = await self._table(c.segment).put(c.segment, entries, c.table_segment_offset)
        return TableEntriesUpdated(c.request_id, tuple(versions))

    async def _remove_keys(self, c: RemoveTableKeys) -> WireCommand:
        keys = [TableKey(k.data, k.key_version) for k in c.keys]
        await self._table(c.segment).remove(c.segment, keys, c.table_segment_offset)
        return TableKeysRemoved(c.request_id, c.segment)

    async def _read_table(self, c: ReadTable) -> WireCommand:
        found = await self._table(c.segment).get(c.segment, [k.data for k in c.keys])
        entries = tuple(
            WireEntry(WireKey(k.data, NOT_EXISTS), WireValue(b""))
            if e is None
            else WireEntry(WireKey(e.key, e.version), WireValue(e.value))
            for k, e in zip(c.keys, found, strict=True)
        )
        return TableRead(c.request_id, c.segment, entries)

    async def _read_keys(self, c: ReadTableKeys) -> WireCommand:
        page = await self._table(c.segment).read_keys(
            c.segment, max(1, c.suggested_key_count), c.args.continuation_token, c.args.from_key, c.args.to_key
        )
        keys = tuple(WireKey(k.key, k.version) for k in page.items)
        return TableKeysRead(c.request_id, c.segment, keys, page.continuation_token)

    async def _read_entries(self, c: ReadTableEntries) -> WireCommand:
        page = await self._table(c.segment).read_entries(
            c.segment, max(1, c.suggested_entry_count), c.args.continuation_token, c.args.from_key, c.args.to_key
        )
        entries = tuple(WireEntry(WireKey(e.key, e.version), WireValue(e.value)) for e in page.items)
        return TableEntriesRead(c.request_id, c.segment, entries, page.continuation_token)

    async def _read_delta(self, c: ReadTableEntriesDelta) -> WireCommand:
        delta = await self._table(c.segment).read_entries_delta(
            c.segment, c.from_position, max(1, c.suggested_entry_count)
        )
        folded: dict[bytes, WireEntry] = {}  # as Pravega: the latest change per key, removals drop the key
        for e in delta.entries:
            if e.removed:
                folded.pop(e.key, None)
            else:
                folded.pop(e.key, None)
                folded[e.key] = WireEntry(WireKey(e.key, e.version), WireValue(e.value))
        return TableEntriesDeltaRead(
            c.request_id,
            c.segment,
            tuple(folded.values()),
            delta.should_clear,
            delta.reached_end,
            delta.last_position,
        )

    async def _table_info(self, c: GetTableSegmentInfo) -> WireCommand:
        info = await self._table(c.segment_name).info(c.segment_name)
        return TableSegmentInfo(
            c.request_id, c.segment_name, info.start_offset, info.length, info.entry_count, info.key_length
        )


def invalid_request(request_id: int, segment: str, message: str) -> WireCommand:
    return ErrorMessage(request_id, segment, message, ErrorMessageCode.ILLEGAL_ARGUMENT_EXCEPTION)
