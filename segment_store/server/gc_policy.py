"""The segment store process's garbage collector settings: process-wide, so set by the process's entry point
(``segstore segmentstore``), never by the library.

CPython collects its youngest generation every 700 net allocations of objects it tracks, and every few
hundred such passes the whole heap. The segment store allocates several tracked objects per append block
(commands, operations, futures, callbacks) that die within milliseconds, thousands of blocks a second; so
the young passes ran about a hundred times a second, and every full pass walked again the ~80,000 objects
start-up leaves (modules, classes, functions), for 50-100 ms each: the longest pauses of appends.

After start-up :func:`settle_after_start` collects once and freezes what survived (``gc.freeze``: those
objects are still freed by reference counting, but no pass walks them again), and raises the young threshold
so that short-lived objects are mostly gone before a pass looks. Measured with 100 segments and 4.3 KB
blocks (raw pre-framed appends, the server on one CPU): with the defaults the collector took 0.33 s of a 7 s
run, its longest pass 80 ms (0.54 s and 101 ms while the storage writer still queued operation objects);
settled, not one pass ran during 5 s of load (the net growth of tracked objects was ~5,000).
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 10_000
"""Net allocations of tracked objects between passes over the youngest generation (CPython's default: 700)."""


def settle_after_start(young_threshold: int = YOUNG_THRESHOLD) -> None:
    """Collect, freeze every object alive now (start-up's), and run young passes every ``young_threshold``
    allocations; the older generations' thresholds stay. Call once, when the process has started serving."""
    if young_threshold < 1:
        raise ValueError("young_threshold: must be positive")
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(young_threshold, middle, old)
