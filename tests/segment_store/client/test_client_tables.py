"""Table-segment operations through the client against the real server, and their typed errors."""

from __future__ import annotations

import pytest

from segment_store.client import (
    NOT_EXISTS,
    NoSuchSegmentError,
    SegmentAlreadyExistsError,
    SegmentClient,
    TableKeyBadVersionReplyError,
    TableKeyDoesNotExistReplyError,
    TableSegmentNotEmptyReplyError,
)
from segstore_shared.table_errors import TableKeyBadVersionError

pytestmark = pytest.mark.integration

TABLE = "_system/_tables/config"


async def test_table_round_trip_with_updates_reads_and_removals(client: SegmentClient) -> None:
    await client.create_table_segment(TABLE)
    versions = await client.update_table_entries(TABLE, [(b"a", b"1"), (b"b", b"2", NOT_EXISTS)])
    assert len(versions) == 2 and versions[0] >= 0
    entries = await client.read_table(TABLE, [b"a", b"b", b"missing"])
    assert [(e.key, e.value) if e else None for e in entries] == [(b"a", b"1"), (b"b", b"2"), None]
    assert entries[0] is not None and entries[0].version == versions[0]
    (new_a,) = await client.update_table_entries(TABLE, [(b"a", b"10", versions[0])])
    assert new_a != versions[0]
    await client.remove_table_keys(TABLE, [(b"b", versions[1])])
    assert await client.read_table(TABLE, [b"b"]) == [None]
    await client.remove_table_keys(TABLE, [b"a"])
    info = await client.get_table_segment_info(TABLE)
    assert info.entry_count == 0 and info.name == TABLE
    await client.delete_table_segment(TABLE, must_be_empty=True)
    with pytest.raises(NoSuchSegmentError):
        await client.read_table(TABLE, [b"a"])


async def test_table_iteration_with_pages_returns_every_key_once(client: SegmentClient) -> None:
    await client.create_table_segment(TABLE)
    expected = {b"key-%03d" % i: b"value-%d" % i for i in range(250)}
    await client.update_table_entries(TABLE, expected)
    keys: list[bytes] = []
    token = b""
    while True:
        page = await client.read_table_keys(TABLE, 40, token)
        if not page.keys:
            break
        keys.extend(k.key for k in page.keys)
        token = page.continuation_token
    assert sorted(keys) == sorted(expected)
    entries = {e.key: e.value async for e in client.iter_table_entries(TABLE, page_size=64)}
    assert entries == expected


async def test_table_delta_read_with_position_returns_changes(client: SegmentClient) -> None:
    await client.create_table_segment(TABLE)
    await client.update_table_entries(TABLE, {b"x": b"1", b"y": b"2"})
    first = await client.read_table_entries_delta(TABLE, 0, 100)
    assert {e.key for e in first.entries} == {b"x", b"y"}
    await client.update_table_entries(TABLE, {b"z": b"3"})
    later = await client.read_table_entries_delta(TABLE, first.last_position, 100)
    assert [e.key for e in later.entries] == [b"z"]


async def test_table_errors_with_failed_conditions_are_typed(client: SegmentClient) -> None:
    await client.create_table_segment(TABLE)
    with pytest.raises(SegmentAlreadyExistsError):
        await client.create_table_segment(TABLE)
    (version,) = await client.update_table_entries(TABLE, [(b"k", b"v")])
    with pytest.raises(TableKeyBadVersionReplyError) as bad:
        await client.update_table_entries(TABLE, [(b"k", b"w", version + 1000)])
    assert isinstance(bad.value, TableKeyBadVersionError) and bad.value.segment == TABLE
    with pytest.raises(TableKeyBadVersionReplyError):
        await client.update_table_entries(TABLE, [(b"k", b"w", NOT_EXISTS)])
    with pytest.raises(TableKeyDoesNotExistReplyError):
        await client.update_table_entries(TABLE, [(b"absent", b"w", 0)])
    with pytest.raises(TableSegmentNotEmptyReplyError):
        await client.delete_table_segment(TABLE, must_be_empty=True)
    assert [e.value if e else None for e in await client.read_table(TABLE, [b"k"])] == [b"v"]
