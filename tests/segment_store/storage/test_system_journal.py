"""System journal (seed 004): record format, the chain, and one test per failure scenario of the seed.

Everything runs on the in-memory chunk storage (wrapped in the fault injector or a corrupting
wrapper where a scenario needs it) with a manual clock; "reopen" is a new instance with a
higher epoch on the same chunk storage and snapshot pointer store.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Callable

import pytest
from journal_env import CID, Env, FlakyPointerStore, _corruptions, describe, put_record

from segment_store.storage.backends.memory import MemoryChunkStorage
from segment_store.storage.chunk_storage import ChunkStorageUnavailableError
from segment_store.storage.data_chunk_names import data_prefix
from segment_store.storage.journal.chunk_metadata import (
    AddChunk,
    ChunkEntry,
    ChunkMetadata,
    ChunkMetadataError,
    CreateSegment,
    ReplaceChunks,
    SegmentLayout,
    TruncateSegment,
)
from segment_store.storage.journal.records import (
    HEADER,
    JournalRecord,
    RecordFormatError,
    SnapshotRecord,
    decode_record,
    encode_record,
    parse_system_name,
    system_name,
    system_prefix,
)
from segment_store.storage.journal.system_journal import (
    InMemorySnapshotInfoStore,
    JournalCorruptedError,
    SnapshotInfo,
    StorageNotPrimaryError,
    SystemJournal,
)
from segstore_shared.contracts import ContainerOfflineError

pytestmark = pytest.mark.unit


def test_record_round_trip_and_names() -> None:
    record = JournalRecord(
        CID,
        5,
        17,
        "system/c3/snapshot/e000000000005-000000000016",
        (
            CreateSegment("a/b", "events"),
            AddChunk("a/b", "data/c3/a%2Fb/e5-18.parquet", 0, 100),
            TruncateSegment("a/b", 50),
        ),
    )
    assert record.name == "system/c3/journal/e000000000005-000000000017"
    assert decode_record(record.name, encode_record(record), CID) == record
    parsed = parse_system_name(record.name)
    assert parsed is not None and (parsed.kind, parsed.epoch, parsed.seq) == ("journal", 5, 17)
    snap = SnapshotRecord(CID, 5, 18, record.name, [SegmentLayout("x", "raw").to_json()])
    decoded = decode_record(snap.name, encode_record(snap), CID)
    assert isinstance(decoded, SnapshotRecord) and decoded.prev == record.name
    assert [s.name for s in decoded.metadata()] == ["x"]


def test_time_bounds_round_trip_and_records_and_snapshots_without_them_stay_readable() -> None:
    timed = (
        CreateSegment("a", "events"),
        AddChunk("a", "data/c3/a/e1-1.parquet", 0, 100, 5, 9),
        ReplaceChunks("a", "data/c3/a/e1-2.parquet", 0, 100, ("data/c3/a/e1-1.parquet",), 7, 7),
    )
    record = JournalRecord(CID, 1, 2, None, timed)
    assert decode_record(record.name, encode_record(record), CID) == record
    old = JournalRecord(CID, 1, 3, None, (AddChunk("a", "data/c3/a/e1-3.parquet", 100, 50),))
    raw = encode_record(old)
    assert b"min_ms" not in raw  # written as before bounds existed
    assert decode_record(old.name, raw, CID) == old
    metadata = ChunkMetadata()
    for change in (*timed, *old.changes):
        metadata.apply(change)
    layout = metadata.get("a")
    assert layout is not None
    assert [(c.min_ms, c.max_ms, c.timed) for c in layout.chunks] == [(7, 7, True), (None, None, False)]
    snapshot = metadata.to_json()
    assert snapshot[0]["chunks"] == [["data/c3/a/e1-2.parquet", 0, 100, 7, 7], ["data/c3/a/e1-3.parquet", 100, 50]]
    assert ChunkMetadata.from_json(snapshot).get("a").chunks == layout.chunks  # type: ignore[union-attr]
    with pytest.raises(ChunkMetadataError):
        SegmentLayout.from_json({**snapshot[0], "chunks": [["x", 0, 150, 7]]})


@pytest.mark.parametrize(("label", "corrupt"), _corruptions(), ids=[c[0] for c in _corruptions()])
def test_decode_record_with_corrupt_bytes_raises(label: str, corrupt: Callable[[bytes], bytes]) -> None:
    record = JournalRecord(CID, 1, 2, None, (CreateSegment("a", "raw"),))
    with pytest.raises(RecordFormatError):
        decode_record(record.name, corrupt(encode_record(record)), CID)


def test_decode_record_with_wrong_identity_raises() -> None:
    record = JournalRecord(CID, 1, 2, None, (CreateSegment("a", "raw"),))
    data = encode_record(record)
    with pytest.raises(RecordFormatError):
        decode_record(system_name(CID, "journal", 1, 3), data, CID)  # a copy under another name
    with pytest.raises(RecordFormatError):
        decode_record(system_name(CID, "snapshot", 1, 2), data, CID)  # another kind
    with pytest.raises(RecordFormatError):
        decode_record(record.name, data, CID + 1)  # another container


def test_decode_record_with_malformed_changes_raises() -> None:
    body = b'{"container":3,"epoch":1,"seq":2,"prev":null,"changes":[{"op":"add","segment":"a"}]}'
    data = HEADER.pack(b"SLTJ", 1, len(body), zlib.crc32(body)) + body
    with pytest.raises(RecordFormatError):
        decode_record(system_name(CID, "journal", 1, 2), data, CID)


@pytest.mark.parametrize(("epoch", "snapshot_id"), [(-1, 0), (0, -1), (1 << 63, 0), (0, 1 << 63), (1.0, 0)])
def test_snapshot_info_with_values_outside_int64_raises(epoch: int, snapshot_id: int) -> None:
    with pytest.raises(ValueError):
        SnapshotInfo(epoch, snapshot_id)
    SnapshotInfo((1 << 63) - 1, (1 << 63) - 1)


def test_metadata_apply_with_change_that_does_not_fit_raises_and_changes_nothing() -> None:
    metadata = ChunkMetadata()
    metadata.apply(CreateSegment("a", "raw"))
    metadata.apply(AddChunk("a", "c1", 0, 10))
    for bad in (AddChunk("a", "c2", 5, 10), AddChunk("b", "c2", 0, 10), TruncateSegment("a", 11)):
        with pytest.raises(ChunkMetadataError):
            metadata.apply(bad)
    [seg] = metadata
    assert (seg.length, seg.chunks) == (10, [ChunkEntry("c1", 0, 10)])
    metadata.check()


def test_metadata_check_with_gap_raises() -> None:
    seg = SegmentLayout("a", "raw")
    seg.append(ChunkEntry("c1", 0, 10))
    seg.append(ChunkEntry("c2", 11, 10))
    with pytest.raises(ChunkMetadataError, match="gap"):
        ChunkMetadata({"a": seg}).check()


# -- commits ---------------------------------------------------------------------------------


async def test_commit_with_concurrent_changes_writes_one_record() -> None:
    env = Env()
    storage = await env.open(1)
    before = storage.journal.records_written
    await asyncio.gather(*(storage.create(f"s{i}", "raw") for i in range(10)))
    assert storage.journal.records_written == before + 1
    [record_name] = [n for n in env.names("journal")]
    record = decode_record(record_name, env.faulty.inner.read_all(record_name), CID)
    assert isinstance(record, JournalRecord) and len(record.changes) == 10
    reopened = await env.open(2)
    assert sorted(s.name for s in reopened.journal.metadata) == sorted(f"s{i}" for i in range(10))


async def test_journal_before_boot_refuses_commits() -> None:
    journal = SystemJournal(MemoryChunkStorage(), CID, InMemorySnapshotInfoStore(CID))
    with pytest.raises(ContainerOfflineError):
        await journal.commit([CreateSegment("a", "raw")])


# -- zombies and fencing ---------------------------------------------------------------------


async def test_boot_with_zombie_writing_after_new_owner_ignores_zombie_changes() -> None:
    env = Env()
    zombie = await env.open(1)
    await zombie.create("s", "raw")
    await zombie.write("s", 0, [b"acknowledged"], 1)
    owner = await env.open(2)
    # the old owner keeps going: its calls succeed (its journal objects are written)...
    await zombie.write("s", 12, [b"zombie"], 2)
    await zombie.create("ghost", "raw")
    await zombie.write("ghost", 0, [b"boo"], 2)
    zombie_chunks = {c.chunk_name for name in ("s", "ghost") for c in await zombie.chunks(name)}
    await owner.write("s", 12, [b"-owner"], 3)
    expected = await describe(owner)

    successor = await env.open(3)
    assert await describe(successor) == expected
    assert not await successor.exists("ghost")
    assert await successor.read("s", 0, 18) == b"acknowledged-owner"
    live = {c.chunk_name for c in await successor.chunks("s")}
    # ...but after the next boot nothing of the zombie's changes remains, not even its chunks
    assert set(env.names("data")) == live
    assert not (zombie_chunks - live) & set(env.names("data"))


async def test_boot_ignores_records_following_objects_not_on_the_chain() -> None:
    env = Env()
    storage = await env.open(1)
    await storage.create("s", "raw")
    await storage.write("s", 0, [b"data"], 1)
    missing = system_name(CID, "journal", 1, 555)
    await put_record(env, JournalRecord(CID, 1, 900, missing, (CreateSegment("x", "raw"),)))
    await put_record(
        env, JournalRecord(CID, 1, 901, "system/c3/journal/e000000000001-000000000900", (CreateSegment("y", "raw"),))
    )
    expected = await describe(storage)
    reopened = await env.open(2)
    assert await describe(reopened) == expected


async def test_boot_at_fork_follows_newer_epoch_not_zombie_history() -> None:
    """A new owner's boot snapshot and a zombie's records both follow the same object."""
    env = Env()
    env.pointer = FlakyPointerStore()
    zombie = await env.open(1)
    await zombie.create("s", "raw")
    await zombie.write("s", 0, [b"before"], 1)
    env.pointer.fail_saves = True
    with pytest.raises(ChunkStorageUnavailableError):
        await env.open(2)  # wrote its boot snapshot (following the zombie's tip), could not move the pointer
    env.pointer.fail_saves = False
    await zombie.write("s", 6, [b"-zombie"], 2)  # alternative history after the fork
    await zombie.create("ghost", "raw")
    successor = await env.open(3)
    assert await successor.read("s", 0, 6) == b"before"
    assert (await successor.info("s")).length == 6
    assert not await successor.exists("ghost")


async def test_boot_with_valid_record_following_the_tip_applies_it() -> None:
    """Control for the corrupt-record tests: the same hand-made record, intact, is applied."""
    env = Env()
    storage = await env.open(1)
    await storage.create("s", "raw")
    await put_record(env, JournalRecord(CID, 1, 900, storage.journal.tip, (CreateSegment("ghost", "raw"),)))
    reopened = await env.open(2)
    assert await reopened.exists("ghost")


@pytest.mark.parametrize(("label", "corrupt"), _corruptions(), ids=[c[0] for c in _corruptions()])
async def test_boot_ignores_partial_and_corrupt_records(label: str, corrupt: Callable[[bytes], bytes]) -> None:
    env = Env()
    storage = await env.open(1)
    await storage.create("s", "raw")
    await storage.write("s", 0, [b"data"], 1)
    record = JournalRecord(CID, 1, 900, storage.journal.tip, (CreateSegment("ghost", "raw"),))
    await put_record(env, record, corrupt(encode_record(record)))
    expected = await describe(storage)
    reopened = await env.open(2)
    assert await describe(reopened) == expected
    assert not await reopened.exists("ghost")


async def test_boot_ignores_copy_of_record_under_another_name() -> None:
    env = Env()
    storage = await env.open(1)
    await storage.create("s", "raw")
    first = storage.journal.tip
    assert first is not None
    await storage.write("s", 0, [b"later change"], 1)
    # the copy would be the newest successor of the first record's predecessor and cut off the write
    env.faulty.inner.write_chunk(system_name(CID, "journal", 1, 999), env.faulty.inner.read_all(first))
    reopened = await env.open(2)
    assert await reopened.read("s", 0, 12) == b"later change"


async def test_boot_with_duplicate_record_from_retried_write_applies_it_once() -> None:
    env = Env()
    storage = await env.open(1)
    await storage.create("s", "raw")
    landed: list[str] = []

    def first_journal_write(op: str, name: str) -> bool:
        if op == "write_chunk" and name.startswith(system_prefix(CID, "journal")) and not landed:
            landed.append(name)
            return True
        return False

    # the write lands but the writer sees a timeout, and cannot delete it: the retry duplicates it
    env.faulty.inject(first_journal_write, after=True, times=1)
    env.faulty.inject(lambda op, name: name in landed, ops=["delete_if_exists"])
    assert await storage.write("s", 0, [b"once"], 1) == 4
    records = [decode_record(n, env.faulty.inner.read_all(n), CID) for n in env.names("journal")]
    adds = [r for r in records if isinstance(r, JournalRecord) and isinstance(r.changes[0], AddChunk)]
    assert len(adds) == 2 and adds[0].changes == adds[1].changes  # the duplicate is there
    env.faulty.clear()
    reopened = await env.open(2)
    info = await reopened.info("s")
    assert (info.length, info.chunk_count) == (4, 1)
    assert await reopened.read("s", 0, 4) == b"once"


async def test_open_with_lower_epoch_than_pointer_raises_not_primary() -> None:
    env = Env()
    await env.open(5)
    with pytest.raises(StorageNotPrimaryError):
        await env.open(4)


async def test_open_with_no_pointer_but_newer_journal_objects_raises_not_primary() -> None:
    env = Env()
    await put_record(env, SnapshotRecord(CID, 9, 0, None, []))
    with pytest.raises(StorageNotPrimaryError):
        await env.open(8)
    assert env.pointer.info is None


async def test_open_with_no_pointer_ignores_older_objects_and_keeps_data() -> None:
    env = Env()
    await put_record(env, JournalRecord(CID, 1, 4, None, (CreateSegment("from-a-failed-boot", "raw"),)))
    env.faulty.inner.write_chunk(f"{data_prefix(CID)}x/e1-5.parquet", b"not referenced")
    storage = await env.open(2)
    assert len(storage.journal.metadata) == 0
    assert env.names("data") == [f"{data_prefix(CID)}x/e1-5.parquet"]  # no pointer: never sweep blindly


async def test_zombie_learns_it_is_fenced_when_its_snapshot_pointer_is_refused() -> None:
    env = Env(snapshot_every_records=2)
    zombie = await env.open(1)
    await zombie.create("a", "raw")
    await env.open(2)
    await zombie.create("b", "raw")  # second record: snapshot; the fenced pointer store refuses it
    with pytest.raises(StorageNotPrimaryError):
        await zombie.create("c", "raw")
    data_before = env.names("data")
    with pytest.raises(StorageNotPrimaryError):
        await zombie.write("a", 0, [b"refused"], 1)
    assert env.names("data") == data_before  # its chunk was written, then deleted: no record names it
    assert env.pointer.info is not None and env.pointer.info.epoch == 2


class StalePointerStore(InMemorySnapshotInfoStore):
    """Answers the first load with an old pointer: the previous owner moved it while we booted."""

    def __init__(self, real: InMemorySnapshotInfoStore, stale: SnapshotInfo) -> None:
        super().__init__(CID)
        self.real = real
        self.stale: SnapshotInfo | None = stale

    async def load(self) -> SnapshotInfo | None:
        stale, self.stale = self.stale, None
        return stale or await self.real.load()

    async def save(self, info: SnapshotInfo) -> None:
        await self.real.save(info)


async def test_boot_starts_over_when_pointer_moves_and_old_objects_vanish() -> None:
    env = Env()
    old_owner = await env.open(1)
    await old_owner.create("s", "raw")
    await old_owner.write("s", 0, [b"data"], 1)
    stale = env.pointer.info
    assert stale is not None
    assert await old_owner.journal.snapshot()
    await old_owner.close()  # its cleanup deleted everything before the new snapshot
    assert system_name(CID, "snapshot", 1, stale.snapshot_id) not in env.names("snapshot")
    env.pointer = StalePointerStore(env.pointer, stale)
    reopened = await env.open(2)
    assert await reopened.read("s", 0, 4) == b"data"


async def test_open_with_pointed_snapshot_missing_raises_corrupted() -> None:
    env = Env()
    await env.open(1)
    assert env.pointer.info is not None
    env.faulty.inner.delete(system_name(CID, "snapshot", 1, env.pointer.info.snapshot_id))
    with pytest.raises(JournalCorruptedError):
        await env.open(2)


async def test_open_with_record_that_does_not_apply_raises_corrupted() -> None:
    env = Env()
    storage = await env.open(1)
    await storage.create("s", "raw")
    await put_record(env, JournalRecord(CID, 1, 900, storage.journal.tip, (AddChunk("s", "c", 7, 1),)))
    with pytest.raises(JournalCorruptedError):
        await env.open(2)


# -- snapshots -------------------------------------------------------------------------------
