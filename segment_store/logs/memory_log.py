"""The in-memory operation log: committed operations in log order, for the storage writer.

Operations are added only after they are durable, in sequence-number order, and
removed only from the front (when Tier-1 is truncated). :meth:`read` never
returns an operation twice for increasing ``after_sequence`` arguments and waits
(bounded) when nothing newer exists.
"""

from __future__ import annotations

import asyncio
import bisect
from collections import deque

from segment_store.logs.operations import Operation


class InMemoryOperationLog:
    def __init__(self) -> None:
        self._ops: deque[Operation] = deque()
        self._first_sequence = 0  # sequence numbers below this were truncated
        self._changed = asyncio.Event()

    def append(self, ops: list[Operation]) -> None:
        if ops and self._ops and ops[0].sequence_number <= self._ops[-1].sequence_number:
            raise ValueError("operations must be added in increasing sequence order")
        self._ops.extend(ops)
        self._changed.set()

    def __len__(self) -> int:
        return len(self._ops)

    @property
    def last_sequence(self) -> int:
        return self._ops[-1].sequence_number if self._ops else self._first_sequence - 1

    def _index_after(self, after_sequence: int) -> int:
        ops = self._ops
        if not ops or ops[0].sequence_number > after_sequence:
            return 0
        # deque has no bisect; sequence numbers are dense enough that an estimate usually lands exactly
        guess = after_sequence - ops[0].sequence_number + 1
        if (
            0 <= guess <= len(ops)
            and (guess == 0 or ops[guess - 1].sequence_number <= after_sequence)
            and (guess == len(ops) or ops[guess].sequence_number > after_sequence)
        ):
            return guess
        return bisect.bisect_right([o.sequence_number for o in ops], after_sequence)

    def read_now(self, after_sequence: int, max_count: int) -> list[Operation]:
        start = self._index_after(after_sequence)
        end = min(len(self._ops), start + max_count)
        return [self._ops[i] for i in range(start, end)]

    async def read(self, after_sequence: int, max_count: int, timeout_s: float) -> list[Operation]:
        """Operations with sequence number > ``after_sequence`` (at most ``max_count``); waits up to ``timeout_s``."""
        ops = self.read_now(after_sequence, max_count)
        if ops or timeout_s <= 0:
            return ops
        self._changed.clear()
        try:
            async with asyncio.timeout(timeout_s):  # not wait_for: on 3.11 it can swallow a cancellation
                await self._changed.wait()
        except TimeoutError:
            return []
        return self.read_now(after_sequence, max_count)

    def wake(self) -> None:
        """End a waiting :meth:`read` early (it returns what there is, possibly nothing)."""
        self._changed.set()

    def truncate(self, below_sequence: int) -> int:
        """Drop operations with sequence number < ``below_sequence``; returns how many were dropped."""
        dropped = 0
        while self._ops and self._ops[0].sequence_number < below_sequence:
            self._ops.popleft()
            dropped += 1
        self._first_sequence = max(self._first_sequence, below_sequence)
        return dropped
