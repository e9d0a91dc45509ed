"""Concurrent conditional updates: one winner per version; tables do not wait for each other."""

from __future__ import annotations

import asyncio

import pytest
from memory_host import FaultyHost

from segment_store.tables.entries import NOT_EXISTS, TableEntry
from segment_store.tables.host import SegmentHost
from segment_store.tables.table_store import TableStore
from segstore_shared.table_errors import ConditionalTableUpdateError, TableKeyBadVersionError

pytestmark = pytest.mark.unit

T = "t"


async def test_concurrent_updates_with_same_version_have_exactly_one_winner(store: TableStore) -> None:
    await store.create_segment(T)
    [version] = await store.put(T, [TableEntry(b"k", b"start")])
    for round_number in range(20):

        async def attempt(i: int, expected: int = version, tag: int = round_number) -> int | None:
            try:
                [new] = await store.put(T, [TableEntry(b"k", b"%d/%d" % (tag, i), expected)])
                return new
            except TableKeyBadVersionError:
                return None

        results = await asyncio.gather(*(attempt(i) for i in range(25)))
        winners = [(i, v) for i, v in enumerate(results) if v is not None]
        assert len(winners) == 1
        winner, version = winners[0]
        assert await store.get(T, [b"k"]) == [TableEntry(b"k", b"%d/%d" % (round_number, winner), version)]


async def test_concurrent_inserts_with_not_exists_have_exactly_one_winner(store: TableStore) -> None:
    await store.create_segment(T)

    async def insert(i: int) -> bool:
        try:
            await store.put(T, [TableEntry(b"k", b"%d" % i, NOT_EXISTS)])
            return True
        except ConditionalTableUpdateError:
            return False

    assert sum(await asyncio.gather(*(insert(i) for i in range(30)))) == 1


async def test_compare_and_set_counter_with_racing_workers_counts_every_increment(store: TableStore) -> None:
    await store.create_segment(T)
    await store.put(T, [TableEntry(b"counter", b"0")])
    conflicts = 0
    seen: list[int] = []

    async def worker() -> None:
        nonlocal conflicts
        for _ in range(10):
            while True:
                [entry] = await store.get(T, [b"counter"])
                assert entry is not None
                try:
                    await store.put(T, [TableEntry(b"counter", b"%d" % (int(entry.value) + 1), entry.version)])
                    break
                except TableKeyBadVersionError:
                    conflicts += 1

    async def reader() -> None:
        for _ in range(100):
            [entry] = await store.get(T, [b"counter"])
            assert entry is not None
            seen.append(int(entry.value))
            await asyncio.sleep(0)

    await asyncio.gather(*(worker() for _ in range(15)), reader())
    [final] = await store.get(T, [b"counter"])
    assert final is not None and final.value == b"150"
    assert conflicts > 0  # the workers did race
    assert seen == sorted(seen)  # readers never see the counter go back


async def test_update_of_one_table_does_not_wait_for_another(host: SegmentHost) -> None:
    faulty = FaultyHost(host)
    store = TableStore(faulty)
    await store.create_segment("a")
    await store.create_segment("b")
    faulty.gate = asyncio.Event()
    faulty.gated_segment = "a"
    blocked = asyncio.create_task(store.put("a", [TableEntry(b"k", b"1")]))
    await faulty.waiting.wait()
    [vb] = await asyncio.wait_for(store.put("b", [TableEntry(b"k", b"1")]), 1.0)
    assert await store.get("b", [b"k"]) == [TableEntry(b"k", b"1", vb)]
    assert await store.get("a", [b"k"]) == [None]  # reads of the blocked table do not wait either
    assert not blocked.done()
    faulty.gate.set()
    [va] = await blocked
    assert await store.get("a", [b"k"]) == [TableEntry(b"k", b"1", va)]
