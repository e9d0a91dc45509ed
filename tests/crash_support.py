"""What the kill -9 tests share: events that are a function of (writer, event number), the check of
stored segments against what was acknowledged, views of Tier-1 (the log's metadata in ZooKeeper)
and Tier-2 (data chunks on disk), and polling with a deadline.

Every event is ``payload(writer, number)``: a header naming the writer, the number and the body
length, then a body whose bytes and length are drawn from a generator seeded by both. So a stored
event can be compared byte for byte with what its writer sent, and an event nobody wrote, a torn
one or one from another position shows as a mismatch.
"""

from __future__ import annotations

import asyncio
import random
import struct
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from segment_store.logs.config import DurableLogConfig
from segment_store.protocol import parse_events
from segment_store.storage.backends.filesystem import FsChunkStorage
from segment_store.storage.data_chunk_names import data_prefix, escape_segment_name, parse_data_chunk_name
from segment_store.tier1.log_metadata import LogMetadata
from segstore_shared.coordination.kazoo_store import KazooCoordinationStore
from segstore_shared.coordination.store import NodeNotFoundError

HEADER = struct.Struct(">IQI")  # writer, event number, body length
LOG_METADATA_ROOT = "/segstore/tier1/logs"  # FileLedgerLogConfig.metadata_root's default
SMALL_DURABLE_LOG = DurableLogConfig(
    max_frame_bytes=64 * 1024,
    checkpoint_min_commit_count=20,
    checkpoint_commit_count=100,
    checkpoint_total_commit_length_bytes=512 * 1024,
)
"""Small frames and frequent checkpoints, so Tier-1 truncation happens within a test's load."""


def payload(writer: int, number: int) -> bytes:
    """Event ``number`` of ``writer``: mostly under 700 bytes, every 61st one 4-24 KB (crosses frames)."""
    rng = random.Random((writer << 40) | number)
    length = rng.randrange(4_000, 24_000) if number % 61 == 0 else rng.randrange(0, 700)
    return HEADER.pack(writer, number, length) + rng.randbytes(length)


def payloads(writer: int, first: int, count: int) -> list[bytes]:
    return [payload(writer, number) for number in range(first, first + count)]


@dataclass
class WriterRecord:
    """What the test knows of one writer: its segment, the highest event number the store acknowledged, the
    highest it was sent, and where acknowledged appends ended ((event number, segment end offset) pairs)."""

    segment: str
    acked: int = 0
    sent: int = 0
    ack_ends: list[tuple[int, int]] = field(default_factory=list)

    def acknowledge(self, number: int, end_offset: int) -> None:
        assert number > self.acked, f"acknowledgements went backwards: {number} after {self.acked}"
        self.acked = number
        self.ack_ends.append((number, end_offset))


def check_segments(contents: Mapping[str, bytes], writers: Mapping[int, WriterRecord]) -> dict[int, int]:
    """Assert the stored ``contents`` hold exactly what ``writers`` wrote: every event is byte for byte
    ``payload(writer, number)`` of a known writer in that writer's segment; each writer's events are
    1, 2, ..., n in order with no gap and no repeat; n covers every acknowledged event and no more than
    was sent; each acknowledged append ends where the store said it did. Returns n per writer."""
    ends: dict[int, dict[int, int]] = {writer: {} for writer in writers}
    for segment, data in contents.items():
        for event in parse_events(data):
            where = f"{segment}@{event.offset}"
            assert len(event.data) >= HEADER.size, f"{where}: a {len(event.data)}-byte event that nobody wrote"
            writer, number, _ = HEADER.unpack_from(event.data)
            assert writer in writers, f"{where}: an event of writer {writer}, which does not exist"
            assert writers[writer].segment == segment, f"{where}: writer {writer} never wrote to this segment"
            assert event.data == payload(writer, number), f"{where}: writer {writer} event {number}: bytes differ"
            numbers = ends[writer]
            expected = len(numbers) + 1
            assert number not in numbers, f"{where}: writer {writer} event {number} is stored twice"
            assert number == expected, f"{where}: writer {writer} event {number} where {expected} should be"
            numbers[number] = event.offset + 8 + len(event.data)  # 8: the event's type and length
    for writer, record in writers.items():
        stored = len(ends[writer])
        assert stored >= record.acked, f"writer {writer}: acknowledged up to {record.acked}, stored up to {stored}"
        assert stored <= record.sent, f"writer {writer}: stored up to {stored}, sent only up to {record.sent}"
        for number, end in record.ack_ends:
            assert ends[writer][number] == end, (
                f"writer {writer}: event {number} ends at {ends[writer][number]}, acknowledged as ending at {end}"
            )
    return {writer: len(numbers) for writer, numbers in ends.items()}


async def log_metadata(store: KazooCoordinationStore, container_id: int) -> LogMetadata | None:
    """The file ledger log metadata of a container (None before its first start)."""
    try:
        node = await store.get(f"{LOG_METADATA_ROOT}/container-{container_id}")
    except NodeNotFoundError:
        return None
    return LogMetadata.parse(node.data)


def data_chunks(tier2: Path, container_id: int, segment: str) -> dict[str, int]:
    """The Tier-2 data chunks of ``segment`` now: name -> the epoch that wrote it (blocking: use a thread)."""
    prefix = f"{data_prefix(container_id)}{escape_segment_name(segment)}/"
    chunks: dict[str, int] = {}
    for name in FsChunkStorage(tier2).list(prefix):
        parsed = parse_data_chunk_name(name)
        if parsed is not None:
            chunks[name] = parsed[0]
    return chunks


async def wait_until(check: Callable[[], Awaitable[str | None]], timeout_s: float, what: str) -> float:
    """Poll ``check`` (None: done; else what is still missing) until done; fail once ``timeout_s`` passed.
    Returns the seconds it took."""
    started = time.monotonic()
    deadline = started + timeout_s
    while (missing := await check()) is not None:
        assert time.monotonic() < deadline, f"{what}: not within {timeout_s:.0f} s; still missing: {missing}"
        await asyncio.sleep(0.02)
    return time.monotonic() - started
