"""Seed 004 failure scenarios the system journal tests did not cover yet.

- "Failure during reads: the read operation is retried a fixed number of times (with a fixed
  interval between the attempts)": journal and snapshot objects read at boot.
- "After each failure to write, a new journal is started": a record retried after a failed
  write goes under a new name, and only the record that succeeded is on the chain.
"""

from __future__ import annotations

import pytest

from segment_store.storage.backends.faulty import FaultyChunkStorage
from segment_store.storage.backends.memory import MemoryChunkStorage
from segment_store.storage.chunk_storage import ChunkStorageUnavailableError
from segment_store.storage.chunked_storage import ChunkedSegmentStorage
from segment_store.storage.journal.records import JournalRecord, decode_record, system_prefix
from segment_store.storage.journal.system_journal import InMemorySnapshotInfoStore
from segment_store.storage.storage_config import ChunkedStorageConfig

pytestmark = pytest.mark.unit

CID = 6
JOURNAL = system_prefix(CID, "journal")
SNAPSHOT = system_prefix(CID, "snapshot")


class Env:
    def __init__(self, **config: object) -> None:
        self.faulty = FaultyChunkStorage(MemoryChunkStorage())
        self.pointer = InMemorySnapshotInfoStore(CID)
        self.sleeps: list[float] = []
        settings: dict[str, object] = {"retry_delay_s": 0.25, "compaction_enabled": False}
        settings.update(config)
        self.config = ChunkedStorageConfig(**settings)  # type: ignore[arg-type]

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)

    async def open(self, epoch: int) -> ChunkedSegmentStorage:
        storage = ChunkedSegmentStorage(self.faulty, CID, self.pointer, self.config, sleep=self.sleep)
        await storage.open(epoch)
        return storage


async def history(env: Env) -> ChunkedSegmentStorage:
    """Epoch 1 leaves a snapshot and records after it (snapshots every 100 records)."""
    storage = await env.open(1)
    await storage.create("s", "raw")
    await storage.write("s", 0, [b"abc"], 1)
    await storage.write("s", 3, [b"def"], 2)
    return storage


@pytest.mark.parametrize("prefix", [JOURNAL, SNAPSHOT], ids=["journal-record", "snapshot"])
async def test_boot_with_transient_read_failures_retries_each_read(prefix: str) -> None:
    env = Env(read_attempts=3)
    await history(env)
    env.sleeps.clear()
    fault = env.faulty.inject(lambda op, name: name.startswith(prefix), ops=["read_all"], times=2)
    booted = await env.open(2)
    assert fault.hits == 2
    assert await booted.read("s", 0, 6) == b"abcdef"
    assert env.sleeps[:2] == [0.25, 0.25]  # a fixed interval between attempts


async def test_boot_with_read_failing_every_attempt_raises_and_later_boot_succeeds() -> None:
    env = Env(read_attempts=3)
    await history(env)
    records = len(list(env.faulty.inner.list(JOURNAL)))
    fault = env.faulty.inject(lambda op, name: name.startswith(JOURNAL), ops=["read_all"])
    with pytest.raises(ChunkStorageUnavailableError):
        await env.open(2)
    # reads run concurrently and the first exhausted one ends the boot: at least one record was tried
    # read_attempts times, and none more often
    assert records == 3 and 3 <= fault.hits <= 3 * records
    env.faulty.remove(fault)
    assert await (await env.open(3)).read("s", 0, 6) == b"abcdef"


async def test_record_retried_after_failed_write_goes_under_a_new_name() -> None:
    env = Env(journal_write_attempts=3)
    storage = await history(env)
    env.faulty.calls.clear()
    env.faulty.inject(lambda op, name: op == "write_chunk" and name.startswith(JOURNAL), times=2)
    assert await storage.write("s", 6, [b"ghi"], 3) == 9
    attempts = [name for op, name in env.faulty.calls if op == "write_chunk" and name.startswith(JOURNAL)]
    assert len(attempts) == 3 and len(set(attempts)) == 3
    assert [n for n in env.faulty.inner.list(JOURNAL) if n in attempts] == [attempts[2]]  # failed ones retracted
    record = decode_record(attempts[2], env.faulty.inner.read_all(attempts[2]), CID)
    assert isinstance(record, JournalRecord) and storage.journal.tip == attempts[2]
    assert await (await env.open(2)).read("s", 0, 9) == b"abcdefghi"
