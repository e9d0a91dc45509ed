"""Model test: random batches of conditional and unconditional updates and removals, restarts and
compactions, checked against a dict after every step."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from segment_store.tables.config import TableConfig
from segment_store.tables.entries import NO_VERSION, NOT_EXISTS, TableEntry, TableKey
from segment_store.tables.host import SegmentHost
from segment_store.tables.table_store import TableStore
from segstore_shared.table_errors import TableKeyBadVersionError, TableKeyNotExistsError

pytestmark = pytest.mark.unit

KEYS = [b"a", b"b", b"c", b"dd", b"eee", b"f" * 300]
CONDITIONS = ["none", "current", "not_exists", "stale"]
CONFIG = TableConfig(read_chunk_bytes=64, compaction_trigger_bytes=300, max_compaction_bytes=400)
_tables = itertools.count()


@dataclass(frozen=True)
class Put:
    items: list[tuple[bytes, bytes, str]]


@dataclass(frozen=True)
class Remove:
    items: list[tuple[bytes, str]]


@dataclass(frozen=True)
class Restart:
    pass


@dataclass(frozen=True)
class Compact:
    pass


keys = st.sampled_from(KEYS)
conditions = st.sampled_from(CONDITIONS)
operations = st.one_of(
    st.builds(Put, st.lists(st.tuples(keys, st.binary(max_size=120), conditions), min_size=1, max_size=4)),
    st.builds(Remove, st.lists(st.tuples(keys, conditions), min_size=1, max_size=3)),
    st.just(Restart()),
    st.just(Compact()),
)


def condition_version(model: dict[bytes, tuple[bytes, int]], key: bytes, kind: str) -> int:
    current = model.get(key)
    if kind == "none":
        return NO_VERSION
    if kind == "not_exists":
        return NOT_EXISTS
    if kind == "current":
        return current[1] if current else NOT_EXISTS
    return current[1] + 1 if current else 12345  # stale


def expected_failure(model: dict[bytes, tuple[bytes, int]], conditioned: list[tuple[bytes, int]]) -> type | None:
    missing = [k for k, v in conditioned if v not in (NO_VERSION, NOT_EXISTS) and k not in model]
    if missing:
        return TableKeyNotExistsError
    for key, version in conditioned:
        if version == NO_VERSION:
            continue
        current = model.get(key)
        if current is not None and current[1] != version:
            return TableKeyBadVersionError
    return None


async def check(store: TableStore, name: str, model: dict[bytes, tuple[bytes, int]]) -> None:
    got = await store.get(name, KEYS)
    assert {e.key: (e.value, e.version) for e in got if e is not None} == model
    iterated: list[TableEntry] = []
    token = b""
    while True:
        items, token = await store.read_entries(name, 2, token)
        if not items:
            break
        iterated += items
    assert sorted((e.key, e.value, e.version) for e in iterated) == sorted((k, v, ver) for k, (v, ver) in model.items())
    assert (await store.info(name)).entry_count == len(model)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(operations, min_size=1, max_size=25))
async def test_table_matches_dict_model(host: SegmentHost, ops: list[Put | Remove | Restart | Compact]) -> None:
    name = f"model-{next(_tables)}"
    store = TableStore(host, CONFIG)
    await store.create_segment(name)
    model: dict[bytes, tuple[bytes, int]] = {}
    last_version = -1
    for op in ops:
        if isinstance(op, Restart):
            store = TableStore(host, CONFIG)
        elif isinstance(op, Compact):
            await store.compact(name, force=True)
        elif isinstance(op, Put):
            entries = [TableEntry(k, v, condition_version(model, k, c)) for k, v, c in op.items]
            failure = expected_failure(model, [(e.key, e.version) for e in entries])
            try:
                versions = await store.put(name, entries)
                assert failure is None, f"expected {failure}"
            except (TableKeyBadVersionError, TableKeyNotExistsError) as e:
                assert type(e) is failure
            else:
                assert versions == sorted(versions) and versions[0] > last_version
                last_version = versions[-1]
                for entry, version in zip(entries, versions, strict=True):
                    model[entry.key] = (entry.value, version)
        else:
            removals = [TableKey(k, condition_version(model, k, c)) for k, c in op.items]
            failure = expected_failure(model, [(k.key, k.version) for k in removals])
            try:
                await store.remove(name, removals)
                assert failure is None, f"expected {failure}"
            except (TableKeyBadVersionError, TableKeyNotExistsError) as e:
                assert type(e) is failure
            else:
                for key in removals:
                    model.pop(key.key, None)
        await check(store, name, model)
    await check(TableStore(host, CONFIG), name, model)
