"""The sink frames Arrow columns into wire blocks without a Python object per row."""

from __future__ import annotations

import pyarrow as pa
import pytest

from pravega_spark.write.framing import framed_blocks as _framed_blocks
from segment_store.protocol import encode_events, parse_events

pytestmark = pytest.mark.unit


def _payloads(count: int, size: int = 10) -> list[bytes]:
    return [bytes([i % 251]) * (size + i % 7) for i in range(count)]


@pytest.mark.parametrize("kind", [pa.binary(), pa.large_binary(), pa.binary_view()])
def test_framed_blocks_are_the_events_framed_back_to_back(kind: pa.DataType) -> None:
    payloads = _payloads(500)
    blocks = list(_framed_blocks(pa.array(payloads, kind), 1_000_000))
    assert [count for _, count in blocks] == [500]
    assert bytes(blocks[0][0]) == encode_events(payloads)


def test_framed_blocks_cut_at_event_boundaries_within_the_limit() -> None:
    payloads = _payloads(1000)
    blocks = list(_framed_blocks(pa.array(payloads, pa.binary()), 1000))
    assert all(len(block) <= 1000 for block, _ in blocks)
    assert len(blocks) > 10
    events = [event.data for block, count in blocks for event in parse_events(bytes(block))]
    assert events == payloads
    assert sum(count for _, count in blocks) == 1000
    assert all(len(parse_events(bytes(block))) == count for block, count in blocks)


def test_framed_blocks_of_a_slice_start_at_its_first_row() -> None:
    payloads = _payloads(300)
    sliced = pa.array(payloads, pa.binary()).slice(120, 50)
    blocks = list(_framed_blocks(sliced, 1_000_000))
    assert bytes(blocks[0][0]) == encode_events(payloads[120:170])


def test_framed_blocks_put_an_event_larger_than_the_limit_alone() -> None:
    payloads = [b"a", b"b" * 5000, b"c", b"d"]
    blocks = list(_framed_blocks(pa.array(payloads, pa.binary()), 100))
    assert [count for _, count in blocks] == [1, 1, 2]
    assert [bytes(block) for block, _ in blocks] == [
        encode_events([b"a"]), encode_events([b"b" * 5000]), encode_events([b"c", b"d"]),
    ]  # fmt: skip


def test_framed_blocks_of_no_rows_are_none() -> None:
    assert list(_framed_blocks(pa.array([], pa.binary()), 100)) == []


def test_framed_blocks_of_more_than_fits_one_arrow_array_are_framed_in_parts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("pravega_spark.write.framing._MAX_FRAMED_BYTES", 1000)  # stands in for 2 GiB of int32 offsets
    payloads = _payloads(400)
    blocks = list(_framed_blocks(pa.array(payloads, pa.binary()), 700))
    assert all(len(block) <= 700 for block, _ in blocks)
    assert b"".join(bytes(block) for block, _ in blocks) == encode_events(payloads)
