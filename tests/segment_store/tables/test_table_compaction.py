"""Index rebuild from the segment (a restart) and compaction: versions and values survive both."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable

import pytest

from segment_store.reading.read_index import ReadResult
from segment_store.tables.entries import NOT_EXISTS, TableEntry, TableKey
from segment_store.tables.host import SegmentHost
from segment_store.tables.table_store import TableStore
from segstore_shared.table_errors import TableKeyBadVersionError

pytestmark = pytest.mark.unit

T = "t"


async def snapshot(store: TableStore) -> dict[bytes, tuple[bytes, int]]:
    """Every entry by iteration, checked against get."""
    found: dict[bytes, tuple[bytes, int]] = {}
    token = b""
    while True:
        items, token = await store.read_entries(T, 50, token)
        if not items:
            break
        for e in items:
            assert e.key not in found
            found[e.key] = (e.value, e.version)
    got = await store.get(T, list(found))
    assert {e.key: (e.value, e.version) for e in got if e is not None} == found
    return found


async def churn(store: TableStore, rng: random.Random, rounds: int, keys: int = 30) -> None:
    for _ in range(rounds):
        batch = [TableEntry(b"key-%d" % rng.randrange(keys), rng.randbytes(rng.randrange(1, 400))) for _ in range(3)]
        await store.put(T, batch)
        if rng.random() < 0.3:
            await store.remove(T, [TableKey(b"key-%d" % rng.randrange(keys))])


async def test_rebuild_after_restart_matches_the_running_index(
    store: TableStore, make_store: Callable[..., TableStore]
) -> None:
    await store.create_segment(T)
    await churn(store, random.Random(3), 200)
    before = await snapshot(store)
    restarted = make_store(read_chunk_bytes=64)  # tiny reads: entries span many of them
    assert await snapshot(restarted) == before
    assert (await restarted.info(T)).entry_count == len(before)
    # the rebuilt index enforces the same versions
    key, (_, version) = next(iter(before.items()))
    await restarted.put(T, [TableEntry(key, b"next", version)])
    try:
        await restarted.put(T, [TableEntry(key, b"stale", version)])
        raise AssertionError("a stale version was accepted after a rebuild")
    except TableKeyBadVersionError:
        pass


async def test_compaction_keeps_values_and_versions_and_truncates(
    make_store: Callable[..., TableStore], host: SegmentHost
) -> None:
    writer = make_store(compaction_trigger_bytes=10**9)  # no compaction while writing
    await writer.create_segment(T)
    await churn(writer, random.Random(5), 150)
    before = await snapshot(writer)
    assert (await host.get_info(T)).start_offset == 0
    store = make_store(compaction_trigger_bytes=0, max_compaction_bytes=3000)
    passes = 0
    while await store.compact(T):
        passes += 1
        assert await snapshot(store) == before
        assert passes < 1000
    assert passes > 1
    info = await host.get_info(T)
    assert info.start_offset > 0
    live = sum(len(k) + len(v) + 21 for k, (v, _) in before.items())
    assert info.length - info.start_offset <= live * 100 / 75 + 3000
    assert await snapshot(make_store()) == before  # rebuild after compaction


async def test_updates_trigger_compaction_and_bound_the_segment(
    make_store: Callable[..., TableStore], host: SegmentHost
) -> None:
    store = make_store(compaction_trigger_bytes=4000, max_compaction_bytes=4000, min_utilization_percent=60)
    await store.create_segment(T)
    rng = random.Random(11)
    model: dict[bytes, bytes] = {}
    for _ in range(600):
        key, value = b"key-%d" % rng.randrange(20), rng.randbytes(rng.randrange(1, 100))
        await store.put(T, [TableEntry(key, value)])
        model[key] = value
    info = await host.get_info(T)
    assert info.start_offset > 0
    assert info.length - info.start_offset < 20 * 140 * 100 / 60 + 2 * 4000
    assert {k: v for k, (v, _) in (await snapshot(store)).items()} == model
    assert {k: v for k, (v, _) in (await snapshot(make_store())).items()} == model


async def test_version_read_before_compaction_still_conditions_after(
    make_store: Callable[..., TableStore],
) -> None:
    store = make_store(compaction_trigger_bytes=0)
    await store.create_segment(T)
    [v_keep] = await store.put(T, [TableEntry(b"keep", b"1", NOT_EXISTS)])
    for i in range(50):
        await store.put(T, [TableEntry(b"churn", b"%d" % i)])
    assert await store.compact(T, force=True)
    entry = (await store.get(T, [b"keep"]))[0]
    assert entry == TableEntry(b"keep", b"1", v_keep)
    for restarted in (store, make_store()):
        try:
            await restarted.put(T, [TableEntry(b"keep", b"x", v_keep + 1)])
            raise AssertionError("a wrong version was accepted")
        except TableKeyBadVersionError as e:
            assert e.versions == {b"keep": (v_keep + 1, v_keep)}
    [v2] = await make_store().put(T, [TableEntry(b"keep", b"2", v_keep)])
    assert v2 > v_keep


class PausingReads:
    """A SegmentHost whose reads at or below ``pause_below`` wait until ``release`` is set."""

    def __init__(self, inner: SegmentHost) -> None:
        self.inner = inner
        self.pause_below = -1
        self.paused = asyncio.Event()
        self.release = asyncio.Event()

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    async def read(self, name: str, offset: int, max_length: int, timeout_s: float = 0.0) -> ReadResult:
        if offset <= self.pause_below:
            self.pause_below = -1
            self.paused.set()
            await self.release.wait()
        return await self.inner.read(name, offset, max_length, timeout_s)


async def test_get_racing_a_compaction_that_truncates_its_entry_reads_the_copy(host: SegmentHost) -> None:
    pausing = PausingReads(host)
    store = TableStore(pausing)
    await store.create_segment(T)
    [v] = await store.put(T, [TableEntry(b"old", b"value")])
    await store.put(T, [TableEntry(b"other", b"x") for _ in range(20)])
    pausing.pause_below = 0
    reader = asyncio.create_task(store.get(T, [b"old"]))
    await pausing.paused.wait()
    assert await store.compact(T, force=True)  # copies "old" to the tail and truncates its first entry
    assert (await host.get_info(T)).start_offset > 0
    pausing.release.set()
    assert await reader == [TableEntry(b"old", b"value", v)]
