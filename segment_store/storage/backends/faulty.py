"""Fault injection around any chunk storage (Pravega's ``FlakyChunkStorage``/``ErrorInjector``).

Faults are injected into a real backend, not a mock: the wrapped storage does the real work
and the wrapper decides, per call, whether to fail before it (the operation did not happen)
or after it (the operation happened but the caller sees an error, like a timed-out S3 PUT that
landed; seed 004's "duplicate records" case).

    faulty = FaultyChunkStorage(FsChunkStorage(tmp))
    faulty.inject(lambda op, name: op == "write_chunk" and name.startswith("journal/"), times=1)
    with faulty.outage():
        ...  # every call raises ChunkStorageUnavailableError
"""

from __future__ import annotations

import contextlib
import errno
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from segment_store.storage.backends.filesystem import map_os_error
from segment_store.storage.chunk_storage import (
    ChunkData,
    ChunkInfo,
    ChunkStorage,
    ChunkStorageUnavailableError,
)

OPS = frozenset({"write_chunk", "read", "read_all", "info", "exists", "delete", "delete_if_exists", "list"})
"""Operation names a predicate sees (``list`` passes the prefix as the name)."""

FaultPredicate = Callable[[str, str], bool]
"""``(op, name) -> bool``: whether to inject into this call."""
ErrorFactory = Callable[[str, str], BaseException]
"""``(op, name) -> exception`` to raise."""

_T = TypeVar("_T")


def unavailable(op: str, name: str) -> BaseException:
    """The default injected error: a retriable :class:`ChunkStorageUnavailableError`."""
    return ChunkStorageUnavailableError(name, f"injected fault in {op}")


def no_space(op: str, name: str) -> BaseException:
    """A full disk: ``ENOSPC`` as the filesystem backend reports it (a retriable ``ChunkStorageFullError``)."""
    return map_os_error(name, OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))


def full_while(storage: ChunkStorage, switch: Path) -> FaultyChunkStorage:
    """``storage`` whose chunk writes fail with :func:`no_space` while the file ``switch`` exists (the self-test's
    ``tier2_disk_full`` fault creates and removes it: ``SEGSTORE_TIER2_FULL_WHILE_FILE``, see ``tier2_config``).
    Reads, listings and deletions go through: a full disk still serves what it holds."""
    faulty = FaultyChunkStorage(storage, record_calls=False)
    faulty.inject(lambda _op, _name: switch.exists(), ops=("write_chunk",), error=no_space)
    return faulty


@dataclass(eq=False)
class Fault:
    """One injection rule; ``hits`` counts the calls it failed."""

    predicate: FaultPredicate
    error: ErrorFactory
    after: bool
    remaining: int | None
    hits: int = 0


class FaultyChunkStorage:
    """A :class:`ChunkStorage` that delegates to ``inner`` and fails calls matching injected faults.

    Thread-safe. Rules are checked in the order they were added; the first match with calls
    remaining fires. ``calls`` records every ``(op, name)`` seen, for assertions (unless
    ``record_calls`` is False: a long-running process).
    """

    def __init__(self, inner: ChunkStorage, *, record_calls: bool = True) -> None:
        self.inner = inner
        self.calls: list[tuple[str, str]] = []
        self._record_calls = record_calls
        self._faults: list[Fault] = []
        self._lock = threading.Lock()

    def inject(
        self,
        predicate: FaultPredicate | None = None,
        *,
        ops: Iterable[str] | None = None,
        error: ErrorFactory = unavailable,
        after: bool = False,
        times: int | None = None,
    ) -> Fault:
        """Add a fault rule and return it (pass it to :meth:`remove` to lift it).

        Args:
            predicate: which calls to fail; ``None`` means all (subject to ``ops``).
            ops: restrict to these operation names (see :data:`OPS`).
            error: builds the exception to raise.
            after: run the real operation first, then raise (the effect persists).
            times: fail this many matching calls, then stop; ``None`` means until removed.

        Raises:
            ValueError: an unknown operation name in ``ops`` or ``times`` < 1.
        """
        op_set = frozenset(ops) if ops is not None else OPS
        if not op_set <= OPS:
            raise ValueError(f"unknown ops: {sorted(op_set - OPS)}")
        if times is not None and times < 1:
            raise ValueError(f"times must be >= 1, got {times}")
        user = predicate

        def matches(op: str, name: str) -> bool:
            return op in op_set and (user is None or user(op, name))

        fault = Fault(matches, error, after, times)
        with self._lock:
            self._faults.append(fault)
        return fault

    def remove(self, fault: Fault) -> None:
        """Lift one fault rule (no error if it is already gone)."""
        with self._lock, contextlib.suppress(ValueError):
            self._faults.remove(fault)

    def clear(self) -> None:
        """Lift every fault rule."""
        with self._lock:
            self._faults.clear()

    @contextlib.contextmanager
    def outage(self, ops: Iterable[str] | None = None) -> Iterator[Fault]:
        """Fail every call (or every call of ``ops``) as unavailable while the block runs."""
        fault = self.inject(ops=ops)
        try:
            yield fault
        finally:
            self.remove(fault)

    # -- the port -------------------------------------------------------------------------

    def write_chunk(self, name: str, data: ChunkData) -> ChunkInfo:
        """Delegate, subject to faults on ``write_chunk``."""
        return self._call("write_chunk", name, lambda: self.inner.write_chunk(name, data))

    def read(self, name: str, offset: int, length: int) -> bytes:
        """Delegate, subject to faults on ``read``."""
        return self._call("read", name, lambda: self.inner.read(name, offset, length))

    def read_all(self, name: str) -> bytes:
        """Delegate, subject to faults on ``read_all``."""
        return self._call("read_all", name, lambda: self.inner.read_all(name))

    def info(self, name: str) -> ChunkInfo:
        """Delegate, subject to faults on ``info``."""
        return self._call("info", name, lambda: self.inner.info(name))

    def exists(self, name: str) -> bool:
        """Delegate, subject to faults on ``exists``."""
        return self._call("exists", name, lambda: self.inner.exists(name))

    def delete(self, name: str) -> None:
        """Delegate, subject to faults on ``delete``."""
        self._call("delete", name, lambda: self.inner.delete(name))

    def delete_if_exists(self, name: str) -> bool:
        """Delegate, subject to faults on ``delete_if_exists``."""
        return self._call("delete_if_exists", name, lambda: self.inner.delete_if_exists(name))

    def list(self, prefix: str = "") -> Iterator[str]:
        """Delegate, subject to faults on ``list`` (checked at the call; ``after`` lists fully first)."""
        names = self._call("list", prefix, lambda: list(self.inner.list(prefix)))
        return iter(names)

    def location(self, name: str) -> str | None:
        """Delegate; never faulted (no I/O)."""
        return self.inner.location(name)

    def close(self) -> None:
        """Close the wrapped storage."""
        self.inner.close()

    def _call(self, op: str, name: str, action: Callable[[], _T]) -> _T:
        fault = self._match(op, name)
        if fault is None:
            return action()
        if fault.after:
            action()
        raise fault.error(op, name)

    def _match(self, op: str, name: str) -> Fault | None:
        with self._lock:
            if self._record_calls:
                self.calls.append((op, name))
            for fault in self._faults:
                if fault.predicate(op, name):
                    fault.hits += 1
                    if fault.remaining is not None:
                        fault.remaining -= 1
                        if fault.remaining == 0:
                            self._faults.remove(fault)
                    return fault
        return None
