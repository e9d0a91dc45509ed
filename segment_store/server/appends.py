"""Appends of one connection (Pravega's ``AppendProcessor``): writer sessions, ordering, dedup, acks.

A writer sets up appends to a segment (``SetupAppend``) and learns the last event number the
segment stored for it (its writer-id attribute); it then pipelines appends, each carrying the
number of its last event. The server chains them: append *n* is stored with the condition
"writer attribute == number of the previous append" and sets it to *n*, so a resent append the
segment already has fails its condition instead of being stored twice (the client gets
``InvalidEventNumber`` and the connection closes, as in Java). Acknowledgements are cumulative
``DataAppended`` replies sent in order, each naming the previous acknowledged number and the
segment's length after the append.

Appends are submitted to their containers strictly in arrival order, so one writer's appends reach the
durable log in order: at once when nothing waits before them (the common case: no event-loop turn between
the socket and the durable log), else by the connection's pump, which waits while a container throttles.
A writer's first failure is answered once (``SegmentIsSealed``, ``NoSuchSegment``, ``WrongHost``, ...); its
later pipelined appends fail silently until it sets up again.

Replies of one session (writer and segment) go out in the order of its appends, as Pravega's
protocol requires: an ack for event *n* precedes any reply about a later event. Some failures are
known at once (a sealed or missing segment, a wrong host, a bad offset, an offline container) while
earlier appends still wait for Tier-1; a client that saw ``SegmentIsSealed`` first would take those
stored events for lost and write them again elsewhere. So each append takes a turn in its session
when the pump handles it, and its reply (an ack, a failure, or nothing) is sent only once every
earlier turn's reply is; the pipeline itself is not held up. "First failure" means first in append
order.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from segment_store.containers.registry import ContainerRegistry
from segment_store.containers.segment_container import SegmentContainer
from segment_store.logs.operations import AppendOperation
from segment_store.protocol import (
    Append,
    AppendSetup,
    ConditionalCheckFailed,
    DataAppended,
    InvalidEventNumber,
    SetupAppend,
    frame_data_appended,
)
from segment_store.protocol.registry import WireCommand
from segment_store.server.replies import error_reply
from segstore_shared.contracts import (
    EVENT_COUNT,
    NULL_ATTRIBUTE_VALUE,
    AttributeUpdate,
    AttributeUpdateType,
    BadAttributeUpdateError,
    BadOffsetError,
    ContainerNotOwnedError,
)

log = logging.getLogger(__name__)


@dataclass(slots=True, eq=False)
class _Turn:
    """An append's place in its session's reply order; ``reply`` is set once its outcome is known."""

    reply: Callable[[], None] | None = None


@dataclass(slots=True)
class WriterState:
    last_submitted: int  # event number of the latest append handed to the container
    last_acked: int
    writer_key: bytes  # the writer id's 16 bytes, for its acks' frames
    failed: bool = False  # a failure was answered (in append order); later ones stay silent
    turns: deque[_Turn] = field(default_factory=deque)  # appends not answered yet, in append order


class ConnectionAppends:
    """The append side of one connection. ``send`` writes a reply; ``send_frame`` writes an encoded one
    (acknowledgements: one per append, framed directly); ``close`` drops the connection;
    ``bytes_changed(delta)`` reports unacknowledged append bytes for flow control."""

    def __init__(
        self,
        registry: ContainerRegistry,
        send: Callable[[WireCommand], None],
        send_frame: Callable[[bytes], None],
        close: Callable[[], None],
        bytes_changed: Callable[[int], None],
    ) -> None:
        self._registry = registry
        self._send = send
        self._send_frame = send_frame
        self._close = close
        self._bytes_changed = bytes_changed
        self._writers: dict[tuple[str, uuid.UUID], WriterState] = {}
        self._queue: deque[Append] = deque()
        self._wake = asyncio.Event()
        self._pump = asyncio.create_task(self._run(), name="append-pump")

    async def setup(self, command: SetupAppend) -> None:
        try:
            container = self._registry.for_segment(command.segment)
            values = await container.get_attributes(command.segment, [command.writer_id.int])
        except Exception as exc:
            self._reply_error(exc, command.request_id, command.segment)
            return
        last = values[command.writer_id.int]
        self._writers[(command.segment, command.writer_id)] = WriterState(last, last, command.writer_id.bytes)
        self._send(AppendSetup(command.request_id, command.segment, command.writer_id, last))

    def append(self, append: Append) -> None:
        """Take an assembled append (in wire order) and submit it, in this order: at once if nothing waits
        before it and its container takes appends now (one event-loop turn less per append block), else the pump
        does (it waits while the container throttles, and answers a container that is not here)."""
        self._bytes_changed(len(append.data))
        if not self._queue:
            try:
                container = self._registry.for_segment(append.segment)
            except ContainerNotOwnedError:
                pass  # the pump answers WrongHost, in order
            else:
                if not container.throttled:
                    self._submit(container, append)
                    return
        self._queue.append(append)
        self._wake.set()

    async def _run(self) -> None:
        while True:
            if not self._queue:
                self._wake.clear()
                await self._wake.wait()
                continue
            append = self._queue[0]
            try:
                container = self._registry.for_segment(append.segment)
                if container.throttled:
                    await container.wait_for_room()
            except Exception as exc:
                self._queue.popleft()
                state = self._writers.get((append.segment, append.writer_id))
                if state is None:  # no session: nothing to keep the reply in order with
                    self._bytes_changed(-len(append.data))
                    self._reply_error(exc, append.request_id, append.segment, append.event_number)
                else:
                    self._failed(append, state, self._turn(state), state.last_submitted, exc)
                continue
            self._queue.popleft()
            self._submit(container, append)

    def _submit(self, container: SegmentContainer, append: Append) -> None:
        state = self._writers.get((append.segment, append.writer_id))
        if state is None:  # the assembler refuses appends without SetupAppend; a stale writer after close
            self._bytes_changed(-len(append.data))
            return
        previous = state.last_submitted
        if previous != NULL_ATTRIBUTE_VALUE and append.event_number <= previous:
            self._duplicate(container, append, state)
            return
        state.last_submitted = append.event_number
        turn = self._turn(state)
        updates = (
            AttributeUpdate(append.writer_id.int, AttributeUpdateType.REPLACE_IF_EQUALS, append.event_number, previous),
            AttributeUpdate(EVENT_COUNT, AttributeUpdateType.ACCUMULATE, append.event_count),
        )

        def done(op: AppendOperation | None, error: BaseException | None) -> None:
            if error is not None:
                self._failed(append, state, turn, previous, error)
            else:
                assert op is not None
                self._completed(append, state, turn, op.offset + len(append.data))

        try:
            container.submit_append(append.segment, append.data, done, updates, append.expected_offset)
        except Exception as exc:
            self._failed(append, state, turn, previous, exc)

    @staticmethod
    def _turn(state: WriterState) -> _Turn:
        turn = _Turn()
        state.turns.append(turn)
        return turn

    @staticmethod
    def _answer(state: WriterState, turn: _Turn, reply: Callable[[], None]) -> None:
        """Set ``turn``'s reply, then send the session's replies whose earlier turns are all answered."""
        turn.reply = reply
        turns = state.turns
        while turns and (ready := turns[0].reply) is not None:
            turns.popleft()
            ready()

    def _duplicate(self, container: SegmentContainer, append: Append, state: WriterState) -> None:
        """A resent append: equal to the last stored event number means the segment has it (acknowledge,
        store nothing); lower means the writer went backwards (``InvalidEventNumber``, close)."""
        self._bytes_changed(-len(append.data))
        turn = self._turn(state)
        if append.event_number < state.last_submitted or append.is_conditional:
            self._answer(state, turn, lambda: self._failed_duplicate(append))
            return
        self._answer(state, turn, lambda: self._acknowledge_duplicate(container, append, state))

    def _acknowledge_duplicate(self, container: SegmentContainer, append: Append, state: WriterState) -> None:
        """In turn: the earlier append with this number was acknowledged (now or before a new setup), or
        it failed and the segment does not have the events (the writer was told, or is told now)."""
        if state.last_acked < append.event_number:
            if not state.failed:
                state.failed = True
                self._failed_duplicate(append)
            return
        length = container.metadata.get_by_name(append.segment)
        end = length.length if length is not None else -1
        self._send(DataAppended(append.writer_id, append.event_number, state.last_acked, append.request_id, end))

    def _failed_duplicate(self, append: Append) -> None:
        log.warning(
            "writer %s on %s: event number %s is below the stored one; closing",
            append.writer_id,
            append.segment,
            append.event_number,
        )
        self._send(InvalidEventNumber(append.writer_id, append.request_id, "", append.event_number))
        self._close()

    def _completed(self, append: Append, state: WriterState, turn: _Turn, end: int) -> None:
        """``append`` is durable; the segment ends at ``end`` after it."""
        self._bytes_changed(-len(append.data))
        turns = state.turns
        if turns[0] is not turn:  # an earlier append is not answered yet: this ack waits for it
            self._answer(state, turn, lambda: self._acknowledge(append, state, end))
            return
        turns.popleft()  # the common case: acknowledge now, then whatever later turns were answered meanwhile
        self._acknowledge(append, state, end)
        while turns and (ready := turns[0].reply) is not None:
            turns.popleft()
            ready()

    def _acknowledge(self, append: Append, state: WriterState, end: int) -> None:
        if state.last_acked < append.event_number:
            self._send_frame(
                frame_data_appended(state.writer_key, append.event_number, state.last_acked, append.request_id, end)
            )
            state.last_acked = append.event_number

    def _failed(self, append: Append, state: WriterState, turn: _Turn, previous: int, exc: BaseException) -> None:
        """``append`` was not stored; ``previous`` is the event number the session had submitted before it."""
        self._bytes_changed(-len(append.data))
        if append.is_conditional and isinstance(exc, BadOffsetError):
            if state.last_submitted == append.event_number:
                state.last_submitted = previous  # nothing stored: the chain continues from the append before
            reply = ConditionalCheckFailed(append.writer_id, append.event_number, append.request_id)
            self._answer(state, turn, lambda: self._send(reply))
            return
        self._answer(state, turn, lambda: self._refused(append, state, exc))

    def _refused(self, append: Append, state: WriterState, exc: BaseException) -> None:
        if state.failed:
            return  # the writer was told already; later pipelined appends fail with it
        state.failed = True
        if isinstance(exc, BadAttributeUpdateError):
            self._failed_duplicate(append)
            return
        self._reply_error(exc, append.request_id, append.segment, append.event_number)

    def _reply_error(self, exc: BaseException, request_id: int, segment: str, offset: int = -1) -> None:
        reply = error_reply(exc, request_id, segment, offset)
        if reply is None:
            self._close()
        else:
            self._send(reply)

    def close(self) -> None:
        self._pump.cancel()
        for append in self._queue:
            self._bytes_changed(-len(append.data))
        self._queue.clear()
