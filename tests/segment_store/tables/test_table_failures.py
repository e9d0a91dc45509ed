"""Failed, lost and cancelled appends: the index never keeps a change the segment does not have, and never
misses one it does."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
from memory_host import FaultyHost, InjectedError

from segment_store.tables.config import TableConfig
from segment_store.tables.entries import NO_VERSION, NOT_EXISTS, TableEntry, TableKey
from segment_store.tables.entry_serializer import serialize
from segment_store.tables.host import SegmentHost
from segment_store.tables.table_store import TableStore
from segstore_shared.contracts import AttributeUpdate
from segstore_shared.table_errors import TableKeyBadVersionError, TableKeyNotExistsError

pytestmark = pytest.mark.unit

T = "t"


async def test_append_failing_before_write_leaves_table_unchanged(host: SegmentHost) -> None:
    faulty = FaultyHost(host)
    store = TableStore(faulty)
    await store.create_segment(T)
    [v] = await store.put(T, [TableEntry(b"a", b"1")])
    faulty.fail_before = 1
    with pytest.raises(InjectedError):
        await store.put(T, [TableEntry(b"a", b"2", v), TableEntry(b"b", b"2")])
    assert await store.get(T, [b"a", b"b"]) == [TableEntry(b"a", b"1", v), None]
    faulty.fail_before = 1
    with pytest.raises(InjectedError):
        await store.remove(T, [TableKey(b"a")])
    [v2, _] = await store.put(T, [TableEntry(b"a", b"3", v), TableEntry(b"b", b"3", NOT_EXISTS)])
    assert await store.get(T, [b"a"]) == [TableEntry(b"a", b"3", v2)]


async def test_append_written_but_unacknowledged_is_indexed_on_next_use(host: SegmentHost) -> None:
    faulty = FaultyHost(host)
    store = TableStore(faulty)
    await store.create_segment(T)
    [v] = await store.put(T, [TableEntry(b"a", b"1")])
    faulty.fail_after = 1
    with pytest.raises(InjectedError):
        await store.put(T, [TableEntry(b"a", b"2", v)])
    # the write landed: readers see it, and the version it replaced no longer conditions anything
    [entry] = await store.get(T, [b"a"])
    assert entry is not None and entry.value == b"2" and entry.version > v
    with pytest.raises(TableKeyBadVersionError):
        await store.put(T, [TableEntry(b"a", b"3", v)])
    faulty.fail_after = 1
    with pytest.raises(InjectedError):
        await store.remove(T, [TableKey(b"a")])
    with pytest.raises(TableKeyNotExistsError):
        await store.put(T, [TableEntry(b"a", b"4", entry.version)])
    assert (await store.info(T)).entry_count == 0


class StrayBeforeNextAppend(FaultyHost):
    """Lands an update of ``key`` (as an earlier lost append would) just before the next append reaches the host."""

    def __init__(self, inner: SegmentHost) -> None:
        super().__init__(inner)
        self.stray: tuple[str, bytes] | None = None

    async def append(
        self,
        name: str,
        data: bytes,
        attribute_updates: Sequence[AttributeUpdate] = (),
        expected_offset: int | None = None,
    ) -> int:
        if self.stray is not None:
            segment, key = self.stray
            self.stray = None
            await self.inner.append(segment, serialize([(key, b"stray", NO_VERSION)])[0])
        return await super().append(name, data, attribute_updates, expected_offset)


async def test_entry_landing_between_check_and_append_fails_the_condition(host: SegmentHost) -> None:
    stray = StrayBeforeNextAppend(host)
    store = TableStore(stray)
    await store.create_segment(T)
    [v] = await store.put(T, [TableEntry(b"a", b"1")])
    stray.stray = (T, b"a")
    with pytest.raises(TableKeyBadVersionError):
        await store.put(T, [TableEntry(b"a", b"mine", v)])
    [entry] = await store.get(T, [b"a"])
    assert entry is not None and entry.value == b"stray"
    # an unconditional batch after a stray entry is applied after it, in segment order
    stray.stray = (T, b"b")
    [vb] = await store.put(T, [TableEntry(b"b", b"mine")])
    assert await store.get(T, [b"b"]) == [TableEntry(b"b", b"mine", vb)]
    assert await TableStore(host).get(T, [b"b"]) == [TableEntry(b"b", b"mine", vb)]


async def test_cancelled_update_keeps_the_lock_until_its_append_has_an_outcome(host: SegmentHost) -> None:
    faulty = FaultyHost(host)
    store = TableStore(faulty)
    await store.create_segment(T)
    faulty.gate = asyncio.Event()
    first = asyncio.create_task(store.put(T, [TableEntry(b"a", b"first", NOT_EXISTS)]))
    await faulty.waiting.wait()
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    second = asyncio.create_task(store.put(T, [TableEntry(b"a", b"second", NOT_EXISTS)]))
    await asyncio.sleep(0.01)
    assert not second.done()  # waits for the first append, which is still in flight
    faulty.gate.set()
    with pytest.raises(TableKeyBadVersionError):
        await second
    [entry] = await store.get(T, [b"a"])
    assert entry is not None and entry.value == b"first"
    await store.close()


class FailCompactionAppends(FaultyHost):
    """Fails appends that move the compaction offset (the compactor's copies)."""

    failures = 0

    async def append(
        self,
        name: str,
        data: bytes,
        attribute_updates: Sequence[AttributeUpdate] = (),
        expected_offset: int | None = None,
    ) -> int:
        if attribute_updates and self.failures:
            self.failures -= 1
            raise InjectedError("compaction append failed")
        return await super().append(name, data, attribute_updates, expected_offset)


async def test_failed_compaction_does_not_fail_the_update(host: SegmentHost, caplog: pytest.LogCaptureFixture) -> None:
    faulty = FailCompactionAppends(host)
    store = TableStore(faulty, TableConfig(compaction_trigger_bytes=100, min_utilization_percent=100))
    await store.create_segment(T)
    await store.put(T, [TableEntry(b"keep", b"k")])
    faulty.failures = 1
    versions = [(await store.put(T, [TableEntry(b"a", b"%d" % i)]))[0] for i in range(5)]
    assert "compaction failed" in caplog.text
    assert faulty.failures == 0
    assert await store.get(T, [b"a", b"keep"]) == [
        TableEntry(b"a", b"4", versions[-1]),
        TableEntry(b"keep", b"k", 0),
    ]
    assert (await host.get_info(T)).start_offset > 0  # later passes succeeded
