"""Blocking facade of the segment client, for callers without an event loop (Spark executors, scripts).

:class:`BlockingClient` runs a private event loop in a daemon thread and one
:class:`~segment_store.client.raw_client.SegmentClient` on it; every method submits the coroutine to
that loop and blocks the calling thread until it finishes, re-raising its error (typed as in
``errors``). Any number of threads may share one BlockingClient. Writers apply backpressure to the
calling thread (``write`` blocks while the window is full) and return ``concurrent.futures.Future``
acknowledgements; ``write_many`` is the fast path (one thread hop per batch instead of per event).
"""

from __future__ import annotations

import concurrent.futures
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence

from segment_store.client.conditional import ConditionalWriter
from segment_store.client.config import ClientConfig, ReaderConfig, WriterConfig
from segment_store.client.connection import Endpoint
from segment_store.client.errors import ClientClosedError
from segment_store.client.raw_client import EntryUpdate, KeyRemoval, SegmentClient
from segment_store.client.reader import SegmentReader
from segment_store.client.results import (
    DeltaPage,
    EntriesPage,
    KeysPage,
    ReadSegmentResult,
    SegmentStatus,
    StorageChunkLocations,
    TableSegmentStatus,
    VersionedEntry,
)
from segment_store.client.writer import SegmentWriter
from segment_store.protocol import (
    NO_SCALE,
    NULL_TABLE_SEGMENT_OFFSET,
    ChunkInfo,
    IcebergTableInfo,
    PinInfo,
    SegmentEvent,
)
from segment_store.protocol.types import Buffer
from segstore_shared.loop_thread import ClosableFacade, LoopOwningFacade, LoopThread


class BlockingWriter(ClosableFacade):
    """Blocking face of a :class:`SegmentWriter`; ``with`` closes (flushes) it."""

    def __init__(self, runner: LoopThread, writer: SegmentWriter) -> None:
        super().__init__(runner)
        self.writer = writer

    @property
    def writer_id(self) -> uuid.UUID:
        return self.writer.writer_id

    def open(self) -> int:
        """Set up the session; returns the last event number the segment holds for this writer id."""
        return self._run(self.writer.open())

    def write(self, payload: Buffer) -> concurrent.futures.Future[None]:
        """Queue one event (blocking while the window is full); the future completes when it is stored."""
        return self._acknowledged(lambda: self.writer.write(payload))

    def write_many(self, payloads: Iterable[Buffer]) -> concurrent.futures.Future[None]:
        """Queue a batch of events; the future completes when all are stored."""
        batch = list(payloads)
        if not batch:
            done: concurrent.futures.Future[None] = concurrent.futures.Future()
            done.set_result(None)
            return done
        if len(batch) == 1:
            return self.write(batch[0])
        return self._acknowledged(lambda: self.writer.write_many(batch))

    def flush(self, timeout_s: float | None = None) -> None:
        """Block until everything written is stored."""
        self._run(self.writer.flush(), timeout_s)

    def close(self) -> None:
        """Flush and leave the connection."""
        self._run(self.writer.close())

    def unacked_events(self) -> list[bytes]:
        """After a failure: the events that were not stored, in order."""
        return self.writer.unacked_events()


class BlockingConditionalWriter(ClosableFacade):
    """Blocking face of a :class:`ConditionalWriter`."""

    def __init__(self, runner: LoopThread, writer: ConditionalWriter) -> None:
        super().__init__(runner)
        self.writer = writer

    def append(self, payload: Buffer, expected_offset: int) -> int:
        """Append if the length is ``expected_offset``; returns the new length. Raises
        ConditionalCheckFailedError."""
        return self._run(self.writer.append(payload, expected_offset))

    def append_many(self, payloads: Sequence[Buffer], expected_offset: int) -> int:
        return self._run(self.writer.append_many(payloads, expected_offset))

    def close(self) -> None:
        self._run(self.writer.close())


class BlockingReader(ClosableFacade):
    """Blocking face of a :class:`SegmentReader`; iterating yields events until the end."""

    def __init__(self, runner: LoopThread, reader: SegmentReader) -> None:
        super().__init__(runner)
        self.reader = reader

    @property
    def offset(self) -> int:
        return self.reader.offset

    @property
    def at_end(self) -> bool:
        return self.reader.at_end

    def read(self, timeout_s: float | None = None) -> bytes:
        """The next bytes; b"" at the end (blocks at the tail, up to ``timeout_s`` if given)."""
        return self._run(self.reader.read(), timeout_s)

    def next_event(self, timeout_s: float | None = None) -> SegmentEvent | None:
        """The next event; None at the end."""
        return self._run(self.reader.next_event(), timeout_s)

    def __iter__(self) -> Iterator[SegmentEvent]:
        while (event := self.next_event()) is not None:
            yield event

    def seek(self, offset: int) -> None:
        self._call(self.reader.seek, offset)

    def close(self) -> None:
        self._run(self.reader.close())


class BlockingClient(LoopOwningFacade):
    """A :class:`SegmentClient` on a private event loop thread, with blocking methods.

    ``with BlockingClient(("127.0.0.1", 12345)) as client: ...`` closes the connections and the thread
    (``close()``: every connection, then the thread; idempotent).
    """

    def __init__(self, endpoint: Endpoint, config: ClientConfig | None = None) -> None:
        super().__init__(f"segstore-client-{endpoint[0]}:{endpoint[1]}", ClientClosedError)
        self.config = config or ClientConfig()
        self.client: SegmentClient = self._call(SegmentClient, endpoint, self.config)

    def _close_on_loop(self) -> None:
        self._run(self.client.close())

    # ---- sessions -----------------------------------------------------------------------------------------

    def writer(
        self, segment: str, writer_id: uuid.UUID | None = None, config: WriterConfig | None = None
    ) -> BlockingWriter:
        writer = self._call(self.client.writer, segment, writer_id, config)
        return BlockingWriter(self._runner, writer)

    def conditional_writer(
        self, segment: str, writer_id: uuid.UUID | None = None, config: WriterConfig | None = None
    ) -> BlockingConditionalWriter:
        writer = self._call(self.client.conditional_writer, segment, writer_id, config)
        return BlockingConditionalWriter(self._runner, writer)

    def reader(
        self, segment: str, offset: int = 0, end_offset: int | None = None, config: ReaderConfig | None = None
    ) -> BlockingReader:
        reader = self._call(self.client.reader, segment, offset, end_offset, config)
        return BlockingReader(self._runner, reader)

    # ---- stream segments ----------------------------------------------------------------------------------

    def create_segment(
        self, segment: str, scale_type: int = NO_SCALE, target_rate: int = 0, rollover_size_bytes: int = 0
    ) -> None:
        self._run(self.client.create_segment(segment, scale_type, target_rate, rollover_size_bytes))

    def create_transient_segment(self, parent_segment: str, writer_id: uuid.UUID) -> str:
        return self._run(self.client.create_transient_segment(parent_segment, writer_id))

    def seal_segment(self, segment: str) -> None:
        self._run(self.client.seal_segment(segment))

    def truncate_segment(self, segment: str, offset: int) -> None:
        self._run(self.client.truncate_segment(segment, offset))

    def delete_segment(self, segment: str) -> None:
        self._run(self.client.delete_segment(segment))

    def merge_segments(self, target: str, source: str) -> int:
        return self._run(self.client.merge_segments(target, source))

    def merge_segments_batch(self, target: str, sources: Sequence[str]) -> list[int]:
        return self._run(self.client.merge_segments_batch(target, sources))

    def get_segment_info(self, segment: str) -> SegmentStatus:
        return self._run(self.client.get_segment_info(segment))

    def offset_at_time(self, segment: str, timestamp_ms: int) -> int:
        return self._run(self.client.offset_at_time(segment, timestamp_ms))

    def offset_before_time(self, segment: str, timestamp_ms: int) -> int | None:
        return self._run(self.client.offset_before_time(segment, timestamp_ms))

    def ingest_times(self, segment: str, from_offset: int, to_offset: int) -> tuple[int, list[tuple[int, int]]]:
        return self._run(self.client.ingest_times(segment, from_offset, to_offset))

    def list_storage_chunks(self, segment: str) -> list[ChunkInfo]:
        return self._run(self.client.list_storage_chunks(segment))

    def list_storage_chunk_locations(
        self, segment: str, from_offset: int = 0, to_offset: int = 2**63 - 1
    ) -> StorageChunkLocations:
        return self._run(self.client.list_storage_chunk_locations(segment, from_offset, to_offset))

    def pin_chunks(self, segment: str, pin_id: str, chunks: Sequence[str], ttl_ms: int) -> int:
        return self._run(self.client.pin_chunks(segment, pin_id, chunks, ttl_ms))

    def unpin_chunks(self, segment: str, pin_id: str) -> bool:
        return self._run(self.client.unpin_chunks(segment, pin_id))

    def list_chunk_pins(self, container_id: int) -> list[PinInfo]:
        return self._run(self.client.list_chunk_pins(container_id))

    def list_iceberg_tables(self) -> tuple[bool, list[IcebergTableInfo]]:
        return self._run(self.client.list_iceberg_tables())

    def get_segment_attribute(self, segment: str, attribute_id: uuid.UUID) -> int | None:
        return self._run(self.client.get_segment_attribute(segment, attribute_id))

    def update_segment_attribute(
        self, segment: str, attribute_id: uuid.UUID, new_value: int, expected_value: int | None = None
    ) -> bool:
        return self._run(self.client.update_segment_attribute(segment, attribute_id, new_value, expected_value))

    def read_segment(self, segment: str, offset: int, length: int) -> ReadSegmentResult:
        return self._run(self.client.read_segment(segment, offset, length))

    def flush_to_storage(self, container_id: int) -> None:
        self._run(self.client.flush_to_storage(container_id))

    # ---- table segments -----------------------------------------------------------------------------------

    def create_table_segment(self, segment: str, key_length: int = 0) -> None:
        self._run(self.client.create_table_segment(segment, key_length))

    def delete_table_segment(self, segment: str, must_be_empty: bool = False) -> None:
        self._run(self.client.delete_table_segment(segment, must_be_empty))

    def get_table_segment_info(self, segment: str) -> TableSegmentStatus:
        return self._run(self.client.get_table_segment_info(segment))

    def update_table_entries(
        self,
        segment: str,
        entries: Sequence[EntryUpdate] | Mapping[bytes, bytes],
        table_segment_offset: int = NULL_TABLE_SEGMENT_OFFSET,
    ) -> list[int]:
        return self._run(self.client.update_table_entries(segment, entries, table_segment_offset))

    def remove_table_keys(
        self, segment: str, keys: Sequence[KeyRemoval], table_segment_offset: int = NULL_TABLE_SEGMENT_OFFSET
    ) -> None:
        self._run(self.client.remove_table_keys(segment, keys, table_segment_offset))

    def read_table(self, segment: str, keys: Sequence[bytes]) -> list[VersionedEntry | None]:
        return self._run(self.client.read_table(segment, keys))

    def read_table_keys(self, segment: str, suggested_count: int = 1000, continuation_token: bytes = b"") -> KeysPage:
        return self._run(self.client.read_table_keys(segment, suggested_count, continuation_token))

    def read_table_entries(
        self, segment: str, suggested_count: int = 1000, continuation_token: bytes = b""
    ) -> EntriesPage:
        return self._run(self.client.read_table_entries(segment, suggested_count, continuation_token))

    def read_table_entries_delta(self, segment: str, from_position: int, suggested_count: int = 1000) -> DeltaPage:
        return self._run(self.client.read_table_entries_delta(segment, from_position, suggested_count))
