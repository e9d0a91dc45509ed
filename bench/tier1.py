"""Throughput of the file ledger log (Tier-1) with fsync on.

Cases (each on a fresh log):

* ``append 1 MiB xN``: 1 MiB entries, N (``--frames-in-flight``, default 8 and 32) of them
  outstanding (the durable log keeps several data frames in flight); MB/s acknowledged;
* ``append 4 KiB xN``: 4 KiB entries with 1, 8 and 64 outstanding; acknowledged entries/s
  and the append latency (call to acknowledgement) p50/p99;
* ``recovery read``: a new instance initializes over the first 1 MiB log (fencing it and
  scanning its open ledger; the time is shown apart) and reads it all; MB/s of the read,
  warm (page cache) and cold (the ledger files' pages dropped with
  ``posix_fadvise(DONTNEED)`` first; the second initialize has no open ledger to scan).

The ownership check before each acknowledgement reads the metadata from ZooKeeper
(``--store zookeeper``, an embedded server on loopback, the default) or from the
in-process store (``--store memory``, shows the cost of the check). Prints a table and
writes JSON (default ``bench/results/tier1.json``).

    python bench/tier1.py [--store zookeeper|memory] [--seconds 3] [--total-mib 1024] [--out PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from segment_store.coordination.kazoo_store import KazooCoordinationStore
from segment_store.coordination.memory_store import MemoryCoordinationServer
from segment_store.coordination.store import CoordinationStore
from segment_store.coordination.zookeeper_server import EmbeddedZooKeeper, ZooKeeperConfig, free_port
from segment_store.tier1.file_ledger_config import FileLedgerLogConfig
from segment_store.tier1.file_ledger_log import FileLedgerLog
from segment_store.tier1.log import LogAddress

MIB = 1024 * 1024


@dataclass(frozen=True)
class Result:
    case: str
    entries: int
    seconds: float
    mb_per_s: float
    entries_per_s: float
    p50_ms: float | None = None
    p99_ms: float | None = None


@asynccontextmanager
async def coordination(kind: str, data_dir: Path) -> AsyncIterator[CoordinationStore]:
    if kind == "memory":
        store: CoordinationStore = MemoryCoordinationServer().connect()
        yield store
        await store.close()
        return
    server = EmbeddedZooKeeper(ZooKeeperConfig(data_dir=data_dir / "zookeeper", port=free_port()))
    await asyncio.to_thread(server.start)
    try:
        store = await KazooCoordinationStore.connect(server.connect_string)
        try:
            yield store
        finally:
            await store.close()
    finally:
        await asyncio.to_thread(server.stop)


async def append_window(
    log: FileLedgerLog, payload: bytes, in_flight: int, *, seconds: float | None, count: int | None
) -> tuple[int, float, list[float]]:
    """Keep ``in_flight`` appends outstanding until ``seconds`` pass or ``count`` are acknowledged."""
    loop = asyncio.get_running_loop()
    latencies: list[float] = []
    pending: set[asyncio.Future[LogAddress]] = set()
    issued = done_count = 0
    start = loop.time()

    def stop_issuing() -> bool:
        if count is not None:
            return issued >= count
        return loop.time() - start >= (seconds or 0.0)

    def record(began: float, _: asyncio.Future[LogAddress]) -> None:
        latencies.append(loop.time() - began)

    while True:
        while len(pending) < in_flight and not stop_issuing():
            future = log.append(payload)
            future.add_done_callback(functools.partial(record, loop.time()))
            pending.add(future)
            issued += 1
        if not pending:
            break
        finished, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        for future in finished:
            future.result()
        done_count += len(finished)
    return done_count, loop.time() - start, latencies


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] * 1000


async def run_cases(args: argparse.Namespace, root: Path) -> list[Result]:
    results: list[Result] = []
    async with coordination(args.store, root) as store:
        config = FileLedgerLogConfig(root_dir=root / "tier1", fsync=True)

        for frames in args.frames_in_flight:
            log = FileLedgerLog(f"big-{frames}", config, store)
            await log.initialize()
            entries, elapsed, lat = await append_window(
                log, os.urandom(MIB), frames, seconds=None, count=args.total_mib
            )
            results.append(
                Result(
                    f"append 1 MiB x{frames}",
                    entries,
                    elapsed,
                    entries * MIB / elapsed / 1e6,
                    entries / elapsed,
                    percentile(lat, 0.5),
                    percentile(lat, 0.99),
                )
            )
            await log.close()

        for in_flight in (1, 8, 64):
            small = FileLedgerLog(f"small-{in_flight}", config, store)
            await small.initialize()
            entries, elapsed, lat = await append_window(
                small, os.urandom(4096), in_flight, seconds=args.seconds, count=None
            )
            results.append(
                Result(
                    f"append 4 KiB x{in_flight}",
                    entries,
                    elapsed,
                    entries * 4096 / elapsed / 1e6,
                    entries / elapsed,
                    statistics.median(lat) * 1000,
                    percentile(lat, 0.99),
                )
            )
            await small.close()

        big = f"big-{args.frames_in_flight[0]}"
        for label, cold in (("warm", False), ("cold", True)):
            if cold:
                drop_page_cache(root / "tier1" / big)
            reader = FileLedgerLog(big, config, store)
            began = time.perf_counter()
            await reader.initialize()
            initialized = time.perf_counter()
            count = size = 0
            async for item in reader.read():
                count += 1
                size += len(item.payload)
            elapsed = time.perf_counter() - initialized
            init_ms = 1000 * (initialized - began)
            results.append(
                Result(
                    f"recovery read {label} (init {init_ms:.0f} ms)",
                    count,
                    elapsed,
                    size / elapsed / 1e6,
                    count / elapsed,
                )
            )
            await reader.close()
    return results


def drop_page_cache(directory: Path) -> None:
    for path in directory.iterdir():
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def print_table(results: list[Result]) -> None:
    print(f"{'case':<40} {'entries':>8} {'s':>6} {'MB/s':>8} {'entries/s':>10} {'p50 ms':>7} {'p99 ms':>7}")
    for r in results:
        p50 = f"{r.p50_ms:7.2f}" if r.p50_ms is not None else f"{'-':>7}"
        p99 = f"{r.p99_ms:7.2f}" if r.p99_ms is not None else f"{'-':>7}"
        print(f"{r.case:<40} {r.entries:>8} {r.seconds:>6.2f} {r.mb_per_s:>8.1f} {r.entries_per_s:>10.0f} {p50} {p99}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", choices=["zookeeper", "memory"], default="zookeeper")
    parser.add_argument("--seconds", type=float, default=3.0, help="duration of each 4 KiB case")
    parser.add_argument("--total-mib", type=int, default=1024, help="data written in each 1 MiB case")
    parser.add_argument("--frames-in-flight", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--dir", type=Path, default=None, help="where to put the logs (default: a temp dir)")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "tier1.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="tier1-bench-") as tmp:
        results = asyncio.run(run_cases(args, Path(tmp)))
    print_table(results)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "benchmark": "tier1",
        "store": args.store,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "results": [asdict(r) for r in results],
    }
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
