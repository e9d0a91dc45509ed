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
    ``first_number``): payloads, routing keys, and runs ``[batch, count]`` of consecutive events of one batch.

    Nothing here is an object per event that the garbage collector tracks: with hundreds of thousands of
    events in flight, per-event objects made full collections the largest cost of writing.
    """

    __slots__ = ("data", "first_number", "keys", "runs")

    def __init__(self) -> None:
        self.first_number = 0
        self.data: deque[bytes] = deque()
        self.keys: deque[str | None] = deque()
        self.runs: deque[list] = deque()  # [batch, count]

    def __len__(self) -> int:
        return len(self.data)

    def add(self, number: int, data: bytes, key: str | None, batch: Batch) -> None:
        if not self.data:
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
        count = min(len(self.data), level - self.first_number + 1)
        if count <= 0:
            return 0
        freed = 0
        data, keys = self.data, self.keys
        for _ in range(count):
            freed += len(data.popleft())
            keys.popleft()
        self.first_number += count
        runs = self.runs
        while count:
            run = runs[0]
            batch: Batch = run[0]
            take = min(run[1], count)
            count -= take
            batch.remaining -= take
            if take == run[1]:
                runs.popleft()
            else:
                run[1] -= take
            if batch.remaining == 0:
                batch.succeed()
        return freed

    def take_all(self) -> list[tuple[bytes, str | None, Batch]]:
        """Remove every event (to move them elsewhere), in order, each with its batch."""
        batches = [run[0] for run in self.runs for _ in range(run[1])]
        events = list(zip(self.data, self.keys, batches, strict=True))
        self.data.clear()
        self.keys.clear()
        self.runs.clear()
        return events

    def fail_all(self, error: BaseException) -> int:
        """Fail every batch with an event here and drop the events; return their bytes."""
        freed = sum(len(d) for d in self.data)
        for run in self.runs:
            run[0].fail(error)
        self.data.clear()
        self.keys.clear()
        self.runs.clear()
        return freed

    def batches(self) -> list[Batch]:
        return list({id(run[0]): run[0] for run in self.runs}.values())
