"""Append assembly (the role of Java's ``AppendDecoder``) and the client-side append framing helpers.

Server side: :class:`AppendAssembler` turns one connection's decoded commands into :class:`Append`
values. Two shapes of unconditional append reach it:

* Java client: ``AppendBlock`` (its data = whole events, then a ``PartialEvent`` or ``Padding`` frame if
  the block was not filled exactly) immediately followed by ``AppendBlockEnd`` (the rest of the partial
  event). The append's data is whole events + partial event + block end data, which is again a run of
  whole events.
* Rust client: ``AppendBlockEnd`` alone, all events in its data (``size_of_whole_events`` unused).

Client side: :func:`build_append_block_end` / :func:`encode_append_batch` build what the Rust client
sends; :func:`encode_java_append_block` frames a batch the way Java's ``CommandEncoder`` does with a
fixed block size (used to test the server against Java-shaped input).
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from segment_store.protocol.codec import encode
from segment_store.protocol.commands.appends import (
    AppendBlock,
    AppendBlockEnd,
    ConditionalAppend,
    ConditionalBlockEnd,
    Event,
    Padding,
    PartialEvent,
    SetupAppend,
)
from segment_store.protocol.constants import HEADER, HEADER_SIZE, MAX_FRAME_PAYLOAD
from segment_store.protocol.errors import ProtocolError
from segment_store.protocol.events import encode_events
from segment_store.protocol.registry import WireCommand
from segment_store.protocol.types import Buffer


@dataclass(frozen=True, slots=True)
class Append:
    """Event data a writer appends to a segment, as assembled from one or more frames.

    ``data`` is a run of whole, Event-framed events (what the segment stores); ``event_number`` is the
    number of the last of them, ``event_count`` how many there are as the client declared.
    ``expected_offset`` is set for conditional appends (the segment length required), else None.
    """

    segment: str
    writer_id: uuid.UUID
    event_number: int
    event_count: int
    data: bytes | memoryview
    expected_offset: int | None
    request_id: int

    @property
    def is_conditional(self) -> bool:
        """True for ``ConditionalAppend``/``ConditionalBlockEnd`` appends."""
        return self.expected_offset is not None


@dataclass(slots=True)
class _Writer:
    segment: str
    last_event_number: int = 0


class AppendAssembler:
    """Sans-I/O state machine of one connection's append frames, fed decoded commands in wire order.

    :meth:`process` returns, for each command: an :class:`Append` for ``AppendBlockEnd``,
    ``ConditionalAppend`` and ``ConditionalBlockEnd``; None for ``AppendBlock`` (held until its end)
    and a stand-alone ``Padding``; the command itself for ``SetupAppend`` (after recording the writer)
    and for every other command. Appends come out in the order their last frame arrived.

    Raises ProtocolError (the connection must close, as Java's ``InvalidMessageException``) for: any
    command other than ``AppendBlockEnd`` after an ``AppendBlock``; append frames of a writer with no
    ``SetupAppend`` on this connection; a block end whose writer differs from its block's; a
    non-positive event count; a last event number below the writer's previous one (equal is allowed, as
    in Java); a ``size_of_whole_events`` outside the block; a block tail that is not exactly one
    ``PartialEvent`` or ``Padding`` frame (Java tolerates trailing garbage after it; we do not); data in
    a block end after ``Padding`` or after a block that ends on an event boundary (Java drops it); a
    top-level ``Event`` or ``PartialEvent``. After an error the assembler keeps no block; the caller is
    expected to drop the connection. A writer's initial last event number is 0, as in Java.
    """

    __slots__ = ("_block", "_writers")

    def __init__(self) -> None:
        self._writers: dict[uuid.UUID, _Writer] = {}
        self._block: AppendBlock | None = None

    @property
    def block_open(self) -> bool:
        """True between an ``AppendBlock`` and its ``AppendBlockEnd``."""
        return self._block is not None

    def writer_segment(self, writer_id: uuid.UUID) -> str | None:
        """The segment ``writer_id`` was set up for on this connection, or None."""
        writer = self._writers.get(writer_id)
        return None if writer is None else writer.segment

    def process(self, command: WireCommand) -> WireCommand | Append | None:
        """Consume one decoded command; see the class docstring for results and errors."""
        try:
            return self._process(command)
        except ProtocolError:
            self._block = None
            raise

    def _process(self, command: WireCommand) -> WireCommand | Append | None:
        if self._block is not None and not isinstance(command, AppendBlockEnd):
            raise ProtocolError(f"unexpected {type(command).__name__} following an AppendBlock")
        if isinstance(command, AppendBlockEnd):
            return self._block_end(command)
        if isinstance(command, AppendBlock):
            self._writer(command.writer_id)
            self._block = command
            return None
        if isinstance(command, SetupAppend):
            self._writers[command.writer_id] = _Writer(command.segment)
            return command
        if isinstance(command, ConditionalAppend):
            writer = self._advance(command.writer_id, command.event_number)
            data = HEADER.pack(Event.TYPE_CODE, len(command.event.data)) + command.event.data
            return Append(
                writer.segment, command.writer_id, command.event_number, 1, data,
                command.expected_offset, command.request_id,
            )  # fmt: skip
        if isinstance(command, ConditionalBlockEnd):
            writer = self._advance(command.writer_id, command.event_number)
            return Append(
                writer.segment, command.writer_id, command.event_number, 1, command.data,
                command.expected_offset, command.request_id,
            )  # fmt: skip
        if isinstance(command, Padding):
            return None
        if isinstance(command, Event | PartialEvent):
            raise ProtocolError(f"{type(command).__name__} outside an append block")
        return command

    def _writer(self, writer_id: uuid.UUID) -> _Writer:
        writer = self._writers.get(writer_id)
        if writer is None:
            raise ProtocolError(f"append frame for writer {writer_id} before its SetupAppend")
        return writer

    def _advance(self, writer_id: uuid.UUID, event_number: int) -> _Writer:
        writer = self._writer(writer_id)
        if event_number < writer.last_event_number:
            raise ProtocolError(
                f"event number went backwards for writer {writer_id} on {writer.segment}: "
                f"{event_number} after {writer.last_event_number}"
            )
        writer.last_event_number = event_number
        return writer

    def _block_end(self, end: AppendBlockEnd) -> Append:
        writer_id = end.writer_id
        self._writer(writer_id)
        if end.num_events <= 0:
            raise ProtocolError(f"invalid number of events in block: {end.num_events}")
        block, self._block = self._block, None
        data: bytes | memoryview = end.data
        if block is not None:
            if block.writer_id != writer_id:
                raise ProtocolError(
                    f"AppendBlock of writer {block.writer_id} ended by AppendBlockEnd of writer {writer_id}"
                )
            data = _join_block(block.data, end)
        writer = self._advance(writer_id, end.last_event_number)
        return Append(writer.segment, writer_id, end.last_event_number, end.num_events, data, None, end.request_id)


def _join_block(block_data: bytes, end: AppendBlockEnd) -> bytes | memoryview:
    whole = end.size_of_whole_events
    if whole < 0 or whole > len(block_data):
        raise ProtocolError(f"invalid size_of_whole_events {whole} for a block of {len(block_data)} bytes")
    if whole == len(block_data):
        if end.data:  # Java would silently drop these bytes; no Java encoder path sends them
            raise ProtocolError("AppendBlockEnd carries data after a block that ends on an event boundary")
        return block_data
    view = memoryview(block_data)
    tail = view[whole:]
    if len(tail) < HEADER_SIZE:
        raise ProtocolError(f"{len(tail)} byte(s) after the whole events of a block are not a frame")
    type_code, length = HEADER.unpack_from(tail, 0)
    if length != len(tail) - HEADER_SIZE:
        raise ProtocolError(f"block tail frame declares {length} bytes but {len(tail) - HEADER_SIZE} follow")
    if type_code == Padding.TYPE_CODE:
        if end.data:
            raise ProtocolError("AppendBlockEnd carries data after a padded block")
        return view[:whole]
    if type_code != PartialEvent.TYPE_CODE:
        raise ProtocolError(
            f"found type code {type_code} at the end of an append block; expected PartialEvent or Padding"
        )
    return b"".join((view[:whole], tail[HEADER_SIZE:], end.data))


# --------------------------------------------------------------------------------------------------
# Client side


def build_append_block_end(
    writer_id: uuid.UUID, events: Sequence[Buffer], last_event_number: int, request_id: int
) -> AppendBlockEnd:
    """The single ``AppendBlockEnd`` the Rust client sends for a batch: all events framed in its data.

    Raises ProtocolError if the batch is empty or the frame would exceed 16 MiB - 1 bytes in total
    (Java's netty decoder counts the 8-byte header against that limit).
    """
    if not events:
        raise ProtocolError("an append batch needs at least one event")
    data = encode_events(events)
    # 44 bytes of other fields; keep the whole frame (header included) within Java's netty frame limit.
    if len(data) > MAX_FRAME_PAYLOAD - HEADER_SIZE - 44:
        raise ProtocolError(f"{len(data)} bytes of events do not fit in one AppendBlockEnd frame")
    return AppendBlockEnd(writer_id, len(data), data, len(events), last_event_number, request_id)


def encode_append_batch(
    writer_id: uuid.UUID, events: Sequence[Buffer], last_event_number: int, request_id: int
) -> bytes:
    """The frame bytes of :func:`build_append_block_end`. Raises ProtocolError like it."""
    return encode(build_append_block_end(writer_id, events, last_event_number, request_id))


_BLOCK_END_HEAD = struct.Struct(">ii16sii")  # frame header, writer id, sizeOfWholeEvents, data length
_BLOCK_END_TAIL = struct.Struct(">iqq")  # numEvents, lastEventNumber, requestId
_BLOCK_END_FIELDS = 44  # the payload besides the events


def frame_append_block_end(
    writer_id: uuid.UUID, parts: Sequence[Buffer], size: int, num_events: int, last_event_number: int, request_id: int
) -> bytes:
    """The bytes of ``encode(AppendBlockEnd(writer_id, size, b"".join(parts), num_events, last, request_id))``
    in one copy of ``parts`` (framed events, ``size`` bytes in all).

    Raises ProtocolError if the frame would exceed 16 MiB - 1 bytes or a number is out of its field's range.
    """
    head, tail = append_block_end_ends(writer_id.bytes, size, num_events, last_event_number, request_id)
    return b"".join((head, *parts, tail))


def append_block_end_ends(
    writer_id: bytes, size: int, num_events: int, last_event_number: int, request_id: int
) -> tuple[bytes, bytes]:
    """What goes before and after ``size`` bytes of framed events in an ``AppendBlockEnd`` frame of the writer
    whose id is ``writer_id`` (its 16 bytes): for the writer's hot path, which hands the frame to its
    connection in pieces (one copy of the events in all, when the connection writes them out).

    Raises ProtocolError if the frame would exceed 16 MiB - 1 bytes or a number is out of its field's range.
    """
    if size > MAX_FRAME_PAYLOAD - HEADER_SIZE - _BLOCK_END_FIELDS:
        raise ProtocolError(f"{size} bytes of events do not fit in one AppendBlockEnd frame")
    try:
        head = _BLOCK_END_HEAD.pack(AppendBlockEnd.TYPE_CODE, _BLOCK_END_FIELDS + size, writer_id, size, size)
        tail = _BLOCK_END_TAIL.pack(num_events, last_event_number, request_id)
    except struct.error as exc:
        raise ProtocolError(f"AppendBlockEnd: {exc}") from exc
    return head, tail


def append_block_header(writer_id: uuid.UUID, block_size: int) -> bytes:
    """An ``AppendBlock`` header as ``CommandEncoder`` writes it: its length covers the writer id and the
    ``block_size`` bytes the caller writes right after it. Raises ProtocolError if that exceeds a frame."""
    if not 0 <= block_size <= MAX_FRAME_PAYLOAD - 16:
        raise ProtocolError(f"block size {block_size} does not fit in a frame")
    return HEADER.pack(AppendBlock.TYPE_CODE, 16 + block_size) + writer_id.bytes


def encode_java_append_block(
    writer_id: uuid.UUID, events: Sequence[Buffer], block_size: int, last_event_number: int, request_id: int
) -> bytes:
    """Frame a batch as Java's ``CommandEncoder`` does with a fixed block size.

    The block reserves ``block_size`` bytes for events plus 8 for a tail frame header. Whole events go
    in the block while they fit; the event crossing the boundary is split into a ``PartialEvent`` (its
    first part fills the block) and the ``AppendBlockEnd`` data (its rest, plus any later events). If the
    events end inside the block, the rest is ``Padding``. Raises ProtocolError for an empty batch.
    """
    if not events:
        raise ProtocolError("an append batch needs at least one event")
    data = encode_events(events)
    whole = 0
    for payload in events:
        size = HEADER_SIZE + len(payload)
        if whole + size > block_size:
            break
        whole += size
    if whole == len(data):
        tail = HEADER.pack(Padding.TYPE_CODE, block_size - whole) + bytes(block_size - whole)
        rest = b""
    else:
        tail = HEADER.pack(PartialEvent.TYPE_CODE, block_size - whole) + data[whole:block_size]
        rest = data[block_size:]
    header = append_block_header(writer_id, block_size + HEADER_SIZE)
    end = AppendBlockEnd(writer_id, whole, rest, len(events), last_event_number, request_id)
    return header + data[:whole] + tail + encode(end)
