"""The append session of one writer on one segment: batching, backpressure, acks, resend.

Every write gets consecutive event numbers (the first after what the segment already holds for this
writer id) and a future that completes when the server acknowledges it. Writes are framed as events
and sent in ``AppendBlockEnd`` blocks of up to ``max_block_bytes``, sized by load:

* idle (nothing awaiting an ack): what was written in this turn of the event loop goes out at once;
* busy: writes accumulate; a block goes out as soon as one is full, and whatever accumulated goes out
  when an ack arrives. Blocks are pipelined; the server acks them cumulatively (``DataAppended``).

Backpressure: :meth:`SegmentWriter.write` waits while ``max_unacked_bytes`` are written but not acked.

Two ways to learn what is stored: the future each write returns, or, for a caller tracking many writes
itself (the stream writer), :meth:`SegmentWriter.offer`/:meth:`SegmentWriter.put` (no future is made)
with a :class:`ProgressListener` told of every advance of the acknowledged event number and of the
session's failure, synchronously, from the reply that caused it.

Reconnect: on a lost connection (or ``WrongHost``/``InvalidEventNumber``) everything sent and not
acked goes back in front of the unsent writes; after the new ``AppendSetup`` the writes up to its last
event number are acked and the rest is resent in order. The server's writer-id attribute deduplicates
anything that arrives twice, so no event is lost or duplicated. ``SegmentIsSealed``/``NoSuchSegment``
fail every pending write with the typed error; :meth:`SegmentWriter.unacked_events` then lists the
events that were not stored, in order, e.g. to resend them to successor segments.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from segment_store.client.config import WriterConfig
from segment_store.client.errors import ConnectionLostError
from segment_store.client.session import AppendSession, ConnectionSource, SessionState
from segment_store.protocol import (
    HEADER_SIZE,
    append_block_end_ends,
    encode_events,
    parse_events,
)
from segment_store.protocol.constants import EVENT_TYPE_CODE, HEADER
from segment_store.protocol.types import Buffer

_log = logging.getLogger(__name__)
_EVENT_HEADERS: dict[int, bytes] = {}  # payload size -> its event header: one shared bytes object per size
_EVENT_HEADERS_LIMIT = 4096
_BLOCK_END_FRAMING = len(b"".join(append_block_end_ends(bytes(16), 0, 0, 0, 0)))  # an AppendBlockEnd besides events


def _event_header(size: int) -> bytes:
    header = _EVENT_HEADERS.get(size)
    if header is None:
        if len(_EVENT_HEADERS) >= _EVENT_HEADERS_LIMIT:
            _EVENT_HEADERS.clear()
        header = _EVENT_HEADERS[size] = HEADER.pack(EVENT_TYPE_CODE, size)
    return header


class ProgressListener(Protocol):
    """Told of a session's progress (:meth:`SegmentWriter.set_listener`), synchronously: it must not call back
    into the session."""

    def stored_through(self, event_number: int) -> None:
        """The server acknowledged every event of this writer up to ``event_number`` (it grows)."""

    def session_failed(self, error: BaseException) -> None:
        """The session failed for good with ``error``; events after the last acknowledged one are not stored."""


@dataclass(slots=True)
class _Write:
    """Consecutive events numbered ``first``..``last``, framed in ``parts`` (``size`` bytes in all, immutable
    buffers: each event's header, then its payload), sharing one ack future (made only when a caller asks
    for one: writes through ``offer``/``put`` have none).

    The newest unsent write grows while it is not sent (the events written in one turn of the event loop,
    up to a block), so a burst of small events costs one future, not one each. Its parts are only listed:
    they are copied once, when the connection writes the turn's frames out (a growing bytearray copied each
    event's bytes again whenever it reallocated: a third more per event with many small blocks).
    """

    first: int
    last: int
    parts: list[bytes]
    size: int
    future: asyncio.Future[None] | None

    def data(self) -> bytes:
        return b"".join(self.parts)

    def drop_through(self, level: int) -> int:
        """Drop the events numbered up to ``level`` (acked by a setup); return how many bytes went."""
        data = self.data()
        pos = 0
        for _ in range(level - self.first + 1):
            pos += HEADER_SIZE + HEADER.unpack_from(data, pos)[1]
        self.parts = [data[pos:]] if pos < len(data) else []
        self.size -= pos
        self.first = level + 1
        return pos


class SegmentWriter(AppendSession):
    """Append session for ``writer_id`` on ``segment``; make it with ``SegmentClient.writer``.

    ``await open()`` is optional (the first write opens). ``close()`` flushes; ``async with`` closes.
    """

    def __init__(self, source: ConnectionSource, segment: str, writer_id: uuid.UUID, config: WriterConfig) -> None:
        super().__init__(source, segment, writer_id, config)
        self._pending: deque[_Write] = deque()  # not sent on the current connection
        self._inflight: deque[_Write] = deque()  # sent, not acked
        self._pending_bytes = 0
        self._unacked_bytes = 0
        self._next_event = 1
        self._acked = 0  # highest event number acknowledged
        self.write_offset = -1
        """The segment's length as of the latest acknowledgement (-1 before the first): every event acknowledged
        so far lies before it (a stream writer's position, for watermarks)."""
        self._room_waiters: deque[asyncio.Future[None]] = deque()
        self._flush_waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._send_scheduled = False
        self._failed_writes: list[_Write] = []
        self._listener: ProgressListener | None = None
        self._writer_key = writer_id.bytes
        self.writes_started = 0
        """How many pending writes were started: it changes when a write goes into a new block (a caller
        grouping events by block, as the stream writer does, starts a new group then)."""
        self.blocks_sent = 0
        """Number of append blocks sent (resends included); for tests and metrics."""

    async def __aenter__(self) -> SegmentWriter:
        await self.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # ---- public API ---------------------------------------------------------------------------------------

    @property
    def unacked_bytes(self) -> int:
        """Framed bytes written and not yet acknowledged."""
        return self._unacked_bytes

    @property
    def acked_event_number(self) -> int:
        """The highest event number of this writer the server acknowledged (0: none yet)."""
        return self._acked

    @property
    def last_event_number(self) -> int:
        """The event number given to the latest write (0: none yet)."""
        return self._next_event - 1

    def set_listener(self, listener: ProgressListener | None) -> None:
        """Tell ``listener`` of every advance of :attr:`acked_event_number` and of the session's failure."""
        self._listener = listener

    async def write(self, payload: Buffer) -> asyncio.Future[None]:
        """Queue one event; wait only while the window of unacked bytes is full.

        Returns a future that completes when the event is stored, or fails with the session's error.
        Events queued together may share one future: await it, do not cancel it. Raises the session's
        error (or ClientClosedError) at once if the session is already over. The payload is copied unless
        it is ``bytes`` (the session keeps it until it is stored).
        """
        if type(payload) is not bytes:
            payload = bytes(payload)
        size = len(payload)
        return await self._future_write((_event_header(size), payload), 1, HEADER_SIZE + size)

    async def put(self, payload: Buffer) -> None:
        """:meth:`write` without a future: the session's :class:`ProgressListener` learns when it is stored."""
        if type(payload) is not bytes:
            payload = bytes(payload)
        size = len(payload)
        await self._write((_event_header(size), payload), 1, HEADER_SIZE + size, False)

    def write_nowait(self, payload: Buffer) -> asyncio.Future[None] | None:
        """:meth:`write` if it would not wait (the session is up and the window has room): the event's future;
        otherwise None and nothing is queued (call :meth:`write`). Raises nothing."""
        if type(payload) is not bytes:
            payload = bytes(payload)
        size = len(payload)
        framed = HEADER_SIZE + size
        if not self._room_now(framed):
            return None
        return self._queue_framed((_EVENT_HEADERS.get(size) or _event_header(size), payload), 1, framed, True)

    def offer(self, payload: Buffer) -> int:
        """Queue one event if that does not wait (the session is up and the window has room), without a
        future (the :class:`ProgressListener` learns when it is stored): its event number; 0 if nothing was
        queued (call :meth:`put`). Raises nothing."""
        if type(payload) is not bytes:
            payload = bytes(payload)
        size = len(payload)
        framed = HEADER_SIZE + size
        if self._failure is not None or self._state is not SessionState.CONNECTED:  # (_room_now, inline: per event)
            return 0
        config = self.config
        unacked = self._unacked_bytes
        if unacked and unacked + framed > config.max_unacked_bytes:
            return 0
        # _queue_framed for one event, inline (it runs per event)
        number = self._next_event
        self._next_event = number + 1
        header = _EVENT_HEADERS.get(size) or _event_header(size)
        pending = self._pending
        newest = pending[-1] if pending else None
        if newest is not None and newest.size + framed <= config.max_block_bytes:
            newest.parts += (header, payload)
            newest.size += framed
            newest.last = number
        else:
            pending.append(_Write(number, number, [header, payload], framed, None))
            self.writes_started += 1
        self._unacked_bytes = unacked + framed
        self._pending_bytes += framed
        if self._pending_bytes >= config.max_block_bytes:
            self._send(full_blocks_only=True)
        if not self._inflight:
            self._schedule_send()
        return number

    def _room_now(self, framed: int) -> bool:
        """Whether ``framed`` bytes can be queued without waiting (connected, window not full)."""
        if self._failure is not None or self._state is not SessionState.CONNECTED:
            return False
        return not self._unacked_bytes or self._unacked_bytes + framed <= self.config.max_unacked_bytes

    async def write_many(self, payloads: Iterable[Buffer]) -> asyncio.Future[None]:
        """Queue several events (consecutive numbers); the future completes when all are stored.

        Large inputs are cut into writes of at most ``max_block_bytes`` each, so the window applies.
        """
        batch: list[Buffer] = []
        size = 0
        futures: list[asyncio.Future[None]] = []
        limit = self.config.max_block_bytes
        for payload in payloads:
            framed = HEADER_SIZE + len(payload)
            if batch and size + framed > limit:
                futures.append(await self._future_write((encode_events(batch),), len(batch), size))
                batch, size = [], 0
            batch.append(payload)
            size += framed
        if batch:
            futures.append(await self._future_write((encode_events(batch),), len(batch), size))
        if not futures:
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            done.set_result(None)
            return done
        if len(futures) == 1:
            return futures[0]
        return asyncio.ensure_future(_all_of(futures))

    async def write_framed(self, data: Buffer, count: int) -> asyncio.Future[None]:
        """Queue ``count`` events already framed back to back in ``data`` (as ``encode_events`` frames them,
        e.g. built column-wise from an Arrow array); they get consecutive numbers and one future.

        ``data`` must hold exactly ``count`` whole events and, unless it is a single event, at most
        ``max_block_bytes``: it is sent as (part of) one block. Raises ValueError otherwise (a count or size
        that cannot be right); the framing itself is the caller's promise.
        """
        size = len(data)
        if count < 1 or size < count * HEADER_SIZE:
            raise ValueError(f"write_framed: {size} bytes cannot hold {count} framed events")
        if count > 1 and size > self.config.max_block_bytes:
            raise ValueError(
                f"write_framed: {count} events in {size} bytes exceed max_block_bytes ({self.config.max_block_bytes})"
            )
        return await self._future_write((data if type(data) is bytes else bytes(data),), count, size)

    def send_pending(self) -> None:
        """Send what is queued now, in blocks, even while earlier blocks await their acknowledgement.

        A busy session otherwise keeps new writes until the next ack (so its blocks grow), and an idle one
        until the next turn of the event loop: for a producer that does not yield (through its stream
        writer), whose writes would wait in the session until it does. No-op while not connected.
        """
        if self._pending and self._state is SessionState.CONNECTED:
            self._send(full_blocks_only=False)

    async def append(self, payload: Buffer) -> None:
        """Write one event and wait until it is stored."""
        await (await self.write(payload))

    async def flush(self) -> None:
        """Wait until everything written so far is stored. Raises the session's error if it failed."""
        self._check_usable()
        target = self._next_event - 1
        if target <= self._acked:
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._flush_waiters.append((target, waiter))
        self._schedule_send()
        await waiter

    async def close(self) -> None:
        """Flush, then leave the connection. Raises the session's error if it failed. Idempotent."""
        try:
            if self._state not in (SessionState.CLOSED, SessionState.FAILED, SessionState.NEW):
                await self.flush()
        finally:
            await self._shutdown()
        if self._failure is not None:
            raise self._failure

    def unacked_events(self) -> list[bytes]:
        """After a failure: the payloads of the writes that were not stored, in order."""
        return [event.data for write in self._failed_writes for event in parse_events(write.data())]

    # ---- writing ------------------------------------------------------------------------------------------

    async def _future_write(self, parts: tuple[bytes, ...], count: int, size: int) -> asyncio.Future[None]:
        future = await self._write(parts, count, size)
        assert future is not None
        return future

    async def _write(
        self, parts: tuple[bytes, ...], count: int, size: int, want_future: bool = True
    ) -> asyncio.Future[None] | None:
        """Queue ``count`` framed events, ``size`` bytes in all, given as ``parts``; their future if wanted."""
        if self._failure is not None or self._state is not SessionState.CONNECTED:
            self._check_usable()
            if self._state is SessionState.NEW:
                await self.open()
        config = self.config
        while self._unacked_bytes and self._unacked_bytes + size > config.max_unacked_bytes:
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._room_waiters.append(waiter)
            await waiter
            self._check_usable()
        return self._queue_framed(parts, count, size, want_future)

    def _queue_framed(
        self, parts: tuple[bytes, ...], count: int, size: int, want_future: bool
    ) -> asyncio.Future[None] | None:
        """Queue ``count`` framed events (``parts``, ``size`` bytes) now: the window has room for them."""
        config = self.config
        first = self._next_event
        self._next_event = first + count
        pending = self._pending
        newest = pending[-1] if pending else None
        if newest is not None and newest.size + size <= config.max_block_bytes:
            newest.parts += parts
            newest.size += size
            newest.last = first + count - 1
        else:
            newest = _Write(first, first + count - 1, list(parts), size, None)
            pending.append(newest)
            self.writes_started += 1
        future = newest.future
        if want_future and future is None:
            future = newest.future = asyncio.get_running_loop().create_future()
        self._pending_bytes += size
        self._unacked_bytes += size
        if self._state is SessionState.CONNECTED:
            if self._pending_bytes >= config.max_block_bytes:
                self._send(full_blocks_only=True)
            if not self._inflight:  # busy: the next ack sends what accumulated
                self._schedule_send()
        return future

    def _schedule_send(self) -> None:
        if not self._send_scheduled:
            self._send_scheduled = True
            asyncio.get_running_loop().call_soon(self._send_when_idle)

    def _send_when_idle(self) -> None:
        self._send_scheduled = False
        if not self._inflight:
            self._send(full_blocks_only=False)

    def _send(self, full_blocks_only: bool) -> None:
        """Send pending writes as blocks of up to ``max_block_bytes`` (only full ones if asked)."""
        connection = self._connection
        if connection is None or self._state is not SessionState.CONNECTED:
            return
        limit = self.config.max_block_bytes
        pending = self._pending
        while pending and (not full_blocks_only or self._pending_bytes >= limit):
            batch = [pending.popleft()]
            size = batch[0].size
            while pending and size + pending[0].size <= limit:
                write = pending.popleft()
                batch.append(write)
                size += write.size
            last = batch[-1].last
            parts = batch[0].parts if len(batch) == 1 else [part for write in batch for part in write.parts]
            head, tail = append_block_end_ends(
                self._writer_key, size, last - batch[0].first + 1, last, self._request_id
            )
            self._pending_bytes -= size
            self._inflight.extend(batch)
            try:
                connection.send_frame_parts(head, parts, tail, size + _BLOCK_END_FRAMING)
            except ConnectionLostError as error:
                # The connection died under us; its loss callback (or this) brings the session back.
                self._detach(error)
                return
            self.blocks_sent += 1

    # ---- session hooks ------------------------------------------------------------------------------------

    def _on_setup(self, last_event_number: int) -> None:
        if self.setups == 1 and not self._pending and not self._inflight and last_event_number >= self._next_event:
            self._next_event = last_event_number + 1  # a reused writer id continues after what is stored
            self._acked = last_event_number
        elif last_event_number >= self._next_event:
            _log.error(
                "server says writer %s stored event %d on %s but the latest written is %d",
                self.writer_id, last_event_number, self.segment, self._next_event - 1,
            )  # fmt: skip
        self._ack_through(last_event_number)
        self._send(full_blocks_only=False)

    def _on_detached(self) -> None:
        if self._inflight:
            resend = self._inflight
            self._pending.extendleft(reversed(resend))
            self._pending_bytes += sum(w.size for w in resend)
            self._inflight = deque()

    def _on_appended(self, event_number: int, write_offset: int) -> None:
        if event_number >= self._next_event:
            self._detach(
                ConnectionLostError(
                    f"server acked event {event_number} of writer {self.writer_id} "
                    f"but the latest sent is {self._next_event - 1}"
                )
            )
            return
        if write_offset > self.write_offset:
            self.write_offset = write_offset
        self._ack_through(event_number)
        self._send(full_blocks_only=False)

    def _on_session_reply(self, reply: object) -> bool:
        return False

    def _holds_unacked(self) -> bool:
        return bool(self._inflight or self._pending)

    def _on_failed(self, error: BaseException) -> None:
        writes = [*self._inflight, *self._pending]
        self._inflight.clear()
        self._pending.clear()
        self._pending_bytes = 0
        self._unacked_bytes = 0
        self._failed_writes.extend(writes)
        for write in writes:
            future = write.future
            if future is not None and not future.done():
                future.set_exception(error)
                future.exception()  # retrieved here: the session's failure is raised by close, flush and writes too
        self._wake(error)
        if self._listener is not None:
            self._listener.session_failed(error)

    # ---- acks ---------------------------------------------------------------------------------------------

    def _ack_through(self, level: int) -> None:
        if level <= self._acked:
            return
        self._acked = level
        self._progress()
        released = _release_through(self._inflight, level)
        if not self._inflight and self._pending and self._pending[0].first <= level:
            unsent = _release_through(self._pending, level)  # a setup can acknowledge writes not sent yet
            self._pending_bytes -= unsent
            released += unsent
        self._unacked_bytes -= released
        if self._room_waiters or self._flush_waiters:
            self._wake(None)
        if self._listener is not None:
            self._listener.stored_through(level)

    def _wake(self, error: BaseException | None) -> None:
        waiters = self._room_waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
        if self._flush_waiters:
            keep: list[tuple[int, asyncio.Future[None]]] = []
            for target, waiter in self._flush_waiters:
                if waiter.done():
                    continue
                if error is not None:
                    waiter.set_exception(error)
                elif target <= self._acked:
                    waiter.set_result(None)
                else:
                    keep.append((target, waiter))
            self._flush_waiters = keep


def _release_through(writes: deque[_Write], level: int) -> int:
    """Drop the events numbered up to ``level`` from the front of ``writes`` (completing the futures of the
    writes that end there); return their bytes."""
    released = 0
    while writes and writes[0].last <= level:
        write = writes.popleft()
        released += write.size
        future = write.future
        if future is not None and not future.done():
            future.set_result(None)
    if writes and writes[0].first <= level:
        released += writes[0].drop_through(level)
    return released


async def _all_of(futures: list[asyncio.Future[None]]) -> None:
    for future in futures:
        await future
