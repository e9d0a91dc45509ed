"""Fuzz: any input either decodes or raises ProtocolError, with bounded buffering; nothing else escapes."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from protocol_strategies import any_command

from segment_store.protocol import (
    HEADER_SIZE,
    MAX_FRAME_PAYLOAD,
    REGISTRY,
    AppendAssembler,
    EventParser,
    FrameDecoder,
    ProtocolError,
    SetupAppend,
    WireCommand,
    encode,
)

pytestmark = pytest.mark.unit

CODES = sorted(REGISTRY)


def feed_all(decoder: FrameDecoder, data: bytes, cuts: list[int], bound: int) -> list[WireCommand]:
    out: list[WireCommand] = []
    start = 0
    try:
        for point in [*sorted({min(c, len(data)) for c in cuts}), len(data)]:
            decoder.feed(data[start:point])
            start = point
            assert decoder.buffered_bytes <= bound
            out.extend(decoder)
    except ProtocolError:
        assert decoder.failed
    return out


@settings(max_examples=500)
@given(st.binary(max_size=300), st.lists(st.integers(0, 300), max_size=8))
def test_decode_with_arbitrary_bytes(data: bytes, cuts: list[int]) -> None:
    feed_all(FrameDecoder(), data, cuts, HEADER_SIZE + MAX_FRAME_PAYLOAD)
    feed_all(FrameDecoder(max_frame_payload=40), data, cuts, HEADER_SIZE + 40)


@settings(max_examples=1000)
@given(st.sampled_from(CODES), st.binary(max_size=200), st.lists(st.integers(0, 220), max_size=4))
def test_decode_with_random_body_for_every_type_code(code: int, body: bytes, cuts: list[int]) -> None:
    data = struct.pack(">ii", code, len(body)) + body
    out = feed_all(FrameDecoder(), data, cuts, HEADER_SIZE + MAX_FRAME_PAYLOAD)
    for command in out:
        assert code == type(command).TYPE_CODE


@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(any_command, min_size=1, max_size=4),
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=4),
    st.integers(0, 10_000),
    st.booleans(),
)
def test_decode_with_mutated_valid_frames(
    commands: list[WireCommand], flips: list[tuple[int, int]], cut: int, fix_lengths: bool
) -> None:
    frames = [bytearray(encode(c)) for c in commands]
    for position, value in flips:
        target = frames[position % len(frames)]
        target[position % len(target)] = value
    if fix_lengths:  # keep headers consistent so the body decoders see the garbage
        for target in frames:
            struct.pack_into(">i", target, 4, len(target) - HEADER_SIZE)
    data = b"".join(frames)
    data = data[: cut % (len(data) + 1)] if cut % 3 == 0 else data
    feed_all(FrameDecoder(), data, [cut % 97], HEADER_SIZE + MAX_FRAME_PAYLOAD)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(any_command, max_size=12), st.uuids())
def test_assemble_with_arbitrary_command_sequences(commands: list[WireCommand], writer: object) -> None:
    assembler = AppendAssembler()
    for command in [SetupAppend(0, writer, "s", ""), *commands]:  # type: ignore[arg-type]
        try:
            assembler.process(command)
        except ProtocolError:
            assert not assembler.block_open


@settings(max_examples=500)
@given(st.binary(max_size=200), st.lists(st.integers(0, 200), max_size=6))
def test_parse_events_with_arbitrary_bytes(data: bytes, cuts: list[int]) -> None:
    parser = EventParser(max_event_bytes=64)
    start = 0
    try:
        for point in [*sorted({min(c, len(data)) for c in cuts}), len(data)]:
            parser.feed(data[start:point])
            start = point
            assert parser.pending_bytes <= HEADER_SIZE + 64
            list(parser)
    except ProtocolError:
        pass
