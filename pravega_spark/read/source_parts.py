"""What the readers of :mod:`pravega_spark.read.source` share: resolving start and end positions, the executors'
token, the input partitions of a set of ranges, and reading one partition as Arrow batches."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    InputPartition,
)

from pravega_spark.connection import StreamConnection
from pravega_spark.errors import SegstoreOptionError
from pravega_spark.offsets import (
    ReadState,
    StreamKey,
    head_cut,
    tail_cut,
)
from pravega_spark.options.common import StreamTarget
from pravega_spark.options.read import Position, ReadOptions
from pravega_spark.options.stream_creation import ensure_stream
from pravega_spark.read.partition_reader import ARROW_SCHEMA, PackedPartition, SegmentRangePartition, read_partition
from pravega_spark.read.planning import ReadRange
from pravega_spark.read.splitting import EventLocator, partition_groups
from pravega_spark.read.timestamp_cuts import timestamp_state
from pravega_spark.read.watermark_cache import driver_thresholds
from pravega_spark.read.watermark_column import thresholds_in_range, with_bound_column

_log = logging.getLogger(__name__)


def resolve_position(connection: StreamConnection, options: ReadOptions, position: Position) -> ReadState:
    """The read state of a start or end position (looked up now)."""
    return resolve_stream_position(connection, options.target.scope, options.target.stream, position)


def resolve_stream_position(connection: StreamConnection, scope: str, stream: str, position: Position) -> ReadState:
    """The read state of a start or end position in ``scope/stream`` (looked up now)."""
    if position.kind == "earliest":
        return ReadState.from_stream_cut(head_cut(connection, scope, stream))
    if position.kind == "latest":
        return ReadState.from_stream_cut(tail_cut(connection, scope, stream))
    if position.kind == "timestamp":
        return timestamp_state(connection, scope, stream, position)
    assert position.cut is not None
    positions = dict(position.cut.positions)
    for segment, offset in positions.items():
        if offset < 0:  # -1: the segment's current end
            status = connection.segment_status(scope, stream, segment)
            if status is None:
                raise SegstoreOptionError(position.option, f"segment {segment} of {scope}/{stream} does not exist")
            positions[segment] = status.write_offset
    state = ReadState(scope, stream, positions, position.cut.pending)
    if not state.pending and not connection.is_valid_cut(state.to_stream_cut()):
        raise SegstoreOptionError(
            position.option,
            f"{state.to_json()} is not a valid stream cut of {scope}/{stream} "
            "(its segments must exist and cover the key space once)",
        )
    return state


def _create_if_allowed(connection: StreamConnection, options: ReadOptions) -> None:
    """Options allowCreateScope/allowCreateStream (default false for reads): create what is missing."""
    creation = options.creation
    allowed = creation.allow_create_scope or creation.allow_create_stream
    if allowed and connection.run(ensure_stream(connection.controller, options.target, creation)):
        _log.info("segstore: created stream %s/%s", options.target.scope, options.target.stream)


def _executor_token(connection: StreamConnection, target: StreamTarget, key: StreamKey | None = None) -> str | None:
    """What the executors read with: a READ token the driver gets now when it logs in with a password (a new
    one for every batch, so a long query never outlives it), the ``token`` option as given, or None.
    ``key``: the stream read (default the target's)."""
    if target.logs_in:
        scope, stream = key or (target.scope, target.stream)
        return connection.delegation_token(scope, stream, write=False)
    return target.token


def _thresholds(
    connection: StreamConnection, options: ReadOptions, ranges: Sequence[ReadRange], start: ReadState, cache: Any
) -> dict[int, Any] | None:
    """With option ``watermarkColumn``: each range's segment's watermark thresholds (``cache``: what a
    :class:`WatermarkCache` read before, from ``start`` on); else None."""
    if options.watermark_column is None:
        return None
    asked, target = {r.segment_id: r.start for r in ranges}, options.target
    return driver_thresholds(connection, target.scope, target.stream, asked, cache, start.positions, [*start.pending])


def _partitions(
    options: ReadOptions,
    ranges: Sequence[ReadRange],
    token: str | None = None,
    thresholds: dict[int, Any] | None = None,
    locator: EventLocator | None = None,
    key: StreamKey | None = None,
) -> list[InputPartition]:
    """One input partition per group of :func:`~pravega_spark.read.splitting.partition_groups` (small ranges packed,
    large ones cut at event starts ``locator`` finds, as options ``maxBytesPerPartition`` and ``minPartitions``
    ask); ``thresholds``: see :func:`_thresholds`; ``key``: the stream read (default the target's)."""
    target = options.target
    scope, stream = key or (target.scope, target.stream)

    def part(r: ReadRange) -> SegmentRangePartition:
        return SegmentRangePartition(
            target.controller,
            scope,
            stream,
            r.segment_id,
            r.start,
            r.end,
            options.fail_on_data_loss,
            options.controller_timeout_s,
            options.tier2_location,
            target.trust_store,
            token,
            None if thresholds is None else thresholds_in_range(thresholds[r.segment_id], r.start, r.end),
        )

    return [
        part(group[0]) if len(group) == 1 else PackedPartition(tuple(part(r) for r in group))
        for group in partition_groups(ranges, options.split, locator)
    ]


def _read_part(part: SegmentRangePartition, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    if part.watermark_thresholds is None or len(schema) == len(ARROW_SCHEMA):
        return read_partition(part)
    name, thresholds = schema.names[-1], part.watermark_thresholds
    return (with_bound_column(batch, name, thresholds) for batch in read_partition(part))


def _read(partition: InputPartition, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    batches: Iterator[pa.RecordBatch]
    if isinstance(partition, PackedPartition):
        batches = (batch for part in partition.parts for batch in _read_part(part, schema))
    elif isinstance(partition, SegmentRangePartition):
        batches = _read_part(partition, schema)
    else:
        return iter(())  # Spark's placeholder partition of an empty read
    if schema.equals(ARROW_SCHEMA):
        return batches
    return (batch if batch.schema.equals(schema) else batch.cast(schema) for batch in batches)
