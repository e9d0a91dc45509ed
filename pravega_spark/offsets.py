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
-1 means "the segment's current end"). :func:`offset_to_stream_cut` and :func:`stream_cut_to_offset` turn
states into :class:`~controller_client.model.StreamCut` values and back; a state with ``pending`` becomes the
cut with the finished predecessors at their ends. :func:`head_cut`, :func:`tail_cut` and
:func:`cut_at_timestamp` look cuts up; :class:`StreamConnection` is the blocking connection they use.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Coroutine, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from controller_client.controller.api import ControllerClient, ControllerClientConfig
from controller_client.errors import (
    ControllerAuthenticationError,
    ControllerError,
    ControllerPermissionError,
    ControllerTlsError,
    StreamNotFoundError,
)
from controller_client.model import StreamCut, qualified_segment_name
from controller_client.stream_manager import StreamManager, StreamManagerConfig
from pravega_spark.errors import OffsetFormatError, SegstoreOptionError, StreamCutTextError
from pravega_spark.options.common import StreamTarget
from pravega_spark.options.stream_cut_text import decode_text
from segment_store.client import (
    ClientClosedError,
    ClientConfig,
    ConnectionLostError,
    NoSuchSegmentError,
    OperationUnsupportedError,
    ReaderConfig,
    SegmentIsTruncatedError,
    SegmentStatus,
)
from segstore_shared.auth.tls import TlsConfigError
from segstore_shared.loop_thread import LoopThread

_log = logging.getLogger(__name__)
_T = TypeVar("_T")
MIB = 1024 * 1024


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
        cls, offset: object, scope: str | None = None, stream: str | None = None, *, allow_end: bool = False
    ) -> ReadState:
        """Parse a Spark offset or a stream-cut JSON object. ``scope``/``stream``: the expected stream (used
        when the object leaves them out). ``allow_end``: accept offset -1 (the segment's end, resolved later).
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
        if not isinstance(raw_positions, Mapping) or not raw_positions:
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


def offset_to_stream_cut(offset: Mapping[str, Any] | str) -> StreamCut:
    """A query's offset (the dict Spark keeps in its offset log, or its JSON text) as a stream cut."""
    state = ReadState.from_json(offset) if isinstance(offset, str) else ReadState.from_offset(offset)
    return state.to_stream_cut()


def stream_cut_to_offset(cut: StreamCut) -> dict[str, Any]:
    """A stream cut as the offset JSON dict this source uses (and accepts in startingOffsets/endingOffsets)."""
    return ReadState.from_stream_cut(cut).to_offset()


def parse_cut_option(option: str, text: str, scope: str, stream: str) -> ReadState:
    """The value of a stream-cut option: JSON, or the Base64 text of the Pravega client's ``StreamCut.asText()``
    (:mod:`pravega_spark.options.stream_cut_text`); errors name the option."""
    try:
        if text.lstrip()[:1] in ("{", "[", '"'):  # JSON (no Base64 text starts so)
            return ReadState.from_json(text, scope, stream)
        try:
            found_scope, found_stream, positions = decode_text(text)
        except StreamCutTextError as error:
            raise OffsetFormatError(f"not JSON, and not a Pravega Base64 stream cut: {error}") from None
        cut = {"scope": found_scope, "stream": found_stream, "positions": {str(s): o for s, o in positions.items()}}
        return ReadState.from_offset(cut, scope, stream, allow_end=True)
    except OffsetFormatError as error:
        raise SegstoreOptionError(
            option,
            f"not a stream cut of {scope}/{stream} ({error}); expected 'earliest', 'latest', 'unbounded', JSON like "
            '{"positions": {"<segment id>": <offset>}} or the Base64 text of a Pravega StreamCut (asText())',
        ) from None


# ---- the blocking connection -------------------------------------------------------------------------------
class StreamConnection:
    """A controller client and a segment client on a private event loop thread, with blocking calls.

    Raises :class:`SegstoreOptionError` naming option ``controller`` when the controller cannot be reached
    within ``timeout_s``. ``close()`` stops everything (the loop thread is a daemon: a process that exits
    without closing leaks nothing).
    """

    def __init__(
        self,
        controller_uri: str,
        timeout_s: float = 30.0,
        reader: ReaderConfig | None = None,
        trust_store: str | None = None,
        credentials: StreamTarget | None = None,
    ) -> None:
        """``credentials``: the target whose trust store, user and password or token to use (instead of
        ``trust_store`` alone)."""
        self.controller_uri = controller_uri
        self._runner = LoopThread("segstore-spark", ClientClosedError)
        timeouts: dict[str, Any] = {"rpc_timeout_s": max(timeout_s, 1.0), "retry_timeout_s": timeout_s}
        if credentials is not None:
            config = credentials.controller_config(**timeouts)
        else:
            config = ControllerClientConfig(trust_store=trust_store, **timeouts)
        self._token_auth = config.token is not None
        self._no_ingest_times = False  # the segment store turned out not to know ReadIngestTimes
        try:
            self.controller: ControllerClient = self.run(
                ControllerClient.connect(controller_uri, config, wait_ready=True)
            )
        except TlsConfigError as error:
            self._runner.stop()
            raise SegstoreOptionError("trustStore", f"{error.path}: {error.problem}") from None
        except ControllerTlsError as error:
            self._runner.stop()
            raise SegstoreOptionError(
                "trustStore", f"TLS to the controller at {controller_uri} failed: {error}"
            ) from None
        except ControllerAuthenticationError as error:
            self._runner.stop()
            option = "token" if config.token is not None else "password"
            raise SegstoreOptionError(option, f"the controller at {controller_uri} refused it ({error})") from None
        except ControllerError as error:
            self._runner.stop()
            raise SegstoreOptionError(
                "controller", f"cannot reach the controller at {controller_uri} within {timeout_s:g}s ({error})"
            ) from None
        except BaseException:
            self._runner.stop()
            raise
        client = ClientConfig(reader=reader or ReaderConfig(read_request_bytes=MIB, prefetch_bytes=8 * MIB))
        self.manager: StreamManager = self.run(_make_manager(self.controller, StreamManagerConfig(client=client)))

    def delegation_token(self, scope: str, stream: str, write: bool) -> str:
        """A token for the executors on the stream (READ, or READ_UPDATE if ``write``)."""
        return self.run(self.controller.get_delegation_token(scope, stream, write))

    def run(self, coroutine: Coroutine[Any, Any, _T], timeout_s: float | None = None) -> _T:
        return self._runner.run(coroutine, timeout_s)

    def close(self) -> None:
        """Close the clients and stop the loop thread. Idempotent."""
        if self._runner.loop.is_closed():
            return
        try:
            self.run(self.manager.close())
            self.run(self.controller.close())
        finally:
            self._runner.stop()

    def __enter__(self) -> StreamConnection:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ---- lookups ------------------------------------------------------------------------------------------
    def require_stream(self, scope: str, stream: str) -> None:
        """Raise SegstoreOptionError naming option ``stream`` unless ``scope/stream`` exists (``password`` or
        ``token`` if the controller refuses the credentials, ``username`` if they may not read the stream)."""
        try:
            exists = self.run(self.manager.stream_exists(scope, stream))
        except ControllerAuthenticationError as error:
            option = "token" if self._token_auth else "password"
            raise SegstoreOptionError(option, f"the controller at {self.controller_uri} refused it ({error})") from None
        except ControllerPermissionError as error:
            option = "token" if self._token_auth else "username"
            raise SegstoreOptionError(option, f"may not read {scope}/{stream}: {error}") from None
        if not exists:
            raise SegstoreOptionError(
                "stream", f"stream {scope}/{stream} does not exist (controller {self.controller_uri})"
            )

    def segment_status(self, scope: str, stream: str, segment_id: int) -> SegmentStatus | None:
        """The segment store's view of a segment; None if the segment no longer exists (truncated away)."""
        try:
            status = self.run(self.manager.segment_info(scope, stream, segment_id))
        except NoSuchSegmentError:
            return None
        return status if status.exists and not status.deleted else None

    def successors(self, scope: str, stream: str, segment_id: int) -> dict[int, list[int]]:
        """Successor id -> predecessor ids (empty while the segment is open, or when the stream is sealed)."""
        found = self.run(self.controller.get_successors(scope, stream, segment_id))
        return {r.segment_id: sorted(preds) for r, preds in sorted(found.items(), key=lambda i: i[0].segment_id)}

    def chunks(self, scope: str, stream: str, segment_id: int, start: int, end: int) -> Iterator[bytes]:
        """The bytes ``[start, end)`` of a segment, as the segment store returns them."""
        name = qualified_segment_name(scope, stream, segment_id)
        reader = self.manager.client.reader(name, start, end)
        try:
            while chunk := self.run(reader.read()):
                yield chunk
        finally:
            self.run(reader.close())

    def event_starts(self, scope: str, stream: str, segment_id: int, targets: Sequence[int]) -> list[int] | None:
        """Per offset of ``targets``, an event start of the segment at or after it (the first one, from a segstore
        segment store; Pravega's ``LocateOffset``, asked for all at once); None (logged) if the segment store does
        not know the command (it answers so, or closes the connection after the client's read retries: the ranges
        are then read whole, which is correct, only not parallel)."""
        name = qualified_segment_name(scope, stream, segment_id)
        client = self.manager.client

        async def locate() -> list[int]:
            return list(await asyncio.gather(*(client.locate_offset(name, t) for t in targets)))

        try:
            return self.run(locate())
        except OperationUnsupportedError:
            _log.warning("%s: the segment store does not know LocateOffset; its ranges are read whole", name)
            return None
        except ConnectionLostError as error:  # a Pravega segment store older than wire version 17 hangs up on it
            _log.warning("%s: LocateOffset lost the connection (%s); its ranges are read whole", name, error)
            return None
        except (SegmentIsTruncatedError, NoSuchSegmentError) as error:  # meanwhile: the read tells (failOnDataLoss)
            _log.info("%s: %s; its ranges are read whole", name, error)
            return None

    def ingest_times(
        self, scope: str, stream: str, segment_id: int, start: int, end: int
    ) -> tuple[int, list[tuple[int, int]]] | None:
        """``(answered_end, runs)``: the ingestion times of the segment's events from ``start`` as ``(offset, ms)``
        runs (segstore's extension ``ReadIngestTimes``; see ``SegmentClient.ingest_times``). None (logged once per
        connection) if the segment store does not know it (a Pravega one hangs up on it): timestamps are then
        null. Raises SegmentIsTruncatedError, NoSuchSegmentError (as a read of the range would)."""
        if self._no_ingest_times:
            return None
        name = qualified_segment_name(scope, stream, segment_id)
        try:
            return self.run(self.manager.client.ingest_times(name, start, end))
        except (OperationUnsupportedError, ConnectionLostError) as error:
            self._no_ingest_times = True
            _log.warning(
                "%s: the segment store does not answer segstore's ReadIngestTimes (%s): the timestamp column "
                "is null for events read through it",
                name,
                error,
            )
            return None

    # the blocking segment calls :func:`pravega_spark.read.tier2_direct.read_range` makes (segment names)
    def get_segment_info(self, segment: str) -> SegmentStatus:
        return self.run(self.manager.client.get_segment_info(segment))

    def list_storage_chunks(self, segment: str) -> list[Any]:
        return self.run(self.manager.client.list_storage_chunks(segment))

    def is_valid_cut(self, cut: StreamCut) -> bool:
        return bool(self.run(self.controller.is_stream_cut_valid(cut)))


async def _make_manager(controller: ControllerClient, config: StreamManagerConfig) -> StreamManager:
    return StreamManager(controller, config=config)


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
    "OffsetFormatError",
    "ReadState",
    "StreamConnection",
    "cut_at_timestamp",
    "head_cut",
    "head_offset",
    "initial_offset",
    "is_initial",
    "offset_to_stream_cut",
    "parse_cut_option",
    "stream_cut_to_offset",
    "tail_cut",
    "tail_offset",
]
