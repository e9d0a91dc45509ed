"""Event framing inside segment data: encoding and the incremental parser."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st
from protocol_wire import event

from segment_store.protocol import (
    EventParser,
    ProtocolError,
    SegmentEvent,
    count_events,
    encode_events,
    encode_events_into,
    frame_event,
    parse_events,
)

pytestmark = pytest.mark.unit

PAYLOADS = [b"", b"a", b"\x00\xff" * 7, "é流".encode()]
GOLDEN = b"".join(event(p) for p in PAYLOADS)


def test_encode_events_with_golden_bytes() -> None:
    assert GOLDEN.startswith(bytes.fromhex("00000000 00000000 00000000 00000001 61"))
    assert encode_events(PAYLOADS) == GOLDEN
    assert b"".join(frame_event(p) for p in PAYLOADS) == GOLDEN
    buffer = bytearray(b"x")
    assert encode_events_into(buffer, PAYLOADS) == 4
    assert buffer == b"x" + GOLDEN


def test_parse_events_with_offsets() -> None:
    events = parse_events(GOLDEN, start_offset=1000)
    assert [e.data for e in events] == PAYLOADS
    assert [e.offset for e in events] == [1000, 1008, 1017, 1039]
    assert count_events(GOLDEN) == 4


def test_parse_events_with_one_byte_at_a_time() -> None:
    parser = EventParser(start_offset=5)
    out: list[SegmentEvent] = []
    for i in range(len(GOLDEN)):
        parser.feed(GOLDEN[i : i + 1])
        out.extend(parser)
    assert out == parse_events(GOLDEN, start_offset=5)
    assert parser.offset == 5 + len(GOLDEN)
    assert parser.pending_bytes == 0


def test_parse_events_with_partial_tail() -> None:
    parser = EventParser()
    parser.feed(GOLDEN[:-3])
    assert [e.data for e in parser] == PAYLOADS[:3]
    assert parser.offset == 39
    assert parser.pending_bytes == len(GOLDEN) - 3 - 39
    parser.feed(GOLDEN[-3:])
    assert [e.data for e in parser] == PAYLOADS[3:]
    with pytest.raises(ProtocolError, match="partial event"):
        parse_events(GOLDEN[:-1])


def test_parse_events_with_wrong_type_code() -> None:
    parser = EventParser()
    parser.feed(event(b"ok") + struct.pack(">ii", 3, 0))
    assert next(parser).data == b"ok"
    with pytest.raises(ProtocolError, match="offset 10 has type code 3"):
        next(parser)
    with pytest.raises(ProtocolError):
        parser.feed(b"")


@pytest.mark.parametrize("length", [-1, 2**31 - 1])
def test_parse_events_with_bad_length(length: int) -> None:
    with pytest.raises(ProtocolError, match="has length"):
        parse_events(struct.pack(">ii", 0, length))
    with pytest.raises(ProtocolError):
        count_events(struct.pack(">ii", 0, length))


def test_parse_events_with_max_event_bytes() -> None:
    parser = EventParser(max_event_bytes=4)
    parser.feed(event(b"1234") + event(b"12345"))
    assert next(parser).data == b"1234"
    with pytest.raises(ProtocolError, match=r"allowed 0\.\.4"):
        next(parser)


@given(st.lists(st.binary(max_size=30), max_size=10), st.lists(st.integers(0, 400), max_size=10))
def test_parse_events_with_random_splits(payloads: list[bytes], cuts: list[int]) -> None:
    data = encode_events(payloads)
    parser = EventParser()
    got: list[bytes] = []
    start = 0
    for point in [*sorted({min(c, len(data)) for c in cuts}), len(data)]:
        parser.feed(data[start:point])
        start = point
        got.extend(e.data for e in parser)
        assert parser.pending_bytes <= 8 + 30
    assert got == payloads
    assert count_events(data) == len(payloads)
