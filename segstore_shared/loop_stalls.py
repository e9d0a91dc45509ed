"""Event-loop lag and stalls, and what the process was doing while they happened (issue 39, item 1).

Two parts, both cheap enough to stay on in production:

* :class:`Activity` - the process-wide log of timed activities that may hold the loop up or delay an
  acknowledgement: garbage-collector pauses (``gc.callbacks``, with their generation), fsync calls (Tier-1
  group commits, Tier-2 chunk writes), Parquet encoding, storage writer flush rounds, Tier-1 group commits
  (write + fsync, as the loop waits for them) and metadata checkpoints. Hooks where that work runs call
  :meth:`Activity.note` with a start and an end read from :func:`time.perf_counter` (any thread). One
  ``Activity`` per process (:data:`ACTIVITY`): a GC pause stops every thread, so the activity of all threads is
  what a stall of the loop can be attributed to.
* :class:`LoopStallRecorder` - a timer on one event loop, re-armed every ``interval_s``: its lateness is the
  loop's lag. A lateness of at least ``threshold_s`` is a *stall*. Its cause: the activity that can hold the
  loop (:data:`LOOP_HOLDERS`: a GC pause stops every thread, a checkpoint is serialized on the loop, Parquet
  encoding holds the GIL for parts of its run) overlapping most the window in which the stall must have happened
  (since the previous tick ran); if none, what the loop thread did in that window, from the kernel's account of
  it (``/proc/<pid>/task/<tid>/schedstat``, read every tick): :data:`LOOP_BUSY` (on a CPU: Python work on the
  loop), :data:`DESCHEDULED` (runnable but waiting for a CPU: the machine is busy) or :data:`BLOCKED` (neither:
  waiting for the GIL another thread holds, or in a blocking call). Where schedstat is missing, :data:`OTHER`.
  Activities that only *wait* (fsyncs in worker threads, a group commit, a flush round) never hold the loop, so
  they are not causes of stalls; they are reported beside them (they delay acknowledgements all the same).

Invariants: timestamps are ``time.perf_counter()`` seconds, which on Linux is ``CLOCK_MONOTONIC`` and so
comparable between processes of one machine (``bench/wire.py`` relates the server's stalls to its client's
acknowledgements). Spans are kept in a bounded ring (the most recent ``capacity``; only spans of at least
``min_record_s``, every one is still counted in the histograms); stalls likewise. Nothing here blocks or takes a
lock of its own: ``deque.append`` is atomic and the Prometheus collectors are thread-safe.

Cost, measured on the 2-core development VM (where a system call is dear: a bare asyncio timer wake-up costs
about 80 us of CPU there): :meth:`Activity.note` 0.6 us, 16 us with a :class:`LoopMetrics` sink (a Prometheus
histogram observation; one per fsync, group commit, flush round, encode or GC pass, none per append); the
recorder 150-230 us per tick on an idle loop, so with the default ``interval_s`` of 5 ms 3-4 % of a core when idle
(an ordinary Linux host: ~10x less); under load the ticks ride on loop iterations that run anyway. A stall of ``d``
seconds shows as a lateness between ``d - interval_s`` and ``d``: stalls shorter than the interval are seen only
when the timer falls due inside them (the longer the stall, the likelier).
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry, Histogram

_T = TypeVar("_T")
CAUSES = (
    "gc",
    "tier1_crc",
    "tier1_write",
    "tier1_fsync",
    "tier2_fsync",
    "parquet_encode",
    "tier1_group_commit",
    "writer_flush",
    "checkpoint",
)
"""The activities the segment store reports (hooks may add others; they are labels like these)."""
LOOP_HOLDERS = frozenset({"gc", "checkpoint", "parquet_encode"})
"""Activities that can hold the event loop up (the others run in threads that release the GIL, or await)."""
LOOP_BUSY = "loop_busy"
"""A stall no holder overlaps, with the loop thread on a CPU most of it (Python work on the loop)."""
DESCHEDULED = "descheduled"
"""A stall no holder overlaps, with the loop thread runnable but waiting for a CPU most of it."""
BLOCKED = "gil_or_blocked"
"""A stall no holder overlaps, with the loop thread off the CPU and not runnable: waiting for the GIL that
another thread holds, or in a blocking call."""
OTHER = "other"
"""A stall no holder overlaps, where the kernel's account of the loop thread cannot be read."""
LAG_BUCKETS_S = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0)
"""Loop lag and stall durations: from the loop's own timer resolution (1 ms) to an outage."""


@dataclass(frozen=True, slots=True)
class Span:
    """One timed activity: ``cause`` ran from ``start`` to ``end`` (``perf_counter`` seconds)."""

    cause: str
    start: float
    end: float


@dataclass(frozen=True, slots=True)
class Stall:
    """A tick of the recorder ``lateness`` late: the loop was held up somewhere in ``[window_start, end]``."""

    window_start: float
    """When the previous tick ran: the stall happened after it."""
    end: float
    """When the late tick ran."""
    lateness: float
    """Seconds past its due time."""
    cause: str
    """The loop holder overlapping the window most when the stall was seen, else :attr:`thread`."""
    thread: str
    """What the loop thread mostly did in the window: :data:`LOOP_BUSY`, :data:`DESCHEDULED`, :data:`BLOCKED`
    (or :data:`OTHER`: unknown)."""

    @property
    def start(self) -> float:
        """The latest the stall can have begun."""
        return self.end - self.lateness


class Activity:
    """The process's log of timed activities (see the module docstring), told to its sinks as they end."""

    def __init__(self, min_record_s: float = 0.0005, capacity: int = 65_536) -> None:
        self.min_record_s = min_record_s
        self.spans: deque[Span] = deque(maxlen=capacity)
        self._sinks: tuple[LoopMetrics, ...] = ()
        self._gc_started = 0.0
        self._gc_hooked = False

    def note(self, cause: str, start: float, end: float, generation: int = -1) -> None:
        """``cause`` ran from ``start`` to ``end`` (``perf_counter``); callable from any thread. ``generation``:
        of a GC pause."""
        if end - start >= self.min_record_s:
            self.spans.append(Span(cause, start, end))
        for sink in self._sinks:
            sink.activity(cause, end - start, generation)

    def timed(self, cause: str, work: Callable[..., _T], /, *args: Any, **kwargs: Any) -> _T:
        """``work(*args, **kwargs)``, its time noted as ``cause`` (for work handed to a worker thread)."""
        started = time.perf_counter()
        try:
            return work(*args, **kwargs)
        finally:
            self.note(cause, started, time.perf_counter())

    def add_sink(self, sink: LoopMetrics) -> None:
        """Tell ``sink`` every activity from now on (until :meth:`remove_sink`)."""
        self._sinks = (*self._sinks, sink)

    def remove_sink(self, sink: LoopMetrics) -> None:
        self._sinks = tuple(s for s in self._sinks if s is not sink)

    def hook_gc(self) -> None:
        """Time every garbage collection (``gc.callbacks``; idempotent). Left hooked: about 2 us per pass."""
        if not self._gc_hooked:
            gc.callbacks.append(self._on_gc)
            self._gc_hooked = True

    def unhook_gc(self) -> None:
        if self._gc_hooked:
            gc.callbacks.remove(self._on_gc)
            self._gc_hooked = False

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        now = time.perf_counter()
        if phase == "start":
            self._gc_started = now
        else:
            self.note("gc", self._gc_started, now, info.get("generation", -1))


class LoopMetrics:
    """The Prometheus histograms of one process's loop and activities, on ``registry``, names led by ``prefix``:
    ``<prefix>_loop_lag_seconds``, ``<prefix>_loop_stall_seconds{cause}``, ``<prefix>_activity_seconds{cause}``
    and ``<prefix>_gc_pause_seconds{generation}``. A :class:`LoopStallRecorder` given it observes into it while it
    runs (and adds it to its :class:`Activity`'s sinks meanwhile)."""

    def __init__(self, registry: CollectorRegistry, prefix: str) -> None:
        self.lag = Histogram(
            f"{prefix}_loop_lag_seconds",
            "Lateness of a periodic event-loop timer (every tick)",
            buckets=LAG_BUCKETS_S,
            registry=registry,
        )
        self._stall = Histogram(
            f"{prefix}_loop_stall_seconds",
            "Event-loop stalls (a tick late by the threshold or more), by cause",
            ["cause"],
            buckets=LAG_BUCKETS_S,
            registry=registry,
        )
        self._activity = Histogram(
            f"{prefix}_activity_seconds",
            "Timed activities that can hold the event loop up or delay acks (GC, fsync, Parquet, flushes, ...)",
            ["cause"],
            buckets=LAG_BUCKETS_S,
            registry=registry,
        )
        self._gc = Histogram(
            f"{prefix}_gc_pause_seconds",
            "Garbage collector pauses (every thread stops), by generation",
            ["generation"],
            buckets=LAG_BUCKETS_S,
            registry=registry,
        )
        self._labelled: dict[tuple[str, str], Any] = {}

    def _child(self, histogram: Histogram, kind: str, label: str) -> Any:
        child = self._labelled.get((kind, label))
        if child is None:
            child = self._labelled[(kind, label)] = histogram.labels(label)
        return child

    def stall(self, cause: str, seconds: float) -> None:
        self._child(self._stall, "stall", cause).observe(seconds)

    def activity(self, cause: str, seconds: float, generation: int = -1) -> None:
        self._child(self._activity, "activity", cause).observe(seconds)
        if cause == "gc":
            self._child(self._gc, "gc", str(generation)).observe(seconds)


ACTIVITY = Activity()
"""The process's activity log: the hooks in the segment store note their spans here."""


def attribute(start: float, end: float, spans: Iterable[Span]) -> dict[str, float]:
    """Seconds of ``[start, end]`` each cause's spans overlap (a cause's spans may overlap each other: summed)."""
    overlap: dict[str, float] = {}
    for span in spans:
        seconds = min(end, span.end) - max(start, span.start)
        if seconds > 0:
            overlap[span.cause] = overlap.get(span.cause, 0.0) + seconds
    return overlap


def main_cause(overlap: dict[str, float], thread: str = OTHER) -> str:
    """The loop holder (:data:`LOOP_HOLDERS`) that overlaps most, or ``thread`` (what the loop thread did)."""
    holders = {cause: seconds for cause, seconds in overlap.items() if cause in LOOP_HOLDERS}
    return max(holders, key=holders.__getitem__) if holders else thread


class _SchedStat:
    """The kernel's account of one thread: seconds on a CPU and seconds runnable but waiting for one."""

    def __init__(self) -> None:
        self._fd: int | None = None
        try:
            self._fd = os.open(f"/proc/self/task/{threading.get_native_id()}/schedstat", os.O_RDONLY)
        except OSError:
            self._fd = None

    def read(self) -> tuple[float, float] | None:
        if self._fd is None:
            return None
        try:
            on_cpu, waiting = os.pread(self._fd, 128, 0).split()[:2]
        except (OSError, ValueError):
            return None
        return int(on_cpu) / 1e9, int(waiting) / 1e9

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def thread_cause(window_s: float, on_cpu_s: float, waiting_s: float, idle_s: float) -> str:
    """What the loop thread mostly did in a stall's window of ``window_s``: on a CPU, runnable but waiting for
    one, or neither (``idle_s`` of the window is the loop's expected sleep until the timer was due)."""
    blocked = max(0.0, window_s - on_cpu_s - waiting_s - idle_s)
    most = max(on_cpu_s, waiting_s, blocked)
    return LOOP_BUSY if most == on_cpu_s else DESCHEDULED if most == waiting_s else BLOCKED


class LoopStallRecorder:
    """A timer on one event loop that measures its lag and records its stalls (see the module docstring).

    ``metrics``: the histograms it observes into while it runs (every tick's lateness, every stall, and its
    activity's spans).
    """

    def __init__(
        self,
        activity: Activity = ACTIVITY,
        metrics: LoopMetrics | None = None,
        *,
        interval_s: float = 0.005,
        threshold_s: float = 0.002,
        capacity: int = 16_384,
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s: must be positive, got {interval_s}")
        if threshold_s <= 0:
            raise ValueError(f"threshold_s: must be positive, got {threshold_s}")
        self.activity = activity
        self.interval_s = interval_s
        self.threshold_s = threshold_s
        self.stalls: deque[Stall] = deque(maxlen=capacity)
        self.ticks = 0
        self.max_lateness = 0.0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._due = 0.0
        self._last = 0.0
        self.metrics = metrics
        self._sched: _SchedStat | None = None
        self._last_sched: tuple[float, float] | None = None

    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Start ticking on ``loop`` (default: the running one); idempotent while running."""
        if self._handle is not None:
            return
        self._loop = loop or asyncio.get_running_loop()
        self._last = time.perf_counter()
        self._arm(self._last)
        if self.metrics is not None:
            self.activity.add_sink(self.metrics)
        self._loop.call_soon(self._open_sched)  # on the loop's thread: its schedstat

    def _open_sched(self) -> None:
        if self._sched is None:
            self._sched = _SchedStat()
            self._last_sched = self._sched.read()

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
            if self.metrics is not None:
                self.activity.remove_sink(self.metrics)
        if self._sched is not None:
            self._sched.close()
            self._sched = None

    def _arm(self, now: float) -> None:
        assert self._loop is not None
        self._due = now + self.interval_s
        self._handle = self._loop.call_later(self.interval_s, self._tick)

    def _tick(self) -> None:
        now = time.perf_counter()
        lateness = max(0.0, now - self._due)
        self.ticks += 1
        self.max_lateness = max(self.max_lateness, lateness)
        if self.metrics is not None:
            self.metrics.lag.observe(lateness)
        sched = self._sched.read() if self._sched is not None else None
        if lateness >= self.threshold_s:
            thread = OTHER
            if sched is not None and self._last_sched is not None:
                on_cpu, waiting = sched[0] - self._last_sched[0], sched[1] - self._last_sched[1]
                thread = thread_cause(now - self._last, on_cpu, waiting, self.interval_s)
            cause = main_cause(attribute(self._last, now, self._recent(self._last)), thread)
            self.stalls.append(Stall(self._last, now, lateness, cause, thread))
            if self.metrics is not None:
                self.metrics.stall(cause, lateness)
        self._last = now
        self._last_sched = sched
        self._arm(now)

    def _recent(self, since: float) -> list[Span]:
        """Spans that ended after ``since`` (the ring is in order of their ends, give or take a thread switch)."""
        out = []
        for span in reversed(self.activity.spans):
            if span.end > since:
                out.append(span)
            elif span.end < since - 1.0:
                break
        return out

    def document(self, since: float = 0.0) -> dict[str, Any]:
        """The stalls and activity spans since ``since`` (``perf_counter``), each stall with the seconds every
        cause overlapped it (computed now: spans that ended after the stall was seen count too)."""
        spans = [s for s in list(self.activity.spans) if s.end > since]
        stalls = []
        for stall in list(self.stalls):
            if stall.end <= since:
                continue
            overlap = attribute(stall.window_start, stall.end, (s for s in spans if s.start < stall.end))
            stalls.append(
                {
                    "window_start": stall.window_start,
                    "end": stall.end,
                    "lateness": stall.lateness,
                    "cause": main_cause(overlap, stall.thread),
                    "thread": stall.thread,
                    "overlap": overlap,
                }
            )
        return {
            "now": time.perf_counter(),
            "interval_s": self.interval_s,
            "threshold_s": self.threshold_s,
            "ticks": self.ticks,
            "stalls": stalls,
            "spans": [[s.cause, s.start, s.end] for s in spans],
        }

    def json_document(self, since: float = 0.0) -> bytes:
        return json.dumps(self.document(since)).encode()


def stall_route(recorder: LoopStallRecorder) -> Callable[[str], bytes]:
    """The ``/stalls`` answer of a metrics port: ``query`` may hold ``since=<perf_counter seconds>``."""

    def answer(query: str) -> bytes:
        since = 0.0
        for part in query.split("&"):
            key, _, value = part.partition("=")
            if key == "since" and value:
                since = float(value)
        return recorder.json_document(since)

    return answer
