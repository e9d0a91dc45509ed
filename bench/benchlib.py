"""Shared pieces of the benchmarks under ``bench/``: units, percentiles, plain-text tables, the filesystem."""

from __future__ import annotations

import argparse
import contextlib
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

MB = 1_000_000


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in [0, 100]) of an ascending sequence."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def mb_per_s(count: float, seconds: float) -> float:
    return round(count / seconds / MB, 1) if seconds > 0 else math.inf


def table(title: str, rows: list[dict[str, Any]], columns: Sequence[tuple[str, str]]) -> None:
    """Print ``rows`` under ``title``; ``columns`` are (key, header) pairs."""
    cells = [[f"{r.get(k):,}" if isinstance(r.get(k), int) else str(r.get(k, "")) for k, _ in columns] for r in rows]
    widths = [max([len(h), *(len(c[i]) for c in cells)]) for i, (_, h) in enumerate(columns)]
    print(f"\n{title}")
    print("  ".join(h.rjust(w) for (_, h), w in zip(columns, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for row in cells:
        print("  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)))


def filesystem_of(path: Path) -> str:
    """The type of the filesystem holding ``path`` (from /proc/mounts; "unknown" elsewhere)."""
    try:
        mounts = [line.split()[1:3] for line in Path("/proc/mounts").read_text().splitlines()]
    except OSError:
        return "unknown"
    resolved = str(path.resolve())
    best = max(
        (m for m in mounts if resolved == m[0] or resolved.startswith(m[0].rstrip("/") + "/")),
        key=lambda m: len(m[0]),
        default=None,
    )
    return best[1] if best else "unknown"


def positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1 (a count of rounds or slices: 0 would divide by zero)."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text}: must be at least 1")
    return value


def reset_peak_rss(pid: int) -> None:
    """Set process ``pid``'s peak RSS (``VmHWM``) back to its RSS now (Linux ``clear_refs`` 5), so that the next
    :func:`rss_mb` gives the peak of what ran since; a process that is gone or not ours keeps its peak."""
    with contextlib.suppress(OSError):
        Path(f"/proc/{pid}/clear_refs").write_text("5")
