"""Give a process's freed memory back to the operating system (an idle service should shrink).

Freed memory is not returned by itself: glibc's malloc keeps freed heap chunks for reuse (only the top of the
heap is trimmed, and a 1 MiB ``bytes`` freed after the mmap threshold has adapted stays in the heap), and
pyarrow's memory pool (mimalloc or jemalloc) keeps freed pages cached for later allocations.
:func:`release_memory` asks both to return what they do not use: ``malloc_trim(0)`` where the C library has it
(glibc; elsewhere nothing), and ``release_unused()`` on pyarrow's default pool if pyarrow is loaded.

It is a blocking call that may take milliseconds on a large heap and, for glibc, holds each malloc arena's lock
while it walks it: call it in a worker thread, and only when the process is quiet (the container registry calls it
after an idle sweep of the read cache). ctypes releases the GIL during the C call.

:func:`arrow_on_system_allocator` (called by a server process's entry point, before pyarrow loads) makes pyarrow
allocate with the C library's ``malloc`` instead of its bundled mimalloc, so that ``malloc_trim`` returns its freed
memory too: mimalloc kept ~60 MB resident after ``release_unused()`` once the read cache was evicted (a segment
store idle after 10 KB events: 235 MB with mimalloc, 171 MB with the system allocator), and the append and
Parquet throughput of ``bench/wire.py`` did not change measurably.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import sys
from collections.abc import Callable


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None where the C library has none (musl, macOS, Windows)."""
    if not sys.platform.startswith("linux"):
        return None
    name = ctypes.util.find_library("c") or "libc.so.6"
    try:
        libc = ctypes.CDLL(name)
    except OSError:
        return None
    trim = getattr(libc, "malloc_trim", None)
    if trim is None:
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


ARROW_POOL_VARIABLE = "ARROW_DEFAULT_MEMORY_POOL"
"""pyarrow reads it once, when it loads: ``system``, ``mimalloc`` or ``jemalloc``."""


def arrow_on_system_allocator() -> str:
    """Make pyarrow's default memory pool the C library's allocator in this process and the processes it starts,
    unless the user chose one (``ARROW_DEFAULT_MEMORY_POOL`` set). Process-wide: for entry points, not libraries.
    Returns the pool pyarrow uses (or will use when it loads)."""
    chosen = os.environ.setdefault(ARROW_POOL_VARIABLE, "system")
    pyarrow = sys.modules.get("pyarrow")
    if pyarrow is not None and chosen == "system":  # loaded already: it read the variable before we set it
        pyarrow.set_memory_pool(pyarrow.system_memory_pool())
    return chosen


def release_memory() -> dict[str, float]:
    """Return freed memory to the OS. Says the process's RSS in MB before (``before``) and after each step it took
    (``arrow_pool``, ``malloc_trim``; a step the process cannot take is left out), so a log shows what each gave."""
    rss = {"before": rss_mb()}
    pyarrow = sys.modules.get("pyarrow")
    if pyarrow is not None:
        pyarrow.default_memory_pool().release_unused()
        rss["arrow_pool"] = rss_mb()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
        rss["malloc_trim"] = rss_mb()
    return rss


def rss_mb() -> float:
    """This process's resident set in MB (10^6 bytes); 0.0 where ``/proc`` is missing."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            pages = int(statm.read().split()[1])
    except OSError:
        return 0.0
    return round(pages * os.sysconf("SC_PAGE_SIZE") / 1e6, 1)
