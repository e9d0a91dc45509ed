"""Append-path commands: writer setup, append framing (blocks, events, padding), and their replies.

How Java's ``CommandEncoder`` frames appends (decoded back into ``Append`` values by
``segment_store.protocol.assembler.AppendAssembler``):

* ``AppendBlock``'s declared length covers its 16-byte writer id *and* the block of data after it:
  whole ``Event`` frames, then, if the block ends mid-event, a ``PartialEvent`` frame holding the first
  part of that event, or a ``Padding`` frame if the block was cut short. A frame decoder therefore sees
  the block as one command whose ``data`` is all of it.
* ``AppendBlockEnd`` follows immediately: ``size_of_whole_events`` says how much of the block's data
  is whole events, ``data`` carries the rest of the partial event (or, from the Rust client, which
  sends no ``AppendBlock``, all the events), ``num_events``/``last_event_number`` describe the lot.
* ``ConditionalAppend`` carries one event (with its own type/length header) and an expected offset;
  ``ConditionalBlockEnd`` carries already-framed event data and an expected offset.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass
from typing import Any, Self

from segment_store.protocol.constants import EVENT_TYPE_CODE, HEADER
from segment_store.protocol.errors import ProtocolError
from segment_store.protocol.registry import WireCommand, register
from segment_store.protocol.types import BLOB, I32, I64, REST, UTF, UUID, Buffer, Kind, Opt, short_read


@register
@dataclass(frozen=True, slots=True)
class Event(WireCommand):
    """One event: as a frame, type 0 + length + payload (the framing stored in segment data).

    Java never sends it as a top-level frame (only inside blocks and ``ConditionalAppend``);
    ``AppendAssembler`` rejects a top-level one.
    """

    TYPE_CODE = EVENT_TYPE_CODE
    LAYOUT = (REST,)
    data: bytes


@register
@dataclass(frozen=True, slots=True)
class Padding(WireCommand):
    """``length`` zero bytes that fill the unused end of an append block. Decoding does not check zeros."""

    TYPE_CODE = -1
    length: int

    def write_fields(self, out: list[Buffer]) -> None:
        if self.length < 0:
            raise ProtocolError(f"Padding length {self.length} is negative")
        out.append(bytes(self.length))

    @classmethod
    def read_fields(cls, body: memoryview, pos: int) -> tuple[Self, int]:
        return cls(len(body) - pos), len(body)


@register
@dataclass(frozen=True, slots=True)
class PartialEvent(WireCommand):
    """The first part of an event that straddles the end of an append block (raw bytes, no header)."""

    TYPE_CODE = -2
    LAYOUT = (REST,)
    data: bytes


@register
@dataclass(frozen=True, slots=True)
class SetupAppend(WireCommand):
    """Client announces ``writer_id`` will append to ``segment``; answered by ``AppendSetup``."""

    TYPE_CODE = 1
    LAYOUT = (I64, UUID, UTF, UTF)
    request_id: int
    writer_id: uuid.UUID
    segment: str
    delegation_token: str


@register
@dataclass(frozen=True, slots=True)
class AppendSetup(WireCommand):
    """Reply to ``SetupAppend``: the last event number the segment has stored for this writer."""

    TYPE_CODE = 2
    LAYOUT = (I64, UTF, UUID, I64)
    request_id: int
    segment: str
    writer_id: uuid.UUID
    last_event_number: int


@register
@dataclass(frozen=True, slots=True)
class AppendBlock(WireCommand):
    """Start of an append block; ``data`` is the whole block (see the module docstring)."""

    TYPE_CODE = 3
    LAYOUT = (UUID, REST)
    writer_id: uuid.UUID
    data: bytes


@register
@dataclass(frozen=True, slots=True)
class AppendBlockEnd(WireCommand):
    """End of an append block. ``request_id`` is optional on the wire (older peers): -1 if absent."""

    TYPE_CODE = 4
    LAYOUT = (UUID, I32, BLOB, I32, I64, Opt(I64, -1, 8))
    writer_id: uuid.UUID
    size_of_whole_events: int
    data: bytes
    num_events: int
    last_event_number: int
    request_id: int


class _EmbeddedEvent(Kind):
    """An ``Event`` written with its own type/length header inside another command."""

    __slots__ = ()

    def read(self, body: memoryview, pos: int) -> tuple[Event, int]:
        if pos + 8 > len(body):
            raise short_read(8, pos, len(body))
        code, length = HEADER.unpack_from(body, pos)
        if code != EVENT_TYPE_CODE:
            raise ProtocolError(f"expected an Event (type 0) but found type code {code}")
        start = pos + 8
        if length < 0 or length > len(body) - start:
            raise ProtocolError(f"event length {length} does not fit in the {len(body) - start} bytes left")
        return Event(bytes(body[start : start + length])), start + length

    def write(self, value: Any, out: list[Buffer]) -> None:
        out.append(HEADER.pack(EVENT_TYPE_CODE, len(value.data)))
        out.append(value.data)


EMBEDDED_EVENT = _EmbeddedEvent("event", 8)


@register
@dataclass(frozen=True, slots=True)
class ConditionalAppend(WireCommand):
    """One event, appended only if the segment length is ``expected_offset``; ``request_id`` optional (-1)."""

    TYPE_CODE = 5
    LAYOUT = (UUID, I64, I64, EMBEDDED_EVENT, Opt(I64, -1, 8))
    writer_id: uuid.UUID
    event_number: int
    expected_offset: int
    event: Event
    request_id: int


@register
@dataclass(frozen=True, slots=True)
class ConditionalBlockEnd(WireCommand):
    """Event-framed ``data`` appended only if the segment length equals ``expected_offset``."""

    TYPE_CODE = 89
    LAYOUT = (UUID, I64, I64, BLOB, I64)
    writer_id: uuid.UUID
    event_number: int
    expected_offset: int
    data: bytes
    request_id: int


@register
@dataclass(frozen=True, slots=True)
class DataAppended(WireCommand):
    """Ack of appends up to ``event_number``. The last three fields are optional on the wire (-1)."""

    TYPE_CODE = 7
    LAYOUT = (UUID, I64, Opt(I64, -1, 8), Opt(I64, -1, 8), Opt(I64, -1, 8))
    writer_id: uuid.UUID
    event_number: int
    previous_event_number: int
    request_id: int
    current_segment_write_offset: int


DATA_APPENDED_FRAME = struct.Struct(">ii16sqqqq")
"""A whole ``DataAppended`` frame with every field: the header (type code, payload length), then the writer
id's 16 bytes and the four numbers. The acknowledgement path packs (server) and unpacks (client) it directly."""
_DATA_APPENDED_LENGTH = DATA_APPENDED_FRAME.size - HEADER.size


def frame_data_appended(
    writer_id: bytes, event_number: int, previous_event_number: int, request_id: int, write_offset: int
) -> bytes:
    """The frame :func:`~segment_store.protocol.codec.encode` gives for ``DataAppended`` with these fields,
    for the writer whose id is ``writer_id`` (its 16 bytes), at a tenth of the cost: one per append acked.

    Raises ProtocolError if a number is out of the signed 64-bit range or the id is not 16 bytes.
    """
    if len(writer_id) != 16:
        raise ProtocolError(f"DataAppended: a writer id is 16 bytes, not {len(writer_id)}")
    try:
        return DATA_APPENDED_FRAME.pack(
            DataAppended.TYPE_CODE, _DATA_APPENDED_LENGTH, writer_id, event_number, previous_event_number,
            request_id, write_offset,
        )  # fmt: skip
    except struct.error as exc:
        raise ProtocolError(f"DataAppended: {exc}") from exc


@register
@dataclass(frozen=True, slots=True)
class ConditionalCheckFailed(WireCommand):
    """A conditional append's expected offset did not match. ``request_id``: -1 if absent."""

    TYPE_CODE = 8
    LAYOUT = (UUID, I64, Opt(I64, -1, 8))
    writer_id: uuid.UUID
    event_number: int
    request_id: int
