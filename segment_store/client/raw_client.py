"""The segment client: every request/reply command of the wire protocol as one async method.

Each call picks a pooled connection to the segment's segment store (a fixed endpoint, or a resolver
such as the controller's ``getURI``), sends one request with a fresh request id and returns a plain
result value (``results``). Failure replies raise their typed error (``errors``); a lost connection
raises ConnectionLostError. Calls are not retried here: reads and info are safe to repeat, creates and
merges are not (a repeated create may answer SegmentAlreadyExistsError), so retrying is the caller's
decision (``RetryPolicy.call``); requests that only read (info, attributes, ``read_segment``, table reads)
are retried by ``ClientConfig.read_retry``. Appends and reads with flow control live in ``writer``, ``conditional``
and ``reader``; this class makes them.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TypeVar

from segment_store.client.conditional import ConditionalWriter
from segment_store.client.config import ClientConfig, ReaderConfig, WriterConfig
from segment_store.client.connection import Connection, Endpoint, next_request_id
from segment_store.client.errors import AuthTokenCheckFailedError
from segment_store.client.pool import ConnectionPool
from segment_store.client.reader import SegmentReader
from segment_store.client.results import (
    NO_VERSION,
    DeltaPage,
    EntriesPage,
    KeysPage,
    ReadSegmentResult,
    SegmentStatus,
    StorageChunkLocations,
    StoredChunk,
    TableSegmentStatus,
    VersionedEntry,
    VersionedKey,
)
from segment_store.client.tokens import StaticTokens, TokenSource
from segment_store.client.writer import SegmentWriter
from segment_store.protocol import (
    NO_SCALE,
    NULL_ATTRIBUTE_VALUE,
    NULL_TABLE_SEGMENT_OFFSET,
    ChunkInfo,
    ChunkPinsListed,
    ChunksPinned,
    ChunksUnpinned,
    ConditionalAttributeUpdate,
    CreateSegment,
    CreateTableSegment,
    CreateTransientSegment,
    DeleteSegment,
    DeleteTableSegment,
    FlushToStorage,
    GetSegmentAttribute,
    GetStreamSegmentInfo,
    GetTableSegmentInfo,
    IcebergTableInfo,
    IcebergTablesListed,
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
    OffsetAtTimeLocated,
    OffsetBeforeTimeLocated,
    OffsetLocated,
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
    StorageChunkLocationsListed,
    StorageChunksListed,
    StorageFlushed,
    StreamSegmentInfo,
    TableEntriesDeltaRead,
    TableEntriesRead,
    TableEntriesUpdated,
    TableEntry,
    TableIteratorArgs,
    TableKey,
    TableKeysRead,
    TableKeysRemoved,
    TableRead,
    TableSegmentInfo,
    TableValue,
    TruncateSegment,
    UnpinChunks,
    UpdateSegmentAttribute,
    UpdateSegmentPolicy,
    UpdateTableEntries,
    WireCommand,
)

EndpointResolver = Callable[[str], Awaitable[Endpoint]]
MAX_OFFSET = 2**63 - 1
"""The largest segment offset (Java ``Long.MAX_VALUE``): "to the end" in ranges."""
R = TypeVar("R", bound=WireCommand)

#: An entry to write: (key, value) for an unconditional put, or (key, value, expected key version).
EntryUpdate = tuple[bytes, bytes] | tuple[bytes, bytes, int]
#: A key to remove: the key alone (unconditional), or (key, expected key version).
KeyRemoval = bytes | tuple[bytes, int]


def _entries(entries: Iterable[TableEntry]) -> list[VersionedEntry]:
    return [VersionedEntry(e.key.data, e.value.data, e.key.key_version) for e in entries]


class SegmentClient:
    """Async client of one or more segment stores; share one per process (it owns a connection pool).

    ``endpoint`` is either the one segment store's ``(host, port)`` or an async resolver from segment name
    to endpoint. Use from one event loop; ``async with`` closes the pool if this client created it.
    """

    def __init__(
        self,
        endpoint: Endpoint | EndpointResolver,
        config: ClientConfig | None = None,
        pool: ConnectionPool | None = None,
        tokens: TokenSource | None = None,
        on_moved: Callable[[str], None] | None = None,
    ) -> None:
        self.config = config or ClientConfig()
        self._on_moved = on_moved
        self._owns_pool = pool is None
        self.pool = pool or ConnectionPool(self.config.connection, self.config.pool)
        self._static: Endpoint | None = endpoint if isinstance(endpoint, tuple) else None
        self._resolve: EndpointResolver | None = None if isinstance(endpoint, tuple) else endpoint
        self.tokens: TokenSource = tokens or StaticTokens(self.config.connection.delegation_token)

    async def __aenter__(self) -> SegmentClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the connection pool if this client created it."""
        if self._owns_pool:
            await self.pool.close()

    async def token(self, segment: str, write: bool) -> str:
        """The delegation token for a request on ``segment`` (``tokens``; sessions and readers ask here)."""
        return await self.tokens.token(segment, write)

    def token_expired(self, segment: str) -> None:
        """A segment store said the token for ``segment`` expired: the next one is fetched anew."""
        self.tokens.expired(segment)

    def moved(self, segment: str) -> None:
        """A segment store answered ``WrongHost`` for ``segment``: where it was looked up is stale, and the next
        connection for it asks the resolver anew (``on_moved``: e.g. the controller resolver's ``invalidate``;
        nothing with one static endpoint). Sessions and readers call it before trying again."""
        if self._on_moved is not None:
            self._on_moved(segment)

    async def endpoint_for(self, segment: str) -> Endpoint:
        """The endpoint serving ``segment``."""
        if self._static is not None:
            return self._static
        assert self._resolve is not None
        return await self._resolve(segment)

    async def connection_for(self, segment: str) -> Connection:
        """A pooled connection to the segment store of ``segment``. Raises ConnectionLostError."""
        return await self.pool.get(await self.endpoint_for(segment))

    async def _call(
        self,
        segment: str,
        make: Callable[[int, str], WireCommand],
        expect: type[R],
        timeout_s: float | None = -1.0,
        *,
        write: bool = True,
    ) -> R:
        """One request, made by ``make(request_id, token)`` with this segment's delegation token. A token the
        segment store found expired is replaced once (the refused request did nothing, so it can be repeated)."""
        for attempt in range(2):
            token = await self.tokens.token(segment, write)
            connection = await self.connection_for(segment)
            try:
                return await connection.request(make(next_request_id(), token), expect, timeout_s)
            except AuthTokenCheckFailedError as error:
                if not error.retriable or attempt:
                    raise
                self.tokens.expired(segment)
        raise AssertionError("unreachable")

    async def _read_call(
        self, segment: str, make: Callable[[int, str], WireCommand], expect: type[R], timeout_s: float | None = -1.0
    ) -> R:
        """A request that is safe to repeat: retried by ``read_retry`` (fresh request id each time)."""

        async def attempt() -> R:
            return await self._call(segment, make, expect, timeout_s, write=False)

        return await self.config.read_retry.call(attempt)

    # ---- append sessions and readers ----------------------------------------------------------------------

    def writer(
        self, segment: str, writer_id: uuid.UUID | None = None, config: WriterConfig | None = None
    ) -> SegmentWriter:
        """An append session for ``segment`` (random writer id unless given); ``await open()`` it."""
        return SegmentWriter(self, segment, writer_id or uuid.uuid4(), config or self.config.writer)

    def conditional_writer(
        self, segment: str, writer_id: uuid.UUID | None = None, config: WriterConfig | None = None
    ) -> ConditionalWriter:
        """A conditional-append session for ``segment``."""
        return ConditionalWriter(self, segment, writer_id or uuid.uuid4(), config or self.config.writer)

    def reader(
        self, segment: str, offset: int = 0, end_offset: int | None = None, config: ReaderConfig | None = None
    ) -> SegmentReader:
        """A prefetching reader of ``segment`` from ``offset`` (up to ``end_offset`` if given)."""
        return SegmentReader(self, segment, offset, end_offset, config or self.config.reader)

    # ---- stream segments ----------------------------------------------------------------------------------

    async def create_segment(
        self, segment: str, scale_type: int = NO_SCALE, target_rate: int = 0, rollover_size_bytes: int = 0
    ) -> None:
        """Create a stream segment. Raises SegmentAlreadyExistsError."""
        await self._call(
            segment, lambda rid, t: CreateSegment(rid, segment, target_rate, scale_type, t, rollover_size_bytes),
            SegmentCreated,
        )  # fmt: skip

    async def create_transient_segment(self, parent_segment: str, writer_id: uuid.UUID) -> str:
        """Create a transient segment of ``writer_id`` under ``parent_segment``; returns its name."""
        reply = await self._call(
            parent_segment, lambda rid, t: CreateTransientSegment(rid, writer_id, parent_segment, t), SegmentCreated
        )
        return reply.segment

    async def seal_segment(self, segment: str) -> None:
        """Seal ``segment``. Raises NoSuchSegmentError."""
        await self._call(segment, lambda rid, t: SealSegment(rid, segment, t), SegmentSealed)

    async def truncate_segment(self, segment: str, offset: int) -> None:
        """Drop the data of ``segment`` below ``offset``."""
        await self._call(segment, lambda rid, t: TruncateSegment(rid, segment, offset, t), SegmentTruncated)

    async def delete_segment(self, segment: str) -> None:
        """Delete ``segment``. Raises NoSuchSegmentError."""
        await self._call(segment, lambda rid, t: DeleteSegment(rid, segment, t), SegmentDeleted)

    async def merge_segments(
        self, target: str, source: str, attribute_updates: Sequence[ConditionalAttributeUpdate] = ()
    ) -> int:
        """Merge ``source`` (sealed) into ``target``; returns the target's new length (-1 if not told)."""
        updates = tuple(attribute_updates)
        reply = await self._call(target, lambda rid, t: MergeSegments(rid, target, source, t, updates), SegmentsMerged)
        return reply.new_target_write_offset

    async def merge_segments_batch(self, target: str, sources: Sequence[str]) -> list[int]:
        """Merge each of ``sources`` into ``target`` in order; returns the target length after each."""
        names = tuple(sources)
        reply = await self._call(target, lambda rid, t: MergeSegmentsBatch(rid, target, names, t), SegmentsBatchMerged)
        return list(reply.new_target_write_offset)

    async def get_segment_info(self, segment: str) -> SegmentStatus:
        """The state of ``segment``. Raises NoSuchSegmentError (or answers ``exists=False``)."""
        reply = await self._read_call(segment, lambda rid, t: GetStreamSegmentInfo(rid, segment, t), StreamSegmentInfo)
        return SegmentStatus(
            reply.segment_name,
            reply.exists,
            reply.is_sealed,
            reply.is_deleted,
            reply.last_modified,
            reply.write_offset,
            reply.start_offset,
        )

    async def update_segment_policy(self, segment: str, scale_type: int, target_rate: int) -> None:
        """Change the scaling policy of ``segment``."""
        await self._call(
            segment, lambda rid, t: UpdateSegmentPolicy(rid, segment, target_rate, scale_type, t), SegmentPolicyUpdated
        )

    async def get_segment_attribute(self, segment: str, attribute_id: uuid.UUID) -> int | None:
        """The value of one attribute, or None if it is not set."""
        reply = await self._read_call(
            segment, lambda rid, t: GetSegmentAttribute(rid, segment, attribute_id, t), SegmentAttribute
        )
        return None if reply.value == NULL_ATTRIBUTE_VALUE else reply.value

    async def update_segment_attribute(
        self, segment: str, attribute_id: uuid.UUID, new_value: int, expected_value: int | None = None
    ) -> bool:
        """Compare-and-set one attribute (``expected_value`` None: must be unset); True if it was set."""
        expected = NULL_ATTRIBUTE_VALUE if expected_value is None else expected_value
        reply = await self._call(
            segment,
            lambda rid, t: UpdateSegmentAttribute(rid, segment, attribute_id, new_value, expected, t),
            SegmentAttributeUpdated,
        )
        return reply.success

    async def read_segment(
        self, segment: str, offset: int, length: int, timeout_s: float | None = -1.0
    ) -> ReadSegmentResult:
        """Read up to ``length`` bytes at ``offset`` (fewer near the tail; at the tail the server waits).

        Raises SegmentIsTruncatedError below the start, NoSuchSegmentError.
        """
        reply = await self._read_call(
            segment, lambda rid, t: ReadSegment(segment, offset, length, t, rid), SegmentRead, timeout_s
        )
        return ReadSegmentResult(reply.segment, reply.offset, reply.data, reply.at_tail, reply.end_of_segment)

    async def flush_to_storage(self, container_id: int, endpoint: Endpoint | None = None) -> None:
        """Flush everything container ``container_id`` holds to Tier-2 (admin)."""
        target = endpoint or self._static
        if target is None:
            raise ValueError("endpoint: required when the client resolves endpoints per segment")
        connection = await self.pool.get(target)
        token = await self.tokens.token("", True)
        await connection.request(FlushToStorage(container_id, token, next_request_id()), StorageFlushed)

    async def offset_at_time(self, segment: str, timestamp_ms: int) -> int:
        """The offset of the first event of ``segment`` ingested at or after ``timestamp_ms`` (epoch ms), or its
        length if every event is older (segstore extension ``LocateOffsetAtTime``). Raises NoSuchSegmentError."""
        reply = await self._read_call(
            segment, lambda rid, t: LocateOffsetAtTime(rid, segment, timestamp_ms, t), OffsetAtTimeLocated
        )
        return reply.offset

    async def offset_before_time(self, segment: str, timestamp_ms: int) -> int | None:
        """The least offset of ``segment`` from which every event was ingested at or after ``timestamp_ms`` (where a
        read of the older events may stop), or None if the segment store cannot tell (segstore extension
        ``LocateOffsetBeforeTime``). Raises NoSuchSegmentError."""
        reply = await self._read_call(
            segment, lambda rid, t: LocateOffsetBeforeTime(rid, segment, timestamp_ms, t), OffsetBeforeTimeLocated
        )
        return None if reply.offset < 0 else reply.offset

    async def ingest_times(self, segment: str, from_offset: int, to_offset: int) -> tuple[int, list[tuple[int, int]]]:
        """``(end, runs)``: when the events of ``segment`` in ``[from_offset, end)`` were ingested, as ``(offset,
        ms)`` runs (each time holds up to the next run), ``end`` at most ``to_offset`` and the segment's length: ask
        again from ``end`` for more (segstore extension ``ReadIngestTimes``; needs READ on the segment). Raises
        NoSuchSegmentError, SegmentIsTruncatedError.

        A Pravega segment store does not know the command and closes the connection: ConnectionLostError
        (which this call does not retry: the answer would be the same)."""
        reply = await self._call(
            segment,
            lambda rid, t: ReadIngestTimes(rid, segment, from_offset, to_offset, t),
            IngestTimesRead,
            write=False,
        )
        return reply.end_offset, [(run.offset, run.time_ms) for run in reply.runs]

    async def locate_offset(self, segment: str, target_offset: int) -> int:
        """An event boundary of ``segment`` at or after ``target_offset`` (Pravega's ``LocateOffset``, wire version
        17): a segstore segment store answers the first event that starts there exactly (the segment's start for an
        offset below it, its length past its last event); a Pravega one the nearest its index segment knows (its
        length without one). Raises NoSuchSegmentError, OperationUnsupportedError (a segment store without it)."""
        reply = await self._read_call(
            segment, lambda rid, t: LocateOffset(rid, segment, target_offset, t), OffsetLocated
        )
        return reply.offset

    async def list_storage_chunks(self, segment: str) -> list[ChunkInfo]:
        """The Tier-2 chunks of ``segment`` (admin)."""
        reply = await self._read_call(segment, lambda rid, t: ListStorageChunks(segment, t, rid), StorageChunksListed)
        return list(reply.chunks)

    async def list_storage_chunk_locations(
        self, segment: str, from_offset: int = 0, to_offset: int = MAX_OFFSET
    ) -> StorageChunkLocations:
        """Where the Tier-2 chunks of ``segment`` holding bytes of ``[from_offset, to_offset)`` live: a file path,
        or the S3 bucket, key and endpoint (segstore extension ``ListStorageChunkLocations``; needs READ on the
        segment). At most ``MAX_LISTED_CHUNKS`` chunks: ask again from the last one's end for more. Raises
        NoSuchSegmentError.

        A Pravega segment store does not know the command and closes the connection: ConnectionLostError
        (which this call does not retry: the answer would be the same)."""
        reply = await self._call(
            segment,
            lambda rid, t: ListStorageChunkLocations(rid, segment, from_offset, to_offset, t),
            StorageChunkLocationsListed,
            write=False,
        )
        chunks = tuple(StoredChunk(c.start_offset, c.length, c.chunk_name, c.path) for c in reply.chunks)
        r = reply
        return StorageChunkLocations(r.segment, r.start_offset, r.kind, r.endpoint, r.bucket, chunks)

    async def pin_chunks(self, segment: str, pin_id: str, chunks: Sequence[str], ttl_ms: int) -> int:
        """Pin Tier-2 chunks ``chunks`` (names as ``list_storage_chunk_locations`` gives them) of ``segment`` for
        ``ttl_ms`` under ``pin_id``, or renew that pin (segstore extension ``PinChunks``; needs READ): garbage
        collection and compaction leave them in place until it ends. Returns its expiry (epoch ms)."""
        reply = await self._read_call(
            segment, lambda rid, t: PinChunks(rid, segment, pin_id, ttl_ms, tuple(chunks), t), ChunksPinned
        )
        return reply.expires_at_ms

    async def unpin_chunks(self, segment: str, pin_id: str) -> bool:
        """End pin ``pin_id`` of ``segment`` now (``UnpinChunks``); False if it was not held (expired)."""
        reply = await self._read_call(segment, lambda rid, t: UnpinChunks(rid, segment, pin_id, t), ChunksUnpinned)
        return reply.held

    async def list_chunk_pins(self, container_id: int, endpoint: Endpoint | None = None) -> list[PinInfo]:
        """The live chunk pins of container ``container_id`` (admin; ``ListChunkPins``)."""
        target = endpoint or self._static
        if target is None:
            raise ValueError("endpoint: required when the client resolves endpoints per segment")
        connection = await self.pool.get(target)
        token = await self.tokens.token("", False)
        reply = await connection.request(ListChunkPins(next_request_id(), container_id, token), ChunkPinsListed)
        return list(reply.pins)

    async def list_iceberg_tables(self, endpoint: Endpoint | None = None) -> tuple[bool, list[IcebergTableInfo]]:
        """Whether the segment store keeps Iceberg tables, and their state as it sees them (admin;
        ``ListIcebergTables``)."""
        target = endpoint or self._static
        if target is None:
            raise ValueError("endpoint: required when the client resolves endpoints per segment")
        connection = await self.pool.get(target)
        token = await self.tokens.token("", False)
        reply = await connection.request(ListIcebergTables(next_request_id(), token), IcebergTablesListed)
        return reply.enabled, list(reply.tables)

    # ---- table segments -----------------------------------------------------------------------------------

    async def create_table_segment(self, segment: str, key_length: int = 0, rollover_size_bytes: int = 0) -> None:
        """Create a table segment (``key_length`` > 0: fixed-length keys). Raises SegmentAlreadyExistsError."""
        await self._call(
            segment,
            lambda rid, t: CreateTableSegment(rid, segment, t, False, key_length, rollover_size_bytes),
            SegmentCreated,
        )

    async def delete_table_segment(self, segment: str, must_be_empty: bool = False) -> None:
        """Delete a table segment. Raises TableSegmentNotEmptyReplyError, NoSuchSegmentError."""
        await self._call(segment, lambda rid, t: DeleteTableSegment(rid, segment, must_be_empty, t), SegmentDeleted)

    async def get_table_segment_info(self, segment: str) -> TableSegmentStatus:
        """The state of a table segment."""
        reply = await self._read_call(segment, lambda rid, t: GetTableSegmentInfo(rid, segment, t), TableSegmentInfo)
        return TableSegmentStatus(
            reply.segment_name, reply.start_offset, reply.length, reply.entry_count, reply.key_length
        )

    async def update_table_entries(
        self,
        segment: str,
        entries: Sequence[EntryUpdate] | Mapping[bytes, bytes],
        table_segment_offset: int = NULL_TABLE_SEGMENT_OFFSET,
    ) -> list[int]:
        """Write entries atomically; returns each key's new version, in order.

        A third tuple element conditions the key on its version (``NOT_EXISTS``: insert only). Raises
        TableKeyBadVersionReplyError / TableKeyDoesNotExistReplyError (nothing written) on a failed condition.
        """
        items = list(entries.items()) if isinstance(entries, Mapping) else list(entries)
        wire = tuple(TableEntry(TableKey(e[0], e[2] if len(e) == 3 else NO_VERSION), TableValue(e[1])) for e in items)
        reply = await self._call(
            segment, lambda rid, t: UpdateTableEntries(rid, segment, t, wire, table_segment_offset), TableEntriesUpdated
        )
        return list(reply.updated_versions)

    async def remove_table_keys(
        self,
        segment: str,
        keys: Sequence[KeyRemoval],
        table_segment_offset: int = NULL_TABLE_SEGMENT_OFFSET,
    ) -> None:
        """Remove keys atomically; a (key, version) pair conditions the removal on that version."""
        wire = tuple(TableKey(k, NO_VERSION) if isinstance(k, bytes) else TableKey(k[0], k[1]) for k in keys)
        await self._call(
            segment, lambda rid, t: RemoveTableKeys(rid, segment, t, wire, table_segment_offset), TableKeysRemoved
        )

    async def read_table(self, segment: str, keys: Sequence[bytes]) -> list[VersionedEntry | None]:
        """The entry of each key, in order; None for a key that does not exist."""
        wire = tuple(TableKey(k, NO_VERSION) for k in keys)
        reply = await self._read_call(segment, lambda rid, t: ReadTable(rid, segment, t, wire), TableRead)
        found: list[VersionedEntry | None] = []
        for entry in reply.entries:
            missing = entry.key.key_version in (TableKey.NOT_EXISTS, NO_VERSION) or not entry.key.data
            found.append(None if missing else VersionedEntry(entry.key.data, entry.value.data, entry.key.key_version))
        return found

    async def read_table_keys(
        self,
        segment: str,
        suggested_count: int = 1000,
        continuation_token: bytes = b"",
        from_key: bytes = b"",
        to_key: bytes = b"",
    ) -> KeysPage:
        """One page of keys after ``continuation_token`` (b"" starts over)."""
        args = TableIteratorArgs(continuation_token, from_key, to_key)
        reply = await self._read_call(
            segment, lambda rid, t: ReadTableKeys(rid, segment, t, suggested_count, args), TableKeysRead
        )
        return KeysPage([VersionedKey(k.data, k.key_version) for k in reply.keys], reply.continuation_token)

    async def read_table_entries(
        self,
        segment: str,
        suggested_count: int = 1000,
        continuation_token: bytes = b"",
        from_key: bytes = b"",
        to_key: bytes = b"",
    ) -> EntriesPage:
        """One page of entries after ``continuation_token`` (b"" starts over)."""
        args = TableIteratorArgs(continuation_token, from_key, to_key)
        reply = await self._read_call(
            segment, lambda rid, t: ReadTableEntries(rid, segment, t, suggested_count, args), TableEntriesRead
        )
        return EntriesPage(_entries(reply.entries), reply.continuation_token)

    async def iter_table_entries(self, segment: str, page_size: int = 1000) -> AsyncIterator[VersionedEntry]:
        """Every entry of the table segment, page by page."""
        token = b""
        while True:
            page = await self.read_table_entries(segment, page_size, token)
            if not page.entries:
                return
            for entry in page.entries:
                yield entry
            token = page.continuation_token

    async def read_table_entries_delta(
        self, segment: str, from_position: int, suggested_count: int = 1000
    ) -> DeltaPage:
        """Entries changed since ``from_position`` (0: from the start)."""
        reply = await self._read_call(
            segment,
            lambda rid, t: ReadTableEntriesDelta(rid, segment, t, from_position, suggested_count),
            TableEntriesDeltaRead,
        )
        return DeltaPage(_entries(reply.entries), reply.should_clear, reply.reached_end, reply.last_position)
