"""KeyIndex: applying entries in order, live bytes, stale copies, iteration positions and tokens."""

from __future__ import annotations

import pytest

from segment_store.tables.entries import NO_VERSION
from segment_store.tables.entry_serializer import ParsedEntry
from segment_store.tables.key_index import KeyIndex

pytestmark = pytest.mark.unit


def put(offset: int, key: bytes, length: int = 30, version: int = NO_VERSION) -> ParsedEntry:
    return ParsedEntry(offset, length, key, None, False, version)


def removal(offset: int, key: bytes, length: int = 25) -> ParsedEntry:
    return ParsedEntry(offset, length, key, None, True, NO_VERSION)


def test_apply_tracks_versions_offsets_and_live_bytes() -> None:
    index = KeyIndex(100)
    index.apply(put(100, b"a"))
    index.apply(put(130, b"b"))
    index.apply(put(160, b"a"))
    index.apply(removal(190, b"b"))
    assert index.tail == 215 and len(index) == 1
    slot = index.get(b"a")
    assert slot is not None and (slot.version, slot.offset, slot.length) == (160, 160, 30)
    assert index.live_bytes == 30
    assert index.utilization_percent() == pytest.approx(100 * 30 / 115)


def test_apply_out_of_order_raises() -> None:
    index = KeyIndex(0)
    with pytest.raises(ValueError):
        index.apply(put(10, b"a"))


def test_copy_keeps_version_and_stale_copy_is_ignored() -> None:
    index = KeyIndex(0)
    index.apply(put(0, b"a"))
    index.apply(put(30, b"a", version=0))  # a compaction copy of the entry at 0
    slot = index.get(b"a")
    assert slot is not None and (slot.version, slot.offset) == (0, 30)
    index.apply(put(60, b"a"))
    index.apply(put(90, b"a", version=30))  # a copy older than the update at 60
    slot = index.get(b"a")
    assert slot is not None and (slot.version, slot.offset) == (60, 60)
    assert index.live_bytes == 30


@pytest.mark.parametrize("hashed", [True, False])
def test_positions_after_pages_through_every_key_once(hashed: bool) -> None:
    index = KeyIndex(0, hashed=hashed)
    keys = [b"%03d" % i for i in range(50)]
    for i, key in enumerate(keys):
        index.apply(put(i * 30, key))
    seen: list[bytes] = []
    after = None
    while page := index.positions_after(after, 7):
        seen += [index.key_at(p) for p in page]
        after = index.position_of_token(index.token(page[-1]))
    assert sorted(seen) == keys and len(seen) == len(set(seen))
    if not hashed:
        assert seen == keys
        assert [index.key_at(p) for p in index.positions_after(None, 100, b"010", b"015")] == keys[10:16]


def test_position_of_foreign_token_raises() -> None:
    index = KeyIndex(0)
    assert index.position_of_token(b"") is None
    for token in (b"\x02abcdefghij", b"\x01short"):
        with pytest.raises(ValueError):
            index.position_of_token(token)
