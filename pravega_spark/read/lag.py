"""How far a streaming query is behind its stream's tail, from Spark's progress alone.

The stream reader implements ``reportLatestOffset``: after each ``latestOffset(start, limit)`` Spark asks it for
the newest position available and puts the answer in the micro-batch's progress as ``latestOffset``. Here that is
the stream's tail cut at that moment, in the offset JSON of :mod:`pravega_spark.offsets` (``{"scope": ...,
"stream": ..., "positions": {"<segment id>": length}}``), so::

    source = query.lastProgress["sources"][0]
    source["endOffset"]      # where this micro-batch ends (the read state the next one starts from)
    source["latestOffset"]   # the tail when the micro-batch was planned

and :func:`lag_bytes` turns the two into bytes behind the tail per segment. pyspark's Python streaming API has no
hook for a source's own progress metrics (Spark's ``ReportsSourceMetrics``: the JVM class of a Python stream does
not implement it, so a source's ``metrics`` map stays empty); the lag is therefore derived from the two offsets.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pravega_spark.errors import LagUnknownError


def _offset(source: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = source.get(key)
    if isinstance(value, str):
        value = None if value in ("", "null", "None") else json.loads(value)
    if not isinstance(value, Mapping) or not isinstance(value.get("positions"), Mapping):
        raise LagUnknownError(f"the source progress has no {key} of a segstore stream (got {source.get(key)!r})")
    return value


def _source(progress: Mapping[str, Any], source: int) -> Mapping[str, Any]:
    if "sources" not in progress:
        return progress  # a source's own progress (one entry of "sources")
    sources = progress["sources"]
    if not 0 <= source < len(sources):
        raise LagUnknownError(f"the progress has {len(sources)} source(s), no source {source}")
    found: Mapping[str, Any] = sources[source]
    return found


def lag_bytes(progress: Mapping[str, Any], source: int = 0) -> dict[int, int]:
    """Bytes behind the tail per segment id after a micro-batch: the ``latestOffset`` (the tail when the batch was
    planned) minus the ``endOffset`` (where the batch ends), for a query's progress (``query.lastProgress``, an
    entry of ``query.recentProgress``; ``source``: which of its sources) or one source's progress.

    Every segment of the tail is in the answer: a segment the batch's end holds counts from its offset there, one
    it does not hold yet (a successor of a scale, not started) counts whole. A segment of the batch's end that has
    been sealed since (a scale while the query is behind) is not in the tail: its unread rest is not in the progress
    and is left out. Raises :class:`LagUnknownError` if the progress lacks either offset (a source other than
    segstore, or a progress Spark reported before the query's first micro-batch)."""
    found = _source(progress, source)
    latest = _offset(found, "latestOffset")["positions"]
    end = _offset(found, "endOffset")["positions"]
    lag: dict[int, int] = {}
    for segment, tail in latest.items():
        read_to = end.get(segment, 0)
        lag[int(segment)] = max(int(tail) - int(read_to), 0)
    return dict(sorted(lag.items()))


def total_lag_bytes(progress: Mapping[str, Any], source: int = 0) -> int:
    """The sum of :func:`lag_bytes` over the segments."""
    return sum(lag_bytes(progress, source).values())


__all__ = ["LagUnknownError", "lag_bytes", "total_lag_bytes"]
