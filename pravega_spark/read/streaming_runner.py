"""Ending Spark's Python streaming runner quietly once Spark has hung up on it.

Spark runs a streaming source's reader in a Python process of its own (``python -m
pyspark.sql.streaming.python_streaming_source_runner``) that answers the JVM's calls over a socket until the
socket fails, then calls the reader's ``stop()`` in a ``finally`` and reports the failure back over the socket. A
query stopped while the JVM waits for that process (the reader being set up, or a call under way) has its thread
interrupted, which closes the socket; and when the reader was not set up yet, Spark never stops the process. The
runner then reads EOF, and its report meets the closed socket: an uncaught ``BrokenPipeError`` whose traceback
lands on the query's stderr although nothing went wrong. Nobody listens any more, so :func:`end_if_spark_hung_up`,
called from the reader's ``stop()``, ends that process there, quietly.
"""

from __future__ import annotations

import contextlib
import os
import sys

RUNNER_MODULE = "pyspark.sql.streaming.python_streaming_source_runner"
_SOCKET_IO_MODULES = frozenset({"pyspark.serializers", "socket"})  # where the runner reads and writes its socket


def in_streaming_runner() -> bool:
    """This process is Spark's Python streaming runner (started as ``python -m`` of its module)."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return spec is not None and spec.name == RUNNER_MODULE


def is_hang_up(error: BaseException | None) -> bool:
    """``error`` is the runner's socket to the JVM failing (EOF, reset, broken pipe), raised by the runner's own
    socket I/O: not an error of the reader (whose connection errors are ``ConnectionError`` too)."""
    if not isinstance(error, EOFError | ConnectionError):
        return False
    innermost = error.__traceback__
    if innermost is None:
        return False
    while innermost.tb_next is not None:
        innermost = innermost.tb_next
    return innermost.tb_frame.f_globals.get("__name__") in _SOCKET_IO_MODULES


def end_if_spark_hung_up() -> None:
    """In Spark's streaming runner, stopping because the JVM closed the socket: end the process now (exit code 0),
    before the runner prints a traceback. Anywhere else, or on any other error (which the runner reports to a
    JVM still listening): return."""
    if not in_streaming_runner() or not is_hang_up(sys.exc_info()[1]):
        return
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # closed or broken: nothing more to say anyway
            stream.flush()
    os._exit(0)
