"""FrameDecoder: round trips, arbitrary splits, bounded buffering and every kind of bad frame."""

from __future__ import annotations

import struct
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from protocol_strategies import COMMAND_CLASSES, any_command, for_command
from protocol_wire import frame, i32, i64, utf
from test_golden import CASES

from segment_store.protocol import (
    HEADER_SIZE,
    MAX_FRAME_PAYLOAD,
    AppendBlock,
    FrameDecoder,
    KeepAlive,
    Padding,
    ProtocolError,
    SegmentCreated,
    SegmentRead,
    WireCommand,
    decode_all,
    encode,
    encode_into,
    encode_many,
)

pytestmark = pytest.mark.unit

GOLDEN_STREAM = b"".join(golden for _, _, golden in CASES)
GOLDEN_COMMANDS = [command for _, command, _ in CASES]


def test_decode_with_whole_stream() -> None:
    decoder = FrameDecoder()
    decoder.feed(GOLDEN_STREAM)
    assert list(decoder) == GOLDEN_COMMANDS
    assert decoder.buffered_bytes == 0


def test_decode_with_one_byte_at_a_time() -> None:
    decoder = FrameDecoder()
    out: list[WireCommand] = []
    for i in range(len(GOLDEN_STREAM)):
        decoder.feed(GOLDEN_STREAM[i : i + 1])
        out.extend(decoder)
        assert decoder.buffered_bytes <= HEADER_SIZE + MAX_FRAME_PAYLOAD
    assert out == GOLDEN_COMMANDS
    assert decoder.buffered_bytes == 0


def test_decode_with_memoryview_and_bytearray_input() -> None:
    decoder = FrameDecoder()
    half = len(GOLDEN_STREAM) // 2
    decoder.feed(memoryview(GOLDEN_STREAM)[:half])
    decoder.feed(bytearray(GOLDEN_STREAM[half:]))
    assert list(decoder) == GOLDEN_COMMANDS


@settings(max_examples=200)
@given(st.data())
def test_roundtrip_with_every_command(data: st.DataObject) -> None:
    for cls in COMMAND_CLASSES:
        command = data.draw(for_command(cls), label=cls.__name__)
        assert decode_all(encode(command)) == [command]


@given(st.lists(any_command, max_size=12), st.lists(st.integers(0, 400), max_size=20))
def test_decode_with_random_splits(commands: list[WireCommand], cuts: list[int]) -> None:
    stream = encode_many(commands)
    points = sorted({min(c, len(stream)) for c in cuts})
    decoder = FrameDecoder()
    out: list[WireCommand] = []
    start = 0
    for point in [*points, len(stream)]:
        decoder.feed(stream[start:point])
        start = point
        out.extend(decoder)
    assert out == commands


def test_encode_into_with_existing_buffer() -> None:
    buffer = bytearray(b"prefix")
    written = encode_into(buffer, KeepAlive())
    assert written == 8
    assert buffer == b"prefix" + frame(100)


def test_decode_with_oversize_length_before_body() -> None:
    decoder = FrameDecoder()
    decoder.feed(struct.pack(">ii", SegmentRead.TYPE_CODE, MAX_FRAME_PAYLOAD + 1))
    assert decoder.buffered_bytes == 0
    with pytest.raises(ProtocolError, match="declares 16777216 payload bytes"):
        next(decoder)


def test_decode_with_oversize_length_split_header() -> None:
    decoder = FrameDecoder()
    header = struct.pack(">ii", AppendBlock.TYPE_CODE, 0x7FFFFFFF)
    decoder.feed(header[:5])
    assert list(decoder) == []
    decoder.feed(header[5:])
    with pytest.raises(ProtocolError, match=r"allowed 0..16777215"):
        list(decoder)


def test_decode_with_negative_length() -> None:
    with pytest.raises(ProtocolError, match="declares -1 payload bytes"):
        decode_all(struct.pack(">ii", 21, -1))


def test_decode_with_custom_frame_limit() -> None:
    decoder = FrameDecoder(max_frame_payload=16)
    decoder.feed(frame(21, i64(1), utf(b"123456")))
    assert list(decoder) == [SegmentCreated(1, "123456")]
    decoder.feed(frame(21, i64(1), utf(b"1234567")))
    with pytest.raises(ProtocolError, match=r"allowed 0..16"):
        list(decoder)


def test_decode_with_unknown_type_code() -> None:
    with pytest.raises(ProtocolError, match="unknown wire command type code 6"):
        decode_all(frame(6, b"whatever"))
    with pytest.raises(ProtocolError, match="type code 72"):  # MergeTableSegments, removed from Java
        decode_all(frame(72, i64(1)))


def test_decode_with_unknown_type_code_before_body() -> None:
    decoder = FrameDecoder()
    decoder.feed(struct.pack(">ii", 13, 1000))
    with pytest.raises(ProtocolError, match="13"):
        next(decoder)


def test_decode_with_truncated_body() -> None:
    with pytest.raises(ProtocolError, match=r"malformed SegmentCreated frame \(9 bytes\): field segment"):
        decode_all(frame(21, i64(1), b"\x00"))
    with pytest.raises(ProtocolError, match=r"malformed SegmentCreated.*field.*request_id"):
        decode_all(frame(21, b"\x00\x00"))


def test_decode_with_body_longer_than_fields() -> None:
    with pytest.raises(ProtocolError, match=r"malformed SegmentCreated.*1 unexpected byte"):
        decode_all(frame(21, i64(1), utf(b"s"), b"\x00"))
    with pytest.raises(ProtocolError, match=r"malformed KeepAlive.*4 unexpected"):
        decode_all(frame(100, i32(0)))


def test_decode_with_byte_buffer_past_body() -> None:
    with pytest.raises(ProtocolError, match=r"malformed SegmentRead.*field data"):
        decode_all(frame(10, utf(b"s"), i64(0), b"\x00\x00", i32(100), b"xy"))
    with pytest.raises(ProtocolError, match="negative byte-buffer length"):
        decode_all(frame(10, utf(b"s"), i64(0), b"\x00\x00", i32(-2), b"xy"))


def test_decode_with_huge_list_count() -> None:
    with pytest.raises(ProtocolError, match="cannot fit"):
        decode_all(frame(75, i64(1), i32(2**31 - 1)))
    with pytest.raises(ProtocolError, match="negative list length"):
        decode_all(frame(75, i64(1), i32(-1)))


def test_decode_with_incomplete_trailing_frame() -> None:
    with pytest.raises(ProtocolError, match="trailing"):
        decode_all(frame(100) + b"\x00\x00")


def test_decode_with_error_after_good_commands() -> None:
    decoder = FrameDecoder()
    decoder.feed(frame(100) + frame(-1, b"\x00") + frame(13))
    assert decoder.failed
    assert next(decoder) == KeepAlive()
    assert next(decoder) == Padding(1)
    with pytest.raises(ProtocolError):
        next(decoder)
    with pytest.raises(ProtocolError):  # stays failed
        next(decoder)
    with pytest.raises(ProtocolError):
        decoder.feed(frame(100))


def test_next_command_with_nothing_ready() -> None:
    decoder = FrameDecoder()
    assert decoder.next_command() is None
    decoder.feed(frame(100)[:3])
    assert decoder.next_command() is None
    decoder.feed(frame(100)[3:])
    assert decoder.next_command() == KeepAlive()


def test_decode_with_max_size_frame_split() -> None:
    payload = b"\xab" * (MAX_FRAME_PAYLOAD - 16)
    command = AppendBlock(uuid.UUID(int=2**128 - 1), payload)
    data = encode(command)
    assert len(data) == HEADER_SIZE + MAX_FRAME_PAYLOAD
    decoder = FrameDecoder()
    step = 1 << 20
    out: list[WireCommand] = []
    for i in range(0, len(data), step):
        decoder.feed(data[i : i + step])
        assert decoder.buffered_bytes <= HEADER_SIZE + MAX_FRAME_PAYLOAD
        out.extend(decoder)
    assert out == [command]


def test_encode_with_payload_over_frame_limit() -> None:
    with pytest.raises(ProtocolError, match="AppendBlock payload of 16777216 bytes exceeds"):
        encode(AppendBlock(uuid.UUID(int=0), bytes(MAX_FRAME_PAYLOAD - 15)))


def test_decode_with_caller_buffer_released_after_error() -> None:
    buffer = bytearray(frame(100) + frame(21, i64(1), b"\x00"))
    decoder = FrameDecoder()
    decoder.feed(buffer)
    assert next(decoder) == KeepAlive()
    with pytest.raises(ProtocolError):
        next(decoder)
    buffer.extend(b"more")  # would raise BufferError if the decoder still held a view of it
    del buffer[:4]
