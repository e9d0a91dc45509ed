"""What a stuck task is waiting for: the chain of awaits of a suspended task, innermost last, for a failure that
says where it hangs (the self-test's ``the writers did not drain``, a controller's transaction commit that does
not end), not only that it does.

``Task.get_stack`` gives a suspended coroutine's outermost frame only (Python 3.11); :func:`await_chain` follows
``cr_await`` from the task's coroutine down to the future it waits on, so the log names the line in the client
library (a flush waiting for acknowledgements, a session waiting to reconnect, a controller call).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator, Iterable
from types import CoroutineType, FrameType
from typing import Any

_log = logging.getLogger(__name__)
MAX_DEPTH = 40
MAX_GATHER_DEPTH = 3
MAX_GATHERED = 3
_ASYNCIO = os.path.dirname(asyncio.__file__) + os.sep


def await_chain(task: asyncio.Task[Any], depth: int = 0) -> list[str]:
    """``file:line in function`` of each coroutine ``task`` is suspended in, outermost first, then what the
    innermost one awaits (a future, a task, an event's waiter); under a gather, the chains of its first
    pending tasks (``depth`` counts the gathers above, for the recursion)."""
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
        if depth < MAX_GATHER_DEPTH:
            chain.extend(_gathered(waited, depth))
    return chain


def _gathered(waited: object, depth: int) -> list[str]:
    """The await chains of the first pending tasks of a gather (each indented under the gather)."""
    children = getattr(waited, "_children", None) or ()
    pending = [c for c in children if isinstance(c, asyncio.Task) and not c.done()][:MAX_GATHERED]
    lines: list[str] = []
    for child in pending:
        lines.append(f"  gathered {child.get_name()}:")
        lines.extend("    " + line for line in await_chain(child, depth + 1))
    return lines


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


@contextlib.asynccontextmanager
async def warn_if_slow(what: str, after_s: float, log: logging.Logger) -> AsyncIterator[None]:
    """Run the body in the current task; each ``after_s`` it is still running, log (WARNING, on ``log``) how long
    it has run and the await chain of the task (where it waits), so a hang names its line in the log."""
    task = asyncio.current_task()
    assert task is not None, "warn_if_slow runs in a task"
    loop = asyncio.get_running_loop()
    began = loop.time()

    async def watch() -> None:
        while True:
            await asyncio.sleep(after_s)
            log.warning(
                "%s still running after %.0f s; it waits at:\n  %s", what, loop.time() - began,
                "\n  ".join(await_chain(task)),
            )  # fmt: skip

    watcher = loop.create_task(watch(), name=f"watch {what}")
    try:
        yield
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
