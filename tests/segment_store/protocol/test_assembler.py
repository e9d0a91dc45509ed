"""AppendAssembler: Java-shaped blocks, Rust-shaped block ends, conditional appends, ordering errors."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st
from protocol_wire import blob, event, frame, i32, i64, uid, utf

from segment_store.protocol import (
    Append,
    AppendAssembler,
    AppendBlock,
    AppendBlockEnd,
    ConditionalAppend,
    ConditionalBlockEnd,
    DataAppended,
    Event,
    FrameDecoder,
    KeepAlive,
    Padding,
    PartialEvent,
    ProtocolError,
    ReadSegment,
    SetupAppend,
    WireCommand,
    append_block_header,
    build_append_block_end,
    decode_all,
    encode,
    encode_append_batch,
    encode_events,
    encode_java_append_block,
    frame_append_block_end,
    frame_data_appended,
)

pytestmark = pytest.mark.unit

W = uuid.UUID("c0ffee00-0000-4000-8000-0000000000ff")
W2 = uuid.UUID("00000000-0000-0000-0000-000000000002")
SEG = "scope/stream/0.#epoch.0"
SETUP = frame(1, i64(1), uid(W), utf(SEG.encode()), utf(b""))


def assemble(stream: bytes) -> list[WireCommand | Append]:
    """Decode a byte stream one byte at a time and run every command through a fresh assembler."""
    decoder = FrameDecoder()
    assembler = AppendAssembler()
    out: list[WireCommand | Append] = []
    for i in range(len(stream)):
        decoder.feed(stream[i : i + 1])
        for command in decoder:
            result = assembler.process(command)
            if result is not None:
                out.append(result)
    assert not assembler.block_open
    return out


def test_assemble_with_java_block_and_partial_event() -> None:
    e1, e2, e3 = event(b"hello"), event(b"world!!"), event(b"straddling-event")
    whole = e1 + e2
    stream = (
        SETUP
        + frame(3, uid(W), whole, frame(-2, e3[:11]))
        + frame(4, uid(W), i32(len(whole)), blob(e3[11:]), i32(3), i64(3), i64(77))
    )
    setup, append = assemble(stream)
    assert setup == SetupAppend(1, W, SEG, "")
    assert append == Append(SEG, W, 3, 3, whole + e3, None, 77)
    assert bytes(append.data) == encode_events([b"hello", b"world!!", b"straddling-event"])


def test_assemble_with_partial_event_inside_header() -> None:
    e1, e2 = event(b"a" * 10), event(b"b" * 20)
    stream = (
        SETUP
        + frame(3, uid(W), e1, frame(-2, e2[:3]))
        + frame(4, uid(W), i32(len(e1)), blob(e2[3:]), i32(2), i64(2), i64(1))
    )
    assert bytes(assemble(stream)[1].data) == e1 + e2  # type: ignore[union-attr]


def test_assemble_with_partial_event_and_no_whole_events() -> None:
    e1 = event(b"only")
    stream = (
        SETUP + frame(3, uid(W), frame(-2, e1[:5])) + frame(4, uid(W), i32(0), blob(e1[5:]), i32(1), i64(1), i64(1))
    )
    assert bytes(assemble(stream)[1].data) == e1  # type: ignore[union-attr]


def test_assemble_with_java_block_and_padding() -> None:
    whole = event(b"x") + event(b"yy")
    stream = (
        SETUP
        + frame(3, uid(W), whole, frame(-1, bytes(13)))
        + frame(4, uid(W), i32(len(whole)), i32(0), i32(2), i64(9), i64(5))
    )
    append = assemble(stream)[1]
    assert append == Append(SEG, W, 9, 2, whole, None, 5)


def test_assemble_with_java_session_flush_block() -> None:
    whole = event(b"") + event(b"z")
    stream = SETUP + frame(3, uid(W), whole) + frame(4, uid(W), i32(len(whole)), i32(0), i32(2), i64(4), i64(5))
    assert assemble(stream)[1] == Append(SEG, W, 4, 2, whole, None, 5)


def test_assemble_with_rust_block_end_only() -> None:
    data = event(b"one") + event(b"two")
    stream = SETUP + frame(4, uid(W), i32(len(data)), blob(data), i32(2), i64(8), i64(-3))
    assert assemble(stream)[1] == Append(SEG, W, 8, 2, data, None, -3)


def test_assemble_with_zero_size_appends() -> None:
    stream = SETUP + frame(4, uid(W), i32(0), i32(0), i32(3), i64(3), i64(1))
    assert assemble(stream)[1] == Append(SEG, W, 3, 3, b"", None, 1)


def test_assemble_with_conditional_append() -> None:
    stream = SETUP + frame(5, uid(W), i64(4), i64(1024), event(b"cond"), i64(6))
    append = assemble(stream)[1]
    assert append == Append(SEG, W, 4, 1, event(b"cond"), 1024, 6)
    assert isinstance(append, Append) and append.is_conditional


def test_assemble_with_conditional_block_end() -> None:
    data = event(b"c1")
    stream = SETUP + frame(89, uid(W), i64(4), i64(0), blob(data), i64(6))
    assert assemble(stream)[1] == Append(SEG, W, 4, 1, data, 0, 6)


def test_assemble_with_other_commands_passed_through() -> None:
    read = ReadSegment(SEG, 0, 10, "", 1)
    stream = encode(KeepAlive()) + SETUP + frame(-1, bytes(4)) + encode(read)
    assert assemble(stream) == [KeepAlive(), SetupAppend(1, W, SEG, ""), read]


def test_assemble_with_interleaved_writers() -> None:
    assembler = AppendAssembler()
    assembler.process(SetupAppend(1, W, "a", ""))
    assembler.process(SetupAppend(2, W2, "b", ""))
    first = assembler.process(build_append_block_end(W2, [b"x"], 1, 10))
    second = assembler.process(build_append_block_end(W, [b"y"], 1, 11))
    assert isinstance(first, Append) and first.segment == "b" and first.request_id == 10
    assert isinstance(second, Append) and second.segment == "a" and second.writer_id == W
    assert assembler.writer_segment(W2) == "b"
    assert assembler.writer_segment(uuid.UUID(int=9)) is None


def test_assemble_with_equal_event_number_repeated() -> None:
    assembler = AppendAssembler()
    assembler.process(SetupAppend(1, W, SEG, ""))
    assembler.process(build_append_block_end(W, [b"x"], 5, 1))
    assert isinstance(assembler.process(build_append_block_end(W, [b"x"], 5, 1)), Append)


def _setup(*commands: WireCommand) -> AppendAssembler:
    assembler = AppendAssembler()
    assembler.process(SetupAppend(1, W, SEG, ""))
    assembler.process(SetupAppend(2, W2, SEG, ""))
    for command in commands:
        assembler.process(command)
    return assembler


BLOCK = AppendBlock(W, event(b"abc"))
END = AppendBlockEnd(W, 11, b"", 1, 1, 1)


@pytest.mark.parametrize(
    ("before", "command", "message"),
    [
        ((), AppendBlockEnd(uuid.UUID(int=7), 0, b"", 1, 1, 1), "before its SetupAppend"),
        ((), AppendBlock(uuid.UUID(int=7), b""), "before its SetupAppend"),
        ((), ConditionalAppend(uuid.UUID(int=7), 1, 0, Event(b""), 1), "before its SetupAppend"),
        ((), ConditionalBlockEnd(uuid.UUID(int=7), 1, 0, b"", 1), "before its SetupAppend"),
        ((BLOCK,), AppendBlockEnd(W2, 11, b"", 1, 1, 1), "ended by AppendBlockEnd of writer"),
        ((BLOCK,), BLOCK, "unexpected AppendBlock following an AppendBlock"),
        ((BLOCK,), KeepAlive(), "unexpected KeepAlive following an AppendBlock"),
        ((BLOCK,), SetupAppend(3, W, SEG, ""), "unexpected SetupAppend"),
        ((), AppendBlockEnd(W, 0, b"", 0, 1, 1), "invalid number of events"),
        ((), AppendBlockEnd(W, 0, b"", -5, 1, 1), "invalid number of events"),
        ((END,), AppendBlockEnd(W, 0, b"", 1, 0, 1), "went backwards"),
        ((END,), ConditionalAppend(W, 0, 0, Event(b""), 1), "went backwards"),
        ((END,), ConditionalBlockEnd(W, 0, 0, b"", 1), "went backwards"),
        ((BLOCK,), AppendBlockEnd(W, 12, b"", 1, 1, 1), "invalid size_of_whole_events 12"),
        ((BLOCK,), AppendBlockEnd(W, -1, b"", 1, 1, 1), "invalid size_of_whole_events -1"),
        ((BLOCK,), AppendBlockEnd(W, 5, b"", 1, 1, 1), "are not a frame"),
        ((), Event(b"x"), "Event outside an append block"),
        ((), PartialEvent(b"x"), "PartialEvent outside an append block"),
    ],
)
def test_assemble_with_out_of_order_frames(before: tuple[WireCommand, ...], command: WireCommand, message: str) -> None:
    assembler = _setup(*before)
    with pytest.raises(ProtocolError, match=message):
        assembler.process(command)
    assert not assembler.block_open


def test_assemble_with_bad_block_tail_type() -> None:
    assembler = _setup(AppendBlock(W, event(b"a") + frame(100)))
    with pytest.raises(ProtocolError, match="found type code 100 at the end of an append block"):
        assembler.process(AppendBlockEnd(W, 9, b"", 1, 1, 1))


def test_assemble_with_bad_block_tail_length() -> None:
    assembler = _setup(AppendBlock(W, event(b"a") + frame(-2, b"xyz") + b"junk"))
    with pytest.raises(ProtocolError, match="declares 3 bytes but 7 follow"):
        assembler.process(AppendBlockEnd(W, 9, b"", 1, 1, 1))


def test_assemble_with_data_after_padding() -> None:
    assembler = _setup(AppendBlock(W, event(b"a") + frame(-1, bytes(2))))
    with pytest.raises(ProtocolError, match="data after a padded block"):
        assembler.process(AppendBlockEnd(W, 9, b"x", 1, 1, 1))


def test_assemble_with_data_after_whole_block() -> None:
    assembler = _setup(AppendBlock(W, event(b"a")))
    with pytest.raises(ProtocolError, match="ends on an event boundary"):
        assembler.process(AppendBlockEnd(W, 9, b"x", 1, 1, 1))


def test_assemble_with_padding_outside_block_ignored() -> None:
    assert _setup().process(Padding(3)) is None


@given(
    st.lists(st.binary(max_size=40), min_size=1, max_size=12),
    st.integers(0, 200),
    st.integers(1, 2**40),
)
def test_assemble_with_java_encoder_emulation(events: list[bytes], block_size: int, last: int) -> None:
    stream = encode(SetupAppend(1, W, SEG, "")) + encode_java_append_block(W, events, block_size, last, 42)
    _setup_reply, append = assemble(stream)
    assert isinstance(append, Append)
    assert bytes(append.data) == encode_events(events)
    assert (append.event_number, append.event_count, append.request_id) == (last, len(events), 42)


@given(st.lists(st.binary(max_size=40), min_size=1, max_size=12))
def test_encode_append_batch_with_rust_layout(events: list[bytes]) -> None:
    data = encode_events(events)
    golden = frame(4, uid(W), i32(len(data)), blob(data), i32(len(events)), i64(99), i64(7))
    assert encode_append_batch(W, events, 99, 7) == golden
    assert decode_all(golden) == [build_append_block_end(W, events, 99, 7)]


@given(
    st.lists(st.lists(st.binary(max_size=40), min_size=1, max_size=5), min_size=1, max_size=4),
    st.integers(1, 2**63 - 1),
)
def test_frame_append_block_end_with_parts_equals_encode(writes: list[list[bytes]], last: int) -> None:
    parts = [bytearray(encode_events(events)) for events in writes]  # the writer's unsent writes
    size = sum(len(part) for part in parts)
    count = sum(len(events) for events in writes)
    expected = encode(AppendBlockEnd(W, size, b"".join(parts), count, last, 7))
    assert frame_append_block_end(W, parts, size, count, last, 7) == expected


def test_frame_append_block_end_with_bad_numbers_raises() -> None:
    with pytest.raises(ProtocolError, match="do not fit"):
        frame_append_block_end(W, [b""], 2**24, 1, 1, 1)
    with pytest.raises(ProtocolError, match="AppendBlockEnd"):
        frame_append_block_end(W, [b"x"], 1, 1, 2**63, 1)


I64_RANGE = st.integers(-(2**63), 2**63 - 1)


@given(st.uuids(), I64_RANGE, I64_RANGE, I64_RANGE, I64_RANGE)
def test_frame_data_appended_equals_encode(
    writer: uuid.UUID, number: int, previous: int, request: int, end: int
) -> None:
    golden = frame(7, uid(writer), i64(number), i64(previous), i64(request), i64(end))
    assert frame_data_appended(writer.bytes, number, previous, request, end) == golden
    assert encode(DataAppended(writer, number, previous, request, end)) == golden


def test_frame_data_appended_with_bad_fields_raises() -> None:
    with pytest.raises(ProtocolError, match="DataAppended"):
        frame_data_appended(W.bytes, 2**63, 0, 0, 0)
    with pytest.raises(ProtocolError, match="16 bytes"):
        frame_data_appended(W.bytes[:8], 1, 0, 0, 0)


def test_append_block_header_with_declared_block_size() -> None:
    assert append_block_header(W, 100) == i32(3) + i32(116) + uid(W)
    with pytest.raises(ProtocolError):
        append_block_header(W, 2**24)


def test_encode_append_batch_with_no_events() -> None:
    with pytest.raises(ProtocolError, match="at least one event"):
        encode_append_batch(W, [], 1, 1)
    with pytest.raises(ProtocolError, match="at least one event"):
        encode_java_append_block(W, [], 10, 1, 1)
