"""TableStore updates and reads: versions, conditions, atomic batches, removal, limits, fixed-key tables."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from segment_store.tables.entries import (
    MAX_KEY_BYTES,
    MAX_VALUE_BYTES,
    NO_VERSION,
    NOT_EXISTS,
    TableEntry,
    TableKey,
)
from segment_store.tables.host import SegmentHost
from segment_store.tables.table_store import TableStore
from segstore_shared.contracts import (
    BadOffsetError,
    SegmentExistsError,
    SegmentNotExistsError,
    SegmentType,
    SegmentTypeMismatchError,
)
from segstore_shared.table_errors import (
    BadKeyLengthError,
    InvalidTableKeyError,
    TableBatchTooLargeError,
    TableConfigError,
    TableKeyBadVersionError,
    TableKeyNotExistsError,
    TableKeyTooLongError,
    TableSegmentNotEmptyError,
    TableValueTooLongError,
)

pytestmark = pytest.mark.unit

T = "scope/_tables/t"


async def values(store: TableStore, keys: list[bytes]) -> list[bytes | None]:
    return [None if e is None else e.value for e in await store.get(T, keys)]


async def test_put_with_new_keys_returns_offsets_as_versions(store: TableStore, host: SegmentHost) -> None:
    await store.create_segment(T)
    v1 = await store.put(T, [TableEntry(b"a", b"1"), TableEntry(b"b", b"22")])
    length_after_first = (await host.get_info(T)).length
    v2 = await store.put(T, [TableEntry(b"a", b"333")])
    assert v1[0] == 0 and 0 < v1[1] < length_after_first
    assert v2 == [length_after_first]
    assert await store.get(T, [b"a", b"b", b"c"]) == [
        TableEntry(b"a", b"333", v2[0]),
        TableEntry(b"b", b"22", v1[1]),
        None,
    ]


async def test_get_with_missing_segment_raises(store: TableStore) -> None:
    with pytest.raises(SegmentNotExistsError):
        await store.get("nope", [b"a"])
    with pytest.raises(SegmentNotExistsError):
        await store.put("nope", [TableEntry(b"a", b"1")])


async def test_create_with_existing_name_raises(store: TableStore) -> None:
    await store.create_segment(T)
    with pytest.raises(SegmentExistsError):
        await store.create_segment(T)


async def test_table_ops_on_stream_segment_raise_type_mismatch(store: TableStore, host: SegmentHost) -> None:
    await host.create_segment("stream", SegmentType.STREAM)
    with pytest.raises(SegmentTypeMismatchError):
        await store.get("stream", [b"a"])
    with pytest.raises(SegmentTypeMismatchError):
        await store.put("stream", [TableEntry(b"a", b"1")])


async def test_put_with_matching_versions_succeeds(store: TableStore) -> None:
    await store.create_segment(T)
    [va] = await store.put(T, [TableEntry(b"a", b"1", NOT_EXISTS)])
    [va2, vb] = await store.put(T, [TableEntry(b"a", b"2", va), TableEntry(b"b", b"1", NOT_EXISTS)])
    assert va2 > va and vb > va2
    assert await values(store, [b"a", b"b"]) == [b"2", b"1"]


async def test_put_with_stale_version_fails_whole_batch(store: TableStore, host: SegmentHost) -> None:
    await store.create_segment(T)
    [va] = await store.put(T, [TableEntry(b"a", b"1")])
    [va2] = await store.put(T, [TableEntry(b"a", b"2")])
    length = (await host.get_info(T)).length
    with pytest.raises(TableKeyBadVersionError) as caught:
        await store.put(T, [TableEntry(b"b", b"new"), TableEntry(b"a", b"3", va)])
    assert caught.value.versions == {b"a": (va, va2)}
    assert caught.value.keys == [b"a"]
    assert caught.value.segment == T
    assert (await host.get_info(T)).length == length  # nothing written
    assert await values(store, [b"a", b"b"]) == [b"2", None]


async def test_put_with_not_exists_on_existing_key_raises_bad_version(store: TableStore) -> None:
    await store.create_segment(T)
    [va] = await store.put(T, [TableEntry(b"a", b"1")])
    with pytest.raises(TableKeyBadVersionError) as caught:
        await store.put(T, [TableEntry(b"a", b"2", NOT_EXISTS)])
    assert caught.value.versions == {b"a": (NOT_EXISTS, va)}


async def test_put_with_version_on_missing_key_raises_not_exists(store: TableStore) -> None:
    await store.create_segment(T)
    [va] = await store.put(T, [TableEntry(b"a", b"1")])
    # A missing conditioned key is reported before a version mismatch in the same batch (Pravega's order).
    with pytest.raises(TableKeyNotExistsError) as caught:
        await store.put(T, [TableEntry(b"a", b"2", va + 1), TableEntry(b"zz", b"1", 0)])
    assert caught.value.key == b"zz"
    assert await values(store, [b"a", b"zz"]) == [b"1", None]


async def test_put_with_duplicate_keys_keeps_last_and_checks_against_state_before_batch(store: TableStore) -> None:
    await store.create_segment(T)
    versions = await store.put(T, [TableEntry(b"a", b"1", NOT_EXISTS), TableEntry(b"a", b"2", NOT_EXISTS)])
    assert await store.get(T, [b"a"]) == [TableEntry(b"a", b"2", versions[1])]
    assert (await store.info(T)).entry_count == 1


async def test_remove_with_and_without_conditions(store: TableStore, host: SegmentHost) -> None:
    await store.create_segment(T)
    va, vb, _ = await store.put(T, [TableEntry(b"a", b"1"), TableEntry(b"b", b"2"), TableEntry(b"c", b"3")])
    await store.remove(T, [TableKey(b"a", va), TableKey(b"c")])
    assert await values(store, [b"a", b"b", b"c"]) == [None, b"2", None]
    await store.remove(T, [TableKey(b"never-there")])  # unconditional removal of a missing key is fine
    await store.remove(T, [TableKey(b"never-there", NOT_EXISTS)])
    length = (await host.get_info(T)).length
    with pytest.raises(TableKeyNotExistsError):
        await store.remove(T, [TableKey(b"b"), TableKey(b"a", va)])  # a is gone
    with pytest.raises(TableKeyBadVersionError):
        await store.remove(T, [TableKey(b"b", vb + 1)])
    assert (await host.get_info(T)).length == length
    assert await values(store, [b"b"]) == [b"2"]
    # a removed key can be inserted again with NOT_EXISTS
    [va2] = await store.put(T, [TableEntry(b"a", b"back", NOT_EXISTS)])
    assert await store.get(T, [b"a"]) == [TableEntry(b"a", b"back", va2)]


async def test_put_with_table_segment_offset(store: TableStore, host: SegmentHost) -> None:
    await store.create_segment(T)
    await store.put(T, [TableEntry(b"a", b"1")])
    length = (await host.get_info(T)).length
    with pytest.raises(BadOffsetError):
        await store.put(T, [TableEntry(b"a", b"2")], table_segment_offset=length - 1)
    with pytest.raises(BadOffsetError):
        await store.remove(T, [TableKey(b"a")], table_segment_offset=length + 1)
    assert await values(store, [b"a"]) == [b"1"]
    [v] = await store.put(T, [TableEntry(b"a", b"2")], table_segment_offset=length)
    assert v == length
    await store.remove(T, [TableKey(b"a", v)], table_segment_offset=(await host.get_info(T)).length)
    assert await values(store, [b"a"]) == [None]


async def test_put_with_empty_batch_writes_nothing(store: TableStore, host: SegmentHost) -> None:
    await store.create_segment(T)
    assert await store.put(T, []) == []
    await store.remove(T, [])
    assert (await host.get_info(T)).length == 0


async def test_put_with_largest_key_and_value_round_trips(store: TableStore) -> None:
    await store.create_segment(T)
    key = b"K" * MAX_KEY_BYTES
    value = bytes(i % 251 for i in range(MAX_VALUE_BYTES))
    v, v_small = await store.put(T, [TableEntry(key, value), TableEntry(b"small", b"s")])
    assert v_small - v > MAX_KEY_BYTES + MAX_VALUE_BYTES
    assert await store.get(T, [key, b"small"]) == [TableEntry(key, value, v), TableEntry(b"small", b"s", v_small)]


async def test_put_beyond_limits_raises_and_writes_nothing(store: TableStore, host: SegmentHost) -> None:
    await store.create_segment(T)
    with pytest.raises(TableKeyTooLongError) as too_long:
        await store.put(T, [TableEntry(b"ok", b"1"), TableEntry(b"K" * (MAX_KEY_BYTES + 1), b"1")])
    assert too_long.value.key_length == MAX_KEY_BYTES + 1
    with pytest.raises(TableKeyTooLongError):
        await store.remove(T, [TableKey(b"K" * (MAX_KEY_BYTES + 1))])
    with pytest.raises(TableValueTooLongError):
        await store.put(T, [TableEntry(b"k", b"v" * (MAX_VALUE_BYTES + 1))])
    with pytest.raises(InvalidTableKeyError):
        await store.put(T, [TableEntry(b"", b"v")])
    assert (await host.get_info(T)).length == 0


async def test_put_with_batch_over_limit_raises(make_store: Callable[..., TableStore], host: SegmentHost) -> None:
    store = make_store(max_batch_bytes=MAX_KEY_BYTES + MAX_VALUE_BYTES)
    await store.create_segment(T)
    big = b"v" * (MAX_VALUE_BYTES // 2 + MAX_KEY_BYTES)
    await store.put(T, [TableEntry(b"a", big)])
    with pytest.raises(TableBatchTooLargeError) as caught:
        await store.put(T, [TableEntry(b"a", big), TableEntry(b"b", big)])
    assert caught.value.maximum == MAX_KEY_BYTES + MAX_VALUE_BYTES
    assert await values(store, [b"b"]) == [None]


async def test_fixed_key_table_requires_exact_key_length(store: TableStore, host: SegmentHost) -> None:
    await store.create_segment(T, key_length=8)
    info = await host.get_info(T)
    assert info.segment_type & SegmentType.FIXED_KEY_TABLE == SegmentType.FIXED_KEY_TABLE
    [v] = await store.put(T, [TableEntry(b"12345678", b"x")])
    assert await store.get(T, [b"12345678"]) == [TableEntry(b"12345678", b"x", v)]
    for bad in (b"1234567", b"123456789", b""):
        with pytest.raises(BadKeyLengthError) as caught:
            await store.put(T, [TableEntry(bad, b"x")])
        assert caught.value.expected == 8
        with pytest.raises(BadKeyLengthError):
            await store.get(T, [bad])
        with pytest.raises(BadKeyLengthError):
            await store.remove(T, [TableKey(bad)])
    assert (await store.info(T)).key_length == 8


async def test_create_with_key_length_out_of_range_raises(store: TableStore) -> None:
    with pytest.raises(TableConfigError):
        await store.create_segment(T, key_length=257)
    with pytest.raises(TableConfigError):
        await store.create_segment(T, key_length=-1)


async def test_info_counts_live_keys(store: TableStore, host: SegmentHost) -> None:
    await store.create_segment(T)
    await store.put(T, [TableEntry(b"a", b"1"), TableEntry(b"b", b"2"), TableEntry(b"a", b"3")])
    await store.remove(T, [TableKey(b"b"), TableKey(b"zz")])
    info = await store.info(T)
    assert (info.name, info.entry_count, info.key_length, info.start_offset) == (T, 1, 0, 0)
    assert info.length == (await host.get_info(T)).length


async def test_delete_with_must_be_empty(store: TableStore) -> None:
    await store.create_segment(T)
    await store.put(T, [TableEntry(b"a", b"1")])
    with pytest.raises(TableSegmentNotEmptyError) as caught:
        await store.delete_segment(T, must_be_empty=True)
    assert caught.value.entry_count == 1
    assert await values(store, [b"a"]) == [b"1"]
    await store.remove(T, [TableKey(b"a")])
    await store.delete_segment(T, must_be_empty=True)
    with pytest.raises(SegmentNotExistsError):
        await store.get(T, [b"a"])
    with pytest.raises(SegmentNotExistsError):
        await store.delete_segment(T)


async def test_delete_non_empty_without_condition_and_recreate_starts_empty(store: TableStore) -> None:
    await store.create_segment(T)
    await store.put(T, [TableEntry(b"a", b"1")])
    await store.delete_segment(T, must_be_empty=False)
    await store.create_segment(T)
    assert await store.get(T, [b"a"]) == [None]
    assert (await store.info(T)).entry_count == 0


async def test_recreated_segment_behind_the_stores_back_is_not_mistaken_for_the_old(
    store: TableStore, host: SegmentHost
) -> None:
    await store.create_segment(T)
    await store.put(T, [TableEntry(b"a", b"1"), TableEntry(b"b", b"2")])
    await host.delete_segment(T)
    await store.create_segment(T)
    [v] = await store.put(T, [TableEntry(b"c", b"3")])
    assert v == 0
    assert await values(store, [b"a", b"b", b"c"]) == [None, None, b"3"]


async def test_unconditional_put_version_is_not_a_condition(store: TableStore) -> None:
    await store.create_segment(T)
    await store.put(T, [TableEntry(b"a", b"1")])
    [v] = await store.put(T, [TableEntry(b"a", b"2", NO_VERSION)])
    assert await store.get(T, [b"a"]) == [TableEntry(b"a", b"2", v)]
