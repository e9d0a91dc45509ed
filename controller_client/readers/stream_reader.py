"""Reading a stream's events between two stream cuts, segment by segment, following scale events.

:class:`StreamReader` starts one prefetching :class:`~segment_store.client.reader.SegmentReader` per segment
of the start cut (default: the head of the stream) and merges their events into one iterator of
:class:`StreamEvent`. When a segment ends (sealed and read to its end) the reader asks the controller for
its successors; a successor is started only after **all** of its predecessors were read to their end, so
every event of a routing key comes out after the earlier events of that key (keys move between segments
only at scale events, and a successor holds only later events than each of its predecessors).

Bounds: a segment named in the end cut is read up to its offset there (-1: to its sealed end) and its
successors are never read; successors of a segment in the end cut are beyond the cut. Without an end cut
the reader follows the tail: it waits for new events at the end of open segments, and ends only when the
stream is sealed and fully read.

Invariants: events of one segment come out in offset order, each exactly once; ``offset`` is where the
event's header starts in its segment. A read below a segment's start (truncated data) raises
``SegmentIsTruncatedError``. A segment store that answers ``WrongHost`` (its container is moving) or drops the
connection is asked again with backoff (the endpoint re-resolved) for as long as the failures in a row last less
than the manager's ``retry_timeout_s``: reading anything ends the run, so a reader that follows the tail for hours
outlives any number of failovers. The cuts must be consistent (as head, tail and at-time cuts are): every
predecessor of a segment the reader reaches is itself read, or the successor is never started.

Use from one event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

from controller_client.model import SegmentRange, StreamCut, qualified_segment_name
from controller_client.ports import ControllerApi
from segment_store.client import (
    Backoff,
    ClientClosedError,
    ConnectionLostError,
    ReaderConfig,
    RetryPolicy,
    SegmentClient,
    SegmentReader,
    WrongHostError,
)
from segstore_shared.deadline import DEFAULT_UNREACHABLE_TIMEOUT_S
from segstore_shared.errors import RetriableError

_log = logging.getLogger(__name__)
_T = TypeVar("_T")
SUCCESSOR_ATTEMPTS = 12
"""Looks for the successors of an ended segment while the stream is not sealed (0.1 s apart, doubling up to 1 s)."""


@dataclass(frozen=True, slots=True)
class StreamEvent:
    """An event of the stream: its segment, the offset of its header in that segment, its bytes."""

    segment_id: int
    offset: int
    data: bytes


@dataclass(frozen=True, slots=True)
class StreamReaderConfig:
    """A stream reader."""

    segment_reader: ReaderConfig | None = None
    """Prefetch settings of each segment reader; None: the client's."""
    max_buffered_events: int = 4096
    """Events read ahead of the caller across all segments (each segment reader also prefetches bytes)."""
    controller_retry: RetryPolicy = field(default_factory=lambda: RetryPolicy(max_attempts=10, max_delay_ms=2_000))
    """Retries of controller calls that fail retriably (controller unavailable)."""
    segment_retry: RetryPolicy = field(default_factory=lambda: RetryPolicy(max_attempts=1_000, max_delay_ms=1_000))
    """Backoff of a segment reader restarted after its segment store answered WrongHost or dropped the connection."""
    segment_retry_timeout_s: float | None = None
    """How long a segment reader may keep failing that way, without reading anything, before the reader fails with
    the error; None: the stream manager's ``retry_timeout_s`` (30 s by default)."""

    def __post_init__(self) -> None:
        if self.max_buffered_events < 1:
            raise ValueError("max_buffered_events: must be at least 1")
        if self.segment_retry_timeout_s is not None and self.segment_retry_timeout_s <= 0:
            raise ValueError(f"segment_retry_timeout_s: must be positive, not {self.segment_retry_timeout_s}")


@dataclass(frozen=True, slots=True)
class _Done:
    segment_id: int


@dataclass(frozen=True, slots=True)
class _Failed:
    segment_id: int
    error: BaseException


_Item = StreamEvent | _Done | _Failed


class StreamReader:
    """Events of ``scope/stream`` from ``start`` (None: the head) to ``end`` (None: follow the tail).

    ``async for event in reader`` or :meth:`next_event`; ``close()`` (or ``async with``) stops the segment
    readers.
    """

    def __init__(
        self,
        controller: ControllerApi,
        client: SegmentClient,
        scope: str,
        stream: str,
        start: StreamCut | None = None,
        end: StreamCut | None = None,
        config: StreamReaderConfig | None = None,
        on_endpoint_error: Callable[[str], None] | None = None,
        retry_timeout_s: float = DEFAULT_UNREACHABLE_TIMEOUT_S,
    ) -> None:
        """``retry_timeout_s``: the segment readers' budget when the config names none (the manager's)."""
        for cut, what in ((start, "start"), (end, "end")):
            if cut is not None and (cut.scope, cut.stream) != (scope, stream):
                raise ValueError(f"{what}: a cut of {cut.scope}/{cut.stream}, not of {scope}/{stream}")
        self.scope = scope
        self.stream = stream
        self.config = config or StreamReaderConfig()
        self._controller = controller
        self._client = client
        self._start_cut = start
        self._end = dict(end.positions) if end is not None else None
        self._on_endpoint_error = on_endpoint_error
        self._segment_retry_timeout_s = self.config.segment_retry_timeout_s or retry_timeout_s
        self._queue: asyncio.Queue[_Item] = asyncio.Queue(self.config.max_buffered_events)
        self._active: dict[int, asyncio.Task[None]] = {}
        self._finished: set[int] = set()
        self._waiting: dict[int, tuple[SegmentRange, set[int]]] = {}
        self._started = False
        self._closed = False
        self._failure: BaseException | None = None
        self.segments_read: list[int] = []
        """Segment ids in the order their reading started; for tests and metrics."""
        self._readers: dict[int, SegmentReader] = {}
        self.ended_without_successors: list[int] = []
        """Segments read to their end for which the controller named no successor (a sealed stream; else the
        reader does not read their key range on): for diagnosis."""

    async def __aenter__(self) -> StreamReader:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def __aiter__(self) -> AsyncIterator[StreamEvent]:
        return self.events()

    async def events(self) -> AsyncIterator[StreamEvent]:
        """Every event up to the end cut (or for ever in tail mode)."""
        while (event := await self.next_event()) is not None:
            yield event

    async def next_event(self, timeout_s: float | None = None) -> StreamEvent | None:
        """The next event; None when everything up to the end cut (or of a sealed stream) was read.

        Raises TimeoutError after ``timeout_s`` without an event (the reader stays usable), a segment
        reader's error (SegmentIsTruncatedError, ...), the controller's errors, ClientClosedError.
        """
        if self._closed:
            raise ClientClosedError(f"reader of {self.scope}/{self.stream} is closed")
        if self._failure is not None:
            raise self._failure
        if not self._started:
            self._started = True
            await self._start()
        loop = asyncio.get_running_loop()
        deadline = None if timeout_s is None else loop.time() + timeout_s
        while True:
            if not self._active and self._queue.empty():
                return None
            if deadline is None:
                item = await self._queue.get()
            else:  # only the wait is bounded: a successor lookup under way is never cut short
                async with asyncio.timeout_at(deadline):  # (not wait_for: it may swallow a cancel, Python 3.11)
                    item = await self._queue.get()
            if isinstance(item, StreamEvent):
                return item
            if isinstance(item, _Failed):
                self._failure = item.error
                await self.close()
                raise item.error
            self._active.pop(item.segment_id, None)
            if self._end is not None and item.segment_id in self._end:
                continue  # stopped at the end cut: its successors are beyond it
            try:
                await self._expand(item.segment_id)
            except Exception as error:  # the successors are unknown: the reader cannot go on in order
                self._failure = error
                await self.close()
                raise

    def positions(self) -> dict[int, int]:
        """Per segment being read, where its reader is (the offset after the last event it handed over); for
        diagnosis (a reader that stopped moving while its segment grows)."""
        return {segment_id: reader.offset for segment_id, reader in self._readers.items()}

    def waiting(self) -> dict[int, set[int]]:
        """Successors not started yet, each with the predecessors still being read; for diagnosis."""
        return {segment_id: set(remaining) for segment_id, (_, remaining) in self._waiting.items()}

    async def close(self) -> None:
        """Stop every segment reader. Idempotent."""
        self._closed = True
        tasks = list(self._active.values())
        self._active.clear()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    # ---- segments -----------------------------------------------------------------------------------------

    async def _controller_call(self, call: Callable[[], Awaitable[_T]]) -> _T:
        return await self.config.controller_retry.call(call)

    async def _start(self) -> None:
        cut = self._start_cut
        if cut is None:
            cut = await self._controller_call(lambda: self._controller.get_segments_at_time(self.scope, self.stream, 0))
        for segment_id, offset in sorted(cut.positions.items()):
            await self._start_segment(segment_id, offset)

    async def _start_segment(self, segment_id: int, offset: int) -> None:
        name = qualified_segment_name(self.scope, self.stream, segment_id)
        if offset < 0:  # -1: the segment's current end
            offset = (await self._client.get_segment_info(name)).write_offset
        end: int | None = None
        if self._end is not None and segment_id in self._end:
            end = self._end[segment_id]
            if end < 0:
                end = None
            elif end < offset:
                raise ValueError(f"segment {segment_id}: end cut offset {end} is before the start offset {offset}")
        self.segments_read.append(segment_id)
        task = asyncio.get_running_loop().create_task(self._pump(segment_id, name, offset, end), name=f"read-{name}")
        self._active[segment_id] = task

    async def _pump(self, segment_id: int, name: str, offset: int, end: int | None) -> None:
        """Feed the segment's events into the queue, then a ``_Done`` (or a ``_Failed``)."""
        backoff = Backoff(self.config.segment_retry, self._segment_retry_timeout_s)
        reader: SegmentReader | None = None
        try:
            while True:
                reader = self._client.reader(name, offset, end, self.config.segment_reader)
                self._readers[segment_id] = reader
                try:
                    while (event := await reader.next_event()) is not None:
                        backoff.succeeded()
                        await self._queue.put(StreamEvent(segment_id, event.offset, event.data))
                    break
                except (WrongHostError, ConnectionLostError) as error:
                    _log.info("reader of %s restarts at %d after %r", name, reader.offset, error)
                    if self._on_endpoint_error is not None:
                        self._on_endpoint_error(name)
                    offset = reader.offset
                    await reader.close()
                    await backoff.failed(error)  # raises once the failures in a row outlast the budget
            await self._queue.put(_Done(segment_id))
        except asyncio.CancelledError:
            raise
        except Exception as error:
            await self._queue.put(_Failed(segment_id, error))
        finally:
            self._readers.pop(segment_id, None)
            if reader is not None:
                await reader.close()

    async def _expand(self, segment_id: int) -> None:
        """``segment_id`` was read to its end: start the successors whose predecessors are all read."""
        successors = await self._successors(segment_id)
        self._finished.add(segment_id)
        if not successors:
            self.ended_without_successors.append(segment_id)
        for successor, predecessors in sorted(successors.items(), key=lambda item: item[0].key_start):
            sid = successor.segment_id
            if sid in self._active or sid in self._finished or sid in self.segments_read:
                continue
            entry = self._waiting.setdefault(sid, (successor, set(predecessors)))
            remaining = entry[1]
            remaining.update(predecessors)
            remaining.difference_update(self._finished)
            if not remaining:
                del self._waiting[sid]
                await self._start_segment(sid, 0)

    async def _successors(self, segment_id: int) -> dict[SegmentRange, list[int]]:
        """The successors of a segment read to its (sealed) end. None named while the stream still has current
        segments is a stale answer (a controller reading ZooKeeper from a member behind the one the scale wrote
        to, found by ``segstore selftest``): asked again, up to ``SUCCESSOR_ATTEMPTS`` times, then
        StaleSuccessorsError (retriable), rather than leaving the segment's key range unread."""
        for attempt in range(1, SUCCESSOR_ATTEMPTS + 1):
            successors = await self._controller_call(
                lambda: self._controller.get_successors(self.scope, self.stream, segment_id)
            )
            if successors:
                return successors
            current = await self._controller_call(
                lambda: self._controller.get_current_segments(self.scope, self.stream)
            )
            if not current:  # a sealed stream: its last segments have no successors
                return successors
            if attempt < SUCCESSOR_ATTEMPTS:
                _log.info("no successor of sealed segment %d of %s/%s yet; asking again", segment_id, self.scope,
                          self.stream)  # fmt: skip
                await asyncio.sleep(min(0.05 * 2**attempt, 1.0))
        raise StaleSuccessorsError(
            f"segment {segment_id} of {self.scope}/{self.stream} ended, the stream is not sealed, and the controller "
            f"names no successor after {SUCCESSOR_ATTEMPTS} attempts"
        )


class StaleSuccessorsError(RetriableError):
    """A segment ended but the controller named no successor while the stream is not sealed (a stale read)."""


async def read_segment_range(
    client: SegmentClient,
    scope: str,
    stream: str,
    segment_id: int,
    start: int = 0,
    end: int | None = None,
    config: ReaderConfig | None = None,
) -> bytes:
    """The bytes ``[start, end)`` of a stream segment (``end`` None: up to its current length).

    An ``end`` past the length of an open segment waits for the data. Raises SegmentIsTruncatedError
    below the segment's start, NoSuchSegmentError, ValueError for a bad range.
    """
    name = qualified_segment_name(scope, stream, segment_id)
    if end is None:
        end = (await client.get_segment_info(name)).write_offset
    if not 0 <= start <= end:
        raise ValueError(f"range: need 0 <= start <= end, got [{start}, {end})")
    chunks: list[bytes] = []
    async with client.reader(name, start, end, config) as reader:
        while chunk := await reader.read():
            chunks.append(chunk)
    data = b"".join(chunks)
    if len(data) != end - start:
        raise ValueError(f"range: segment {name} ends at {start + len(data)}, before {end}")
    return data
