"""The key-value table client against the real controller (gRPC) and an in-memory segment store: managing tables,
every operation with and without versions, the conditional failures, batches atomic within one primary key and
refused across two, reads of many keys, iteration by primary key, prefix and range in key order, and a table
deleted under an open client."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TypeVar

import pytest
from fake_controller import fast_client_config
from kvt_controller import KvtController, connect, kvt_controller

from controller_client.errors import InvalidArgumentError, ScopeNotFoundError
from controller_client.kvt.errors import BadKeyVersionError, KeyValueTableNotFoundError, NoSuchKeyError
from controller_client.kvt.model import (
    NOT_EXISTS,
    Insert,
    KeyValueTableConfiguration,
    Put,
    Remove,
    TableKey,
    Version,
    table_segment_name,
)
from controller_client.kvt.routing import primary_key_position
from controller_client.kvt.table import KeyValueTable
from controller_client.model import InvalidModelError
from controller_client.stream_manager import StreamManager, StreamManagerConfig

pytestmark = pytest.mark.integration

_I = TypeVar("_I")
CONFIG = KeyValueTableConfiguration(partition_count=4, primary_key_length=4, secondary_key_length=2)


def key(primary: str, secondary: str = "aa") -> TableKey:
    return TableKey(primary.encode(), secondary.encode())


@pytest.fixture
async def env() -> AsyncIterator[KvtController]:
    async with kvt_controller() as controller:
        yield controller


@pytest.fixture
async def manager(env: KvtController) -> AsyncIterator[StreamManager]:
    controller = await connect(env.uri)
    async with controller, StreamManager(controller, config=StreamManagerConfig(client=fast_client_config())) as m:
        await m.create_scope("sc")
        yield m


@pytest.fixture
async def table(manager: StreamManager) -> KeyValueTable:
    assert await manager.create_key_value_table("sc", "t", CONFIG)
    return await manager.key_value_table("sc", "t")


async def test_create_list_configuration_and_delete_through_the_manager(manager: StreamManager) -> None:
    assert await manager.create_key_value_table("sc", "t", CONFIG)
    assert not await manager.create_key_value_table("sc", "t", CONFIG)
    assert await manager.create_key_value_table("sc", "u", KeyValueTableConfiguration(1, 8))
    assert await manager.list_key_value_tables("sc") == ["t", "u"]
    assert await manager.get_key_value_table_configuration("sc", "t") == CONFIG
    with pytest.raises(ScopeNotFoundError):
        await manager.create_key_value_table("nope", "t", CONFIG)
    with pytest.raises(ScopeNotFoundError):
        await manager.list_key_value_tables("nope")
    with pytest.raises(InvalidModelError, match="key-value table"):
        await manager.create_key_value_table("sc", "bad_name", CONFIG)
    with pytest.raises(InvalidArgumentError, match="bad_name"):  # the controller says so too
        await manager.controller.create_key_value_table("sc", "bad_name", CONFIG)  # type: ignore[attr-defined]
    assert await manager.delete_key_value_table("sc", "t")
    assert not await manager.delete_key_value_table("sc", "t")
    assert await manager.list_key_value_tables("sc") == ["u"]
    with pytest.raises(KeyValueTableNotFoundError):
        await manager.key_value_table("sc", "t")
    with pytest.raises(KeyValueTableNotFoundError):
        await manager.get_key_value_table_configuration("sc", "t")


async def test_put_get_and_remove_with_and_without_versions(table: KeyValueTable) -> None:
    assert await table.get(key("k001")) is None
    assert not await table.exists(key("k001"))
    first = await table.put(key("k001"), b"one")
    entry = await table.get(key("k001"))
    assert entry is not None and (entry.key, entry.value, entry.version) == (key("k001"), b"one", first)
    assert await table.exists(key("k001"))
    second = await table.replace(key("k001"), b"two", first)
    assert second != first and second.segment_id == first.segment_id
    third = await table.put(key("k001"), b"three", second)
    fourth = await table.put(key("k001"), b"four")  # unconditional
    assert len({first, second, third, fourth}) == 4
    await table.remove(key("k001"), fourth)
    assert await table.get(key("k001")) is None
    await table.remove(key("k001"))  # a missing key, unconditionally: no error
    inserted = await table.put_if_absent(key("k001"), b"again")
    assert (await table.get(key("k001"))) == (await table.get_all([key("k001")]))[0]
    assert Version.from_string(str(inserted)) == inserted


async def test_conditional_failures_write_nothing(table: KeyValueTable) -> None:
    version = await table.put(key("k001"), b"v1")
    with pytest.raises(BadKeyVersionError):
        await table.put_if_absent(key("k001"), b"v2")  # exists
    newer = await table.replace(key("k001"), b"v2", version)
    with pytest.raises(BadKeyVersionError):
        await table.replace(key("k001"), b"v3", version)  # stale
    with pytest.raises(BadKeyVersionError):
        await table.remove(key("k001"), version)  # wrong version
    with pytest.raises(NoSuchKeyError):
        await table.replace(key("k999"), b"x", newer)  # gone (never there)
    with pytest.raises(BadKeyVersionError):
        await table.put(key("k001"), b"x", NOT_EXISTS)  # a put conditioned on absence, as put_if_absent
    other_segment = Version(newer.segment_id + 1, newer.segment_version)
    with pytest.raises(BadKeyVersionError, match="table segment"):
        await table.replace(key("k001"), b"v4", other_segment)
    entry = await table.get(key("k001"))
    assert entry is not None and (entry.value, entry.version) == (b"v2", newer)
    assert await table.get(key("k999")) is None


async def test_a_batch_of_one_primary_key_is_atomic(table: KeyValueTable) -> None:
    versions = await table.update([Put(key("pk01", "a1"), b"1"), Put(key("pk01", "a2"), b"2")])
    assert len(versions) == 2 and versions[0].segment_id == versions[1].segment_id
    with pytest.raises(BadKeyVersionError):
        await table.update(
            [
                Put(key("pk01", "a1"), b"changed", versions[0]),
                Insert(key("pk01", "a3"), b"new"),
                Put(key("pk01", "a2"), b"changed", versions[0]),  # a2's version is versions[1]: fails all
            ]
        )
    entries = await table.get_all([key("pk01", "a1"), key("pk01", "a2"), key("pk01", "a3")])
    assert [e.value if e else None for e in entries] == [b"1", b"2", None]
    changed = await table.update(
        [Put(key("pk01", "a1"), b"x", versions[0]), Insert(key("pk01", "a3"), b"y"), Put(key("pk01", "a2"), b"z")]
    )
    assert len(changed) == 3
    await table.update([Remove(key("pk01", "a1"), changed[0]), Remove(key("pk01", "a3"))])
    assert [e.value if e else None for e in await table.get_all([key("pk01", "a1"), key("pk01", "a2")])] == [None, b"z"]


async def test_a_batch_across_primary_keys_or_mixing_removals_is_refused_before_anything_is_sent(
    table: KeyValueTable,
) -> None:
    with pytest.raises(InvalidModelError, match="same primary key"):
        await table.update([Put(key("pk01"), b"1"), Put(key("pk02"), b"2")])
    with pytest.raises(InvalidModelError, match="removals"):
        await table.update([Put(key("pk01"), b"1"), Remove(key("pk01", "bb"))])
    assert await table.get_all([key("pk01"), key("pk02")]) == [None, None]
    assert await table.update([]) == []


async def test_keys_of_the_wrong_length_and_values_too_long_are_refused(table: KeyValueTable) -> None:
    with pytest.raises(InvalidModelError, match="primary key: must be 4 bytes"):
        await table.put(TableKey(b"abc", b"aa"), b"v")
    with pytest.raises(InvalidModelError, match="secondary key: must be 2 bytes"):
        await table.get(TableKey(b"abcd"))
    with pytest.raises(InvalidModelError, match="value"):
        await table.put(key("abcd"), b"x" * (1024 * 1024))


async def test_keys_go_to_the_partition_of_their_primary_key_as_javas_hash_says(
    env: KvtController, table: KeyValueTable
) -> None:
    segments = table.partitions.segments
    assert [s.segment_id for s in segments] == [0, 1, 2, 3]
    primary = b"k001"
    expected = next(s for s in segments if s.key_start <= primary_key_position(primary) < s.key_end)
    for secondary in ("aa", "zz", "q1"):
        version = await table.put(TableKey(primary, secondary.encode()), b"v")
        assert version.segment_id == expected.segment_id
    raw = await table.client.read_table(table_segment_name("sc", "t", expected.segment_id), [primary + b"zz"])
    assert raw[0] is not None and raw[0].value == b"v"


async def test_get_all_reads_every_partition_and_keeps_the_order(table: KeyValueTable) -> None:
    keys = [key(f"k{i:03d}") for i in range(60)]
    for k in keys[::2]:
        await table.put(k, k.primary)
    found = await table.get_all(keys)
    assert [e.value if e else None for e in found] == [k.primary if i % 2 == 0 else None for i, k in enumerate(keys)]
    assert len({e.version.segment_id for e in found if e}) == 4


async def collect(items: AsyncIterator[_I]) -> list[_I]:
    return [item async for item in items]


async def test_iteration_by_primary_key_prefix_and_range_in_key_order(table: KeyValueTable) -> None:
    written = {}
    for p in ("ab01", "ab02", "ab10", "ac01", "zz99"):
        for s in ("00", "01", "10", "11"):
            written[key(p, s)] = await table.put(key(p, s), f"{p}{s}".encode())
    ordered = sorted(written, key=lambda k: k.primary + k.secondary)
    builder = table.iterator(max_iteration_size=3)  # pages of 3: several reads per segment
    assert await collect(builder.all().keys()) == ordered
    entries = await collect(builder.all().entries())
    assert [(e.key, e.version, e.value) for e in entries] == [(k, written[k], k.primary + k.secondary) for k in ordered]
    one = builder.for_primary_key(b"ab02")
    assert one.single_segment
    assert [k.secondary for k in await collect(one.keys())] == [b"00", b"01", b"10", b"11"]
    between = builder.for_primary_key(b"ab02", b"01", b"10")
    assert [e.value for e in await collect(between.entries())] == [b"ab0201", b"ab0210"]
    by_prefix = builder.for_primary_key_prefix(b"ab02", b"1")
    assert [k.secondary for k in await collect(by_prefix.keys())] == [b"10", b"11"]
    primaries = [k.primary for k in await collect(builder.for_prefix(b"ab").keys())]
    assert primaries == [b"ab01"] * 4 + [b"ab02"] * 4 + [b"ab10"] * 4
    assert {k.primary for k in await collect(builder.for_prefix(b"ab0").keys())} == {b"ab01", b"ab02"}
    assert {k.primary for k in await collect(builder.for_range(b"ab10", b"ac01").keys())} == {b"ab10", b"ac01"}
    assert await collect(builder.for_prefix(b"q").keys()) == []
    with pytest.raises(InvalidModelError, match="prefix"):
        builder.for_prefix(b"toolong")
    with pytest.raises(InvalidModelError, match="primary key"):
        builder.for_primary_key(b"ab")


async def test_a_table_deleted_under_an_open_client_is_not_found(manager: StreamManager, table: KeyValueTable) -> None:
    await table.put(key("k001"), b"v")
    assert await manager.delete_key_value_table("sc", "t")
    with pytest.raises(KeyValueTableNotFoundError):
        await table.get(key("k001"))
    with pytest.raises(KeyValueTableNotFoundError):
        await table.put(key("k001"), b"v")
