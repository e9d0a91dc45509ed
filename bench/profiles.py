"""Profile summaries for the benchmarks: cProfile dumps and py-spy collapsed stacks, as top-N tables."""

from __future__ import annotations

import contextlib
import io
import pstats
import re
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchlib import table

PROFILE_TOP = 25
PYSPY_RATE = 200


def cprofile_top(path: Path, n: int = PROFILE_TOP) -> dict[str, Any]:
    """The top functions of a cProfile dump by self and by cumulative time."""
    stats = pstats.Stats(str(path), stream=io.StringIO())
    rows = []
    for (file, line, name), (_, calls, tottime, cumtime, _) in stats.stats.items():  # type: ignore[attr-defined]
        where = f"{name} ({'/'.join(Path(file).parts[-2:])}:{line})" if line else name
        rows.append({"function": where, "calls": calls, "self_s": round(tottime, 3), "cum_s": round(cumtime, 3)})
    return {
        "profiler": "cProfile",
        "by_self": sorted(rows, key=lambda r: -r["self_s"])[:n],
        "by_cumulative": sorted(rows, key=lambda r: -r["cum_s"])[:n],
    }


def _thread_label(thread: str, stacks: list[list[str]]) -> str:
    """Name a thread: py-spy's thread name (``thread (tid): name``) without an executor's worker index
    (``asyncio_0`` -> ``asyncio``), else by what it runs (the event loop, or the frame under ``Thread.run``)."""
    loop = any(f.startswith("BaseEventLoop.run_forever") for frames in stacks for f in frames)
    _, _, name = thread.partition(": ")
    if name:
        name = re.sub(r"_\d+$", "", name)
        return f"{name} (event loop)" if loop else name
    if loop:
        return "event loop"
    labels: Counter[str] = Counter()
    for frames in stacks:
        names = [f.split(" (")[0] for f in frames]
        below = names.index("Thread.run") + 1 if "Thread.run" in names else 0
        labels[frames[min(below, len(frames) - 1)]] += 1
    return labels.most_common(1)[0][0] if labels else "?"


def pyspy_top(path: Path, seconds: float, n: int = PROFILE_TOP) -> dict[str, Any]:
    """Summarise py-spy's collapsed stacks (``--format raw --threads``): each thread's busy share of the
    run (1.0 = always on a CPU or holding it), and the top functions by self and inclusive samples,
    for all threads and for the event loop thread alone. Shares are of all samples taken."""
    per_thread: dict[str, list[tuple[list[str], int]]] = {}
    for line in path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack:
            continue
        frames = stack.split(";")
        thread = frames[0] if frames[0].startswith("thread (") else "?"
        frames = frames[1:] if thread != "?" else frames
        frames = [f.rsplit(":", 1)[0] + ")" if f.endswith(")") and ":" in f else f for f in frames]  # no line numbers
        if frames:
            per_thread.setdefault(thread, []).append((frames, int(count_text)))
    groups: dict[str, list[tuple[list[str], int]]] = {}
    thread_counts: Counter[str] = Counter()
    for thread, samples in per_thread.items():
        label = _thread_label(thread, [frames for frames, _ in samples])
        groups.setdefault(label, []).extend(samples)
        thread_counts[label] += 1
    expected = seconds * PYSPY_RATE

    def top(samples: list[tuple[list[str], int]]) -> dict[str, list[dict[str, Any]]]:
        own: Counter[str] = Counter()
        inclusive: Counter[str] = Counter()
        for frames, count in samples:
            own[frames[-1]] += count
            for frame in set(frames):
                inclusive[frame] += count
        total = sum(count for _, count in samples) or 1

        def share(counter: Counter[str]) -> list[dict[str, Any]]:
            return [{"function": f, "percent": round(100 * c / total, 1)} for f, c in counter.most_common(n)]

        return {"by_self": share(own), "by_cumulative": share(inclusive)}

    everything = [s for samples in groups.values() for s in samples]
    loop = next((samples for label, samples in groups.items() if "event loop" in label), [])
    return {
        "profiler": "py-spy",
        "threads": sorted(
            (
                {
                    "thread": label,
                    "threads": thread_counts[label],
                    "busy": round(sum(c for _, c in samples) / expected, 2),
                }
                for label, samples in groups.items()
            ),
            key=lambda r: -r["busy"],
        ),
        "all_threads": top(everything),
        "event_loop": top(loop),
    }


@contextlib.contextmanager
def py_spy(binary: str | None, pid: int, out: Path) -> Iterator[None]:
    """Sample ``pid`` with py-spy while the block runs (nothing if ``binary`` is None)."""
    if binary is None:
        yield
        return
    command = [binary, "record", "--pid", str(pid), "--format", "raw", "--threads", "--rate", str(PYSPY_RATE)]
    spy = subprocess.Popen(
        [*command, "--nonblocking", "--output", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    time.sleep(0.5)  # attach before the measured span starts
    try:
        yield
    finally:
        spy.send_signal(signal.SIGINT)
        _, err = spy.communicate(timeout=60)
        if not out.exists():
            raise RuntimeError(f"py-spy wrote no profile: {err.decode(errors='replace')[-2000:]}")


def report_profile(profiles: list[dict[str, Any]]) -> None:
    for profile in profiles:
        row = profile["case"]
        print(
            f"\n==== profiled: {row['event_bytes']} B {row['api']}, {row['events_per_s']:,} events/s, "
            f"{row['mb_per_s']} MB/s under the profilers (cpu srv {row['cpu_server']}, cli {row['cpu_client']})"
        )
        for side in ("server", "client"):
            top = profile[side]
            if top["profiler"] == "py-spy":
                table(f"{side}: busy share of each thread (py-spy)", top["threads"],
                      [("busy", "busy"), ("threads", "n"), ("thread", "thread")])  # fmt: skip
                for view in ("event_loop", "all_threads"):
                    for order in ("by_self", "by_cumulative"):
                        title = f"{side} {view.replace('_', ' ')}, % of its samples, {order.replace('_', ' ')}"
                        table(title, top[view][order], [("percent", "%"), ("function", "function")])
            else:
                columns = [("self_s", "self s"), ("cum_s", "cum s"), ("calls", "calls"), ("function", "function")]
                for order in ("by_self", "by_cumulative"):
                    table(f"{side} (cProfile) {order.replace('_', ' ')}", top[order], columns)
        print(f"\nprofiles: {', '.join(profile['files'])}")
