"""Per-row target streams of the sink: a ``stream`` column (and optionally a ``scope`` column) names where each row
goes, like the ``topic`` column of Spark's Kafka sink.

Invariants:

* Without a ``stream`` column nothing here is used: every row goes to the ``stream`` option, as always.
* With the ``stream`` option given, nothing here is used either: the option wins over the column, as the ``topic``
  option of Spark's Kafka sink does over its ``topic`` column.
* A row whose ``scope`` is null (or a DataFrame without a ``scope`` column) goes to the ``scope`` option. A null
  ``stream`` fails the task naming the column.
* :func:`split_by_target` keeps the order of the rows within each target (a stable split), so rows of one routing
  key and one stream keep the order in which the task wrote them.
* A stream named by a row that does not exist fails the task naming it, unless ``allowCreateStream`` (default
  ``true`` for writes) allows creating it: then it is created with the ``default*`` options' configuration
  (:func:`ensure_row_stream`), once per executor process, and no task writes to it before its creation is done.
"""

from __future__ import annotations

import contextlib

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from controller_client.controller.api import ControllerClient
from controller_client.errors import ControllerPermissionError, ScopeNotFoundError
from controller_client.model import InvalidModelError, validate_scope_name, validate_stream_name
from pravega_spark.errors import SegstoreOptionError, SegstoreSchemaError, shown_alone
from pravega_spark.options import stream_creation
from pravega_spark.options.common import StreamTarget
from pravega_spark.options.stream_creation import StreamCreation

STREAM_COLUMN = "stream"
SCOPE_COLUMN = "scope"

Target = tuple[str, str]
"""``(scope, stream)``."""


def _strings(column: pa.Array) -> pa.Array:
    return column.cast(pa.string()) if pa.types.is_large_string(column.type) else column


def _filled(column: pa.Array, name: str, default: str) -> pa.Array:
    column = _strings(column)
    if not column.null_count:
        return column
    if not default:
        first = pc.index(pc.is_null(column), True).as_py()
        raise shown_alone(
            SegstoreSchemaError(
                name,
                f"row {first} of a batch names no stream (null) and there is no default: give option 'stream' "
                "for such rows, or a stream in every row",
            )
        )
    return pc.fill_null(column, default)


def _checked(scope: str, stream: str) -> Target:
    try:
        validate_scope_name(scope)
    except InvalidModelError as error:
        raise shown_alone(SegstoreSchemaError(SCOPE_COLUMN, str(error))) from None
    try:
        validate_stream_name(stream)
    except InvalidModelError as error:
        raise shown_alone(SegstoreSchemaError(STREAM_COLUMN, str(error))) from None
    return scope, stream


def split_by_target(
    batch: pa.RecordBatch, stream_column: str, scope_column: str | None, default: StreamTarget
) -> list[tuple[Target, pa.Array | None]]:
    """The batch's rows per target ``(scope, stream)``, each as the indices of its rows in batch order (None: every
    row of the batch), targets in the order of their first row. Raises SegstoreSchemaError naming the column for
    a null stream without a default, or an invalid scope or stream name."""
    streams = _filled(batch.column(stream_column), STREAM_COLUMN, default.stream)
    if scope_column is None:
        keys = streams
    else:
        scopes = _filled(batch.column(scope_column), SCOPE_COLUMN, default.scope)
        keys = pc.binary_join_element_wise(scopes, streams, "/")  # scope names hold no '/'
    encoded = pc.dictionary_encode(keys)
    names: list[str] = encoded.dictionary.to_pylist()
    targets = [_checked(*name.split("/", 1)) if scope_column else _checked(default.scope, name) for name in names]
    if len(targets) == 1:
        return [(targets[0], None)]
    codes = encoded.indices.to_numpy(zero_copy_only=False)
    order = np.argsort(codes, kind="stable")
    counts = np.bincount(codes, minlength=len(targets))
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    return [(targets[i], pa.array(order[starts[i] : starts[i] + counts[i]])) for i in range(len(targets))]


async def ensure_row_stream(controller: ControllerClient, target: StreamTarget, creation: StreamCreation) -> bool:
    """Make sure the stream a row names exists: create it (and its scope) if ``creation`` allows, with its
    configuration; True if it was created. Raises SegstoreSchemaError naming the stream when it is missing and
    option ``allowCreateStream`` is false (or its scope is missing and ``allowCreateScope`` is false)."""
    name = f"{target.scope}/{target.stream}"
    try:
        if await stream_creation.ensure_stream(controller, target, creation):
            return True
        if creation.allow_create_stream:
            # The stream exists, but another task may still be creating it (the controller says it exists from
            # the creation's first record on): a create of it returns once that creation is done.
            with contextlib.suppress(ControllerPermissionError):
                await controller.create_stream(target.scope, target.stream, creation.config)
        return False
    except SegstoreOptionError as error:
        if error.option == "stream":
            problem = f"stream {name} named by a row does not exist, and option 'allowCreateStream' is false"
        elif error.option == "scope":
            problem = f"scope {target.scope} of stream {name} named by a row does not exist, and option "
            problem += "'allowCreateScope' is false"
        else:
            raise
        raise shown_alone(SegstoreSchemaError(STREAM_COLUMN, problem)) from None
    except ScopeNotFoundError:
        problem = f"scope {target.scope} of stream {name} named by a row does not exist"
        raise shown_alone(SegstoreSchemaError(STREAM_COLUMN, problem)) from None
