"""The at-least-once write task (``exactlyOnce=false``): Arrow batches straight into the stream's segments, in
chunks whose writer ids name their content, so that a retried task skips what an earlier attempt stored.

Like the exactly-once task, it routes each Arrow batch over the segments column-wise
(:class:`~pravega_spark.write.framing.Router`) and frames each segment's part into wire blocks with no Python
object per row; the difference is where the blocks go: to the stream's own segments, visible at once.

**Chunks.** A segment's rows are gathered into chunks of about ``chunk_bytes`` (cut at the Arrow batch part
that reaches the size, and at the end of the input). Each chunk is written through an append session of its
own, whose writer id is derived from the task's writer id, the segment, the chunk's number on that segment,
its row and byte counts and a CRC-32 of its framed events. Its events are numbered 1..n in that session. A
segment's chunks are written one after the other: the next chunk's session starts once the previous one is
stored, so rows keep their order per segment (and so per routing key), reconnects included.

**Retries.** The task's writer id is the same in every attempt (:meth:`pravega_spark.write.sink._TaskInfo.writer_id`),
and so is the way the rows are cut into chunks when the input is the same rows in the same order. The
session of a chunk learns from its setup how many of its events the segment already stored under its writer
id (an earlier attempt's, or a concurrent speculative one's) and sends only the rest: a retried task does not
duplicate what an earlier attempt stored. Since the writer id names the chunk's content, a retried task that
reads its rows in a different order (a shuffle's output) or after the stream scaled gets other writer ids and
writes its rows again: duplicates then, never a loss. Connection losses within an attempt are deduplicated
by the same sessions (the segment writer resends what was not acknowledged).

**Scaling.** When a segment is sealed, its session's stored event number (read once the seal is committed)
says which events of the current chunk are stored; the rest of it, the chunks still waiting and the rows not
yet in a chunk are routed again by key over the successors, before any later row of the segment's key range.
A sealed stream fails the task with :class:`~controller_client.errors.StreamSealedError`.

**Memory.** Rows held (in chunks not yet stored) are bounded by ``held_bytes`` while anything is in flight,
plus the chunks being gathered (at most one per segment).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
import zlib
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from controller_client.errors import StreamNotFoundError, StreamSealedError
from controller_client.model import SegmentRange, qualified_segment_name
from controller_client.stream_manager import StreamManager
from pravega_spark.options.write import WriteOptions
from pravega_spark.write.framing import Router, framed_blocks
from segment_store.client import NoSuchSegmentError, RetryPolicy, SegmentIsSealedError, SegmentWriter
from segment_store.protocol import HEADER_SIZE

MIB = 1024 * 1024
HELD_BYTES = 64 * MIB
"""Framed bytes of rows held, not yet stored, over all segments, beyond which the task waits for the segment
stores (while any chunk is in flight)."""
MAX_CHUNK_BYTES = 8 * MIB
MIN_CHUNK_BYTES = 1 * MIB
SEAL_CONFIRM_ATTEMPTS = 50
"""How many times (10 ms apart) to look for a seal to be committed before trusting acknowledgements alone."""
_CONTROLLER_RETRY = RetryPolicy(max_attempts=10, max_delay_ms=2_000)


def chunk_bytes_for(segments: int, held_bytes: int = HELD_BYTES) -> int:
    """The chunk size of a task writing to ``segments`` segments: about two chunks per segment in
    ``held_bytes``, within ``MIN_CHUNK_BYTES``..``MAX_CHUNK_BYTES``."""
    return max(MIN_CHUNK_BYTES, min(MAX_CHUNK_BYTES, held_bytes // (2 * max(1, segments))))


def chunk_writer_id(writer_id: uuid.UUID, segment: str, number: int, rows: int, size: int, crc: int) -> uuid.UUID:
    """The writer id of the session of chunk ``number`` (from 0) of ``segment``: ``rows`` events framed in
    ``size`` bytes whose CRC-32 is ``crc``."""
    return uuid.uuid5(writer_id, f"{segment}/{number}/{rows}/{size}/{crc:08x}")


def _framed_size(events: pa.Array) -> int:
    payload = pc.sum(pc.binary_length(events)).as_py() or 0
    return int(payload) + HEADER_SIZE * len(events)


@dataclass(slots=True)
class _Chunk:
    """Consecutive rows of one segment, written through one session of their own."""

    events: list[pa.Array] = field(default_factory=list)
    keys: list[pa.Array | None] = field(default_factory=list)
    rows: int = 0
    size: int = 0  # framed bytes

    def add(self, events: pa.Array, keys: pa.Array | None, size: int) -> None:
        self.events.append(events)
        self.keys.append(keys)
        self.rows += len(events)
        self.size += size

    def parts_from(self, first: int) -> list[tuple[pa.Array, pa.Array | None]]:
        """The chunk's ``(events, keys)`` parts from its row ``first`` on."""
        out = []
        for events, keys in zip(self.events, self.keys, strict=True):
            if first >= len(events):
                first -= len(events)
                continue
            out.append((events.slice(first), keys.slice(first) if keys is not None else None))
            first = 0
        return out


@dataclass(eq=False)
class _Lane:
    """One segment: the chunk being gathered, the chunks waiting, the task writing them."""

    segment: SegmentRange
    name: str
    building: _Chunk = field(default_factory=_Chunk)
    waiting: deque[_Chunk] = field(default_factory=deque)  # the first one is being written
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    chunks: int = 0  # chunks begun on this segment (the next one's number)
    closed_bytes: int = 0  # framed bytes of the chunks closed so far
    session: SegmentWriter | None = None  # the session of the chunk being written
    next: _Prepared | None = None  # the next chunk, its session being set up

    def sessions(self) -> list[SegmentWriter]:
        return [s for s in (self.session, self.next.session if self.next else None) if s is not None]


@dataclass(slots=True)
class _Prepared:
    """A chunk framed, its session being set up."""

    chunk: _Chunk
    session: SegmentWriter
    blocks: list[tuple[memoryview, int]]
    opening: asyncio.Task[int]


class PlainTaskWriter:
    """Writes one task's rows at least once (see the module docstring). ``write`` each Arrow batch, then
    ``finish`` (waits until everything is stored), or ``cancel``. Use from one event loop."""

    def __init__(
        self,
        manager: StreamManager,
        options: WriteOptions,
        writer_id: uuid.UUID,
        held_bytes: int = HELD_BYTES,
        chunk_bytes: int | None = None,
    ) -> None:
        self.manager = manager
        self.options = options
        self.writer_id = writer_id
        self.held_bytes = held_bytes
        self.chunk_bytes = chunk_bytes
        self.scales_followed = 0
        """Sealed segments whose rows went to their successors; for tests."""
        self.chunks_skipped = 0
        """Chunks (whole or in part) an earlier attempt had stored; for tests."""
        self._router: Router | None = None
        self._lanes: dict[int, _Lane] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._held = 0  # framed bytes of rows in chunks not stored yet
        self._in_flight = 0  # chunks handed to a lane's task and not stored yet
        self._room: asyncio.Event = asyncio.Event()
        self._failure: BaseException | None = None
        self._finishing = False

    # ---- the producer side ---------------------------------------------------------------------------------

    async def write(self, events: pa.Array, keys: pa.Array | None) -> None:
        """Route one batch's rows to the segments' chunks; waits while ``held_bytes`` are held and in flight.
        Raises the first failure of a segment's writing (StreamSealedError, StreamNotFoundError, ...)."""
        self._check()
        if self._router is None:
            target = self.options.target
            segments = await _CONTROLLER_RETRY.call(
                lambda: self.manager.controller.get_current_segments(target.scope, target.stream)
            )
            if not segments:
                raise StreamSealedError(target.scope, target.stream)
            self._router = Router(segments, self.manager.hasher)
            if self.chunk_bytes is None:
                self.chunk_bytes = chunk_bytes_for(len(segments), self.held_bytes)
        while self._held > self.held_bytes and self._in_flight:
            self._room.clear()
            await self._room.wait()
            self._check()
        self._route(events, keys)

    def _route(self, events: pa.Array, keys: pa.Array | None) -> None:
        assert self._router is not None and self.chunk_bytes is not None
        for segment, part, part_keys in self._router.split_with_keys(events, keys):
            lane = self._lanes.get(segment.segment_id)
            if lane is None:
                lane = self._open_lane(segment)
            size = _framed_size(part)
            lane.building.add(part, part_keys, size)
            self._held += size
            if lane.building.size >= self._chunk_limit(lane):
                self._close_chunk(lane)

    def _open_lane(self, segment: SegmentRange) -> _Lane:
        target = self.options.target
        lane = self._lanes[segment.segment_id] = _Lane(
            segment, qualified_segment_name(target.scope, target.stream, segment.segment_id)
        )
        task = asyncio.get_running_loop().create_task(self._run_lane(lane))
        self._tasks.add(task)
        return lane

    def _chunk_limit(self, lane: _Lane) -> int:
        """A lane's chunks start at ``MIN_CHUNK_BYTES`` and grow with what it wrote (a quarter of it) up to
        ``chunk_bytes``: a small task's rows go out early, a large one's use few writer ids."""
        assert self.chunk_bytes is not None
        return max(min(MIN_CHUNK_BYTES, self.chunk_bytes), min(self.chunk_bytes, lane.closed_bytes // 4))

    def _close_chunk(self, lane: _Lane) -> None:
        if lane.building.rows:
            lane.closed_bytes += lane.building.size
            lane.waiting.append(lane.building)
            lane.building = _Chunk()
            self._in_flight += 1
            lane.wake.set()

    async def finish(self) -> None:
        """Write the chunks still gathering and wait until every row is stored (following scales). Raises the
        first failure."""
        self._check()
        self._finishing = True
        for lane in self._lanes.values():
            self._close_chunk(lane)
            lane.wake.set()
        while pending := [t for t in self._tasks if not t.done()]:
            await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            self._check()
        self._check()

    async def cancel(self) -> None:
        """Stop writing (what was sent may be stored or not)."""
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks)  # each ends cancelled: its errors went to _fail
        for lane in self._lanes.values():
            for session in lane.sessions():
                await _close_quietly(session)

    def _check(self) -> None:
        if self._failure is not None:
            raise self._failure

    def _fail(self, error: BaseException) -> None:
        if self._failure is None:
            if isinstance(error, NoSuchSegmentError):
                target = self.options.target
                missing = StreamNotFoundError(target.scope, target.stream)
                missing.__cause__ = error
                error = missing
            self._failure = error
        self._room.set()

    def _stored(self, chunk: _Chunk) -> None:
        self._held -= chunk.size
        self._in_flight -= 1
        self._room.set()

    # ---- a segment's writing -------------------------------------------------------------------------------

    async def _run_lane(self, lane: _Lane) -> None:
        try:
            while True:
                if not lane.waiting:
                    if self._finishing:
                        return
                    lane.wake.clear()
                    await lane.wake.wait()
                    continue
                chunk = lane.waiting[0]
                try:
                    await self._write_chunk(lane, chunk)
                except SegmentIsSealedError:
                    await self._follow_scale(lane)
                    return
                lane.waiting.popleft()
                self._stored(chunk)
        except asyncio.CancelledError:
            raise
        except BaseException as error:  # the task's failure: write() and finish() raise it
            self._fail(error)

    def _prepare(self, lane: _Lane, chunk: _Chunk) -> _Prepared:
        """Frame ``chunk`` and start setting up its session (which learns what an earlier attempt stored)."""
        config = self.manager.client.config.writer
        blocks = [block for events in chunk.events for block in framed_blocks(events, config.max_block_bytes)]
        crc = 0
        for data, _ in blocks:
            crc = zlib.crc32(data, crc)
        number = lane.chunks
        lane.chunks += 1
        session_id = chunk_writer_id(self.writer_id, lane.name, number, chunk.rows, chunk.size, crc)
        session = self.manager.client.writer(lane.name, session_id, config)
        opening = asyncio.get_running_loop().create_task(session.open())
        opening.add_done_callback(_retrieve)
        return _Prepared(chunk, session, blocks, opening)

    async def _write_chunk(self, lane: _Lane, chunk: _Chunk) -> None:
        prepared, lane.next = lane.next, None
        if prepared is None or prepared.chunk is not chunk:
            prepared = self._prepare(lane, chunk)
        session = lane.session = prepared.session
        stored = await prepared.opening  # the events of this chunk an earlier attempt stored (negative: none)
        blocks = prepared.blocks
        if stored > 0:
            self.chunks_skipped += 1
            limit = session.config.max_block_bytes
            blocks = [block for events, _ in chunk.parts_from(stored) for block in framed_blocks(events, limit)]
        for data, count in blocks:
            ack = await session.write_framed(data, count)
            ack.add_done_callback(_retrieve)
        if len(lane.waiting) > 1:  # the next chunk's session is set up while this one's last acks come
            lane.next = self._prepare(lane, lane.waiting[1])
        await session.close()  # once every event is stored
        lane.session = None

    async def _follow_scale(self, lane: _Lane) -> None:
        """``lane``'s segment is sealed: route its rows not stored to the successors, and the segment's key
        range from now on."""
        session = lane.session
        stored = 0
        if session is not None:
            stored = max(0, session.acked_event_number)
            confirmed = await self._stored_through(lane.name, session.writer_id)
            if confirmed is not None:
                stored = max(stored, confirmed)
        for open_session in lane.sessions():
            await _close_quietly(open_session)
        lane.session = lane.next = None
        target = self.options.target
        segment_id = lane.segment.segment_id
        successors = await _CONTROLLER_RETRY.call(
            lambda: self.manager.controller.get_successors(target.scope, target.stream, segment_id)
        )
        if not any(segment_id in predecessors for predecessors in successors.values()):
            raise StreamSealedError(target.scope, target.stream)
        # from here on no await: the producer routes nothing meanwhile
        assert self._router is not None
        self._router.replace(segment_id, successors)
        del self._lanes[segment_id]
        self.scales_followed += 1
        leftovers: list[tuple[pa.Array, pa.Array | None]] = []
        if lane.waiting:
            leftovers += lane.waiting[0].parts_from(stored)
        for chunk in [*list(lane.waiting)[1:], lane.building]:
            leftovers += chunk.parts_from(0)
        for chunk in lane.waiting:
            self._stored(chunk)  # held again below, in the successors' chunks
        self._held -= lane.building.size
        for events, keys in leftovers:
            self._route(events, keys)
        if self._finishing:
            for each in self._lanes.values():
                self._close_chunk(each)

    async def _stored_through(self, segment: str, writer_id: uuid.UUID) -> int | None:
        """The last event number the sealed segment stored for ``writer_id``, read once the seal is
        committed (a committed seal implies every append before it is committed); None if unknown."""
        client = self.manager.client
        for _ in range(SEAL_CONFIRM_ATTEMPTS):
            try:
                info = await client.get_segment_info(segment)
                if not info.exists:
                    return None
                if info.sealed:
                    value = await client.get_segment_attribute(segment, writer_id)
                    return 0 if value is None or value < 0 else value
            except NoSuchSegmentError:
                return None
            await asyncio.sleep(0.01)
        return None


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


async def _close_quietly(session: SegmentWriter) -> None:
    """End a session whose outcome is handled elsewhere (a failed session re-raises its failure)."""
    with contextlib.suppress(Exception):
        await session.close()
