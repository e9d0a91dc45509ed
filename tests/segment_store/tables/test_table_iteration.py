"""Key and entry iteration: pages, opaque tokens, stable order, and mutations between pages."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from segment_store.tables.entries import TableEntry, TableKey
from segment_store.tables.table_store import TableStore
from segstore_shared.table_errors import BadContinuationTokenError

pytestmark = pytest.mark.unit

T = "t"


async def all_keys(store: TableStore, page_size: int) -> list[TableKey]:
    found: list[TableKey] = []
    token = b""
    while True:
        page = await store.read_keys(T, page_size, token)
        if not page.items:
            assert page.continuation_token == b""
            return found
        assert len(page.items) <= page_size
        found += page.items
        token = page.continuation_token


async def test_read_keys_with_pages_returns_every_key_once_with_versions(store: TableStore) -> None:
    await store.create_segment(T)
    entries = [TableEntry(b"key-%03d" % i, b"v%d" % i) for i in range(100)]
    versions = await store.put(T, entries)
    found = await all_keys(store, 7)
    assert sorted(found, key=lambda k: k.key) == [TableKey(e.key, v) for e, v in zip(entries, versions, strict=True)]
    assert found == await all_keys(store, 1000)  # same order whatever the page size


async def test_read_entries_with_pages_returns_values(store: TableStore) -> None:
    await store.create_segment(T)
    await store.put(T, [TableEntry(b"k%d" % i, b"value-%d" % i * 50) for i in range(30)])
    await store.put(T, [TableEntry(b"k3", b"new")])
    await store.remove(T, [TableKey(b"k4")])
    found: dict[bytes, bytes] = {}
    token = b""
    while True:
        items, token = await store.read_entries(T, 4, token)
        if not items:
            break
        for entry in items:
            assert entry.key not in found
            found[entry.key] = entry.value
    expected = {b"k%d" % i: b"value-%d" % i * 50 for i in range(30)}
    expected[b"k3"] = b"new"
    del expected[b"k4"]
    assert found == expected
    current = await store.get(T, list(expected))
    assert all(e is not None for e in current)


async def test_iteration_of_empty_table_ends_at_once(store: TableStore) -> None:
    await store.create_segment(T)
    assert await store.read_keys(T, 10) == ([], b"")
    assert await store.read_entries(T, 10) == ([], b"")


async def test_iteration_with_mutations_between_pages_returns_unchanged_keys_exactly_once(store: TableStore) -> None:
    rng = random.Random(7)
    await store.create_segment(T)
    await store.put(T, [TableEntry(b"stable-%d" % i, b"s") for i in range(200)])
    await store.put(T, [TableEntry(b"doomed-%d" % i, b"d") for i in range(50)])
    seen: list[bytes] = []
    token = b""
    added = 0
    while True:
        page = await store.read_keys(T, 9, token)
        if not page.items:
            break
        seen += [k.key for k in page.items]
        token = page.continuation_token
        # between pages: add new keys, remove some, update stable ones (updates keep the key's place)
        await store.put(T, [TableEntry(b"new-%d" % added, b"n"), TableEntry(b"stable-%d" % rng.randrange(200), b"u")])
        added += 1
        await store.remove(T, [TableKey(b"doomed-%d" % rng.randrange(50))])
    assert len(seen) == len(set(seen))
    assert {b"stable-%d" % i for i in range(200)} <= set(seen)


async def test_read_keys_with_foreign_token_raises(store: TableStore) -> None:
    await store.create_segment(T)
    await store.put(T, [TableEntry(b"a", b"1")])
    with pytest.raises(BadContinuationTokenError):
        await store.read_keys(T, 10, b"\x07garbage")
    with pytest.raises(BadContinuationTokenError):
        await store.read_entries(T, 10, b"\x01")


async def test_token_survives_a_restart_of_the_store(store: TableStore, make_store: Callable[..., TableStore]) -> None:
    await store.create_segment(T)
    await store.put(T, [TableEntry(b"k%d" % i, b"v") for i in range(20)])
    first = await store.read_keys(T, 5)
    rest: list[TableKey] = []
    token = first.continuation_token
    restarted = make_store()
    while True:
        page = await restarted.read_keys(T, 5, token)
        if not page.items:
            break
        rest += page.items
        token = page.continuation_token
    assert sorted(k.key for k in first.items + rest) == sorted(b"k%d" % i for i in range(20))


async def test_fixed_key_table_iterates_in_key_order_within_range(store: TableStore) -> None:
    await store.create_segment(T, key_length=4)
    keys = [b"%04d" % i for i in range(0, 100, 3)]
    shuffled = keys[:]
    random.Random(1).shuffle(shuffled)
    await store.put(T, [TableEntry(k, k + b"!") for k in shuffled])
    found: list[TableEntry] = []
    token = b""
    while True:
        items, token = await store.read_entries(T, 4, token)
        if not items:
            break
        found += items
    assert [e.key for e in found] == keys
    assert all(e.value == e.key + b"!" for e in found)
    ranged = await store.read_keys(T, 100, from_key=b"0010", to_key=b"0030")
    assert [k.key for k in ranged.items] == [k for k in keys if b"0010" <= k <= b"0030"]


async def test_suggested_count_below_one_returns_one_item(store: TableStore) -> None:
    await store.create_segment(T)
    await store.put(T, [TableEntry(b"a", b"1"), TableEntry(b"b", b"2")])
    assert len((await store.read_keys(T, 0)).items) == 1
