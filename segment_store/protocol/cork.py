"""Corking: the frames a connection writes during one turn of its event loop leave in one socket write.

Used by both ends of the wire (client connections and the server's): a turn that acknowledges or sends
blocks of many writers costs one system call per connection, not one per frame. Sans-I/O: the owner
gives the function that writes bytes to its transport and the one that schedules a call for the next
turn (``loop.call_soon``).

Invariants:
- frames leave in the order written, each exactly once (unless dropped);
- nothing waits longer than until the next turn: the first frame queued schedules the flush;
- once ``limit`` bytes or more are queued they leave at once, so the transport's write buffer (and its
  ``pause_writing`` flow control) sees everything but less than ``limit`` bytes;
- :meth:`FrameCork.flush` sends what is queued now (before a close); :meth:`FrameCork.drop` forgets it
  (an abort).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

CORK_BYTES = 64 * 1024


class FrameCork:
    """See module docstring."""

    __slots__ = ("_bytes", "_limit", "_out", "_schedule", "_sink")

    def __init__(
        self,
        sink: Callable[[bytes], None],
        schedule: Callable[[Callable[[], None]], object],
        limit: int = CORK_BYTES,
    ) -> None:
        self._sink = sink
        self._schedule = schedule
        self._limit = limit
        self._out: list[bytes] = []
        self._bytes = 0

    @property
    def queued_bytes(self) -> int:
        return self._bytes

    def write(self, frame: bytes) -> None:
        """Queue ``frame`` after what this turn wrote; the first one schedules the flush."""
        out = self._out
        out.append(frame)
        self._bytes += len(frame)
        if self._bytes >= self._limit:
            self.flush()
        elif len(out) == 1:
            self._schedule(self.flush)

    def write_parts(self, head: bytes, parts: Sequence[bytes], tail: bytes, size: int) -> None:
        """Queue the frame ``head + b"".join(parts) + tail`` (``size`` bytes in all) without joining it
        first: its pieces are copied once, with the rest of the turn's frames, when they leave."""
        out = self._out
        first = not out
        out.append(head)
        out.extend(parts)
        out.append(tail)
        self._bytes += size
        if self._bytes >= self._limit:
            self.flush()
        elif first:
            self._schedule(self.flush)

    def flush(self) -> None:
        """Hand everything queued to the sink in one call (nothing if empty)."""
        out = self._out
        if not out:
            return
        self._out = []
        self._bytes = 0
        self._sink(out[0] if len(out) == 1 else b"".join(out))

    def drop(self) -> None:
        """Forget what is queued."""
        self._out = []
        self._bytes = 0
