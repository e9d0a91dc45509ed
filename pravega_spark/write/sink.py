"""The ``segstore`` sink: ``df.write.format("segstore")`` and ``df.writeStream.format("segstore")``.

Input columns: ``event`` (binary or string, required, not null) and ``routing_key`` (string, optional;
null means no key), and optionally ``stream`` and ``scope`` (strings): with a ``stream`` column each row goes to
the stream it names (:mod:`pravega_spark.write.targets`; null: the ``stream`` option), in the scope its ``scope``
column names (null or no such column: the ``scope`` option); without one every row goes to the ``stream``
option. None of these but ``event`` is written into the event. Other columns are ignored. Options: the README's
Spark section (parsed in :mod:`pravega_spark.options.write`; an option writes do not take fails, naming it). The
scope and the stream are created when missing (a fixed number of segments, ``defaultNumSegments``). Streams are
append-only: ``mode("overwrite")`` and the ``complete`` output mode are refused; use ``append`` (Spark offers no
``update`` mode to Python data sources).

Example::

    (df.selectExpr("CAST(value AS STRING) AS event", "CAST(user AS STRING) AS routing_key")
       .writeStream.format("segstore")
       .option("controller", "tcp://127.0.0.1:9090").option("scope", "demo").option("stream", "events")
       .option("checkpointLocation", "/tmp/ckpt")
       .start())

**Exactly once** (``exactlyOnce=true``, the default). Each write task opens one transaction per stream it writes
to (one, without a ``stream`` column), appends its rows to the transaction's segments and returns the transaction
ids (and their streams) in its commit message; nothing is visible yet. The driver's ``commit`` commits every
transaction of the micro-batch (on every stream) and keeps a durable record of the batch id per query in a table
segment (:mod:`pravega_spark.write.commit_log`): the record is written *before* the transactions are committed
and marked done after, so a batch Spark replays after a crash (its own commit log entry was not written) commits
nothing twice: its new transactions are aborted, and a commit an earlier run left half done is finished. The
query's identity is Spark's persistent query id (kept in the checkpoint), so restart from the same
``checkpointLocation``. ``abort`` aborts the batch's transactions. A task renews its transaction's lease every
``transactionTimeoutMs / 3`` while it runs and once when it finishes; between the end of a task and the driver's
commit the lease must not run out, so ``transactionTimeoutMs`` must exceed the longest micro-batch (default two
minutes). Ordering: rows with the same routing key keep the order in which their task wrote them (tasks of one
batch are committed in no particular order relative to each other).

A batch write (``df.write``) commits all its tasks' transactions once every task succeeded, so a failed
job leaves nothing behind; Spark calls that commit once, no record is kept.

**At least once** (``exactlyOnce=false``). Each task writes straight into the stream's segments
(:mod:`pravega_spark.write.plain`); rows are visible as soon as they are stored, and the driver's commit does
nothing. The task's writer id is the same in every attempt: derived from (query id, batch id, partition) for
a streaming write (so also when Spark replays a batch after a restart), from (the write's id, partition) for
a batch write. A segment's rows go in chunks, each through an append session whose writer id names the
chunk's content; the segment stores deduplicate by writer id and event number, so a retried task (or a
replayed batch) that reads the same rows in the same order skips what an earlier attempt stored, and
connection losses duplicate nothing. A retry that reads its rows in another order (a shuffle's output), or
after the stream scaled, writes them again: duplicates are possible then, loss is not.

Routing: a row with a routing key goes to the segment owning the key's hash (the same hash as Pravega's
Java and Rust clients, so readers keep per-key order); rows without one are spread over the segments in
contiguous slices of each Arrow batch. The hot path works on Arrow batches, in both modes
(:mod:`pravega_spark.write.framing`): a task splits each batch per segment and frames each part column-wise
into wire blocks (``SegmentWriter.write_framed``), with no Python object per row. Distinct routing keys are
hashed once each per task (in Python: many millions of distinct keys are slow).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import signal
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import BinaryType, StringType, StructType

from controller_client.stream_manager import StreamManager
from controller_client.writers.event_writer import session_writer_id
from controller_client.writers.txn_writer import Transaction, TransactionalEventStreamWriter, TxnWriterConfig
from pravega_spark.errors import CommitLogError, SegstoreOptionError, SegstoreSchemaError
from pravega_spark.options.write import WriteOptions
from pravega_spark.write.commit_log import BatchCommitter, CommitLog, CommitOutcome, CrashHook
from pravega_spark.write.connection import ENSURED, connect, ensure_stream, token_for_executors
from pravega_spark.write.framing import Router, framed_blocks
from pravega_spark.write.plain import PlainTaskWriter
from pravega_spark.write.targets import SCOPE_COLUMN, STREAM_COLUMN, ensure_row_stream, split_by_target
from segment_store.client import SegmentWriter

_log = logging.getLogger(__name__)

EVENT_COLUMN = "event"
ROUTING_KEY_COLUMN = "routing_key"
QUERY_ID_PROPERTY = "sql.streaming.queryId"
"""Spark's local property holding the persistent id of a streaming query (tasks see it)."""
BATCH_ID_PROPERTY = "streaming.sql.batchId"
CRASH_ENV = "SEGSTORE_SPARK_SINK_CRASH"
"""Test hook: ``recorded:<batch id>`` or ``committed:<batch id>`` stops the committing process at that
point of :class:`~pravega_spark.write.commit_log.BatchCommitter` (SIGKILL of ``CRASH_PGID_ENV``'s process
group if set, then ``os._exit``)."""
CRASH_PGID_ENV = "SEGSTORE_SPARK_SINK_CRASH_PGID"
WRITER_ID_NAMESPACE = uuid.UUID("6f1d3c1e-4a59-4d0e-9a3c-5e3f2b7d9a10")


@dataclass(frozen=True, slots=True)
class SinkColumns:
    """The positions of the sink's columns in the written schema."""

    event: str
    routing_key: str | None
    stream: str | None = None
    """The per-row target stream's column, if the DataFrame has one."""
    scope: str | None = None
    """The per-row target scope's column, if the DataFrame has one and a ``stream`` column."""

    @property
    def per_row(self) -> bool:
        """Whether rows name their streams."""
        return self.stream is not None

    @classmethod
    def of(cls, schema: StructType) -> SinkColumns:
        """Raises SegstoreSchemaError for a missing ``event`` column or a column of the wrong type. A ``scope``
        column without a ``stream`` column is ignored, as any other column."""
        fields = {f.name: f for f in schema.fields}
        event = fields.get(EVENT_COLUMN)
        if event is None:
            raise SegstoreSchemaError(
                EVENT_COLUMN, f"is required (binary or string); the DataFrame has {sorted(fields)}"
            )
        if not isinstance(event.dataType, BinaryType | StringType):
            raise SegstoreSchemaError(EVENT_COLUMN, f"must be binary or string, not {event.dataType.simpleString()}")
        key = fields.get(ROUTING_KEY_COLUMN)
        if key is not None and not isinstance(key.dataType, StringType):
            raise SegstoreSchemaError(ROUTING_KEY_COLUMN, f"must be string, not {key.dataType.simpleString()}")
        stream, scope = fields.get(STREAM_COLUMN), fields.get(SCOPE_COLUMN)
        for column in (stream, scope if stream is not None else None):
            if column is not None and not isinstance(column.dataType, StringType):
                raise SegstoreSchemaError(column.name, f"must be string, not {column.dataType.simpleString()}")
        return cls(
            EVENT_COLUMN,
            ROUTING_KEY_COLUMN if key is not None else None,
            STREAM_COLUMN if stream is not None else None,
            SCOPE_COLUMN if stream is not None and scope is not None else None,
        )


@dataclass
class SegstoreCommitMessage(WriterCommitMessage):
    """What a write task tells the driver: its transaction (if any) and who it was."""

    txn_ids: tuple[str, ...] = ()
    rows: int = 0
    partition: int = -1
    query_id: str | None = None
    batch_id: int | None = None
    writer_id: str = ""
    txn_streams: tuple[str, ...] = ()
    """``scope/stream`` of each of ``txn_ids``, in their order."""


@dataclass(frozen=True, slots=True)
class _TaskInfo:
    partition: int
    attempt: int
    query_id: str | None
    batch_id: int | None
    write_id: str | None = None
    """The batch write's id, made by the driver once per write (``df.write``); None for streaming writes."""

    @classmethod
    def current(cls, write_id: str | None = None) -> _TaskInfo:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        if ctx is None:
            return cls(-1, 0, None, None, write_id)
        query = ctx.getLocalProperty(QUERY_ID_PROPERTY)
        batch = ctx.getLocalProperty(BATCH_ID_PROPERTY)
        return cls(ctx.partitionId(), ctx.attemptNumber(), query or None, int(batch) if batch else None, write_id)

    def writer_id(self) -> uuid.UUID:
        """The same in every attempt of a task: from (query, batch, partition) for a streaming task (so also when
        Spark replays the batch after a restart), from (write id, partition) for a batch write's; random
        without either."""
        if self.query_id is not None and self.batch_id is not None:
            return uuid.uuid5(WRITER_ID_NAMESPACE, f"{self.query_id}/{self.batch_id}/{self.partition}")
        if self.write_id is not None:
            return uuid.uuid5(WRITER_ID_NAMESPACE, f"write {self.write_id}/{self.partition}")
        return uuid.uuid4()


# ---- routing Arrow batches -----------------------------------------------------------------------------------


def _binary_events(batch: pa.RecordBatch, column: str) -> pa.Array:
    events = batch.column(column)
    if events.null_count:
        first = pc.index(pc.is_null(events), True).as_py()
        raise SegstoreSchemaError(column, f"must not be null (row {first} of a batch is null)")
    if pa.types.is_string(events.type):
        return events.cast(pa.binary())
    if pa.types.is_large_string(events.type) or pa.types.is_large_binary(events.type):
        return events.cast(pa.binary())
    return events


# ---- task writers --------------------------------------------------------------------------------------------


def _retrieve(future: asyncio.Future[None]) -> None:
    if not future.cancelled():
        future.exception()


@dataclass
class _TxnTaskWriter:
    """One transaction per task; payloads go straight to its transaction segments in blocks."""

    manager: StreamManager
    options: WriteOptions
    writer_id: uuid.UUID
    txn_writer: TransactionalEventStreamWriter | None = None
    txn: Transaction | None = None
    router: Router | None = None
    writers: dict[int, SegmentWriter] = field(default_factory=dict)
    acks: list[asyncio.Future[None]] = field(default_factory=list)
    pinger: asyncio.Task[None] | None = None

    async def write(self, events: pa.Array, keys: pa.Array | None) -> None:
        target = self.options.target
        if self.txn is None:
            self.txn_writer = self.manager.create_txn_writer(
                target.scope, target.stream, TxnWriterConfig(lease_ms=self.options.transaction_timeout_ms)
            )
            self.txn = await self.txn_writer.begin()
            self.router = Router(self.txn.segments, self.manager.hasher)
            self.pinger = asyncio.get_running_loop().create_task(self._keep_alive(self.txn))
        assert self.router is not None
        for segment, part in self.router.split(events, keys):
            writer = self.writers.get(segment.segment_id)
            if writer is None:
                name = self.txn.segment_name(segment)  # one writer id per session: sessions share connections
                writer = self.manager.client.writer(name, session_writer_id(self.writer_id, name))
                self.writers[segment.segment_id] = writer
            limit = writer.config.max_block_bytes
            for block, count in framed_blocks(part, limit):
                ack = await writer.write_framed(block, count)
                ack.add_done_callback(_retrieve)
                self.acks.append(ack)
        if len(self.acks) > 256:
            self.acks = [a for a in self.acks if not a.done()]

    async def _keep_alive(self, txn: Transaction) -> None:
        """Renew the lease while the task runs (also while it waits for its input)."""
        while True:
            await asyncio.sleep(self.options.ping_interval_s)
            try:
                await txn.ping()
            except Exception as error:  # the commit reports a lost transaction; keep writing meanwhile
                _log.warning("segstore sink: renewing the lease of transaction %s failed: %r", txn.txn_id, error)

    async def _stop_pinger(self) -> None:
        if self.pinger is not None:
            self.pinger.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.pinger
            self.pinger = None

    async def finish(self) -> tuple[str, ...]:
        await self._stop_pinger()
        for writer in self.writers.values():
            await writer.close()  # flushes; raises the session's failure
        for ack in self.acks:
            await ack
        if self.txn is None:
            return ()
        await self.txn.ping()  # a full lease from the end of the task
        assert self.txn_writer is not None
        await self.txn_writer.close()
        return (str(self.txn.txn_id),)

    async def cancel(self) -> None:
        await self._stop_pinger()
        for writer in self.writers.values():
            with contextlib.suppress(Exception):
                await writer.close()
        if self.txn is not None and self.txn.is_open:
            try:
                await self.txn.abort()
            except Exception as error:
                _log.warning("segstore sink: abort of transaction %s failed: %r", self.txn.txn_id, error)
        if self.txn_writer is not None:
            await self.txn_writer.close()


@dataclass
class _TaskWriters:
    """A task's writer per target stream: one (the ``stream`` option's) without a ``stream`` column; with one, a
    writer per stream its rows name, each made when the first row for it comes (the stream made sure of then)."""

    manager: StreamManager
    options: WriteOptions
    writer_id: uuid.UUID
    writers: dict[tuple[str, str], _TxnTaskWriter | PlainTaskWriter] = field(default_factory=dict)

    async def get(self, scope: str, stream: str, ensure: bool) -> _TxnTaskWriter | PlainTaskWriter:
        writer = self.writers.get((scope, stream))
        if writer is not None:
            return writer
        target = dataclasses.replace(self.options.target, scope=scope, stream=stream)
        if ensure and (target.controller, scope, stream) not in ENSURED:
            await ensure_row_stream(self.manager.controller, target, self.options.creation)  # type: ignore[arg-type]
            ENSURED.add((target.controller, scope, stream))
        options = dataclasses.replace(self.options, target=target)
        if options.exactly_once:
            writer = _TxnTaskWriter(self.manager, options, self.writer_id)
        else:
            writer = PlainTaskWriter(self.manager, options, self.writer_id)
        self.writers[(scope, stream)] = writer
        return writer

    async def finish(self) -> list[tuple[str, str]]:
        """``(transaction id, scope/stream)`` of each transaction (none at least once)."""
        txns = []
        for (scope, stream), writer in self.writers.items():
            if isinstance(writer, _TxnTaskWriter):
                txns += [(txn, f"{scope}/{stream}") for txn in await writer.finish()]
            else:
                await writer.finish()
        return txns

    async def cancel(self) -> None:
        for writer in self.writers.values():
            await writer.cancel()


async def _write_batch(writers: _TaskWriters, columns: SinkColumns, batch: pa.RecordBatch) -> None:
    events = _binary_events(batch, columns.event)
    keys = batch.column(columns.routing_key) if columns.routing_key is not None else None
    default = writers.options.target
    if columns.stream is None:
        writer = await writers.get(default.scope, default.stream, ensure=False)  # the driver made sure of it
        await writer.write(events, keys)
        return
    for (scope, stream), rows in split_by_target(batch, columns.stream, columns.scope, default):
        writer = await writers.get(scope, stream, ensure=True)
        if rows is None:
            await writer.write(events, keys)
        else:
            await writer.write(events.take(rows), keys.take(rows) if keys is not None else None)


async def _write_task(
    options: WriteOptions, columns: SinkColumns, batches: Iterator[pa.RecordBatch], task: _TaskInfo
) -> SegstoreCommitMessage:
    controller = await connect(options)
    manager = StreamManager(controller)
    writer_id = task.writer_id()
    writers = _TaskWriters(manager, options, writer_id)
    rows = 0
    try:
        try:
            while (batch := await asyncio.to_thread(next, batches, None)) is not None:
                if batch.num_rows == 0:
                    continue
                await _write_batch(writers, columns, batch)
                rows += batch.num_rows
            txns = await writers.finish()
        except BaseException:
            await writers.cancel()
            raise
    finally:
        await manager.close()
        await controller.close()
    txn_ids = tuple(txn for txn, _ in txns)
    streams = tuple(stream for _, stream in txns)
    return SegstoreCommitMessage(
        txn_ids, rows, task.partition, task.query_id, task.batch_id, str(writer_id), txn_streams=streams
    )


# ---- driver side ---------------------------------------------------------------------------------------------


def _env_crash_hook() -> CrashHook | None:
    spec = os.environ.get(CRASH_ENV, "").strip()
    if not spec:
        return None
    point, _, batch = spec.partition(":")

    def crash(at: str, batch_id: int) -> None:
        if at != point or str(batch_id) != batch:
            return
        _log.warning("segstore sink: %s=%s: stopping the driver at %s of batch %d", CRASH_ENV, spec, at, batch_id)
        pgid = os.environ.get(CRASH_PGID_ENV, "").strip()
        if pgid:
            os.killpg(int(pgid), signal.SIGKILL)
        os._exit(137)

    return crash


def _messages(messages: Sequence[WriterCommitMessage | None]) -> list[SegstoreCommitMessage]:
    return [m for m in messages if isinstance(m, SegstoreCommitMessage)]


def _txn_ids(messages: Sequence[SegstoreCommitMessage]) -> list[uuid.UUID]:
    return [uuid.UUID(t) for m in messages for t in m.txn_ids]


def _txn_streams(messages: Sequence[SegstoreCommitMessage]) -> dict[uuid.UUID, tuple[str, str]]:
    """The stream of each transaction whose task named it (per-row targets)."""
    found = {}
    for message in messages:
        for txn, name in zip(message.txn_ids, message.txn_streams, strict=False):
            scope, _, stream = name.partition("/")
            found[uuid.UUID(txn)] = (scope, stream)
    return found


async def _with_committer(
    options: WriteOptions, logged: bool, work: Any, messages: Sequence[SegstoreCommitMessage] = ()
) -> Any:
    """Run ``work`` with a committer of the write's transactions. Its commit log is the ``stream`` option's table,
    or with rows naming their streams and no ``stream`` option, the scope's table of no stream (``commit_log``)."""
    controller = await connect(options)
    manager = StreamManager(controller)
    try:
        target = options.target
        invalidate = manager.resolver.invalidate if manager.resolver is not None else None
        log = CommitLog(manager.client, target.scope, target.stream, invalidate) if logged else None
        committer = BatchCommitter(
            controller,
            log,
            target.scope,
            target.stream,
            options.transaction_timeout_ms,
            wait_committed=options.read_after_write_consistency,
            wait_timeout_s=max(120.0, options.transaction_timeout_ms / 1000.0),
            crash_hook=_env_crash_hook(),
            poll_interval_s=options.transaction_status_poll_interval_ms / 1000.0,
            streams=_txn_streams(messages),
        )
        return await work(committer)
    finally:
        await manager.close()
        await controller.close()


class _SinkWriter:
    """What the batch and the streaming writer share: options, columns, the task's write."""

    def __init__(self, options: dict[str, str], schema: StructType, overwrite: bool) -> None:
        columns = SinkColumns.of(schema)
        self.options = WriteOptions.parse(options, per_row=columns.per_row)
        if columns.per_row and self.options.target.stream:  # the option wins over the column (WriteOptions.parse)
            columns = dataclasses.replace(columns, stream=None, scope=None)
        self.columns = columns
        if overwrite:
            raise SegstoreOptionError(
                "mode",
                f"stream {self.options.target.scope}/{self.options.target.stream or '(per row)'}: segstore streams are "
                "append-only; overwrite (or the complete output mode) is not supported, use append",
            )
        asyncio.run(ensure_stream(self.options))
        self.write_id = str(uuid.uuid4())
        """Names this write in its tasks' writer ids (a batch write's; streaming tasks name query and batch)."""
        self._driver = self.options
        """The options as given (the driver's commits and aborts log in with them)."""
        if self.options.target.logs_in:  # executors get a token for the stream, never the password
            token = asyncio.run(token_for_executors(self.options))
            self.options = dataclasses.replace(self.options, target=self.options.target.for_executors(token))

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_driver"] = None  # what executors get: no password
        return state

    @property
    def driver_options(self) -> WriteOptions:
        return self._driver if self._driver is not None else self.options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SegstoreCommitMessage:
        return asyncio.run(_write_task(self.options, self.columns, iterator, _TaskInfo.current(self.write_id)))


class SegstoreBatchWriter(_SinkWriter, DataSourceArrowWriter):
    """``df.write.format("segstore")``: see the module docstring."""

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        mine = _messages(messages)
        ids = _txn_ids(mine)
        if not ids:
            return
        target = self.options.target
        what = f"batch write to {target.scope}/{target.stream or '(the streams of its rows)'}"
        asyncio.run(_with_committer(self.driver_options, False, lambda c: c.commit_unlogged(ids, what), mine))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        mine = _messages(messages)
        ids = _txn_ids(mine)
        if ids:
            asyncio.run(_with_committer(self.driver_options, False, lambda c: c.abort_transactions(ids), mine))


class SegstoreStreamWriter(_SinkWriter, DataSourceStreamArrowWriter):
    """``df.writeStream.format("segstore")``: see the module docstring."""

    def _query_key(self, messages: Sequence[SegstoreCommitMessage]) -> str | None:
        ids = {m.query_id for m in messages if m.query_id}
        if len(ids) > 1:
            raise CommitLogError(f"commit: tasks of one batch name different queries {sorted(ids)}")
        if ids:
            return ids.pop()
        return self.options.checkpoint_location

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        if not self.options.exactly_once:
            return
        mine = _messages(messages)
        ids = _txn_ids(mine)
        query = self._query_key(mine)
        if query is None:
            if not ids:
                return
            raise CommitLogError(
                f"batch {batchId}: cannot tell the streaming query (no query id, no checkpointLocation option); "
                "exactly-once needs one"
            )
        outcome: CommitOutcome = asyncio.run(
            _with_committer(self.driver_options, True, lambda c: c.commit(query, batchId, ids), mine)
        )
        _log.info("segstore sink: batch %d of query %s: %s (%d transactions)", batchId, query, outcome.value, len(ids))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        mine = _messages(messages)
        ids = _txn_ids(mine)
        if not ids:
            return
        query = self._query_key(mine)
        asyncio.run(_with_committer(self.driver_options, True, lambda c: c.abort(query, batchId, ids), mine))
