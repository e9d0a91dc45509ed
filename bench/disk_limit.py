"""The disk's own limit for the bytes segstore writes, in segstore's write pattern (issue 39, item 4).

Every acknowledged byte is written twice: to Tier-1 (the file ledger: appends, one fsync per group commit) and
later to Tier-2 (Parquet chunk files, each fsync'd). How fast segstore can take 10 KB events from one writer is
bounded by how fast this disk writes both, with those fsyncs. :class:`DiskProbe` notes, around a write case, the
bytes the segment store process sent to the disk (``/proc/<pid>/io`` ``write_bytes``), how much of it is Tier-2
(the growth of its directory) and how many fsyncs each tier made (its ``/metrics``: the ``tier1_fsync`` and
``tier2_fsync`` activities); :func:`disk_alone` then writes the same bytes in the same pattern from this process
(two threads at once, as the segment store's Tier-1 and Tier-2 threads: one file appended and ``fdatasync``'d
``tier1_fsyncs`` times; ``tier2_fsyncs`` files written whole, fsync'd, then their directory), with nothing else to
do, under the same directory. Then:

* ``disk MB/s``: what the disk alone wrote per second in that pattern (Tier-1 and Tier-2 bytes together);
* ``disk B per B``: bytes the disk took per byte of segment data (about 2: both tiers, plus metadata);
* ``limit MB/s``: segment data per second the disk allows = disk MB/s / disk B per B;
* ``of limit``: the case's segment MB/s / limit MB/s (issue 39's target: >= 0.8 if 350 MB/s is out of reach).

Where the case's time went, from the same counters: ``tier1_ms_per_group`` (a Tier-1 group commit's mean time in its
entry checksums, its ``writev`` into the page cache, its ``fdatasync``, and the rest: the hand-off between the event
loop and the log's thread, GIL waits between the steps) and ``server_threads`` (the segment store's threads, summed:
cores of user and of kernel CPU time, and threads runnable but waiting for a CPU, per second of the case).
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchlib import MB
from wire_server import ServerProcess
from wire_stalls import activity_totals

WRITE_BLOCK = 1024 * 1024
"""The buffer the disk-alone writers write from (random bytes: nothing to compress anywhere)."""


@dataclass(frozen=True, slots=True)
class WritePattern:
    """What one case made the segment store write: bytes and fsyncs per tier, and the segment data behind them."""

    segment_bytes: int
    tier1_bytes: int
    tier1_fsyncs: int
    tier2_bytes: int
    tier2_fsyncs: int

    @property
    def disk_bytes(self) -> int:
        return self.tier1_bytes + self.tier2_bytes


class DiskProbe:
    """Counters of the segment store noted before a case; :meth:`pattern` after it (its drain included)."""

    def __init__(self, server: ServerProcess) -> None:
        self._server = server
        self._activity = activity_totals(server.metrics_port)
        self._written = server.io("write_bytes")
        self._tier2 = server.tier2_disk_bytes()
        self._threads = server.thread_times()
        self._started = time.perf_counter()

    def pattern(self, segment_bytes: int) -> WritePattern:
        activity = activity_totals(self._server.metrics_port)

        def during(cause: str) -> tuple[float, float]:
            count, seconds = activity.get(cause, (0.0, 0.0))
            before = self._activity.get(cause, (0.0, 0.0))
            return count - before[0], seconds - before[1]

        def fsyncs(cause: str) -> int:
            return int(during(cause)[0])

        groups = max(during("tier1_group_commit")[0], 1)
        steps = {step: during(f"tier1_{step}")[1] * 1000 / groups for step in ("crc", "write", "fsync")}
        steps["hand-off"] = during("tier1_group_commit")[1] * 1000 / groups - sum(steps.values())
        self.tier1_ms_per_group = {step: round(ms, 1) for step, ms in steps.items()}
        wall = time.perf_counter() - self._started
        now = self._server.thread_times()
        user, system, waiting = (round((a - b) / wall, 2) for a, b in zip(now, self._threads, strict=True))
        self.server_threads = {"user": user, "system": system, "waiting_for_cpu": waiting}

        tier2 = max(self._server.tier2_disk_bytes() - self._tier2, 0)
        written = self._server.io("write_bytes") - self._written
        return WritePattern(segment_bytes, max(written - tier2, 0), fsyncs("tier1_fsync"), tier2, fsyncs("tier2_fsync"))


def disk_alone(directory: Path, pattern: WritePattern) -> dict[str, Any]:
    """Write ``pattern``'s bytes under ``directory`` as the segment store did (both tiers at once); the rates."""
    directory.mkdir(parents=True, exist_ok=True)
    block = os.urandom(WRITE_BLOCK)
    failures: list[BaseException] = []

    def tier1() -> None:
        per_sync = max(pattern.tier1_bytes // max(pattern.tier1_fsyncs, 1), 1)
        fd = os.open(directory / "tier1-ledger", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            left = pattern.tier1_bytes
            while left > 0:
                _write(fd, block, min(per_sync, left))
                os.fdatasync(fd)  # as the file ledger syncs
                left -= per_sync
        finally:
            os.close(fd)

    def tier2() -> None:
        files = max(pattern.tier2_fsyncs, 1)
        per_file = max(pattern.tier2_bytes // files, 1)
        left, index = pattern.tier2_bytes, 0
        while left > 0:
            fd = os.open(directory / f"chunk-{index}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                _write(fd, block, min(per_file, left))
                os.fsync(fd)
            finally:
                os.close(fd)
            _fsync_directory(directory)  # as the filesystem Tier-2 publishes a chunk
            left, index = left - per_file, index + 1

    def guarded(work: Any) -> None:
        try:
            work()
        except BaseException as error:  # re-raised below, in the caller's thread
            failures.append(error)

    threads = [threading.Thread(target=guarded, args=(work,)) for work in (tier1, tier2)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - started
    for path in directory.iterdir():
        path.unlink()
    if failures:
        raise failures[0]
    disk_mb_per_s = pattern.disk_bytes / MB / seconds
    per_byte = pattern.disk_bytes / max(pattern.segment_bytes, 1)
    return {
        "disk_alone_s": round(seconds, 2),
        "disk_alone_mb_per_s": round(disk_mb_per_s, 1),
        "disk_bytes_per_byte": round(per_byte, 2),
        "limit_mb_per_s": round(disk_mb_per_s / per_byte, 1),
        "tier1_fsyncs": pattern.tier1_fsyncs,
        "tier2_fsyncs": pattern.tier2_fsyncs,
        "tier1_kib_per_fsync": round(pattern.tier1_bytes / max(pattern.tier1_fsyncs, 1) / 1024, 1),
        "tier2_kib_per_fsync": round(pattern.tier2_bytes / max(pattern.tier2_fsyncs, 1) / 1024, 1),
    }


def _write(fd: int, block: bytes, size: int) -> None:
    view = memoryview(block)
    while size > 0:
        size -= os.write(fd, view[: min(size, len(view))])


def _fsync_directory(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
