"""The shared Event frame scanner (segstore_shared.event_frames): the same frames as the plain walk, their
lengths, and where a bad header stops it. The engine's chunk format tests
(tests/segment_store/storage/test_parquet_chunk.py) and the Spark reader's (tests/pravega_spark/test_offsets_unit.py)
cover it through its users."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from segment_store.protocol import encode_events
from segstore_shared.event_frames import (
    HEADER_BYTES,
    find_frames,
    frame_lengths,
    invalid_header,
    walk_frames,
)

pytestmark = pytest.mark.unit

_tails = st.sampled_from([b"", b"\x00", b"\x00\x00\x00\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00\x00\x09abc"])
# runs of equal events, around the length at which the scanner stops walking and checks the rest of a run at once
_runs = st.lists(st.tuples(st.binary(max_size=40), st.integers(1, 40)), max_size=12)


def _walked_lengths(data: bytes, starts: np.ndarray) -> list[int]:
    return [struct.unpack_from(">i", data, int(s) + 4)[0] for s in starts]


@settings(max_examples=300, deadline=None)
@given(runs=_runs, tail=_tails)
def test_find_frames_with_runs_of_equal_events_matches_walk(runs: list[tuple[bytes, int]], tail: bytes) -> None:
    data = encode_events([payload for payload, count in runs for _ in range(count)]) + tail
    found, end = find_frames(data)
    walked, walk_end = walk_frames(data)
    assert end == walk_end
    assert found.tolist() == walked.tolist()
    assert frame_lengths(found, end).tolist() == _walked_lengths(data, walked)


@settings(max_examples=100, deadline=None)
@given(payloads=st.lists(st.binary(max_size=300), max_size=80), cut=st.integers(0, 64))
def test_find_frames_of_a_view_cut_anywhere_gives_the_whole_events(payloads: list[bytes], cut: int) -> None:
    data = encode_events(payloads)
    view = memoryview(data)[: max(0, len(data) - cut)]
    starts, end = find_frames(view)
    whole, at = [], 0
    for payload in payloads:
        if at + HEADER_BYTES + len(payload) > len(view):
            break
        whole.append((at, len(payload)))
        at += HEADER_BYTES + len(payload)
    assert starts.tolist() == [offset for offset, _ in whole]
    assert frame_lengths(starts, end).tolist() == [length for _, length in whole]
    assert end == at
    assert invalid_header(view, end) is None  # only a cut-short event or nothing follows


def test_a_bad_header_stops_the_scan_and_is_told_from_a_short_frame() -> None:
    good = encode_events([b"abc"] * 20)
    bad_headers = [(struct.pack(">ii", 1, 0), (1, 0)), (struct.pack(">ii", 0, -1), (0, -1))]
    for bad_header, expected in bad_headers:
        data = good + bad_header + b"payload"
        starts, end = find_frames(data)
        assert starts.size == 20 and end == len(good)
        assert invalid_header(data, end) == expected
    short = good + encode_events([b"cut short"])[:-1]
    starts, end = find_frames(short)
    assert end == len(good) and invalid_header(short, end) is None
    assert invalid_header(good, len(good)) is None  # nothing left
    empty, at = find_frames(b"")
    assert empty.size == 0 and at == 0 and frame_lengths(empty, 0).size == 0
