"""The errors the ``segstore`` connector raises on purpose, in one place (it imports nothing of the connector).

Options and input:

* :class:`SegstoreOptionError` - an option is missing or invalid (a ``ValueError``; the message names the option);
* :class:`OffsetFormatError` - a JSON offset or stream cut that is not a read state (:mod:`pravega_spark.offsets`);
* :class:`StreamCutTextError` - not a stream cut in the Pravega client's Base64 text
  (:mod:`pravega_spark.options.stream_cut_text`);
* :class:`SegstoreSchemaError` - the DataFrame's columns do not fit the sink (the message names the column);
* :class:`LagUnknownError` - a streaming progress without this source's offsets (:mod:`pravega_spark.read.lag`).

Reading and writing:

* :class:`DataLossError` - data the query had not read yet was truncated away (``failOnDataLoss=true``);
* :class:`UnreachableEndError` - a read's end position is not after its start (:mod:`pravega_spark.read.planning`);
* :class:`Tier2ReadError` - a direct Tier-2 read stopped midway, the rest is read elsewhere
  (:mod:`pravega_spark.read.tier2_direct`);
* :class:`CommitLogError` - a batch cannot be committed exactly once (:mod:`pravega_spark.write.commit_log`).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from segstore_shared.errors import SegstoreError

_P = ParamSpec("_P")
_R = TypeVar("_R")
_E = TypeVar("_E", bound=ValueError)


class SegstoreOptionError(ValueError):
    """An option is missing or invalid; the message names it."""

    def __init__(self, option: str, problem: str) -> None:
        super().__init__(f"option '{option}': {problem}")
        self.option = option


def shown_alone(error: _E) -> _E:
    """``error``, to be shown by Spark as one line, without a traceback: Spark's Python worker formats the error it
    reports with its traceback, so the first line of what the user sees would be ``Traceback (most recent call
    last):``; with ``SPARK_HIDE_TRACEBACK`` set (what ``spark.sql.execution.pyspark.udf.hideTraceback.enabled`` sets)
    it is the error itself, naming the option and the URI. For errors that end the worker's task (it exits after
    reporting one, so nothing else it reports loses its traceback)."""
    os.environ["SPARK_HIDE_TRACEBACK"] = "1"
    return error


def planned(method: Callable[_P, _R]) -> Callable[_P, _R]:
    """A data source method Spark runs in a planning worker (``schema``, ``reader``, ``writer``, ``streamWriter``):
    an option or column error it raises is :func:`shown_alone`, so the first line the user reads names the option
    (or column), not ``Traceback``. The worker reports that one error and ends. Not ``streamReader``: Spark's
    streaming source runner then fails in its own clean-up (``UnboundLocalError`` for ``reader``, pyspark 4.3),
    and only its traceback keeps the option's error in what the user reads."""

    @functools.wraps(method)
    def run(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return method(*args, **kwargs)
        except (SegstoreOptionError, SegstoreSchemaError) as error:
            shown_alone(error)
            raise

    return run


class OffsetFormatError(ValueError):
    """A JSON offset or stream cut that is not a :class:`~pravega_spark.offsets.ReadState`; the message says what
    is wrong."""


class StreamCutTextError(ValueError):
    """Not a stream cut in the Pravega client's text form; the message says what is wrong."""


class SegstoreSchemaError(ValueError):
    """The DataFrame's columns do not fit the sink; the message names the column."""

    def __init__(self, column: str, problem: str) -> None:
        super().__init__(f"column '{column}': {problem}")
        self.column = column


class LagUnknownError(ValueError):
    """The progress has no ``latestOffset`` or ``endOffset`` of this source (e.g. not a segstore source)."""


class DataLossError(SegstoreError):
    """Data the query has not read yet was truncated away (failOnDataLoss=true)."""


class UnreachableEndError(ValueError):
    """The end state is not after the start state."""


class Tier2ReadError(SegstoreError):
    """Tier-2 stopped serving a range midway; rows before ``offset`` were yielded, read the rest elsewhere."""

    def __init__(self, segment: str, offset: int, reason: str) -> None:
        super().__init__(f"{segment}: direct Tier-2 read stopped at offset {offset}: {reason}")
        self.segment = segment
        self.offset = offset


class CommitLogError(SegstoreError):
    """A batch cannot be committed exactly once; the message says which batch and why."""


__all__ = [
    "CommitLogError",
    "DataLossError",
    "LagUnknownError",
    "OffsetFormatError",
    "SegstoreOptionError",
    "SegstoreSchemaError",
    "StreamCutTextError",
    "Tier2ReadError",
    "UnreachableEndError",
]
