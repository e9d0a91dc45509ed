"""Event starts (``LocateOffset``): the first event that starts at or after an offset, exact in memory, in Tier-2,
across both, inside a merged transaction, after truncation and recovery; and the walk on its own."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator

import pytest
from container_env import ContainerEnv

from segment_store.containers.segment_container import SegmentContainer
from segment_store.protocol import encode_events
from segment_store.reading.event_starts import walk_to_event_start
from segstore_shared.contracts import InvalidOffsetError, SegmentNotExistsError

pytestmark = pytest.mark.unit

SEGMENT = "scope/stream/0.#epoch.0"
TRANSACTION = "scope/stream/0.#epoch.0#transaction.00000000000000000000000000000001"


@pytest.fixture
async def env() -> AsyncIterator[ContainerEnv]:
    e = ContainerEnv()
    yield e
    await e.close()


def events(rng: random.Random, count: int, largest: int = 700) -> list[bytes]:
    return [rng.randbytes(rng.choice([0, 1, 7, rng.randrange(largest)])) for _ in range(count)]


def starts_of(payloads: list[bytes], base: int = 0) -> list[int]:
    starts, position = [], base
    for p in payloads:
        starts.append(position)
        position += 8 + len(p)
    return starts


def first_at_or_after(starts: list[int], offset: int, start: int, length: int) -> int:
    return next((s for s in starts if s >= max(offset, start)), length)


async def check(container: SegmentContainer, starts: list[int], rng: random.Random, start: int = 0) -> None:
    length = container.length(SEGMENT)
    probes = {0, start, length, length + 5, -3}
    for s in [*starts[:5], *rng.sample(starts, min(len(starts), 60)), *starts[-5:]]:
        probes.update((s - 1, s, s + 1, s + 8))
    probes.update(rng.randrange(length + 1) for _ in range(100))
    for offset in sorted(probes):
        got = await container.event_start_at_or_after(SEGMENT, offset)
        assert got == first_at_or_after(starts, offset, start, length), offset


async def test_event_start_is_exact_in_memory_in_tier2_in_a_transaction_and_after_truncation_and_recovery(
    env: ContainerEnv,
) -> None:
    rng = random.Random(27)
    c = await env.start()
    await c.create_segment(SEGMENT)
    payloads: list[bytes] = []
    for _ in range(30):  # appends of several events each; the writer flushes some to Tier-2 meanwhile
        batch = events(rng, rng.randrange(1, 40))
        await c.append(SEGMENT, encode_events(batch))
        payloads.extend(batch)
    await check(c, starts_of(payloads), rng)
    await c.flush_to_storage()
    assert c.metadata.get_by_name(SEGMENT).storage_length == c.length(SEGMENT)  # type: ignore[union-attr]
    await check(c, starts_of(payloads), rng)

    await c.create_segment(TRANSACTION)
    transaction = events(rng, 300)
    await c.append(TRANSACTION, encode_events(transaction))  # one append: the walk crosses it from its start
    await c.merge(SEGMENT, TRANSACTION)
    payloads.extend(transaction)
    for _ in range(5):
        batch = events(rng, 20)
        await c.append(SEGMENT, encode_events(batch))
        payloads.extend(batch)
    starts = starts_of(payloads)
    await check(c, starts, rng)

    truncated_at = starts[len(starts) // 3]
    await c.truncate(SEGMENT, truncated_at)
    await check(c, starts, rng, start=truncated_at)

    await c.stop()
    recovered = await env.start()
    await check(recovered, starts, rng, start=truncated_at)
    await recovered.flush_to_storage()
    await check(recovered, starts, rng, start=truncated_at)
    with pytest.raises(SegmentNotExistsError):
        await recovered.event_start_at_or_after("scope/stream/9.#epoch.0", 0)


async def test_event_start_with_bytes_that_are_not_events_raises_invalid_offset(env: ContainerEnv) -> None:
    c = await env.start()
    await c.create_segment(SEGMENT)
    await c.append(SEGMENT, b"\x00\x00\x00\x07not an event at all")
    with pytest.raises(InvalidOffsetError):
        await c.event_start_at_or_after(SEGMENT, 5)


async def test_walk_with_short_reads_and_events_longer_than_a_step_finds_every_start() -> None:
    rng = random.Random(5)
    payloads = events(rng, 120, largest=3000)
    data = encode_events(payloads)
    starts = starts_of(payloads)

    async def read(at: int, size: int) -> bytes:  # at most 37 bytes per call, as a read index at entry edges
        return data[at : at + min(size, 37)]

    for offset in range(0, len(data) + 1, 31):
        expected = first_at_or_after(starts, offset, 0, len(data))
        base = max(s for s in [0, *starts] if s <= offset)  # the closest known start, or one far before
        for known in (0, base):
            got = await walk_to_event_start(SEGMENT, read, known, offset, len(data), step_bytes=100)
            assert got == expected, (offset, known)


def test_chunk_first_event_skips_raw_rows_and_reads_only_from_the_row_group_of_the_start() -> None:
    from segment_store.storage.format import parquet_chunk

    rng = random.Random(9)
    payloads = events(rng, 400)
    data = encode_events(payloads) + b"\x00\x00\x00\x00\x00\x00\x10"  # a partial tail: a raw row
    chunk = parquet_chunk.encode(data, 1_000, row_group_bytes=2048)
    starts = starts_of(payloads)
    assert parquet_chunk.chunk_info(chunk).row_groups > 5
    for offset in [0, 1, *starts[1::37], starts[-1], starts[-1] + 1, len(data) - 1, len(data) + 3]:
        expected = next((s for s in starts if s >= offset), None)  # the raw tail is no event
        assert parquet_chunk.first_event_at_or_after(chunk, offset) == expected, offset
