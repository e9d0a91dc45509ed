"""Delta reads: entries in segment order from a position, removals included, positions, should_clear."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from segment_store.tables.entries import DeltaEntry, DeltaRead, TableEntry, TableKey
from segment_store.tables.host import SegmentHost
from segment_store.tables.table_store import TableStore
from segstore_shared.contracts import InvalidOffsetError

pytestmark = pytest.mark.unit

T = "t"


async def read_all_deltas(store: TableStore, start: int, count: int) -> tuple[list[DeltaEntry], list[DeltaRead]]:
    entries: list[DeltaEntry] = []
    reads: list[DeltaRead] = []
    position = start
    while True:
        read = await store.read_entries_delta(T, position, count)
        reads.append(read)
        entries += read.entries
        assert len(read.entries) <= count
        position = read.last_position
        if read.reached_end:
            return entries, reads


async def test_delta_of_empty_table_is_at_end(store: TableStore) -> None:
    await store.create_segment(T)
    assert await store.read_entries_delta(T, 0, 10) == DeltaRead([], False, True, 0)


async def test_delta_returns_updates_and_removals_in_segment_order(store: TableStore, host: SegmentHost) -> None:
    await store.create_segment(T)
    va, vb = await store.put(T, [TableEntry(b"a", b"1"), TableEntry(b"b", b"2")])
    await store.remove(T, [TableKey(b"a")])
    [vb2] = await store.put(T, [TableEntry(b"b", b"3")])
    entries, reads = await read_all_deltas(store, 0, 2)
    assert [(e.key, e.value, e.removed) for e in entries] == [
        (b"a", b"1", False),
        (b"b", b"2", False),
        (b"a", b"", True),
        (b"b", b"3", False),
    ]
    assert [entries[0].version, entries[1].version, entries[3].version] == [va, vb, vb2]
    assert [len(r.entries) for r in reads] == [2, 2]
    assert not reads[0].reached_end and reads[-1].reached_end
    assert reads[-1].last_position == (await host.get_info(T)).length
    assert not any(r.should_clear for r in reads)


async def test_delta_from_last_position_returns_only_newer_entries(store: TableStore) -> None:
    await store.create_segment(T)
    await store.put(T, [TableEntry(b"k%d" % i, b"v") for i in range(10)])
    first = await store.read_entries_delta(T, 0, 100)
    assert first.reached_end and len(first.entries) == 10
    assert await store.read_entries_delta(T, first.last_position, 100) == DeltaRead(
        [], False, True, first.last_position
    )
    [v] = await store.put(T, [TableEntry(b"k3", b"changed")])
    second = await store.read_entries_delta(T, first.last_position, 100)
    assert second.entries == [DeltaEntry(b"k3", b"changed", v, False)]
    assert second.reached_end and not second.should_clear


async def test_delta_from_position_beyond_length_raises(store: TableStore) -> None:
    await store.create_segment(T)
    await store.put(T, [TableEntry(b"a", b"1")])
    length = (await store.info(T)).length
    with pytest.raises(InvalidOffsetError):
        await store.read_entries_delta(T, length + 1, 10)
    with pytest.raises(InvalidOffsetError):
        await store.read_entries_delta(T, -1, 10)


async def test_delta_below_compacted_head_should_clear_and_keeps_versions(
    make_store: Callable[..., TableStore], host: SegmentHost
) -> None:
    store = make_store(compaction_trigger_bytes=0, max_compaction_bytes=10_000_000)
    await store.create_segment(T)
    versions = await store.put(T, [TableEntry(b"k%d" % i, b"first-%d" % i) for i in range(20)])
    for _ in range(3):
        await store.put(T, [TableEntry(b"k%d" % i, b"later-%d" % i) for i in range(10)])
    before_compaction = (await host.get_info(T)).length
    assert await store.compact(T, force=True)
    info = await host.get_info(T)
    assert info.start_offset == before_compaction  # everything before the copies is gone
    entries, reads = await read_all_deltas(store, 0, 1000)
    assert reads[0].should_clear
    # a client clearing its state and applying these entries has the table
    state = {e.key: (e.value, e.version) for e in entries if not e.removed}
    current = await store.get(T, [b"k%d" % i for i in range(20)])
    assert state == {e.key: (e.value, e.version) for e in current if e is not None}
    # copied entries keep the versions they had
    assert {state[b"k%d" % i][1] for i in range(10, 20)} == set(versions[10:20])
    # a position at or after the head does not ask for a clear
    later = await store.read_entries_delta(T, info.start_offset, 5)
    assert not later.should_clear
