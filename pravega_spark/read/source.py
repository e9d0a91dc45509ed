"""The ``segstore`` Spark data source: registration, schema, and the batch and streaming readers.

Writers live in :mod:`pravega_spark.write.sink`; this class only hands them the options.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import ReadLimit, SupportsTriggerAvailableNow
from pyspark.sql.types import BinaryType, LongType, StringType, StructField, StructType, TimestampType

from pravega_spark.connection import StreamConnection
from pravega_spark.errors import SegstoreOptionError, UnreachableEndError, planned
from pravega_spark.offsets import (
    ReadState,
    StreamKey,
    StreamsState,
    is_initial,
    tail_cut,
)
from pravega_spark.options.common import Options
from pravega_spark.options.read import Position, ReadOptions, metadata_mode, watermark_column
from pravega_spark.options.stream_creation import ensure_stream
from pravega_spark.read.admission import Admission, Limits
from pravega_spark.read.partition_reader import ARROW_SCHEMA
from pravega_spark.read.planning import LiveCatalog, forget_successors, plan_ranges
from pravega_spark.read.pushdown import Pushed, prune_in
from pravega_spark.read.several_streams import StreamSet, advance_streams, cuts, plan_streams
from pravega_spark.read.source_parts import (
    _create_if_allowed,
    _executor_token,
    _partitions,
    _read,
    _thresholds,
    resolve_position,
    resolve_stream_position,
)
from pravega_spark.read.streaming_runner import end_if_spark_hung_up
from pravega_spark.read.subscription import Subscription
from pravega_spark.read.timestamp_cuts import checked_named_streams
from pravega_spark.read.watermark_cache import WatermarkCache
from pravega_spark.read.watermark_column import ARROW_TYPE

_log = logging.getLogger(__name__)

SCHEMA = StructType(
    [
        StructField("event", BinaryType()),
        StructField("scope", StringType()),
        StructField("stream", StringType()),
        StructField("segment_id", LongType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
    ]
)


class SegstoreDataSource(DataSource):
    """Read and write segstore (Pravega-compatible) streams: ``format("segstore")``.

    Reading (``spark.read`` / ``spark.readStream``) gives one row per event::

        event       binary   the event's payload (without the 8-byte Pravega event header)
        scope       string   the stream's scope
        stream      string   the stream's name
        segment_id  bigint   the 64-bit id of the segment holding the event (epoch << 32 | number)
        offset      bigint   where the event's header starts in that segment
        timestamp   timestamp  when the event was ingested (the segment store's clock when it accepted the append;
                             null where a segment store without segstore's ReadIngestTimes served it)

    ``(segment_id, offset)`` identifies an event; the events of one routing key come in order within a
    segment. Options: the README's Spark section (parsed in :mod:`pravega_spark.options.read`; an option reads
    do not take fails, naming it); offsets are stream cuts (:mod:`pravega_spark.offsets`). A streaming query
    follows scaling: a sealed segment read to its end is replaced by its successors, each started once all of
    its predecessors are read; one input partition per segment range (small ones packed together; large ones cut at
    event starts with options ``maxBytesPerPartition`` / ``minPartitions``: :mod:`pravega_spark.read.splitting`);
    admission control by ``maxBytesPerTrigger``, ``maxEventsPerTrigger`` and ``minEventsPerTrigger``
    (:mod:`pravega_spark.read.admission`); Trigger.AvailableNow is supported.

    With option ``streams`` or ``streamPattern`` instead of ``stream`` a query reads several streams
    (:mod:`pravega_spark.read.several_streams`: :class:`SeveralStreamsBatchReader`, :class:`SeveralStreamsReader`).

    With option ``metadata`` a batch read gives rows about the scope (``Streams``) or the stream (``StreamInfo``:
    its head and tail cuts as Base64 text) instead: :mod:`pravega_spark.read.metadata`.

    Writing (``df.write`` / ``df.writeStream``): see :mod:`pravega_spark.write.sink`.

    Example::

        import pravega_spark
        pravega_spark.register(spark)            # not needed when pyspark finds the source by itself
        df = (spark.read.format("segstore").option("controller", "tcp://127.0.0.1:9090")
              .option("scope", "demo").option("stream", "events").load())
    """

    @classmethod
    def name(cls) -> str:
        return "segstore"

    @planned
    def schema(self) -> StructType:
        view = Options.of(self.options)
        mode = metadata_mode(view)
        if mode is None:
            return events_schema(watermark_column(view))
        from pravega_spark.read.metadata import SCHEMAS

        return SCHEMAS[mode]

    @planned
    def reader(self, schema: StructType) -> DataSourceReader:
        options = ReadOptions.parse(self.options)
        options.check_batch()
        if options.metadata is not None:
            from pravega_spark.read.metadata import SegstoreMetadataReader

            return SegstoreMetadataReader(options, schema)
        from pravega_spark.read.pushdown_readers import batch_reader  # readers taking filters

        return batch_reader(options, _checked(schema, options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        options = ReadOptions.parse(self.options)
        if options.metadata is not None:
            raise SegstoreOptionError("metadata", "is for batch reads (spark.read), not for streaming queries")
        if options.ending is not None:
            raise SegstoreOptionError(
                options.ending.option,
                "is for batch queries only: a streaming query has no end here (end_stream_cut takes 'unbounded'; "
                "the Pravega connector takes an end cut and never stops at it); read up to an end with spark.read",
            )
        if options.selection is not None:
            return SeveralStreamsReader(options, _checked(schema, options))
        return SegstoreStreamReader(options, _checked(schema, options))

    @planned
    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from pravega_spark.write.sink import SegstoreBatchWriter

        return SegstoreBatchWriter(dict(self.options), schema, overwrite)

    @planned
    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from pravega_spark.write.sink import SegstoreStreamWriter

        return SegstoreStreamWriter(dict(self.options), schema, overwrite)


def events_schema(watermark_column: str | None = None) -> StructType:
    """The columns of a read of events; with option ``watermarkColumn`` one more, a nullable timestamp, at the end."""
    if watermark_column is None:
        return SCHEMA
    return StructType([*SCHEMA.fields, StructField(watermark_column, TimestampType(), True)])


def _checked(schema: StructType, options: ReadOptions) -> StructType:
    fixed = events_schema(options.watermark_column)
    expected = [(f.name, f.dataType) for f in fixed.fields]
    if [(f.name, f.dataType) for f in schema.fields] != expected:
        raise ValueError(f"segstore: the read schema is fixed ({fixed.simpleString()}), got {schema.simpleString()}")
    return schema


def _arrow_schema(schema: StructType) -> pa.Schema:
    def arrow_type(name: str) -> pa.DataType:
        return ARROW_SCHEMA.field(name).type if name in ARROW_SCHEMA.names else ARROW_TYPE

    return pa.schema([pa.field(f.name, arrow_type(f.name), f.nullable) for f in schema.fields])


class SegstoreBatchReader(DataSourceReader):
    """``spark.read.format("segstore")``: the events between the start and the end position."""

    pushed: Pushed | None = None  # the filters pyspark pushed (pravega_spark.read.pushdown_readers)

    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        self.options = options
        self.arrow_schema = _arrow_schema(schema)

    def partitions(self) -> list[InputPartition]:
        options = self.options
        target = options.target
        with StreamConnection(target.controller, options.controller_timeout_s, credentials=target) as connection:
            _create_if_allowed(connection, options)
            connection.require_stream(target.scope, target.stream)
            if self.pushed is not None and not self.pushed.admits_stream(target.scope, target.stream):
                return []
            token = _executor_token(connection, target)
            start = resolve_position(connection, options, options.starting_or("earliest"))
            end = resolve_position(connection, options, options.ending or Position.latest("endingOffsets"))
            catalog = LiveCatalog(connection, target.scope, target.stream)
            try:
                ranges = plan_ranges(start, end, catalog, fail_on_data_loss=options.fail_on_data_loss)
            except UnreachableEndError as error:
                ending = options.ending.option if options.ending is not None else "endingOffsets"
                starting = options.starting.option if options.starting is not None else "startingOffsets"
                raise SegstoreOptionError(ending, f"is not after option '{starting}': {error}") from None
            ranges = prune_in(self.pushed, ranges, catalog)
            thresholds = _thresholds(connection, options, ranges, start, WatermarkCache())
            return _partitions(options, ranges, token, thresholds, catalog)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(partition, self.arrow_schema)


class SegstoreStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("segstore")``: micro-batches between read states (stream cuts).

    Spark keeps one instance per query in a long-lived Python process (the connection is made there on
    first use and kept); executors only call :meth:`read` on a copy without a connection.
    """

    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        self.options = options
        self.arrow_schema = _arrow_schema(schema)
        self._connection: StreamConnection | None = None
        self._successors: dict[int, dict[int, list[int]]] = {}
        self._target: ReadState | None = None
        self._subscription: Subscription | None = None
        self._watermarks = WatermarkCache()  # for watermarkColumn: the watermarks read so far
        self._admission = Admission(options)
        self._planned: tuple[dict[str, Any], LiveCatalog] | None = None  # latestOffset's start and catalog
        self._tail: ReadState | None = None  # latestOffset's end when it read everything: the tail then

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_connection"] = None
        state["_subscription"] = None
        state["_planned"] = None
        state["_tail"] = None
        return state

    def _connect(self) -> StreamConnection:
        if self._connection is None:
            target = self.options.target
            connection = StreamConnection(target.controller, self.options.controller_timeout_s, credentials=target)
            try:
                _create_if_allowed(connection, self.options)
                connection.require_stream(target.scope, target.stream)
                if self.options.subscriber is not None:
                    self._subscription = Subscription(connection, target.scope, target.stream, self.options.subscriber)
            except BaseException:
                connection.close()
                raise
            self._connection = connection
        return self._connection

    def _catalog(self, state: ReadState) -> LiveCatalog:
        """A catalog of the stream now, with the statuses of ``state``'s segments asked all at once."""
        target = self.options.target
        catalog = LiveCatalog(self._connect(), target.scope, target.stream, self._successors)
        catalog.prefetch(state.positions)
        return catalog

    def _state(self, offset: dict[str, Any]) -> ReadState:
        target = self.options.target
        return ReadState.from_offset(offset, target.scope, target.stream)

    def initialOffset(self) -> dict[str, Any]:
        """The same JSON on every call (Spark asks again when it runs the first micro-batch, and after a
        restart before that batch committed): a fixed cut as it is, any other start unresolved; see
        :mod:`pravega_spark.offsets`."""
        position = self.options.starting_or("latest")
        connection = self._connect()  # a wrong controller or a missing stream fails the query here
        if position.is_fixed:
            return resolve_position(connection, self.options, position).to_offset()
        target = self.options.target
        return position.to_initial_offset(target.scope, target.stream)

    def getDefaultReadLimit(self) -> ReadLimit:
        return self._admission.default_limit()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        if is_initial(start):  # the first micro-batch: look the start up; that batch reads nothing
            return resolve_position(self._connect(), self.options, Position.from_initial_offset(start)).to_offset()
        cap = None if self._target is None else self._target.positions
        state = self._state(start)
        catalog = self._catalog(state)
        available_now = self._target is not None
        end = self._admission.next_end(state, catalog, limit, cap=cap, available_now=available_now)
        self._planned = (start, catalog)  # partitions(start, end) plans with the statuses the end came from
        unlimited = cap is None and self._admission.limits(limit, available_now) == Limits()
        self._tail = end if unlimited else None  # everything available: the end is the tail (reportLatestOffset)
        return start if end is None else end.to_offset()  # None: minEventsPerTrigger waits

    def reportLatestOffset(self) -> dict[str, Any]:
        """The stream's tail cut now, as an offset: Spark calls it after each ``latestOffset`` and shows it in the
        micro-batch's progress (``lastProgress["sources"][0]["latestOffset"]``);
        :func:`pravega_spark.read.lag.lag_bytes` subtracts the batch's ``endOffset`` from it. When ``latestOffset``
        read up to everything available (no read limit), that end is the tail: no second look-up."""
        tail, self._tail = self._tail, None
        if tail is not None:
            return tail.to_offset()
        target = self.options.target
        return ReadState.from_stream_cut(tail_cut(self._connect(), target.scope, target.stream)).to_offset()

    def prepareForTriggerAvailableNow(self) -> None:
        target = self.options.target
        self._target = ReadState.from_stream_cut(tail_cut(self._connect(), target.scope, target.stream))

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        if is_initial(start):
            self._state(end)  # the looked-up start: nothing before it is read
            return []
        first = self._state(start)
        planned, self._planned = self._planned, None
        catalog = planned[1] if planned is not None and planned[0] == start else self._catalog(first)
        forget_successors(self._successors, first.positions)  # of segments finished: never asked again
        ranges = plan_ranges(first, self._state(end), catalog, fail_on_data_loss=self.options.fail_on_data_loss)
        connection = self._connect()
        thresholds = _thresholds(connection, self.options, ranges, first, self._watermarks)
        token = _executor_token(connection, self.options.target)
        return _partitions(self.options, ranges, token, thresholds, catalog)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(partition, self.arrow_schema)

    def commit(self, end: dict[str, Any]) -> None:
        """With option ``subscriber``: publish ``end`` as the query's subscriber cut (what retention may drop);
        otherwise nothing: the stream keeps its data until it is truncated."""
        if self.options.subscriber is None:
            return
        connection = self._connect()
        assert self._subscription is not None
        self._subscription.publish(connection, self._state(end).to_stream_cut())

    def stop(self) -> None:
        """Spark's streaming runner calls it when the query stops, or when the JVM hung up on the runner: then
        the runner process ends here, quietly (:mod:`pravega_spark.read.streaming_runner`)."""
        if self._connection is not None:
            self._connection.close()
            self._connection = None
        end_if_spark_hung_up()


# ---- several streams (options streams / streamPattern: pravega_spark.read.several_streams) -----------------------
class _SeveralStreams:
    """What both readers of several streams share: the driver's connection and the stream set."""

    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        assert options.selection is not None
        self.options = options
        self.arrow_schema = _arrow_schema(schema)
        self.streams = StreamSet(options.selection, options.target.scope)
        self.pushed: Pushed | None = None  # batch reads: the filters pyspark pushed
        self._successors: dict[StreamKey, dict[int, dict[int, list[int]]]] = {}

    def _start_streams(self, connection: StreamConnection) -> list[StreamKey]:
        """The streams at the start of the query (created first if allowed; a missing listed one fails)."""
        creation, target = self.options.creation, self.options.target
        if creation.allow_create_scope or creation.allow_create_stream:
            for scope, stream in self.options.selection.names if self.options.selection else ():
                connection.run(
                    ensure_stream(connection.controller, replace(target, scope=scope, stream=stream), creation)
                )
        return checked_named_streams(self.options, self.streams.current(connection, strict=True))

    def _catalog_of(self, connection: StreamConnection) -> Callable[[StreamKey], LiveCatalog]:
        catalogs: dict[StreamKey, LiveCatalog] = {}

        def catalog(key: StreamKey) -> LiveCatalog:
            if key not in catalogs:
                catalogs[key] = LiveCatalog(connection, *key, self._successors.setdefault(key, {}))
            return catalogs[key]

        return catalog

    def _resolve(self, connection: StreamConnection, keys: Sequence[StreamKey], position: Position) -> StreamsState:
        """``position`` in each stream; a cut (the initial offset of a query started on one stream) is where that
        stream starts, the others start at their head."""
        states = {}
        for key in keys:
            at = position
            if position.kind == "cut" and position.cut is not None and (position.cut.scope, position.cut.stream) != key:
                at = Position.earliest(position.option)
            states[key] = resolve_stream_position(connection, *key, at)
        return StreamsState(states)

    def _partitions(self, connection: StreamConnection, start: StreamsState, end: StreamsState) -> list[InputPartition]:
        catalog_of = self._catalog_of(connection)
        parts: list[InputPartition] = []
        for key, ranges in plan_streams(connection, start, end, catalog_of, self.options.fail_on_data_loss):
            token = _executor_token(connection, self.options.target, key)
            ranges = prune_in(self.pushed, ranges, catalog_of(key))
            parts += _partitions(self.options, ranges, token, None, catalog_of(key), key)
        return parts

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(partition, self.arrow_schema)


class SeveralStreamsBatchReader(_SeveralStreams, DataSourceReader):
    """``spark.read`` with option ``streams`` or ``streamPattern``: every stream between the start and the end."""

    @planned  # a missing listed stream: one line naming option 'streams'
    def partitions(self) -> list[InputPartition]:
        options = self.options
        with StreamConnection(options.target.controller, options.controller_timeout_s, credentials=options.target) as c:
            keys = [k for k in self._start_streams(c) if self.pushed is None or self.pushed.admits_stream(*k)]
            start = self._resolve(c, keys, options.starting_or("earliest"))
            try:
                return self._partitions(
                    c, start, self._resolve(c, keys, options.ending or Position.latest("endingOffsets"))
                )
            except UnreachableEndError as error:
                ending = options.ending.option if options.ending is not None else "endingOffsets"
                raise SegstoreOptionError(ending, f"is not after the start: {error}") from None


class SeveralStreamsReader(_SeveralStreams, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream`` with option ``streams`` or ``streamPattern``: micro-batches between
    :class:`~pravega_spark.offsets.StreamsState` offsets, the stream set looked up at every ``latestOffset``."""

    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        super().__init__(options, schema)
        self._connection: StreamConnection | None = None
        self._target: StreamsState | None = None
        self._admission = Admission(options)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_connection": None}

    def _connect(self) -> StreamConnection:
        if self._connection is None:
            target = self.options.target
            connection = StreamConnection(target.controller, self.options.controller_timeout_s, credentials=target)
            try:
                self._start_streams(connection)
            except BaseException:
                connection.close()
                raise
            self._connection = connection
        return self._connection

    def initialOffset(self) -> dict[str, Any]:
        """The start, not looked up (the same JSON every time, as for one stream), with the stream selection."""
        self._connect()  # a wrong controller or a missing listed stream fails the query here
        selection = self.options.selection
        assert selection is not None
        initial = self.options.starting_or("latest").to_initial_offset(self.options.target.scope, "")
        return {**initial, "stream": selection.pattern or ",".join(f"{s}/{n}" for s, n in selection.names)}

    def getDefaultReadLimit(self) -> ReadLimit:
        return self._admission.default_limit()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        connection = self._connect()
        keys = self.streams.current(connection)
        if is_initial(start):  # the first micro-batch: look the start up; that batch reads nothing
            return self._resolve(connection, keys, Position.from_initial_offset(start)).to_offset()
        begin, catalog_of, fail = (
            StreamsState.from_offset(start),
            self._catalog_of(connection),
            self.options.fail_on_data_loss,
        )

        def advance_to(max_bytes: int | None) -> StreamsState:
            return advance_streams(
                connection, begin, keys, catalog_of, fail_on_data_loss=fail, max_bytes=max_bytes, target=self._target
            )

        end = self._admission.next_streams_end(
            begin, advance_to, catalog_of, limit, available_now=self._target is not None
        )
        return start if end is None else end.to_offset()  # None: minEventsPerTrigger waits

    def reportLatestOffset(self) -> dict[str, Any]:
        """The tails of the streams read now (the ``latestOffset`` of the micro-batch's progress)."""
        connection = self._connect()
        return cuts(connection, self.streams.current(connection), tail_cut).to_offset()

    def prepareForTriggerAvailableNow(self) -> None:
        connection = self._connect()
        self._target = cuts(connection, self.streams.current(connection), tail_cut)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        if is_initial(start):
            return []
        return self._partitions(self._connect(), StreamsState.from_offset(start), StreamsState.from_offset(end))

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing: option ``subscriber`` is refused with several streams."""

    def stop(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None
        end_if_spark_hung_up()
