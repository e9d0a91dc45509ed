"""The key-value table records on both coordination stores (in-memory and ZooKeeper): one node per table under
its scope, compare-and-set state changes, removal by version, listing, the numbers of deleted tables, and the
record format (exact floats, a newer format refused)."""

from __future__ import annotations

import dataclasses
import json
import uuid

import pytest
from metadata_contract_env import Clock, Connect

from controller.kvt.records import (
    DeletedKvtRecord,
    KvtEpochRecord,
    KvtRecord,
    KvtSegmentRecord,
    KvtState,
    decode_deleted,
    decode_kvt,
    encode_deleted,
    encode_kvt,
)
from controller.kvt.store import KvtMetadataStore
from controller.metadata import StreamMetadataStore
from controller.metadata.codec import CodecError
from controller.metadata.errors import ScopeNotFoundError, WriteConflictError
from controller_client.kvt.model import KeyValueTableConfiguration

pytestmark = pytest.mark.contract

CONFIG = KeyValueTableConfiguration(2, 16, 4, rollover_size_bytes=1 << 20)


def record(state: KvtState = KvtState.CREATING, first: int = 0) -> KvtRecord:
    segments = (KvtSegmentRecord(first, 0, 5, 0.0, 0.1 + 0.2), KvtSegmentRecord(first + 1, 0, 5, 0.1 + 0.2, 1.0))
    return KvtRecord(uuid.uuid4(), state, CONFIG, 5, KvtEpochRecord(0, 0, segments, 5))


@pytest.fixture
async def kvts(store: StreamMetadataStore) -> KvtMetadataStore:
    await store.create_scope("sc")
    return KvtMetadataStore.beside(store)


async def test_create_get_set_state_and_remove_with_versions(kvts: KvtMetadataStore) -> None:
    created = record()
    assert await kvts.create("sc", "t", created)
    assert not await kvts.create("sc", "t", record())
    found = await kvts.get("sc", "t")
    assert found is not None and found[0] == created
    version = await kvts.set_state("sc", "t", created, found[1], KvtState.ACTIVE)
    with pytest.raises(WriteConflictError):
        await kvts.set_state("sc", "t", created, found[1], KvtState.DELETING)  # a stale version
    active = await kvts.get("sc", "t")
    assert active is not None and active[0].state is KvtState.ACTIVE and active[1] == version
    with pytest.raises(WriteConflictError):
        await kvts.remove("sc", "t", found[1])
    await kvts.remove("sc", "t", version)
    await kvts.remove("sc", "t", version)  # gone already: fine
    assert await kvts.get("sc", "t") is None


async def test_a_table_needs_its_scope_and_lists_with_pages(kvts: KvtMetadataStore) -> None:
    with pytest.raises(ScopeNotFoundError):
        await kvts.create("nope", "t", record())
    with pytest.raises(ScopeNotFoundError):
        await kvts.list_tables("nope")
    for name in ("b", "a", "c"):
        await kvts.create("sc", name, record())
    assert await kvts.list_tables("sc", "", 2) == (["a", "b"], "b")
    assert await kvts.list_tables("sc", "b", 2) == (["c"], "c")


async def test_deleted_numbers_only_rise_and_outlive_the_scope(
    kvts: KvtMetadataStore, store: StreamMetadataStore
) -> None:
    assert await kvts.first_segment_number("sc", "t") == 0
    await kvts.record_deleted("sc", "t", 4)
    await kvts.record_deleted("sc", "t", 2)
    assert await kvts.first_segment_number("sc", "t") == 5
    await store.delete_scope("sc")
    await store.create_scope("sc")
    assert await kvts.first_segment_number("sc", "t") == 5
    assert await kvts.first_segment_number("sc", "u") == 0


async def test_a_second_session_sees_the_same_records(connect: Connect, clock: Clock) -> None:
    first = StreamMetadataStore(await connect(), clock_ms=clock)
    await first.create_scope("sc")
    await KvtMetadataStore.beside(first).create("sc", "t", record(KvtState.ACTIVE))
    second = KvtMetadataStore.beside(StreamMetadataStore(await connect(), clock_ms=clock))
    found = await second.get("sc", "t")
    assert found is not None and found[0].state is KvtState.ACTIVE and found[0].config == CONFIG


def test_records_round_trip_exactly_and_a_newer_format_is_refused() -> None:
    original = record(KvtState.DELETING, first=7)
    assert decode_kvt(encode_kvt(original)) == original
    assert decode_kvt(encode_kvt(original)).epoch.segments[0].key_end == 0.1 + 0.2
    assert decode_deleted(encode_deleted(DeletedKvtRecord(9))) == DeletedKvtRecord(9)
    newer = json.loads(encode_kvt(original))
    newer["v"] = 2
    with pytest.raises(CodecError, match="newer"):
        decode_kvt(json.dumps(newer).encode())
    with pytest.raises(CodecError):
        decode_kvt(b"[1, 2]")
    broken = json.loads(encode_kvt(dataclasses.replace(original, state=KvtState.ACTIVE)))
    del broken["config"]
    with pytest.raises(CodecError, match="config"):
        decode_kvt(json.dumps(broken).encode())
