"""Offsets of the ``segstore`` source: stream cuts as Spark offset JSON, and where a stream starts and ends.

A Spark offset of this source is the JSON of a :class:`ReadState`::

    {"scope": "demo", "stream": "events",
     "positions": {"4294967296": 1048576, "4294967297": 0},
     "pending": {"8589934592": {"4294967296": 2097152}}}

* ``positions`` maps a segment id (the 64-bit id, ``creation epoch << 32 | number``, as a decimal string:
  JSON keys are strings) to the byte offset where reading continues; the offset is always an event boundary.
  Keys are written in ascending numeric order, so equal states have equal JSON (Spark compares offsets as
  JSON text).
* ``pending`` (left out when empty) holds the successors that cannot be read yet: a successor created by a
  merge is started only when **all** of its predecessors were read to their sealed end. Each entry maps the
  successor's id to the predecessors already finished, with their end offsets. Once the last predecessor
  finishes, the successor moves to ``positions`` at offset 0 and leaves ``pending``.

How a state moves forward (:mod:`pravega_spark.read.planning`): a segment in ``positions`` that is sealed and
read to its end is *finished*: it leaves ``positions`` and each of its successors (``getSegmentsImmediately
Following``) either starts at offset 0 (all its predecessors finished) or waits in ``pending``. So a state
always says exactly which bytes were consumed: for every key, either a segment and an offset in it, or a
finished predecessor recorded in ``pending``. Nothing is read twice and nothing is skipped across scaling.

A query's *initial offset* (what ``initialOffset`` answers) is where it was asked to start, not looked up yet::

    {"scope": "demo", "stream": "events", "initial": {"kind": "latest", "option": "startingOffsets"}}

Spark asks for it more than once (before it plans the first micro-batch, again when it runs it, and once more
when a query restarts before its first micro-batch committed) and keeps only the first batch's end, so a
start that depends on when it is looked up (``latest``, ``earliest`` after a truncation, a time, a cut with
offset -1) must give the same JSON every time. The first ``latestOffset`` looks it up and answers the read
state found, which becomes the first micro-batch's end and is kept in Spark's offset log; that first
micro-batch reads nothing. A cut that names every offset is its own initial offset (no empty batch).

A plain Pravega stream cut (``positions`` only, no ``pending``) is a valid state, so users pass stream cuts
in the same JSON as ``startingOffsets`` / ``endingOffsets`` (``scope`` and ``stream`` may be left out; offset
-1 means "the segment's current end"; the options are parsed in :mod:`pravega_spark.options.read`).
:func:`offset_to_stream_cut` and :func:`stream_cut_to_offset` turn states into
:class:`~controller_client.model.StreamCut` values and back; a state with ``pending`` becomes the cut with the
finished predecessors at their ends. :func:`head_cut`, :func:`tail_cut` and :func:`cut_at_timestamp` look cuts up
through a :class:`~pravega_spark.connection.StreamConnection` (the blocking connection to the cluster, in its own
module); :func:`head_offset` and :func:`tail_offset` connect for one look-up.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from controller_client.errors import StreamNotFoundError
from controller_client.model import StreamCut
from pravega_spark.connection import StreamConnection
from pravega_spark.errors import OffsetFormatError, SegstoreOptionError
from segment_store.client import NoSuchSegmentError

_log = logging.getLogger(__name__)


INITIAL = "initial"
"""The key of a query's initial offset (see the module docstring)."""


def initial_offset(scope: str, stream: str, start: Mapping[str, Any]) -> dict[str, Any]:
    """A query's initial offset: where it starts (``start``: a JSON-able description), not looked up yet."""
    return {"scope": scope, "stream": stream, INITIAL: dict(start)}


def is_initial(offset: object) -> bool:
    """True if ``offset`` is an initial offset of :func:`initial_offset` (not a read position)."""
    return isinstance(offset, Mapping) and INITIAL in offset


def _segment_key(key: object) -> int:
    try:
        value = int(str(key))
    except ValueError:
        raise OffsetFormatError(f"segment id {key!r} is not an integer") from None
    if not 0 <= value < 2**63:
        raise OffsetFormatError(f"segment id {value} is out of range")
    return value


def _offset_value(value: object, segment: int, allow_end: bool) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise OffsetFormatError(f"offset of segment {segment} must be an integer, got {value!r}")
    if value < (-1 if allow_end else 0):
        raise OffsetFormatError(f"offset {value} of segment {segment} is negative")
    return value


@dataclass(frozen=True, slots=True)
class ReadState:
    """Where a query is in a stream: ``positions`` (segment id -> next offset) and ``pending`` successors
    (successor id -> {finished predecessor id: its end offset}). See the module docstring."""

    scope: str
    stream: str
    positions: Mapping[int, int]
    pending: Mapping[int, Mapping[int, int]] = field(default_factory=dict)

    def to_offset(self) -> dict[str, Any]:
        """The Spark offset (JSON-able dict, keys in ascending segment order)."""
        offset: dict[str, Any] = {
            "scope": self.scope,
            "stream": self.stream,
            "positions": {str(s): self.positions[s] for s in sorted(self.positions)},
        }
        if self.pending:
            offset["pending"] = {
                str(s): {str(p): self.pending[s][p] for p in sorted(self.pending[s])} for s in sorted(self.pending)
            }
        return offset

    def to_json(self) -> str:
        return json.dumps(self.to_offset(), separators=(",", ":"))

    @classmethod
    def from_offset(
        cls,
        offset: object,
        scope: str | None = None,
        stream: str | None = None,
        *,
        allow_end: bool = False,
        allow_empty: bool = False,
    ) -> ReadState:
        """Parse a Spark offset or a stream-cut JSON object. ``scope``/``stream``: the expected stream (used
        when the object leaves them out). ``allow_end``: accept offset -1 (the segment's end, resolved later).
        ``allow_empty``: accept empty ``positions`` (a sealed stream read to its end, in a :class:`StreamsState`).
        Raises OffsetFormatError."""
        if not isinstance(offset, Mapping):
            raise OffsetFormatError(f"expected a JSON object, got {type(offset).__name__}")
        if INITIAL in offset:
            raise OffsetFormatError(
                f"it is a query's initial offset ({offset[INITIAL]!r}: where it was asked to start, looked up at "
                "its first micro-batch), not a position in the stream"
            )
        unknown = set(offset) - {"scope", "stream", "positions", "pending"}
        if unknown:
            raise OffsetFormatError(f"unknown field(s) {sorted(unknown)}")
        got_scope, got_stream = offset.get("scope", scope), offset.get("stream", stream)
        if not isinstance(got_scope, str) or not isinstance(got_stream, str):
            raise OffsetFormatError("'scope' and 'stream' must be strings")
        if scope is not None and stream is not None and (got_scope, got_stream) != (scope, stream):
            raise OffsetFormatError(f"it is a position in {got_scope}/{got_stream}, not in {scope}/{stream}")
        raw_positions = offset.get("positions")
        if not isinstance(raw_positions, Mapping) or not (raw_positions or allow_empty):
            raise OffsetFormatError("'positions' must be a non-empty object {\"<segment id>\": offset}")
        positions: dict[int, int] = {}
        for key, value in raw_positions.items():
            segment = _segment_key(key)
            positions[segment] = _offset_value(value, segment, allow_end)
        pending: dict[int, dict[int, int]] = {}
        raw_pending = offset.get("pending", {})
        if not isinstance(raw_pending, Mapping):
            raise OffsetFormatError("'pending' must be an object")
        for key, finished in raw_pending.items():
            successor = _segment_key(key)
            if not isinstance(finished, Mapping) or not finished:
                raise OffsetFormatError(f'pending successor {successor}: expected {{"<predecessor id>": offset}}')
            pending[successor] = {_segment_key(p): _offset_value(v, successor, False) for p, v in finished.items()}
            if successor in positions:
                raise OffsetFormatError(f"segment {successor} is both in 'positions' and in 'pending'")
        return cls(got_scope, got_stream, dict(sorted(positions.items())), dict(sorted(pending.items())))

    @classmethod
    def from_json(cls, text: str, scope: str | None = None, stream: str | None = None) -> ReadState:
        try:
            value = json.loads(text)
        except json.JSONDecodeError as error:
            raise OffsetFormatError(f"not JSON: {error}") from None
        return cls.from_offset(value, scope, stream, allow_end=True)

    def to_stream_cut(self) -> StreamCut:
        """The stream cut of this state (finished predecessors of pending successors at their ends)."""
        positions = dict(self.positions)
        for finished in self.pending.values():
            for segment, end in finished.items():
                positions.setdefault(segment, end)
        return StreamCut(self.scope, self.stream, dict(sorted(positions.items())))

    @classmethod
    def from_stream_cut(cls, cut: StreamCut) -> ReadState:
        return cls(cut.scope, cut.stream, dict(sorted(cut.positions.items())))


StreamKey = tuple[str, str]
"""``(scope, stream)``."""


@dataclass(frozen=True, slots=True)
class StreamsState:
    """Where a query over several streams is (options ``streams`` / ``streamPattern``): one :class:`ReadState` per
    stream it reads now. Its Spark offset keys each stream's positions by ``"scope/stream"`` (names cannot hold a
    ``/``), in ascending order, so equal states have equal JSON::

        {"streams": {"demo/a": {"positions": {"0": 120}},
                     "demo/b": {"positions": {"4294967296": 0}, "pending": {...}}}}

    A stream's ``positions`` may be empty (a sealed stream read to its end). The offset of a single-stream query
    (a :class:`ReadState`) is accepted as the state of that one stream, so a query started with option ``stream``
    restarts from its checkpoint with option ``streams`` or ``streamPattern``."""

    states: Mapping[StreamKey, ReadState]

    def to_offset(self) -> dict[str, Any]:
        streams: dict[str, Any] = {}
        for key in sorted(self.states):
            offset = self.states[key].to_offset()
            del offset["scope"], offset["stream"]
            streams[f"{key[0]}/{key[1]}"] = offset
        return {"streams": streams}

    def to_json(self) -> str:
        return json.dumps(self.to_offset(), separators=(",", ":"))

    @classmethod
    def from_offset(cls, offset: object) -> StreamsState:
        """Parse this class's offset, or a single stream's (:meth:`ReadState.from_offset`). Raises
        OffsetFormatError."""
        if not isinstance(offset, Mapping):
            raise OffsetFormatError(f"expected a JSON object, got {type(offset).__name__}")
        if "streams" not in offset:
            single = ReadState.from_offset(offset)
            return cls({(single.scope, single.stream): single})
        raw = offset["streams"]
        if set(offset) != {"streams"} or not isinstance(raw, Mapping):
            raise OffsetFormatError('expected {"streams": {"<scope>/<stream>": {"positions": ...}}}')
        states: dict[StreamKey, ReadState] = {}
        for name, value in raw.items():
            parts = str(name).split("/")
            if len(parts) != 2 or not all(parts):
                raise OffsetFormatError(f"stream {name!r} is not 'scope/stream'")
            if not isinstance(value, Mapping) or {"scope", "stream"} & set(value):
                raise OffsetFormatError(f'stream {name}: expected {{"positions": ...}}')
            states[(parts[0], parts[1])] = ReadState.from_offset(value, parts[0], parts[1], allow_empty=True)
        return cls(dict(sorted(states.items())))


def offset_to_stream_cut(offset: Mapping[str, Any] | str) -> StreamCut:
    """A query's offset (the dict Spark keeps in its offset log, or its JSON text) as a stream cut."""
    state = ReadState.from_json(offset) if isinstance(offset, str) else ReadState.from_offset(offset)
    return state.to_stream_cut()


def stream_cut_to_offset(cut: StreamCut) -> dict[str, Any]:
    """A stream cut as the offset JSON dict this source uses (and accepts in startingOffsets/endingOffsets)."""
    return ReadState.from_stream_cut(cut).to_offset()


# ---- cuts ------------------------------------------------------------------------------------------------------
def _with_stream_errors(scope: str, stream: str, call: Any) -> Any:
    try:
        return call()
    except StreamNotFoundError:
        raise SegstoreOptionError("stream", f"stream {scope}/{stream} does not exist") from None


def head_cut(connection: StreamConnection, scope: str, stream: str) -> StreamCut:
    """The first readable position of every key (the stream's truncation point)."""
    return _with_stream_errors(scope, stream, lambda: connection.run(connection.manager.head_cut(scope, stream)))


def tail_cut(connection: StreamConnection, scope: str, stream: str) -> StreamCut:
    """The current segments at their current lengths (everything written by now is before it)."""
    return _with_stream_errors(scope, stream, lambda: connection.run(connection.manager.tail_cut(scope, stream)))


def cut_at_timestamp(connection: StreamConnection, scope: str, stream: str, timestamp_ms: int) -> StreamCut:
    """Per segment live at ``timestamp_ms``, the first event ingested at or after it (the segment's end if
    every event is older), as the segment stores keep ingestion times (``StreamManager.cut_at_time``). If a
    segment live then has been truncated away since, the stream's head (everything readable is newer)."""
    try:
        return _with_stream_errors(
            scope, stream, lambda: connection.run(connection.manager.cut_at_time(scope, stream, timestamp_ms))
        )
    except NoSuchSegmentError:
        _log.warning("%s/%s: segments live at %d were truncated; starting at the head", scope, stream, timestamp_ms)
        return head_cut(connection, scope, stream)


def head_offset(controller_uri: str, scope: str, stream: str) -> dict[str, Any]:
    """The offset JSON dict of the stream's head (connects, looks up, disconnects)."""
    with StreamConnection(controller_uri) as connection:
        return stream_cut_to_offset(head_cut(connection, scope, stream))


def tail_offset(controller_uri: str, scope: str, stream: str) -> dict[str, Any]:
    """The offset JSON dict of the stream's tail (connects, looks up, disconnects)."""
    with StreamConnection(controller_uri) as connection:
        return stream_cut_to_offset(tail_cut(connection, scope, stream))


__all__ = [
    "ReadState",
    "StreamKey",
    "StreamsState",
    "cut_at_timestamp",
    "head_cut",
    "head_offset",
    "initial_offset",
    "is_initial",
    "offset_to_stream_cut",
    "stream_cut_to_offset",
    "tail_cut",
    "tail_offset",
]
