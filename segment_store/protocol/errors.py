"""Errors of the wire codec.

Every malformed input the codec sees (bad header, unknown type code, a body shorter or longer than its
fields, an out-of-order append frame, an unencodable value) surfaces as :class:`ProtocolError`; nothing
else escapes the decoders. A protocol error is never retriable: the same bytes fail the same way, and
the connection that carried them must be closed.
"""

from __future__ import annotations

from collections import deque
from typing import TypeVar

from segstore_shared.errors import SegstoreError


class ProtocolError(SegstoreError):
    """Bytes or commands that violate the Pravega wire protocol; the connection cannot continue."""

    retriable = False


class IncompatibleVersionError(ProtocolError):
    """The peer's ``Hello`` version range does not overlap ours."""

    def __init__(self, message: str, peer_high: int, peer_low: int) -> None:
        super().__init__(message)
        self.peer_high = peer_high
        self.peer_low = peer_low


def detached(error: ProtocolError) -> ProtocolError:
    """Strip ``error``'s traceback and exception chain so that keeping it (decoders store the error they
    hit, to raise it in order) does not keep the frames, and so the caller's input buffers, alive."""
    error.__traceback__ = None
    error.__context__ = None
    error.__cause__ = None
    return error


_T = TypeVar("_T")


def next_ready(ready: deque[_T | ProtocolError]) -> _T:
    """The next item of an incremental parser's ready queue, in order.

    Raises StopIteration when the queue is empty, and the stored ProtocolError when it is next in
    line; the error stays queued, so every later call raises it again.
    """
    if not ready:
        raise StopIteration
    item = ready[0]
    if isinstance(item, ProtocolError):
        raise item.with_traceback(None)
    ready.popleft()
    return item
