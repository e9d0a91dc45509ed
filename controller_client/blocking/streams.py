"""Blocking forms of the client library, for callers without an event loop (scripts, notebooks, Spark).

:class:`BlockingStreamManager` runs a private event loop in a daemon thread (as
:class:`~segment_store.client.sync.BlockingClient` does) and the controller client plus a
:class:`~controller_client.stream_manager.StreamManager` on it. Every method submits the coroutine to that
loop and blocks the calling thread until it finishes, re-raising its error. Writers, transactions and
readers it makes run on the same loop; any number of threads may share them (a writer keeps the order of
the calls as they reach the loop). Acknowledgements are ``concurrent.futures.Future`` objects.

Example::

    with BlockingStreamManager.connect("tcp://127.0.0.1:9090") as manager:
        manager.create_scope("demo")
        manager.create_stream("demo", "events", StreamConfiguration(ScalingPolicy.fixed(2)))
        with manager.create_writer("demo", "events") as writer:
            writer.write_event(b"hello", routing_key="user-1").result()
        for event in manager.create_reader("demo", "events", end=manager.tail_cut("demo", "events")):
            print(event.segment_id, event.offset, event.data)

With TLS: ``BlockingStreamManager.connect("tls://localhost:9090", StreamManagerConfig(trust_store="ca.pem"))``.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import uuid
from collections.abc import Callable, Coroutine, Iterator, Sequence
from typing import Any

from controller_client.blocking.kvt import BlockingKeyValueTable
from controller_client.blocking.reader_groups import BlockingReaderGroup
from controller_client.controller.channel import ControllerClientConfig
from controller_client.kvt.model import KeyValueTableConfiguration
from controller_client.model import (
    ReaderGroupRetention,
    RetentionPolicy,
    ScalingPolicy,
    SegmentRange,
    StreamConfiguration,
    StreamCut,
    TxnState,
)
from controller_client.ports import ControllerApi
from controller_client.readers.stream_reader import StreamEvent, StreamReader, StreamReaderConfig
from controller_client.stream_manager import StreamManager, StreamManagerConfig
from controller_client.writers.event_writer import EventStreamWriter, EventWriterConfig
from controller_client.writers.txn_writer import Transaction, TransactionalEventStreamWriter, TxnWriterConfig
from segment_store.client import ClientClosedError, SegmentStatus
from segstore_shared.loop_thread import BlockingFacade, ClosableFacade, LoopOwningFacade, LoopThread

ControllerFactory = Callable[[], Coroutine[Any, Any, ControllerApi]]


class BlockingEventStreamWriter(ClosableFacade):
    """Blocking face of an :class:`EventStreamWriter`; ``with`` closes (flushes) it."""

    def __init__(self, runner: LoopThread, writer: EventStreamWriter) -> None:
        super().__init__(runner)
        self.writer = writer

    @property
    def writer_id(self) -> uuid.UUID:
        return self.writer.writer_id

    def write_event(self, event: bytes, routing_key: str | None = None) -> concurrent.futures.Future[None]:
        """Queue one event (blocking while its segment's window is full); the future completes when stored."""
        return self._acknowledged(lambda: self.writer.write_event(event, routing_key))

    def write_events(self, events: list[tuple[bytes, str | None]]) -> concurrent.futures.Future[None]:
        """Queue ``(event, routing_key)`` pairs in order in one hop to the loop; one future for all."""
        return self._acknowledged(lambda: self.writer.write_events(events))

    def flush(self, timeout_s: float | None = None) -> None:
        """Block until every event written so far is stored."""
        self._run(self.writer.flush(), timeout_s)

    def close(self) -> None:
        self._run(self.writer.close())


class BlockingTransaction(BlockingFacade):
    """Blocking face of a :class:`Transaction`."""

    def __init__(self, runner: LoopThread, txn: Transaction) -> None:
        super().__init__(runner)
        self.txn = txn

    @property
    def txn_id(self) -> uuid.UUID:
        return self.txn.txn_id

    def write_event(self, event: bytes, routing_key: str | None = None) -> concurrent.futures.Future[None]:
        return self._acknowledged(lambda: self.txn.write_event(event, routing_key))

    def flush(self) -> None:
        self._run(self.txn.flush())

    def commit(self) -> None:
        self._run(self.txn.commit())

    def abort(self) -> None:
        self._run(self.txn.abort())

    def ping(self, lease_ms: int | None = None) -> None:
        self._run(self.txn.ping(lease_ms))

    def check_status(self) -> TxnState:
        return self._run(self.txn.check_status())


class BlockingTransactionalWriter(ClosableFacade):
    """Blocking face of a :class:`TransactionalEventStreamWriter`."""

    def __init__(self, runner: LoopThread, writer: TransactionalEventStreamWriter) -> None:
        super().__init__(runner)
        self.writer = writer

    def begin(self, lease_ms: int | None = None) -> BlockingTransaction:
        return BlockingTransaction(self._runner, self._run(self.writer.begin(lease_ms)))

    def close(self) -> None:
        self._run(self.writer.close())


class BlockingStreamReader(ClosableFacade):
    """Blocking face of a :class:`StreamReader`; iterating yields events until the end cut (or for ever)."""

    def __init__(self, runner: LoopThread, reader: StreamReader) -> None:
        super().__init__(runner)
        self.reader = reader

    def next_event(self, timeout_s: float | None = None) -> StreamEvent | None:
        """The next event, None at the end; raises TimeoutError after ``timeout_s`` without one."""
        return self._run(self.reader.next_event(timeout_s))

    def __iter__(self) -> Iterator[StreamEvent]:
        while (event := self.next_event()) is not None:
            yield event

    def close(self) -> None:
        self._run(self.reader.close())


class BlockingStreamManager(LoopOwningFacade):
    """A :class:`StreamManager` on a private event loop thread, with blocking methods.

    ``connect`` makes the controller client on that loop (a gRPC channel belongs to its loop); it is closed
    with the manager if it has an async ``close()``. ``close()`` closes the segment client, the controller client
    and the loop thread (idempotent).
    """

    def __init__(self, connect: ControllerFactory, config: StreamManagerConfig | None = None) -> None:
        super().__init__("segstore-streams", ClientClosedError)
        try:
            self.controller: ControllerApi = self._run(connect())
            self.manager: StreamManager = self._call(StreamManager, self.controller, config=config)
        except BaseException:
            self._runner.stop()
            raise

    @classmethod
    def connect(
        cls,
        uri: str,
        config: StreamManagerConfig | None = None,
        controller_config: ControllerClientConfig | None = None,
    ) -> BlockingStreamManager:
        """A manager of the controllers at ``uri`` (``tcp://host:port``, or ``tls://host:port`` for TLS to the
        controller and the segment stores; a list ``tcp://h1:port1,h2:port2`` fails over between them:
        :mod:`controller_client.controller.transport`), trusting ``config.trust_store``, else
        ``controller_config``'s, else the system's trust store. ``config.retry_timeout_s``, if given, is the
        controller client's too."""
        from controller_client.controller.api import ControllerClient

        settings = controller_config or ControllerClientConfig()
        if config is not None and config.trust_store and not settings.trust_store:
            settings = dataclasses.replace(settings, trust_store=config.trust_store)
        if config is not None and config.retry_timeout_s is not None and controller_config is None:
            settings = dataclasses.replace(settings, retry_timeout_s=config.retry_timeout_s)

        async def make() -> ControllerApi:
            return await ControllerClient.connect(uri, settings)

        return cls(make, config)

    def _close_on_loop(self) -> None:
        self._run(self.manager.close())
        close: Any = getattr(self.controller, "close", None)
        if close is not None:
            self._run(close())

    # ---- scopes and streams -------------------------------------------------------------------------------
    def create_scope(self, scope: str) -> bool:
        return self._run(self.manager.create_scope(scope))

    def delete_scope(self, scope: str) -> None:
        self._run(self.manager.delete_scope(scope))

    def scope_exists(self, scope: str) -> bool:
        return self._run(self.manager.scope_exists(scope))

    def list_scopes(self) -> list[str]:
        return self._run(self.manager.list_scopes())

    def create_stream(self, scope: str, stream: str, config: StreamConfiguration | None = None) -> bool:
        return self._run(self.manager.create_stream(scope, stream, config))

    def update_stream(self, scope: str, stream: str, config: StreamConfiguration) -> None:
        self._run(self.manager.update_stream(scope, stream, config))

    def get_stream_configuration(self, scope: str, stream: str) -> StreamConfiguration:
        return self._run(self.manager.get_stream_configuration(scope, stream))

    def update_scaling_policy(self, scope: str, stream: str, policy: ScalingPolicy) -> None:
        self._run(self.manager.update_scaling_policy(scope, stream, policy))

    def update_retention_policy(self, scope: str, stream: str, policy: RetentionPolicy | None) -> None:
        self._run(self.manager.update_retention_policy(scope, stream, policy))

    def seal_stream(self, scope: str, stream: str) -> None:
        self._run(self.manager.seal_stream(scope, stream))

    def delete_stream(self, scope: str, stream: str) -> None:
        self._run(self.manager.delete_stream(scope, stream))

    def stream_exists(self, scope: str, stream: str) -> bool:
        return self._run(self.manager.stream_exists(scope, stream))

    def list_streams(self, scope: str, tag: str | None = None) -> list[str]:
        return self._run(self.manager.list_streams(scope, tag))

    def current_segments(self, scope: str, stream: str) -> list[SegmentRange]:
        return self._run(self.manager.current_segments(scope, stream))

    # ---- cuts ---------------------------------------------------------------------------------------------
    def head_cut(self, scope: str, stream: str) -> StreamCut:
        return self._run(self.manager.head_cut(scope, stream))

    def tail_cut(self, scope: str, stream: str) -> StreamCut:
        return self._run(self.manager.tail_cut(scope, stream))

    def cut_at_time(self, scope: str, stream: str, timestamp_ms: int) -> StreamCut:
        return self._run(self.manager.cut_at_time(scope, stream, timestamp_ms))

    def truncate(self, cut: StreamCut) -> None:
        self._run(self.manager.truncate(cut))

    def segment_info(self, scope: str, stream: str, segment_id: int) -> SegmentStatus:
        return self._run(self.manager.segment_info(scope, stream, segment_id))

    def offset_at_time(self, scope: str, stream: str, segment_id: int, timestamp_ms: int) -> int:
        return self._run(self.manager.offset_at_time(scope, stream, segment_id, timestamp_ms))

    def read_segment_range(
        self, scope: str, stream: str, segment_id: int, start: int = 0, end: int | None = None
    ) -> bytes:
        return self._run(self.manager.read_segment_range(scope, stream, segment_id, start, end))

    # ---- key-value tables ---------------------------------------------------------------------------------
    def create_key_value_table(self, scope: str, kvt: str, config: KeyValueTableConfiguration) -> bool:
        return self._run(self.manager.create_key_value_table(scope, kvt, config))

    def delete_key_value_table(self, scope: str, kvt: str) -> bool:
        return self._run(self.manager.delete_key_value_table(scope, kvt))

    def list_key_value_tables(self, scope: str) -> list[str]:
        return self._run(self.manager.list_key_value_tables(scope))

    def get_key_value_table_configuration(self, scope: str, kvt: str) -> KeyValueTableConfiguration:
        return self._run(self.manager.get_key_value_table_configuration(scope, kvt))

    def key_value_table(self, scope: str, kvt: str) -> BlockingKeyValueTable:
        return BlockingKeyValueTable(self._runner, self._run(self.manager.key_value_table(scope, kvt)))

    # ---- writers and readers ------------------------------------------------------------------------------
    def create_writer(
        self, scope: str, stream: str, config: EventWriterConfig | None = None, writer_id: uuid.UUID | None = None
    ) -> BlockingEventStreamWriter:
        writer = self._run(self.manager.create_writer(scope, stream, config, writer_id))
        return BlockingEventStreamWriter(self._runner, writer)

    def create_txn_writer(
        self, scope: str, stream: str, config: TxnWriterConfig | None = None, writer_id: uuid.UUID | None = None
    ) -> BlockingTransactionalWriter:
        writer = self._call(self.manager.create_txn_writer, scope, stream, config, writer_id)
        return BlockingTransactionalWriter(self._runner, writer)

    # ---- reader groups ---------------------------------------------------------------------------------------
    def create_reader_group(
        self,
        scope: str,
        group: str,
        start: Sequence[StreamCut],
        end: Sequence[StreamCut] = (),
        retention: ReaderGroupRetention = ReaderGroupRetention.NONE,
        refresh_ms: int = 3000,
        automatic_checkpoint_ms: int = 30_000,
    ) -> BlockingReaderGroup:
        """Create (or open, if it exists) a reader group; see ``StreamManager.create_reader_group``."""
        made = self._run(
            self.manager.create_reader_group(scope, group, start, end, retention, refresh_ms, automatic_checkpoint_ms)
        )
        return BlockingReaderGroup(self._runner, made)

    def reader_group(self, scope: str, group: str) -> BlockingReaderGroup:
        return BlockingReaderGroup(self._runner, self._run(self.manager.reader_group(scope, group)))

    def delete_reader_group(self, scope: str, group: str) -> None:
        self._run(self.manager.delete_reader_group(scope, group))

    def create_reader(
        self,
        scope: str,
        stream: str,
        start: StreamCut | None = None,
        end: StreamCut | None = None,
        config: StreamReaderConfig | None = None,
    ) -> BlockingStreamReader:
        reader = self._call(self.manager.create_reader, scope, stream, start, end, config)
        return BlockingStreamReader(self._runner, reader)
