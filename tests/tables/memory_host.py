"""An in-memory SegmentHost for table tests, and a fault-injecting wrapper around any SegmentHost.

``MemoryHost`` keeps the container's contract: appends are atomic and durable once they return, with the
expected-offset check and attribute updates applied together; sealed segments refuse appends; truncation
drops bytes and raises SegmentTruncatedError below the start offset; a read returns at most up to the next
multiple of ``read_block_bytes`` (as a cache block would), so readers must handle short reads; a read at
the tail waits up to its timeout and returns empty.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field

from segment_store.reading.read_index import ReadResult
from segment_store.tables.host import SegmentHost
from segstore_shared.contracts import (
    NULL_ATTRIBUTE_VALUE,
    AttributeUpdate,
    AttributeUpdateType,
    BadAttributeUpdateError,
    BadOffsetError,
    InvalidOffsetError,
    SegmentExistsError,
    SegmentInfo,
    SegmentNotExistsError,
    SegmentSealedError,
    SegmentTruncatedError,
    SegmentType,
)
from segstore_shared.errors import SegstoreError


@dataclass
class _Segment:
    segment_id: int
    name: str
    segment_type: SegmentType
    attributes: dict[int, int]
    data: bytearray = field(default_factory=bytearray)  # bytes from ``start_offset`` on
    start_offset: int = 0
    sealed: bool = False
    waiters: list[asyncio.Future[None]] = field(default_factory=list)

    @property
    def length(self) -> int:
        return self.start_offset + len(self.data)

    def wake(self) -> None:
        waiters, self.waiters = self.waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)


def _resolve(segment: _Segment, updates: Sequence[AttributeUpdate]) -> dict[int, int]:
    result: dict[int, int] = {}
    for u in updates:
        current = result.get(u.attribute_id, segment.attributes.get(u.attribute_id, NULL_ATTRIBUTE_VALUE))
        kind = u.update_type
        if kind == AttributeUpdateType.NONE and current != NULL_ATTRIBUTE_VALUE:
            raise BadAttributeUpdateError(segment.name, u.attribute_id, "already set")
        if kind == AttributeUpdateType.REPLACE_IF_GREATER and current != NULL_ATTRIBUTE_VALUE and u.value <= current:
            raise BadAttributeUpdateError(segment.name, u.attribute_id, "not greater")
        if kind == AttributeUpdateType.REPLACE_IF_EQUALS and current != u.comparison_value:
            raise BadAttributeUpdateError(segment.name, u.attribute_id, f"expected {u.comparison_value}, is {current}")
        if kind == AttributeUpdateType.ACCUMULATE and current != NULL_ATTRIBUTE_VALUE:
            result[u.attribute_id] = current + u.value
        else:
            result[u.attribute_id] = u.value
    return result


class MemoryHost:
    """Segments in memory (see module docstring). ``appends`` counts successful appends."""

    def __init__(self, read_block_bytes: int = 1000) -> None:
        self.read_block_bytes = read_block_bytes
        self._segments: dict[str, _Segment] = {}
        self._next_id = 1
        self.appends = 0

    def _get(self, name: str) -> _Segment:
        segment = self._segments.get(name)
        if segment is None:
            raise SegmentNotExistsError(name)
        return segment

    async def create_segment(
        self, name: str, segment_type: SegmentType, attributes: dict[int, int] | None = None
    ) -> None:
        await asyncio.sleep(0)
        if name in self._segments:
            raise SegmentExistsError(name)
        values = {k: v for k, v in (attributes or {}).items() if v != NULL_ATTRIBUTE_VALUE}
        self._segments[name] = _Segment(self._next_id, name, segment_type, values)
        self._next_id += 1

    async def delete_segment(self, name: str) -> None:
        await asyncio.sleep(0)
        self._get(name).wake()
        del self._segments[name]

    async def append(
        self,
        name: str,
        data: bytes,
        attribute_updates: Sequence[AttributeUpdate] = (),
        expected_offset: int | None = None,
    ) -> int:
        await asyncio.sleep(0)  # queued behind other operations, as in a durable log
        segment = self._get(name)
        if segment.sealed:
            raise SegmentSealedError(name)
        if expected_offset is not None and expected_offset != segment.length:
            raise BadOffsetError(name, expected_offset, segment.length)
        values = _resolve(segment, attribute_updates)
        offset = segment.length
        segment.data += data
        for key, value in values.items():
            if value == NULL_ATTRIBUTE_VALUE:
                segment.attributes.pop(key, None)
            else:
                segment.attributes[key] = value
        self.appends += 1
        segment.wake()
        await asyncio.sleep(0)  # the acknowledgement arrives later than the data becomes readable
        return offset

    async def read(self, name: str, offset: int, max_length: int, timeout_s: float = 0.0) -> ReadResult:
        if max_length <= 0:
            raise ValueError("max_length must be positive")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, timeout_s)
        while True:
            segment = self._get(name)
            if offset < segment.start_offset:
                raise SegmentTruncatedError(name, segment.start_offset, offset)
            if offset > segment.length:
                raise InvalidOffsetError(name, f"offset {offset} beyond length {segment.length}")
            if offset < segment.length:
                block_end = (offset // self.read_block_bytes + 1) * self.read_block_bytes
                end = min(offset + max_length, segment.length, block_end)
                start = offset - segment.start_offset
                return ReadResult(offset, bytes(segment.data[start : start + end - offset]))
            if segment.sealed:
                return ReadResult(offset, b"", end_of_segment=True)
            remaining = deadline - loop.time()
            if remaining <= 0:
                return ReadResult(offset, b"")
            waiter: asyncio.Future[None] = loop.create_future()
            segment.waiters.append(waiter)
            try:
                await asyncio.wait_for(waiter, remaining)
            except TimeoutError:
                return ReadResult(offset, b"")

    async def get_info(self, name: str) -> SegmentInfo:
        segment = self._get(name)
        return SegmentInfo(
            name=name,
            segment_id=segment.segment_id,
            segment_type=segment.segment_type,
            start_offset=segment.start_offset,
            length=segment.length,
            storage_length=0,
            sealed=segment.sealed,
            deleted=False,
            last_modified_ms=0,
            attributes=dict(segment.attributes),
        )

    async def truncate(self, name: str, offset: int) -> None:
        await asyncio.sleep(0)
        segment = self._get(name)
        if offset < 0 or offset > segment.length:
            raise InvalidOffsetError(name, f"truncate offset {offset} outside [0, {segment.length}]")
        if offset > segment.start_offset:
            del segment.data[: offset - segment.start_offset]
            segment.start_offset = offset

    async def seal(self, name: str) -> None:
        """Not part of SegmentHost; for tests of the host itself."""
        segment = self._get(name)
        segment.sealed = True
        segment.wake()


class InjectedError(SegstoreError):
    """A failure injected by :class:`FaultyHost`."""


class FaultyHost:
    """Wraps a SegmentHost; fails the next appends before they reach it (nothing written) or after (written,
    but the caller sees an error: an unknown outcome), and can hold appends until released."""

    def __init__(self, inner: SegmentHost) -> None:
        self.inner = inner
        self.fail_before = 0
        self.fail_after = 0
        self.gate: asyncio.Event | None = None
        self.gated_segment: str | None = None
        self.waiting = asyncio.Event()

    async def create_segment(
        self, name: str, segment_type: SegmentType, attributes: dict[int, int] | None = None
    ) -> None:
        await self.inner.create_segment(name, segment_type, attributes)

    async def delete_segment(self, name: str) -> None:
        await self.inner.delete_segment(name)

    async def append(
        self,
        name: str,
        data: bytes,
        attribute_updates: Sequence[AttributeUpdate] = (),
        expected_offset: int | None = None,
    ) -> int:
        if self.gate is not None and self.gated_segment in (None, name):
            self.waiting.set()
            await self.gate.wait()
        if self.fail_before:
            self.fail_before -= 1
            raise InjectedError("append failed before it was written")
        offset = await self.inner.append(name, data, attribute_updates, expected_offset)
        if self.fail_after:
            self.fail_after -= 1
            raise InjectedError(f"append written at {offset}, but the acknowledgement was lost")
        return offset

    async def read(self, name: str, offset: int, max_length: int, timeout_s: float = 0.0) -> ReadResult:
        return await self.inner.read(name, offset, max_length, timeout_s)

    async def get_info(self, name: str) -> SegmentInfo:
        return await self.inner.get_info(name)

    async def truncate(self, name: str, offset: int) -> None:
        await self.inner.truncate(name, offset)
