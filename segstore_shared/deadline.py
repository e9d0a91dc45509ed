"""One time budget per call for reaching what the call needs, shared by every layer that retries.

A client call that cannot reach the controller or a segment store fails once its budget is spent (the controller
client's ``retry_timeout_s``, 30 s by default): one deadline for the whole call, never retries nested in retries.
The layer that owns a call (a ``StreamManager`` method, the controller client's transport) opens
:func:`budget`; inside it:

* a retry loop starts no attempt once the deadline has passed (``RetryPolicy.call``, the transport's UNAVAILABLE
  loop), and a connection attempt waits no longer than the time left (:func:`clip`);
* a retry loop inside another one (:func:`retrying`) makes one attempt and leaves the retrying to the outer one,
  so attempts never multiply;
* an error after which the budget is spent is :func:`final` (:func:`mark_final`): no retry loop repeats it.

A budget inside a budget never extends it: the earlier deadline wins. The deadline belongs to the task that opened
it: a task started inside (a writer's session reconnecting in the background, a reader's prefetch) does not
inherit it and keeps its own limits. Once a call has reached its server, the server's answer has its own deadline
(``rpc_timeout_s``, ``request_timeout_ms``): the budget bounds reaching, not waiting for a reachable server.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

DEFAULT_UNREACHABLE_TIMEOUT_S = 30.0
"""The default budget: how long a call tries to reach an unreachable controller or segment store."""


@dataclass(frozen=True, slots=True)
class Deadline:
    """The budget of the call running in ``owner``: it started at ``started`` and ends at ``at`` (monotonic s)."""

    started: float
    at: float
    owner: asyncio.Task[object] | None
    retrying: bool = False
    """A retry loop of this task is running around the code that looks (so inner loops make one attempt)."""

    def remaining_s(self) -> float:
        return self.at - time.monotonic()

    def elapsed_s(self) -> float:
        return time.monotonic() - self.started


_CURRENT: ContextVar[Deadline | None] = ContextVar("segstore_call_deadline", default=None)


def _task() -> asyncio.Task[object] | None:
    try:
        return asyncio.current_task()
    except RuntimeError:  # no running loop: a synchronous caller
        return None


def current() -> Deadline | None:
    """The deadline of the call this task runs, if one was opened in this task (tasks do not inherit it)."""
    deadline = _CURRENT.get()
    if deadline is None or deadline.owner is not _task():
        return None
    return deadline


@contextmanager
def budget(seconds: float) -> Iterator[Deadline]:
    """Run the code inside within ``seconds`` from now, or within the deadline already open if that is earlier."""
    outer = current()
    now = time.monotonic()
    if outer is not None and outer.at <= now + seconds:
        yield outer
        return
    deadline = Deadline(now, now + seconds, _task(), outer.retrying if outer is not None else False)
    token = _CURRENT.set(deadline)
    try:
        yield deadline
    finally:
        _CURRENT.reset(token)


@contextmanager
def retrying() -> Iterator[bool]:
    """Mark a retry loop of this task as running; yields whether another one runs around it already (then this
    one must make one attempt only: the outer loop retries)."""
    outer = current()
    if outer is None:
        task = _task()
        if task is None:  # no event loop: nothing to mark
            yield False
            return
        outer = Deadline(time.monotonic(), float("inf"), task)
    if outer.retrying:
        yield True
        return
    token = _CURRENT.set(Deadline(outer.started, outer.at, outer.owner, True))
    try:
        yield False
    finally:
        _CURRENT.reset(token)


def remaining_s() -> float | None:
    """Seconds left of this task's call budget; None when no budget is open (infinite when only a retry loop is)."""
    deadline = current()
    return None if deadline is None else deadline.remaining_s()


def clip(seconds: float) -> float:
    """``seconds``, or the time left of the call budget if that is shorter (never below zero)."""
    left = remaining_s()
    return seconds if left is None else max(0.0, min(seconds, left))


def mark_final(error: BaseException) -> BaseException:
    """Mark ``error`` as the end of a spent budget: no retry loop repeats it. Returns it."""
    error.final = True  # type: ignore[attr-defined]
    return error


def final(error: BaseException) -> bool:
    """Whether ``error`` ended a spent budget (:func:`mark_final`): a layer under the caller retried it already."""
    return bool(getattr(error, "final", False))
