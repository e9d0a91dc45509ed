"""The segment store's end of the table maintainer's worker process (:mod:`.worker`: why a process, the conversation).

:meth:`WorkerProcess.run_pass` is blocking: the maintainer calls it on its one worker thread, which is where the
pin operations the pass asks for run (they write to Tier-2), on the very :class:`ChunkPins` the container's
garbage collector consults. The process is started on the first pass (``spawn``: a fresh interpreter, nothing of
the segment store's threads or sockets inherited) and started again on the pass after one it did not finish.

The process starts with SIGINT blocked (and then ignores it): a Ctrl-C in the terminal reaches the whole process
group, and stopping the worker is the segment store's call, even while the worker is still importing pyiceberg.

A pass that does not finish raises :class:`WorkerFailedError`, after which the process is gone:

* the process could not be started (``OSError``: out of memory, of processes, of file descriptors);
* the process died (killed, out of memory, a crash in a native library): its exit code is in the error;
* the pass outlived ``pass_timeout_s`` (a catalog call that never returns): the process is killed;
* :meth:`WorkerProcess.interrupt` was called (the segment store stops): the pass under way is cut short, killed, so
  that stopping never waits for a catalog or for the worker's start-up.

Killing the process mid-commit is safe: an Iceberg commit is one atomic swap of the table's metadata pointer in
the catalog; the next process's first pass re-reads the tables and finds what landed.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import pickle
import signal
import threading
import time
from collections.abc import Mapping
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

from segment_store.iceberg.config import IcebergConfig
from segment_store.iceberg.status import TableStatus
from segment_store.iceberg.stream_table import ChunkFile
from segment_store.iceberg.sync import SyncResult
from segment_store.iceberg.worker import Snapshot, TableKey, change_of, serve
from segment_store.storage.chunk_pins import ChunkPins

log = logging.getLogger(__name__)

_POLL_S = 0.2
"""How often a waiting pass checks for a dead process, its deadline and a stop."""
_PIN_METHODS = frozenset({"pin", "release", "live"})


class WorkerFailedError(RuntimeError):
    """A pass the worker process did not finish (see the module docstring); the process is gone."""


class WorkerProcess:
    """See the module docstring. ``config`` and ``file_io`` (pyiceberg FileIO properties, secrets included) go to
    the process through its pipe, never its command line."""

    def __init__(self, config: IcebergConfig, file_io: Mapping[str, str], pass_timeout_s: float) -> None:
        self._config = config
        self._file_io = dict(file_io)
        self._pass_timeout_s = pass_timeout_s
        self._process: BaseProcess | None = None
        self._connection: Connection | None = None
        self._stopping = threading.Event()
        self._held: dict[TableKey, dict[str, ChunkFile]] | None = None
        """The chunk files the worker holds (the last pass it finished); None: nothing (the next pass sends all)."""
        self.starts = 0
        """How many processes were started (1 while none failed)."""

    @property
    def pid(self) -> int | None:
        """The running process's id (None: none running)."""
        return self._process.pid if self._process is not None and self._process.is_alive() else None

    def run_pass(
        self, snapshot: Snapshot, pins: Mapping[int, ChunkPins], previous: Mapping[TableKey, TableStatus]
    ) -> tuple[list[SyncResult], dict[TableKey, TableStatus]]:
        """One pass in the process (blocking; one caller at a time): what each table's sync did and every table's
        status. ``pins``: the pins of the containers running here, by id. Raises WorkerFailedError."""
        if self._stopping.is_set():
            raise WorkerFailedError("the table maintainer is stopping")
        try:
            connection = self._start()
        except OSError as error:  # no process (out of memory, of process slots, of file descriptors)
            raise self._fail(f"it could not be started ({error!r})") from error
        try:
            connection.send(("pass", change_of(snapshot, self._held), sorted(pins), dict(previous)))
            deadline = time.monotonic() + self._pass_timeout_s
            while True:
                if not connection.poll(_POLL_S):
                    if self._stopping.is_set():
                        raise self._fail("the segment store stops: the pass was cut short")
                    if time.monotonic() > deadline:
                        raise self._fail(f"a pass took longer than {self._pass_timeout_s:g} s: killed")
                    continue
                message = connection.recv()
                if message[0] == "done":
                    self._held = snapshot.chunks  # what the worker holds now
                    return message[1], message[2]
                if message[0] == "log":
                    record: logging.LogRecord = message[1]
                    logging.getLogger(record.name).handle(record)
                elif message[0] == "call":
                    connection.send(_call(pins, *message[1:]))
                else:
                    raise self._fail(f"unexpected message {message[0]!r}: killed")
        except (EOFError, OSError) as error:
            raise self._fail(f"the process ended ({error!r})") from error

    def interrupt(self) -> None:
        """Cut the pass under way short (the process is killed: any thread), and refuse new ones."""
        self._stopping.set()
        process = self._process
        if process is not None and process.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGKILL)  # the pass's wait sees the pipe close at once

    def stop(self) -> None:
        """End the process (blocking; no pass under way: :meth:`interrupt` first): asked to exit, killed if it does
        not within a second. New passes are refused."""
        self._stopping.set()
        process, connection = self._process, self._connection
        if process is None or connection is None:
            return
        with contextlib.suppress(OSError):  # already gone
            connection.send(("stop",))
        process.join(1.0)
        self._reap()

    def _start(self) -> Connection:
        if self._connection is not None and self._process is not None and self._process.is_alive():
            return self._connection
        self._reap()
        context = multiprocessing.get_context("spawn")
        ours, theirs = context.Pipe(duplex=True)
        process = context.Process(
            target=serve,
            args=(theirs, self._config, self._file_io, logging.getLogger().getEffectiveLevel()),
            name="segstore-iceberg-tables",
            daemon=True,
        )
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})  # inherited: a Ctrl-C is the parent's
        try:
            process.start()
        except BaseException:
            ours.close()
            raise
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            theirs.close()
        self._process, self._connection = process, ours
        self.starts += 1
        log.info("iceberg: table worker process %s started", process.pid)
        return ours

    def _fail(self, why: str) -> WorkerFailedError:
        code = self._reap()
        ended = f" (exit code {code})" if code is not None and code >= 0 else ""
        error = WorkerFailedError(f"the table worker process failed: {why}{ended}")
        if self._stopping.is_set():
            log.info("iceberg: %s (the segment store stops)", error)
        else:
            log.error("iceberg: %s; started again on the next pass", error)
        return error

    def _reap(self) -> int | None:
        """Kill the process if alive, wait for it, forget it; its exit code (None: none)."""
        process, connection = self._process, self._connection
        self._process = self._connection = None
        self._held = None  # a new worker holds nothing
        if connection is not None:
            connection.close()
        if process is None:
            return None
        if process.is_alive():
            process.kill()
        process.join(5.0)
        code = process.exitcode
        process.close() if code is not None else None
        return code


def _call(pins: Mapping[int, ChunkPins], container_id: int, method: str, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """Run a pin operation the worker asked for; the reply to send (its error if it raised)."""
    holder = pins.get(container_id)
    if holder is None or method not in _PIN_METHODS:
        return ("reply", False, LookupError(f"no pins {method!r} of container {container_id} here"))
    try:
        value = getattr(holder, method)(*args)
    except Exception as error:  # the worker's pass fails for this table, and says why
        try:
            pickle.loads(pickle.dumps(error))
        except Exception:  # does not cross a pipe (its constructor takes other arguments): its text
            error = RuntimeError(repr(error))
        return ("reply", False, error)
    return ("reply", True, value)


__all__ = ["WorkerFailedError", "WorkerProcess"]
