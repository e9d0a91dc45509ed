"""What a stuck task is waiting for: the chain of awaits of a suspended task, innermost last, for a failure that
says where the drain hangs (``the writers did not drain``), not only that it does.

``Task.get_stack`` gives a suspended coroutine's outermost frame only (Python 3.11); :func:`await_chain` follows
``cr_await`` from the task's coroutine down to the future it waits on, so the log names the line in the client
library (a flush waiting for acknowledgements, a session waiting to reconnect, a controller call).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Iterable
from types import CoroutineType, FrameType
from typing import Any

_log = logging.getLogger(__name__)
MAX_DEPTH = 40
_ASYNCIO = os.path.dirname(asyncio.__file__) + os.sep


def await_chain(task: asyncio.Task[Any]) -> list[str]:
    """``file:line in function`` of each coroutine ``task`` is suspended in, outermost first, then what the
    innermost one awaits (a future, a task, an event's waiter)."""
    chain: list[str] = []
    awaited: object = task.get_coro()
    for _ in range(MAX_DEPTH):
        frame = _frame_of(awaited)
        if frame is None:
            break
        chain.append(f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}")
        awaited = getattr(awaited, "cr_await", None) or getattr(awaited, "gi_yieldfrom", None)
    if awaited is not None and _frame_of(awaited) is None:
        # What the task itself waits on names the future (a task, a gather); ``cr_await`` holds only its iterator.
        waited = getattr(task, "_fut_waiter", None) or awaited
        chain.append(f"awaits {_short(waited)}")
    return chain


def _frame_of(awaitable: object) -> FrameType | None:
    if isinstance(awaitable, CoroutineType):
        return awaitable.cr_frame
    frame = getattr(awaitable, "gi_frame", None)  # an async generator's asend(), a generator-based awaitable
    return frame if isinstance(frame, FrameType) else None


def _short(awaited: object) -> str:
    text = repr(awaited)
    return text if len(text) <= 200 else text[:197] + "..."


def innermost(task: asyncio.Task[Any]) -> str:
    """The innermost line of code outside asyncio itself that the task waits at (``event_writer.py:210 in
    flush``, not the ``Event.wait`` under it), for a one-line failure."""
    frames = [line for line in await_chain(task) if not line.startswith(("awaits ", _ASYNCIO))]
    return frames[-1].rsplit("/", 1)[-1] if frames else "not started"


def log_pending(what: str, tasks: Iterable[asyncio.Task[Any]]) -> None:
    """Log (WARNING) the await chain of every task still pending, with ``what`` the run was waiting for."""
    pending = [task for task in tasks if not task.done()]
    _log.warning("%s: %d task(s) still pending", what, len(pending))
    for task in pending:
        _log.warning("task %s waits at:\n  %s", task.get_name(), "\n  ".join(await_chain(task)))
