"""The official Pravega Python client (``pravega_client``) as a test peer: read a stream through a reader group."""

from __future__ import annotations

import asyncio

import pravega_client  # the official Pravega client: a test dependency (pyproject), never skipped


def official_read(uri: str, scope: str, stream: str, group: str, count: int, timeout_s: float = 60.0) -> list[str]:
    """Read ``count`` events (decoded) through a new reader group with one reader, in read order."""
    return read_with_group(pravega_client.StreamManager(uri), scope, stream, group, count, timeout_s)


def read_with_group(
    manager: pravega_client.StreamManager, scope: str, stream: str, group: str, count: int, timeout_s: float = 60.0
) -> list[str]:
    """Read ``count`` events (decoded) through a new reader group of ``manager`` with one reader, in read order."""
    reader = manager.create_reader_group(group, scope, stream).create_reader("reader-1")
    events: list[str] = []

    async def consume() -> None:
        while len(events) < count:
            segment_slice = await reader.get_segment_slice_async()
            events.extend(event.data().decode() for event in segment_slice)
            reader.release_segment(segment_slice)

    try:
        asyncio.run(asyncio.wait_for(consume(), timeout_s))
    finally:
        reader.reader_offline()
    return events


def assert_each_key_in_order(events: list[str]) -> None:
    """Events are ``<key>:<sequence>``: each key's sequence numbers appear as 0, 1, 2, ... in order."""
    last: dict[str, int] = {}
    for event in events:
        key, seq = event.split(":")
        assert int(seq) == last.get(key, -1) + 1, f"{key}: {seq} after {last.get(key)}"
        last[key] = int(seq)
