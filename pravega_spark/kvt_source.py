"""The ``segstore-kvt`` Spark data source: a batch read of a key-value table as a DataFrame.

Why a format of its own rather than an option of ``segstore``: a table is not a stream. Its rows have another
schema (keys, value, version - not events at offsets), it has no offsets, stream cuts or micro-batches, and none
of ``segstore``'s reading options (``startingOffsets``, ``maxBytesPerTrigger``, ``tier2Location``...) would mean
anything for it; under one format every option would be valid for one kind of read and refused for the other,
and one option (say ``table``) would switch the schema. One data source per concern keeps both strict and
documented in one place each; this module's options are its own (``segstore``'s are in
:mod:`pravega_spark.options.names`).
"""

from __future__ import annotations

import binascii
import difflib
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.types import BinaryType, StringType, StructField, StructType

from controller_client.kvt.errors import KeyValueTableNotFoundError
from controller_client.kvt.iterator import KeyValueTableIterator
from controller_client.kvt.model import KeyValueTableConfiguration, TableEntry, table_segment_stream, validate_kvt_name
from controller_client.model import InvalidModelError, SegmentRange, validate_scope_name
from pravega_spark.connection import StreamConnection
from pravega_spark.errors import SegstoreOptionError, planned
from pravega_spark.options.common import DEFAULT_CONTROLLER, Options, StreamTarget

SCHEMA = StructType(
    [
        StructField("primary_key", BinaryType()),
        StructField("secondary_key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("version", StringType()),
    ]
)
ARROW_SCHEMA = pa.schema(
    [("primary_key", pa.binary()), ("secondary_key", pa.binary()), ("value", pa.binary()), ("version", pa.string())]
)
OPTIONS: Mapping[str, str] = {
    "controller": "controller URI, default tcp://127.0.0.1:9090; tls://host:port for TLS",
    "trustStore": "with TLS: the CA certificates (PEM file) to trust, read at this path by the driver and executors",
    "username": "with authentication on, with password: the driver logs in; executors get a READ token",
    "password": "goes with username",
    "token": "instead of username/password: a delegation token for the table's segments (stream <table>_kvtable)",
    "scope": "the table's scope (required)",
    "table": "the key-value table (required)",
    "path": "Spark's own, from load('scope/table'): the scope and the table in one",
    "primaryKey": "only the entries of this primary key (one table segment is read)",
    "primaryKeyPrefix": "only the entries whose primary key starts with this",
    "keyEncoding": "how primaryKey and primaryKeyPrefix are written: utf-8 (default) or hex",
    "pageSize": "entries per request to a segment store (default 1000)",
    "controllerTimeoutMs": "how long the driver and executors try to reach the controller (default 30000)",
}
"""Every option of ``format("segstore-kvt")`` (case-insensitive) and what it means; any other fails the read."""
_ALIASES = {"trust_store": "trustStore"}
ROWS_PER_BATCH = 4096


@dataclass(frozen=True, slots=True)
class KvtReadOptions:
    target: StreamTarget
    """Controller, trust store and credentials; ``stream`` is the table's name."""
    primary_key: bytes | None
    primary_prefix: bytes | None
    page_size: int
    timeout_s: float

    @property
    def table(self) -> str:
        return self.target.stream

    @classmethod
    def parse(cls, given: Mapping[str, str]) -> KvtReadOptions:
        """Raises SegstoreOptionError naming the option (unknown ones with the closest known name)."""
        known = {name.lower(): name for name in [*OPTIONS, *_ALIASES]}
        for key in given:
            if str(key).lower() not in known:
                near = difflib.get_close_matches(str(key).lower(), list(known), n=1, cutoff=0.5)
                hint = f"did you mean '{known[near[0]]}'?" if near else f"it takes {', '.join(OPTIONS)}"
                raise SegstoreOptionError(str(key), f"unknown option of segstore-kvt; {hint}")
        options = Options.of(given)
        controller = options.string("controller", DEFAULT_CONTROLLER)
        scope, table = _scope_and_table(options)
        trust = options.raw("trustStore", ("trust_store",))
        username, password, token = options.raw("username"), options.raw("password"), options.raw("token")
        if (username is None) != (password is None):
            raise SegstoreOptionError(
                "password" if password is None else "username", "username and password go together"
            )
        if token is not None and username is not None:
            raise SegstoreOptionError("token", "give either username and password or a token, not both")
        target = StreamTarget(controller, scope, table, trust.strip() if trust else None, username, password, token)
        primary_key = _key(options, "primaryKey")
        prefix = _key(options, "primaryKeyPrefix")
        if primary_key is not None and prefix is not None:
            raise SegstoreOptionError("primaryKeyPrefix", "give primaryKey or primaryKeyPrefix, not both")
        page_size = options.integer("pageSize", 1000)
        timeout_ms = options.integer("controllerTimeoutMs", 30_000)
        assert page_size is not None and timeout_ms is not None
        return cls(target, primary_key, prefix, page_size, timeout_ms / 1000.0)


def _scope_and_table(options: Options) -> tuple[str, str]:
    path = options.raw("path")
    if path is not None and path.strip():
        parts = path.strip().split("/")
        if len(parts) != 2 or not all(parts):
            raise SegstoreOptionError("path", f"must be 'scope/table', got {path!r}")
        scope, table = parts
    else:
        scope, table = options.required("scope"), options.required("table")
    try:
        validate_scope_name(scope)
    except InvalidModelError as error:
        raise SegstoreOptionError("scope", str(error)) from None
    try:
        validate_kvt_name(table)
    except InvalidModelError as error:
        raise SegstoreOptionError("table", str(error)) from None
    return scope, table


def _key(options: Options, name: str) -> bytes | None:
    value = options.raw(name)
    if value is None or value == "":
        return None
    encoding = options.string("keyEncoding", "utf-8").lower()
    if encoding in ("utf-8", "utf8"):
        return value.encode("utf-8")
    if encoding == "hex":
        try:
            return binascii.unhexlify(value.strip())
        except (binascii.Error, ValueError):
            raise SegstoreOptionError(name, f"is not hex (keyEncoding is hex): {value!r}") from None
    raise SegstoreOptionError("keyEncoding", f"must be utf-8 or hex, got {encoding!r}")


@dataclass(frozen=True)
class KvtPartition(InputPartition):
    """One table segment's share of the read: what an executor needs and nothing secret but a READ token."""

    target: StreamTarget
    config: KeyValueTableConfiguration
    segments: tuple[SegmentRange, ...]
    segment: SegmentRange
    from_key: bytes
    to_key: bytes
    page_size: int
    timeout_s: float


class SegstoreKvtDataSource(DataSource):
    """Read a key-value table: ``spark.read.format("segstore-kvt")``, one row per entry::

        primary_key    binary  the primary key
        secondary_key  binary  the secondary key (empty for a table without secondary keys)
        value          binary  the value
        version        string  the key's version, as Java writes it ("<segment id>:<version>"): give it to
                               ``Version.from_string`` for a conditional update

    One input partition per table segment (one only with ``primaryKey``); within a partition, rows come in key
    order. Options (any other fails the read, naming the closest): ``controller``, ``trustStore``, ``username``
    and ``password`` or ``token``, ``scope`` and ``table`` (or ``load("scope/table")``), ``primaryKey`` or
    ``primaryKeyPrefix`` (``keyEncoding`` utf-8 or hex), ``pageSize``, ``controllerTimeoutMs``. Batch reads only.

    Example::

        df = (spark.read.format("segstore-kvt").option("controller", "tcp://127.0.0.1:9090")
              .option("scope", "shop").option("table", "carts").load())
    """

    @classmethod
    def name(cls) -> str:
        return "segstore-kvt"

    @planned
    def schema(self) -> StructType:
        return SCHEMA

    @planned
    def reader(self, schema: StructType) -> DataSourceReader:
        if [(f.name, f.dataType) for f in schema.fields] != [(f.name, f.dataType) for f in SCHEMA.fields]:
            raise ValueError(
                f"segstore-kvt: the schema is fixed ({SCHEMA.simpleString()}), got {schema.simpleString()}"
            )
        return KvtBatchReader(KvtReadOptions.parse(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        raise SegstoreOptionError(
            "table", "segstore-kvt reads a key-value table in batch (spark.read), not as a stream"
        )


class KvtBatchReader(DataSourceReader):
    def __init__(self, options: KvtReadOptions) -> None:
        self.options = options

    def partitions(self) -> list[InputPartition]:
        options = self.options
        target = options.target
        with StreamConnection(target.controller, options.timeout_s, credentials=target) as connection:
            try:
                table = connection.run(connection.manager.key_value_table(target.scope, options.table))
            except KeyValueTableNotFoundError as error:
                raise SegstoreOptionError("table", str(error)) from None
            try:
                builder = table.iterator(options.page_size)
                if options.primary_key is not None:
                    iterator = builder.for_primary_key(options.primary_key)
                elif options.primary_prefix is not None:
                    iterator = builder.for_prefix(options.primary_prefix)
                else:
                    iterator = builder.all()
            except InvalidModelError as error:
                raise SegstoreOptionError(
                    "primaryKey" if options.primary_key else "primaryKeyPrefix", str(error)
                ) from None
            token = target.token
            if target.logs_in:
                token = connection.delegation_token(target.scope, table_segment_stream(options.table), write=False)
        segments = table.partitions.segments
        chosen = [table.partitions.segment_for(options.primary_key)] if options.primary_key is not None else segments
        executors = target.for_executors(token) if token is not None else target
        return [
            KvtPartition(
                executors,
                table.config,
                tuple(segments),
                segment,
                iterator.from_key,
                iterator.to_key,
                options.page_size,
                options.timeout_s,
            )
            for segment in chosen
        ]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, KvtPartition)
        return read_partition(partition)


def read_partition(partition: KvtPartition) -> Iterator[pa.RecordBatch]:
    """An executor's read of one table segment, as Arrow record batches of at most ``ROWS_PER_BATCH`` rows."""
    target = partition.target
    with StreamConnection(target.controller, partition.timeout_s, credentials=target) as connection:
        table = connection.manager.key_value_table_of(target.scope, target.stream, partition.config, partition.segments)
        length = partition.config.primary_key_length
        from_key, to_key = partition.from_key, partition.to_key
        iterator = KeyValueTableIterator(
            table, from_key[:length], from_key[length:], to_key[:length], to_key[length:], partition.page_size
        )
        entries = iterator.segment_entries(partition.segment)
        while rows := connection.run(_take(entries, ROWS_PER_BATCH)):
            yield _batch(rows)


async def _take(entries: AsyncIterator[TableEntry], count: int) -> list[TableEntry]:
    taken: list[TableEntry] = []
    async for entry in entries:
        taken.append(entry)
        if len(taken) >= count:
            break
    return taken


def _batch(rows: list[TableEntry]) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [
            pa.array([e.key.primary for e in rows], pa.binary()),
            pa.array([e.key.secondary for e in rows], pa.binary()),
            pa.array([e.value for e in rows], pa.binary()),
            pa.array([str(e.version) for e in rows], pa.string()),
        ],
        schema=ARROW_SCHEMA,
    )
