"""What the cases of ``bench/wire.py`` share: segment names, payloads, batches, the drain and the length check."""

from __future__ import annotations

import asyncio
import random
import time

from wire_server import CONTAINERS

from segment_store.client import SegmentClient

FRAME_HEADER = 8


_segments = iter(range(1_000_000))


def new_segment() -> str:
    return f"bench/wire/{next(_segments)}.#epoch.0"


def payloads(size: int, count: int, seed: int = 7) -> list[bytes]:
    rng = random.Random(seed + size)
    return [rng.randbytes(size) for _ in range(count)]


def batches_of(events: list[bytes], per_batch: int) -> list[list[bytes]]:
    return [events[i : i + per_batch] for i in range(0, len(events) - per_batch + 1, per_batch)]


async def drain(client: SegmentClient) -> float:
    """``flush_to_storage`` of every container; returns the seconds it took."""
    started = time.perf_counter()
    await asyncio.gather(*(client.flush_to_storage(c) for c in range(CONTAINERS)))
    return round(time.perf_counter() - started, 2)


async def check_length(client: SegmentClient, segment: str, events: int, size: int) -> None:
    length = (await client.get_segment_info(segment)).write_offset
    if length != events * (FRAME_HEADER + size):
        raise AssertionError(
            f"{segment} holds {length} bytes; {events} acked events of {size} B make a different length"
        )
