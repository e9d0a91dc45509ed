"""The event loop a server process runs on: uvloop where it is installed, the standard asyncio loop otherwise.

``--event-loop`` (``segstore segmentstore``, ``controller``, ``standalone``) chooses: ``auto`` (the default) takes
uvloop when it can be imported and the standard loop when not; ``uvloop`` insists (a clear error naming the flag
when it is missing); ``asyncio`` is the standard loop. Measured with ``bench/wire_ab.py`` (docs/benchmarks.md,
"Where the tail latency goes"). The servers' code runs on both: nothing here changes what a coroutine sees,
except that uvloop's transports are not subclasses of ``asyncio.Transport`` (so the servers never assert they are).
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

EVENT_LOOPS = ("auto", "uvloop", "asyncio")
"""The choices of ``--event-loop``."""


class EventLoopUnavailableError(ValueError):
    """``--event-loop uvloop`` where uvloop is not installed."""


def uvloop_installed() -> bool:
    return importlib.util.find_spec("uvloop") is not None


def loop_factory(choice: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The factory of the loop ``choice`` names (None: the standard loop). Raises ValueError for an unknown choice,
    :class:`EventLoopUnavailableError` for ``uvloop`` when it is not installed."""
    if choice not in EVENT_LOOPS:
        raise ValueError(f"--event-loop: {choice!r} is not one of {', '.join(EVENT_LOOPS)}")
    if choice == "asyncio" or (choice == "auto" and not uvloop_installed()):
        return None
    try:
        import uvloop
    except ImportError as error:
        raise EventLoopUnavailableError(f"--event-loop uvloop: uvloop cannot be imported ({error})") from None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def loop_name(loop: asyncio.AbstractEventLoop) -> str:
    """``uvloop`` or ``asyncio``: what a process says it runs on."""
    return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"


def run(main: Coroutine[Any, Any, T], choice: str = "auto") -> T:
    """``asyncio.run(main)`` on the loop ``choice`` names (see :func:`loop_factory`)."""
    try:
        factory = loop_factory(choice)
    except ValueError:
        main.close()
        raise
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)
