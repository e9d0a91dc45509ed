"""Entry format: round trips, any split of the bytes, corruption detected, reads over short host reads."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from segment_store.tables.entries import MAX_KEY_BYTES, MAX_VALUE_BYTES, NO_VERSION
from segment_store.tables.entry_serializer import (
    HEADER_BYTES,
    EntryFormatError,
    entry_length,
    parse,
    read_exact,
    scan,
    serialize,
)
from segment_store.tables.host import SegmentHost
from segstore_shared.contracts import SegmentType
from segstore_shared.table_errors import TableDataCorruptedError

pytestmark = pytest.mark.unit

ITEMS = [
    (b"k1", b"value-1", NO_VERSION),
    (b"key-two", None, NO_VERSION),
    (b"k3", b"", 17),
    (b"k4", b"x" * 3000, NO_VERSION),
]


def test_serialize_with_mixed_items_parses_back() -> None:
    data, positions = serialize(ITEMS)
    entries, consumed = parse(data, 500)
    assert consumed == len(data)
    assert [(e.key, e.value, e.removed) for e in entries] == [
        (b"k1", b"value-1", False),
        (b"key-two", None, True),
        (b"k3", b"", False),
        (b"k4", b"x" * 3000, False),
    ]
    assert [e.offset for e in entries] == [500 + p for p in positions]
    assert [e.length for e in entries] == [entry_length(len(k), -1 if v is None else len(v)) for k, v, _ in ITEMS]
    # version: own offset unless written explicitly (a compaction copy)
    assert [e.version for e in entries] == [500 + positions[0], 500 + positions[1], 17, 500 + positions[3]]


def test_header_layout_is_format_lengths_version_crc() -> None:
    data, _ = serialize([(b"ab", None, 42)])
    assert len(data) == HEADER_BYTES + 2
    assert struct.unpack_from(">biiq", data) == (0, 2, -1, 42)


def test_parse_with_incomplete_tail_stops_at_last_whole_entry() -> None:
    data, positions = serialize(ITEMS)
    for cut in range(len(data)):
        entries, consumed = parse(data[:cut], 0)
        whole = [p for p in [*positions[1:], len(data)] if p <= cut]
        assert consumed == (whole[-1] if whole else 0)
        assert len(entries) == len(whole)


def test_parse_without_values_keeps_keys_only() -> None:
    data, _ = serialize(ITEMS)
    entries, _ = parse(data, 0, with_values=False)
    assert [e.key for e in entries] == [k for k, _, _ in ITEMS]
    assert all(e.value is None for e in entries)


@pytest.mark.parametrize("position", [0, 1, 5, 13, HEADER_BYTES, HEADER_BYTES + 1, HEADER_BYTES + 3])
def test_parse_with_flipped_byte_raises(position: int) -> None:
    data = bytearray(serialize([(b"key", b"value", NO_VERSION)])[0])
    data[position] ^= 0x40
    with pytest.raises(EntryFormatError):
        parse(bytes(data), 0)


def test_parse_with_bad_lengths_raises_before_reading_the_body() -> None:
    header = struct.pack(">biiqI", 0, MAX_KEY_BYTES + 1, 0, NO_VERSION, 0)
    with pytest.raises(EntryFormatError, match="bad lengths"):
        parse(header, 0)
    header = struct.pack(">biiqI", 0, 1, -2, NO_VERSION, 0)
    with pytest.raises(EntryFormatError, match="bad lengths"):
        parse(header, 0)


def test_serialize_with_largest_key_and_value_round_trips() -> None:
    key, value = b"k" * MAX_KEY_BYTES, bytes(range(256)) * (MAX_VALUE_BYTES // 256)
    assert len(value) == MAX_VALUE_BYTES
    data, _ = serialize([(key, value, NO_VERSION)])
    entries, consumed = parse(data, 0)
    assert consumed == len(data) == HEADER_BYTES + MAX_KEY_BYTES + MAX_VALUE_BYTES
    assert entries[0].key == key and entries[0].value == value


@given(
    st.lists(
        st.tuples(st.binary(min_size=1, max_size=40), st.one_of(st.none(), st.binary(max_size=200))),
        max_size=20,
    ),
    st.data(),
)
def test_parse_with_any_split_yields_every_entry_once(
    items: list[tuple[bytes, bytes | None]], data: st.DataObject
) -> None:
    raw, _ = serialize([(k, v, NO_VERSION) for k, v in items])
    cuts = sorted(data.draw(st.lists(st.integers(0, len(raw)), max_size=8)))
    pending, base, found = b"", 0, []
    for piece in [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True)]:
        pending += piece
        entries, consumed = parse(pending, base)
        found += entries
        pending, base = pending[consumed:], base + consumed
    assert pending == b""
    assert [(e.key, e.value) for e in found] == items


async def test_scan_over_short_host_reads_reassembles_entries(host: SegmentHost) -> None:
    await host.create_segment("raw", SegmentType.TABLE)
    batches = [serialize([(b"key%d" % i, bytes([i]) * (i * 97 % 2500), NO_VERSION)])[0] for i in range(40)]
    for batch in batches:
        await host.append("raw", batch)
    total = sum(len(b) for b in batches)
    entries = [e async for e in scan(host, "raw", 0, total, chunk_bytes=300)]
    assert [e.key for e in entries] == [b"key%d" % i for i in range(40)]
    assert [e.value for e in entries] == [bytes([i]) * (i * 97 % 2500) for i in range(40)]
    assert await read_exact(host, "raw", 0, total) == b"".join(batches)


async def test_scan_ending_inside_an_entry_raises(host: SegmentHost) -> None:
    await host.create_segment("raw", SegmentType.TABLE)
    data, _ = serialize([(b"a", b"1234", NO_VERSION)])
    await host.append("raw", data + b"\x00\x00")
    with pytest.raises(TableDataCorruptedError):
        _ = [e async for e in scan(host, "raw", 0, len(data) + 2, chunk_bytes=64)]
