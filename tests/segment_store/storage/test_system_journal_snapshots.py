"""System journal (seed 004), continued: snapshot read-back and write failures, pointer failures, cadence, names."""

from __future__ import annotations

import struct

import pytest
from journal_env import CID, Env, FlakyPointerStore, describe

from segment_store.storage.backends.memory import MemoryChunkStorage
from segment_store.storage.chunk_storage import ChunkData, ChunkInfo, ChunkStorage, ChunkStorageUnavailableError
from segment_store.storage.data_chunk_names import data_prefix, parse_data_chunk_name
from segment_store.storage.journal.records import (
    HEADER,
    decode_record,
    parse_system_name,
    system_name,
    system_prefix,
)
from segment_store.storage.journal.system_journal import (
    SnapshotInfo,
)

pytestmark = pytest.mark.unit


class CorruptingChunkStorage:
    """Delegates to ``inner`` but stores a damaged copy for the first ``times`` matching writes."""

    def __init__(self, inner: ChunkStorage, prefix: str, times: int) -> None:
        self.inner = inner
        self.prefix = prefix
        self.remaining = times
        self.corrupted: list[str] = []

    def write_chunk(self, name: str, data: ChunkData) -> ChunkInfo:
        if name.startswith(self.prefix) and self.remaining > 0:
            self.remaining -= 1
            self.corrupted.append(name)
            raw = bytes(data)  # type: ignore[arg-type]
            return self.inner.write_chunk(name, raw[:-1] + bytes([raw[-1] ^ 0xFF]))
        return self.inner.write_chunk(name, data)

    def __getattr__(self, attr: str) -> object:
        return getattr(self.inner, attr)


async def test_snapshot_that_fails_read_back_is_not_used() -> None:
    corrupting = CorruptingChunkStorage(MemoryChunkStorage(), system_prefix(CID, "snapshot"), times=1)
    env = Env(corrupting)  # type: ignore[arg-type]
    storage = await env.open(1)
    [bad] = corrupting.corrupted
    info = env.pointer.info
    assert info is not None and system_name(CID, "snapshot", 1, info.snapshot_id) != bad
    assert bad not in env.names("snapshot")  # retracted
    await storage.create("s", "raw")
    record = decode_record(storage.journal.tip or "", corrupting.inner.read_all(storage.journal.tip or ""), CID)
    assert record.prev == system_name(CID, "snapshot", 1, info.snapshot_id)  # the chain goes through the good one
    assert await (await env.open(2)).exists("s")


async def test_snapshot_whose_read_back_fails_is_replaced_under_new_name() -> None:
    env = Env()
    env.faulty.inject(lambda op, name: name.startswith(system_prefix(CID, "snapshot")), ops=["read_all"], times=1)
    await env.open(1)
    written = env.written(system_prefix(CID, "snapshot"))
    assert len(written) == 2 and len(set(written)) == 2
    assert env.pointer.info == SnapshotInfo(1, parse_system_name(written[1]).seq)  # type: ignore[union-attr]


async def test_snapshot_write_failure_is_retried_under_new_name() -> None:
    env = Env()
    env.faulty.inject(lambda op, name: name.startswith(system_prefix(CID, "snapshot")), ops=["write_chunk"], times=2)
    await env.open(1)
    written = env.written(system_prefix(CID, "snapshot"))
    assert len(written) == 3 and len(set(written)) == 3
    assert env.names("snapshot") == [written[2]]
    assert env.pointer.info == SnapshotInfo(1, parse_system_name(written[2]).seq)  # type: ignore[union-attr]


async def test_boot_snapshot_failing_every_attempt_fails_open_and_next_owner_recovers() -> None:
    env = Env(snapshot_attempts=2)
    first = await env.open(1)
    await first.create("s", "raw")
    await first.write("s", 0, [b"kept"], 1)
    with env.faulty.outage(ops=["write_chunk"]), pytest.raises(ChunkStorageUnavailableError):
        await env.open(2)
    assert env.pointer.info is not None and env.pointer.info.epoch == 1
    third = await env.open(3)
    assert await third.read("s", 0, 4) == b"kept"


async def test_runtime_snapshot_failures_keep_the_chain_of_records() -> None:
    env = Env(snapshot_every_records=3)
    storage = await env.open(1)
    await storage.create("s", "raw")
    fault = env.faulty.inject(lambda op, name: name.startswith(system_prefix(CID, "snapshot")), ops=["write_chunk"])
    data = b""
    for i in range(8):
        piece = bytes([65 + i]) * (i + 1)
        await storage.write("s", len(data), [piece], i)
        data += piece
    assert fault.hits >= 6  # several snapshots were attempted and failed
    env.faulty.remove(fault)
    reopened = await env.open(2)
    assert await reopened.read("s", 0, len(data)) == data


async def test_pointer_save_failure_keeps_old_pointer_and_chain_through_new_snapshots() -> None:
    env = Env(snapshot_every_records=2)
    env.pointer = FlakyPointerStore()
    storage = await env.open(1)
    booted_at = env.pointer.info
    env.pointer.fail_saves = True
    await storage.create("s", "raw")
    data = b""
    for i in range(6):
        await storage.write("s", len(data), [b"xy"], i)
        data += b"xy"
    assert storage.journal.snapshots_written >= 3
    assert env.pointer.info == booted_at  # never moved, so nothing was cleaned up either
    env.pointer.fail_saves = False
    reopened = await env.open(2)
    assert await reopened.read("s", 0, len(data)) == data


async def test_pointer_save_failure_at_boot_fails_open_and_next_owner_recovers() -> None:
    env = Env()
    env.pointer = FlakyPointerStore()
    first = await env.open(1)
    await first.create("s", "raw")
    env.pointer.fail_saves = True
    with pytest.raises(ChunkStorageUnavailableError):
        await env.open(2)
    env.pointer.fail_saves = False
    assert await (await env.open(3)).exists("s")


async def test_boot_with_many_records_replays_only_those_after_the_pointer() -> None:
    env = Env(snapshot_every_records=10)
    storage = await env.open(1)
    for i in range(23):
        await storage.create(f"s{i}", "raw")
    await storage.write("s0", 0, [b"payload"], 1)
    await storage.journal.wait_idle()
    assert storage.journal.snapshots_written == 1 + 2  # boot + after records 10 and 20
    await storage.close()  # waits for the cleanups
    assert env.pointer.info is not None
    pointer_key = (env.pointer.info.epoch, env.pointer.info.snapshot_id)
    left = [parse_system_name(n) for n in env.names("journal") + env.names("snapshot")]
    assert all(p is not None and p.key >= pointer_key for p in left)
    assert len(env.names("journal")) == 4  # records 21..24 follow the last snapshot
    expected = await describe(await env.open(2))

    # the same history, but cleanups fail: boot must still read only what follows the pointer
    env2 = Env(snapshot_every_records=10)
    env2.faulty.inject(lambda op, name: name.startswith("system/"), ops=["delete_if_exists"])
    storage = await env2.open(1)
    for i in range(23):
        await storage.create(f"s{i}", "raw")
    await storage.write("s0", 0, [b"payload"], 1)
    await storage.close()
    assert len(env2.names("journal")) == 24
    env2.faulty.calls.clear()
    second = await env2.open(2)
    reads = [n for op, n in env2.faulty.calls if op == "read_all" and n.startswith("system/")]
    assert len(reads) == 1 + 4 + 1  # the pointed-at snapshot, 4 records, the new snapshot's read-back
    assert await describe(second) == expected


async def test_snapshot_after_time_limit_even_with_few_records() -> None:
    env = Env(snapshot_every_records=1000, snapshot_every_s=60.0)
    storage = await env.open(1)
    await storage.create("a", "raw")
    assert storage.journal.snapshots_written == 1
    env.clock.now += 59.0
    await storage.create("b", "raw")
    await storage.journal.wait_idle()
    assert storage.journal.snapshots_written == 1
    env.clock.now += 2.0
    await storage.create("c", "raw")
    await storage.journal.wait_idle()
    assert storage.journal.snapshots_written == 2
    assert env.pointer.info is not None and env.pointer.info.snapshot_id > 2
    await storage.create("d", "raw")
    await storage.journal.wait_idle()
    assert storage.journal.snapshots_written == 2


# -- names -----------------------------------------------------------------------------------


async def test_names_are_unique_across_epochs_and_restarts_with_same_epoch() -> None:
    env = Env(snapshot_every_records=3)
    data = b""
    for epoch in (1, 2, 2, 3, 7):
        storage = await env.open(epoch)
        if not await storage.exists("s"):
            await storage.create("s", "raw")
        for _ in range(4):
            await storage.write("s", len(data), [b"abc"], 1)
            data += b"abc"
        await storage.truncate("s", len(data) - 3)
        for name in env.written():
            if name.startswith("system/"):
                parsed = parse_system_name(name)
                assert parsed is not None and parsed.container_id == CID
            else:
                assert name.startswith(data_prefix(CID)) and parse_data_chunk_name(name) is not None
        # crash: no close
    written = env.written()
    assert len(written) == len(set(written))
    epochs = [
        parse_system_name(n).epoch if n.startswith("system/") else parse_data_chunk_name(n)[0]  # type: ignore[union-attr,index]
        for n in written
    ]
    assert epochs == sorted(epochs)  # each instance writes only names of its own epoch
    final = await env.open(8)
    info = await final.info("s")
    assert (info.start_offset, info.length) == (len(data) - 3, len(data))


def test_header_layout_is_sixteen_bytes() -> None:
    assert HEADER.size == 16
    assert struct.calcsize(">4sBxxxII") == 16
