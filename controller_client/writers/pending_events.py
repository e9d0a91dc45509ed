"""The events a stream writer holds for one segment until they are stored, and the futures callers get.

:class:`Batch`: events written one after another into one block of a segment session share one future.
:class:`PendingEvents`: a segment's events not acknowledged yet, in event-number order, kept so that a scale
can move them to the successors; nothing in it is an object per event. Both run on the writer's event loop.
"""

from __future__ import annotations

import asyncio
from collections import deque


class Batch:
    """Events written one after another into one block of a session share one future (``write_event``
    returns it), done once all of them are stored, wherever a scale moved them."""

    __slots__ = ("error", "future", "remaining", "settled", "waiters")

    def __init__(self, future: asyncio.Future[None]) -> None:
        self.future = future  # the callers'; one of them may cancel it, so the writer never awaits it
        self.remaining = 0  # events of the batch not stored yet
        self.settled = False
        self.error: BaseException | None = None
        self.waiters: list[asyncio.Future[None]] | None = None  # the writer's own (flush)

    def succeed(self) -> None:
        """Every event of the batch is stored."""
        if not self.settled:
            self.settled = True
            if not self.future.done():
                self.future.set_result(None)
            if self.waiters:
                self._wake()

    def fail(self, error: BaseException) -> None:
        if not self.settled:
            self.settled, self.error = True, error
            if not self.future.done():
                self.future.set_exception(error)
                self.future.exception()  # retrieved here; the caller sees it when awaiting
            self._wake()

    def wait(self) -> asyncio.Future[None]:
        """A future of the writer's own that settles with the batch, whatever callers do to ``future``."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.waiters is None:
            self.waiters = []
        self.waiters.append(waiter)
        if self.settled:
            self._wake()
        return waiter

    def _wake(self) -> None:
        waiters, self.waiters = self.waiters or [], None
        for waiter in waiters:
            if waiter.done():
                continue
            if self.error is None:
                waiter.set_result(None)
            else:
                waiter.set_exception(self.error)
                waiter.exception()


class PendingEvents:
    """A sink's events not acknowledged yet, in event-number order (consecutive numbers from
    ``first_number``): payloads, routing keys, and runs ``[batch, count]`` of consecutive events of one
    batch.

    Nothing here is an object per event that the garbage collector tracks: with hundreds of thousands of
    events in flight, per-event objects made full collections the largest cost of writing. Releasing is per
    run, not per event: payloads and keys sit in lists read from ``_start``, cut when half of them are
    released or emptied when all are (popping them one by one was ~0.3 us per event).
    """

    __slots__ = ("_compact_at", "_start", "data", "first_number", "keys", "runs")

    def __init__(self, compact_at: int = 1024) -> None:
        self._compact_at = compact_at  # released entries kept in front of the lists: at most this many or half
        self.first_number = 0
        self._start = 0
        self.data: list[bytes] = []
        self.keys: list[str | None] = []
        self.runs: deque[list] = deque()  # [batch, count]

    def __len__(self) -> int:
        return len(self.data) - self._start

    def add(self, number: int, data: bytes, key: str | None, batch: Batch) -> None:
        if not self.data:  # (lists are emptied once everything in them is released)
            self.first_number = number
        self.data.append(data)
        self.keys.append(key)
        runs = self.runs
        if runs and runs[-1][0] is batch:
            runs[-1][1] += 1
        else:
            runs.append([batch, 1])

    def release_through(self, level: int) -> int:
        """The events numbered up to ``level`` are stored: complete batches that are whole; return their bytes."""
        position = self._start
        data = self.data
        count = min(len(data) - position, level - self.first_number + 1)
        if count <= 0:
            return 0
        freed = sum(map(len, data[position : position + count]))  # in C: no Python step per event
        runs = self.runs
        left = count
        while left:
            run = runs[0]
            batch: Batch = run[0]
            take = min(run[1], left)
            if take == run[1]:
                runs.popleft()
            else:  # part of a run (a setup acknowledged within a block)
                run[1] -= take
            position += take
            left -= take
            batch.remaining -= take
            if batch.remaining == 0:
                batch.succeed()
        self.first_number += count
        self._start = position
        if position == len(data):
            self._clear()
        elif position >= self._compact_at and 2 * position >= len(data):
            del data[:position]
            del self.keys[:position]
            self._start = 0
        return freed

    def take_all(self) -> list[tuple[bytes, str | None, Batch]]:
        """Remove every event (to move them elsewhere), in order, each with its batch."""
        batches = [run[0] for run in self.runs for _ in range(run[1])]
        events = list(zip(self.data[self._start :], self.keys[self._start :], batches, strict=True))
        self._clear()
        return events

    def fail_all(self, error: BaseException) -> int:
        """Fail every batch with an event here and drop the events; return their bytes."""
        freed = sum(map(len, self.data[self._start :]))
        for run in self.runs:
            run[0].fail(error)
        self._clear()
        return freed

    def _clear(self) -> None:
        self.data.clear()
        self.keys.clear()
        self.runs.clear()
        self._start = 0

    def batches(self) -> list[Batch]:
        return list({id(run[0]): run[0] for run in self.runs}.values())
