"""A prefetching reader of one segment: raw bytes or events, from an offset to the end or a bound.

The reader keeps up to ``prefetch_bytes`` of ``ReadSegment`` requests in flight ahead of the caller,
each for ``read_request_bytes`` at consecutive offsets, and consumes the replies in offset order. A
reply shorter than asked (the tail, a Tier-2 block boundary) is followed by a request for the rest of
its range before the later replies are used, so the bytes come out contiguous whatever the server
returns. At the tail (``at_tail``) only one request is kept in flight; the server holds it until data
arrives or its wait times out, and the reader re-issues it. The end of a sealed segment
(``end_of_segment``) or ``end_offset`` ends the reader. ``SegmentIsTruncated`` raises
:class:`~segment_store.client.errors.SegmentIsTruncatedError` (its ``start_offset`` says where data
begins; :meth:`SegmentReader.seek` there to go on). A lost connection re-issues the requests after a
backoff (``ReaderConfig.retry``); so does ``WrongHost`` (the segment's container moved), after telling the
connection source, so the re-issued requests go to the segment's new owner (a controller-resolved client asks
the controller again: a move costs a reader one refused request and a look-up, not its whole retry budget).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass

from segment_store.client.config import ReaderConfig
from segment_store.client.connection import next_request_id
from segment_store.client.errors import (
    AuthTokenCheckFailedError,
    ClientClosedError,
    UnexpectedReplyError,
    WrongHostError,
)
from segment_store.client.retry import is_retriable
from segment_store.client.session import ConnectionSource
from segment_store.protocol import EventParser, ProtocolError, ReadSegment, SegmentEvent, SegmentRead


@dataclass(slots=True)
class _Read:
    offset: int
    length: int
    task: asyncio.Task[SegmentRead]


def _forget(task: asyncio.Task[SegmentRead]) -> None:
    """Cancel a request whose reply is no longer wanted; its outcome is retrieved so nothing is logged."""
    task.cancel()
    task.add_done_callback(lambda t: None if t.cancelled() else t.exception())


class SegmentReader:
    """Reads ``segment`` from ``offset`` up to ``end_offset`` (None: the end of the sealed segment, or
    for ever at the tail). Use either :meth:`read` (raw bytes) or the event API, not both."""

    def __init__(
        self,
        source: ConnectionSource,
        segment: str,
        offset: int = 0,
        end_offset: int | None = None,
        config: ReaderConfig | None = None,
    ) -> None:
        if offset < 0 or (end_offset is not None and end_offset < offset):
            raise ValueError("offset/end_offset: need 0 <= offset <= end_offset")
        self.segment = segment
        self.config = config or ReaderConfig()
        self._source = source
        self._offset = offset
        self._end_offset = end_offset
        self._requests: deque[_Read] = deque()
        self._requested_to = offset  # end of the last range requested
        self._at_tail = False
        self._sealed_end: int | None = None
        self._parser: EventParser | None = None
        self._closed = False
        self._failures = 0
        self.requests_sent = 0
        """How many ReadSegment requests were sent; for tests and metrics."""

    async def __aenter__(self) -> SegmentReader:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @property
    def offset(self) -> int:
        """Where the reader resumes: after the last byte returned, or (events) after the last whole event."""
        return self._parser.offset if self._parser is not None else self._offset

    @property
    def at_end(self) -> bool:
        """True once the sealed end or ``end_offset`` was reached."""
        end = self._sealed_end if self._end_offset is None else self._end_offset
        return end is not None and self._offset >= end

    def seek(self, offset: int) -> None:
        """Continue from ``offset`` (drops prefetched data and any partial event)."""
        if offset < 0:
            raise ValueError("offset: must not be negative")
        self._reset()
        self._offset = self._requested_to = offset
        self._sealed_end = None
        self._parser = None

    async def close(self) -> None:
        """Drop the requests in flight. Idempotent."""
        self._closed = True
        self._reset()

    def _reset(self) -> None:
        while self._requests:
            _forget(self._requests.popleft().task)
        self._requested_to = self._offset

    # ---- raw bytes ----------------------------------------------------------------------------------------

    async def read(self) -> bytes:
        """The next bytes (as many as one reply carried), waiting at the tail; b"" at the end.

        Raises SegmentIsTruncatedError, NoSuchSegmentError, or ConnectionLostError once retries are spent.
        """
        if self._parser is not None:
            raise RuntimeError("this reader returns events; do not mix read() with the event API")
        return await self._next_chunk()

    # ---- events -------------------------------------------------------------------------------------------

    async def next_event(self) -> SegmentEvent | None:
        """The next event with its segment offset; None at the end. Raises ProtocolError on bad framing or
        if the segment ends inside an event, and what :meth:`read` raises."""
        if self._parser is None:
            self._parser = EventParser(self._offset)
        parser = self._parser
        while True:
            event = next(parser, None)
            if event is not None:
                return event
            chunk = await self._next_chunk()
            if not chunk:
                if parser.pending_bytes:
                    raise ProtocolError(
                        f"{self.segment} ends inside an event at offset {parser.offset} "
                        f"({parser.pending_bytes} byte(s) of it)"
                    )
                return None
            parser.feed(chunk)

    async def events(self) -> AsyncIterator[SegmentEvent]:
        """Iterate the events up to the end."""
        while (event := await self.next_event()) is not None:
            yield event

    def __aiter__(self) -> AsyncIterator[SegmentEvent]:
        return self.events()

    # ---- prefetch -----------------------------------------------------------------------------------------

    def _limit(self) -> int | None:
        if self._end_offset is None:
            return self._sealed_end
        if self._sealed_end is None:
            return self._end_offset
        return min(self._end_offset, self._sealed_end)

    def _issue(self, offset: int, length: int, front: bool = False) -> None:
        read = _Read(offset, length, asyncio.get_running_loop().create_task(self._fetch(offset, length)))
        self.requests_sent += 1
        if front:
            self._requests.appendleft(read)
        else:
            self._requests.append(read)

    async def _fetch(self, offset: int, length: int) -> SegmentRead:
        connection = await self._source.connection_for(self.segment)
        token = await self._source.token(self.segment, False)
        command = ReadSegment(self.segment, offset, length, token, next_request_id())
        try:
            return await connection.request(command, SegmentRead, timeout_s=None)
        except AuthTokenCheckFailedError as error:
            if error.retriable:
                self._source.token_expired(self.segment)  # the re-issued read asks for a new one
            raise

    def _fill(self) -> None:
        limit = self._limit()
        in_flight = sum(r.length for r in self._requests)
        depth = 1 if self._at_tail else None
        while depth is None or len(self._requests) < depth:
            start = self._requested_to
            if limit is not None and start >= limit:
                return
            if self._requests and in_flight + self.config.read_request_bytes > self.config.prefetch_bytes:
                return
            length = self.config.read_request_bytes
            if limit is not None:
                length = min(length, limit - start)
            self._issue(start, length)
            self._requested_to = start + length
            in_flight += length

    async def _next_chunk(self) -> bytes:
        while True:
            if self._closed:
                raise ClientClosedError(f"reader of {self.segment} is closed")
            if self.at_end:
                return b""
            self._fill()
            head = self._requests[0]
            try:
                reply = await asyncio.shield(head.task)
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if head.task.cancelled() and not self._closed and not (current and current.cancelling()):
                    continue  # dropped by a seek or reset; the caller was not cancelled
                raise
            except Exception as error:
                await self._recover(error)
                continue
            if self._requests and self._requests[0] is head:
                self._requests.popleft()
            data = reply.data
            got = len(data)
            if reply.offset != head.offset or got > head.length:
                self._reset()
                raise UnexpectedReplyError(f"ReadSegment at {head.offset} for {head.length} bytes", reply)
            self._failures = 0
            self._at_tail = reply.at_tail
            if reply.end_of_segment:
                self._sealed_end = head.offset + got
                self._reset_after(self._sealed_end)
            elif got < head.length:
                self._issue(head.offset + got, head.length - got, front=True)
            if got:
                self._offset += got
                return data

    def _reset_after(self, end: int) -> None:
        """The segment ends at ``end``: drop every request beyond it."""
        while self._requests:
            _forget(self._requests.popleft().task)
        self._requested_to = end

    async def _recover(self, error: Exception) -> None:
        """A request failed: re-issue everything after a backoff if that may help, else raise."""
        self._reset()
        if isinstance(error, WrongHostError):
            self._source.moved(self.segment)  # its container moved: the re-issued reads go to its new owner
        if not is_retriable(error):
            raise error
        self._failures += 1
        delays = list(self.config.retry.delays_s())
        if self._failures > len(delays):
            raise error
        await self.config.retry.sleep(delays[self._failures - 1])
