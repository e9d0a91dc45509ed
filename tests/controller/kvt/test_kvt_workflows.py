"""Key-value tables in the controller's domain API, over a real (in-memory) segment store: the table segments a
create makes (names, fixed key length, key ranges), delete, names and scopes, and controllers that die midway
(the next one, or the next call, finishes the work)."""

from __future__ import annotations

import pytest
from controller_env import ControllerEnv, Crash

from controller.errors import ScopeNotEmptyError, ScopeNotFoundError
from controller.kvt import KvtNameTakenError, KvtNotFoundError, KvtState
from controller.kvt.store import KvtMetadataStore
from controller_client.kvt.model import KeyValueTableConfiguration, table_segment_name
from controller_client.model import ScalingPolicy, SegmentRange, StreamConfiguration, segment_id
from segment_store.client import NoSuchSegmentError

pytestmark = pytest.mark.integration

CONFIG = KeyValueTableConfiguration(partition_count=3, primary_key_length=4, secondary_key_length=2)


async def key_lengths(env: ControllerEnv, scope: str, kvt: str, numbers: range) -> list[int]:
    found = []
    for n in numbers:
        info = await env.client.get_table_segment_info(table_segment_name(scope, kvt, segment_id(n, 0)))
        found.append(info.key_length)
    return found


async def missing(env: ControllerEnv, scope: str, kvt: str, numbers: range) -> bool:
    for n in numbers:
        with pytest.raises(NoSuchSegmentError):
            await env.client.get_table_segment_info(table_segment_name(scope, kvt, segment_id(n, 0)))
    return True


async def test_create_with_partitions_makes_fixed_key_table_segments_with_even_ranges(env: ControllerEnv) -> None:
    core = env.core()
    await core.create_scope("sc")
    assert await core.create_key_value_table("sc", "t", CONFIG)
    assert await key_lengths(env, "sc", "t", range(3)) == [6, 6, 6]
    assert table_segment_name("sc", "t", segment_id(2, 0)) == "sc/t_kvtable/2.#epoch.0"
    assert await core.key_value_table_configuration("sc", "t") == CONFIG
    assert await core.key_value_table_segments("sc", "t") == [
        SegmentRange(0, 0.0, 1 / 3),
        SegmentRange(1, 1 / 3, 2 / 3),
        SegmentRange(2, 2 / 3, 1.0),
    ]
    assert not await core.create_key_value_table("sc", "t", CONFIG)  # exists: False, as Pravega's TABLE_EXISTS
    other = KeyValueTableConfiguration(partition_count=1, primary_key_length=1)
    assert not await core.create_key_value_table("sc", "t", other)
    assert await core.key_value_table_configuration("sc", "t") == CONFIG


async def test_create_with_a_missing_scope_or_a_name_taken_by_a_stream_is_refused(env: ControllerEnv) -> None:
    core = env.core()
    with pytest.raises(ScopeNotFoundError):
        await core.create_key_value_table("nope", "t", CONFIG)
    await core.create_scope("sc")
    await core.create_stream("sc", "t_kvtable", StreamConfiguration(ScalingPolicy.fixed(1)))
    with pytest.raises(KvtNameTakenError, match="t_kvtable"):
        await core.create_key_value_table("sc", "t", CONFIG)
    assert await core.list_key_value_tables("sc", "", 10) == ([], "")


async def test_delete_removes_segments_and_record_and_a_new_table_numbers_above_them(env: ControllerEnv) -> None:
    core = env.core()
    await core.create_scope("sc")
    await core.create_key_value_table("sc", "t", CONFIG)
    await core.delete_key_value_table("sc", "t")
    assert await missing(env, "sc", "t", range(3))
    with pytest.raises(KvtNotFoundError):
        await core.key_value_table_configuration("sc", "t")
    with pytest.raises(KvtNotFoundError):
        await core.key_value_table_segments("sc", "t")
    with pytest.raises(KvtNotFoundError):
        await core.delete_key_value_table("sc", "t")
    assert await core.create_key_value_table("sc", "t", CONFIG)
    assert [s.segment_id for s in await core.key_value_table_segments("sc", "t")] == [3, 4, 5]
    assert await key_lengths(env, "sc", "t", range(3, 6)) == [6, 6, 6]


async def test_a_scope_with_a_table_is_not_empty_and_tables_list_by_page(env: ControllerEnv) -> None:
    core = env.core()
    await core.create_scope("sc")
    for name in ("c", "a", "b"):
        await core.create_key_value_table("sc", name, KeyValueTableConfiguration(1, 8))
    assert await core.list_key_value_tables("sc", "", 2) == (["a", "b"], "b")
    assert await core.list_key_value_tables("sc", "b", 2) == (["c"], "c")
    assert await core.list_key_value_tables("sc", "c", 2) == ([], "c")
    with pytest.raises(ScopeNotFoundError):
        await core.list_key_value_tables("nope", "", 2)
    with pytest.raises(ScopeNotEmptyError, match="kv tables"):
        await core.delete_scope("sc")
    for name in ("a", "b", "c"):
        await core.delete_key_value_table("sc", name)
    await core.delete_scope("sc")
    assert not await core.scope_exists("sc")


async def test_a_create_cut_short_is_finished_by_the_next_controllers_query(env: ControllerEnv) -> None:
    crashing, ops = env.crashing_core()
    await crashing.create_scope("sc")
    ops.crash_on, ops.after = "create_table_segment", 1
    with pytest.raises(Crash):
        await crashing.create_key_value_table("sc", "t", CONFIG)
    record = await KvtMetadataStore.beside(crashing.store).get("sc", "t")
    assert record is not None and record[0].state is KvtState.CREATING
    restarted = env.core()
    assert [s.segment_id for s in await restarted.key_value_table_segments("sc", "t")] == [0, 1, 2]
    assert await key_lengths(env, "sc", "t", range(3)) == [6, 6, 6]
    assert not await restarted.create_key_value_table("sc", "t", CONFIG)  # ACTIVE now


async def test_a_create_cut_short_is_finished_by_the_same_create_again(env: ControllerEnv) -> None:
    crashing, ops = env.crashing_core()
    await crashing.create_scope("sc")
    ops.crash_on, ops.after = "create_table_segment", 0
    with pytest.raises(Crash):
        await crashing.create_key_value_table("sc", "t", CONFIG)
    restarted = env.core()
    assert not await restarted.create_key_value_table("sc", "t", KeyValueTableConfiguration(1, 1))
    assert await restarted.create_key_value_table("sc", "t", CONFIG)
    assert await key_lengths(env, "sc", "t", range(3)) == [6, 6, 6]


async def test_a_delete_cut_short_hides_the_table_and_is_finished_by_delete_or_create(env: ControllerEnv) -> None:
    crashing, ops = env.crashing_core()
    await crashing.create_scope("sc")
    for name in ("t", "u"):
        await crashing.create_key_value_table("sc", name, CONFIG)
    ops.crash_on, ops.after = "delete_table_segment", ops.calls.get("delete_table_segment", 0)
    for name in ("t", "u"):
        with pytest.raises(Crash):
            await crashing.delete_key_value_table("sc", name)
    restarted = env.core()
    with pytest.raises(KvtNotFoundError):
        await restarted.key_value_table_configuration("sc", "t")  # DELETING: gone for queries
    assert await restarted.list_key_value_tables("sc", "", 10) == (["t", "u"], "u")
    await restarted.delete_key_value_table("sc", "t")
    assert await missing(env, "sc", "t", range(3))
    assert await restarted.create_key_value_table("sc", "u", KeyValueTableConfiguration(2, 8))
    assert await missing(env, "sc", "u", range(3))
    assert [s.segment_id for s in await restarted.key_value_table_segments("sc", "u")] == [3, 4]
    assert await restarted.list_key_value_tables("sc", "", 10) == (["u"], "u")


async def test_a_recursive_scope_delete_deletes_its_tables_and_their_segments(env: ControllerEnv) -> None:
    core = env.core()
    await core.create_scope("sc")
    await core.create_key_value_table("sc", "t", CONFIG)
    await core.create_stream("sc", "st", StreamConfiguration(ScalingPolicy.fixed(1)))
    await core.delete_scope("sc", recursive=True)
    assert not await core.scope_exists("sc")
    assert await missing(env, "sc", "t", range(3))
