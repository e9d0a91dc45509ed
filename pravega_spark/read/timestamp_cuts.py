"""Where a read starts or ends by time, in one stream (options ``startingTimestamp`` / ``endingTimestamp``, one
epoch ms or a time per stream, and ``startingTimestampStrategy``: :mod:`pravega_spark.options.timestamps`).

The cut at a time is per segment live then, the first event ingested at or after it
(:func:`~pravega_spark.offsets.cut_at_timestamp`); a time after every event of a segment is that segment's end when
looked up. So a start time after a stream's last event is its tail: later events are read (strategy ``latest``,
what segstore always did). With strategy ``error`` the start fails instead, naming the option and the stream, when
no event of the stream is at or after the time: the tail is looked up first, and the cut at the time is at or past
it in every segment of the tail (an event appended between the two look-ups makes it no error).
"""

from __future__ import annotations

from controller_client.model import StreamCut
from pravega_spark.connection import StreamConnection
from pravega_spark.errors import SegstoreOptionError
from pravega_spark.offsets import ReadState, StreamKey, cut_at_timestamp, head_cut, tail_cut
from pravega_spark.options.read import Position, ReadOptions


def timestamp_state(connection: StreamConnection, scope: str, stream: str, position: Position) -> ReadState:
    """The read state of a ``timestamp`` position in ``scope/stream`` (looked up now). Raises SegstoreOptionError
    (strategy ``error``, a start after the stream's last event)."""
    times = position.by_stream
    ms = position.timestamp_ms if times is None else times.time_of(scope, stream)
    if ms is None:  # a stream the per-stream times leave out
        assert times is not None
        fallback = head_cut if times.otherwise == "earliest" else tail_cut
        return ReadState.from_stream_cut(fallback(connection, scope, stream))
    if position.beyond_tail == "latest":
        return ReadState.from_stream_cut(cut_at_timestamp(connection, scope, stream, ms))
    tail = tail_cut(connection, scope, stream)
    cut = cut_at_timestamp(connection, scope, stream, ms)
    if _at_or_past(cut, tail):
        raise SegstoreOptionError(
            position.option,
            f"{ms} is after the last event of {scope}/{stream} and option 'startingTimestampStrategy' is 'error'; "
            "give an earlier time, or startingTimestampStrategy=latest to start at the tail",
        )
    return ReadState.from_stream_cut(cut)


def _at_or_past(cut: StreamCut, tail: StreamCut) -> bool:
    """Whether ``cut`` has the segments of ``tail``, each at or after the tail's offset (nothing at or after the
    time was there when the tail was looked up)."""
    return set(cut.positions) == set(tail.positions) and all(cut.positions[s] >= o for s, o in tail.positions.items())


def checked_named_streams(options: ReadOptions, keys: list[StreamKey]) -> list[StreamKey]:
    """``keys`` (the streams a query of several starts with), after checking that every stream a per-stream time
    names is among them. Raises SegstoreOptionError naming the option."""
    for position in (options.starting, options.ending):
        if position is None or position.by_stream is None:
            continue
        missing = [f"{s}/{n}" for s, n, _ in position.by_stream.times_ms if (s, n) not in keys]
        if missing:
            raise SegstoreOptionError(position.option, f"stream(s) {', '.join(missing)} do not exist")
    return keys
