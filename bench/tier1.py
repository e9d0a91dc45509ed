"""Throughput and latency of the Tier-1 logs, side by side in one run: the file ledger log (fsync on) and the
JetStream log on one NATS server (R1) and on a 3-node NATS cluster (R3), all on this machine.

Cases (each on a fresh log of each backend):

* ``100 B xN``: 100-byte entries, N (``--small-in-flight``, default 256) outstanding: acknowledged entries/s
  (the per-entry cost: the durable log packs events into frames, but a slow Tier-1 shows here first);
* ``10 KB x32``: 10,000-byte entries, 32 outstanding: MB/s;
* ``1 MiB x8``: 1 MiB entries (a full data frame), 8 outstanding: MB/s;
* ``100 B at R/s``: 100-byte entries issued at a fixed rate (``--rate``, default 10,000/s) for
  ``--seconds``: latency from the call to the acknowledgement, p50/p99;
* ``recovery read``: a new instance initializes over the 1 MiB log (fencing the writer) and reads it all:
  MB/s of the read (init time shown apart). The file log's read is warm (page cache).

Metadata (epochs, ownership) lives in an embedded ZooKeeper. The NATS servers run with ``sync_interval:
always`` (fsync before every acknowledgement, segstore's default); ``--nats-sync always,default`` runs every
JetStream backend once per mode in the same run (``default``: the NATS server's lazy fsync every 2 minutes;
acknowledged = in the memory of a quorum), one row each. Prints a table and writes JSON (default
``bench/results/tier1.json``). ``--quick``: 1 s cases and 64 MiB of 1 MiB entries.

    python bench/tier1.py [--backends file jetstream-r1 jetstream-r3] [--nats-sync always,default]
                          [--file-lease-ms 1000,0]
                          [--seconds 3] [--total-mib 256] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from benchlib import percentile, table

from segment_store.tier1.file.config import FileLedgerLogConfig
from segment_store.tier1.file.factory import FileLedgerLogFactory
from segment_store.tier1.jetstream.config import JetStreamLogConfig
from segment_store.tier1.jetstream.factory import JetStreamLogFactory
from segment_store.tier1.jetstream.nats_server import NatsCluster
from segment_store.tier1.log import DurableDataLog, DurableDataLogFactory, LogAddress
from segstore_shared.coordination.kazoo_store import KazooCoordinationStore
from segstore_shared.coordination.store import CoordinationStore
from segstore_shared.coordination.zookeeper_server import EmbeddedZooKeeper, ZooKeeperConfig, free_port

MIB = 1024 * 1024
BACKENDS = ("file", "jetstream-r1", "jetstream-r3")
Outcome = tuple[int, float, list[float]]  # acknowledged entries, seconds, latencies (s)


@dataclass(frozen=True)
class Result:
    backend: str
    sync: str
    """``fsync lease <ms> ms`` (the file ledger log: fsync on, its ownership lease), else the NATS servers'
    ``sync_interval``."""
    case: str
    entries: int
    seconds: float
    mb_per_s: float
    entries_per_s: float
    p50_ms: float | None = None
    p99_ms: float | None = None


@asynccontextmanager
async def zookeeper(root: Path) -> AsyncIterator[CoordinationStore]:
    server = EmbeddedZooKeeper(ZooKeeperConfig(data_dir=root / "zookeeper", port=free_port()))
    await asyncio.to_thread(server.start)
    try:
        store = await KazooCoordinationStore.connect(server.connect_string)
        try:
            yield store
        finally:
            await store.close()
    finally:
        await asyncio.to_thread(server.stop)


def file_sync_label(lease_ms: int) -> str:
    return f"fsync lease {lease_ms} ms"


def file_lease_ms(label: str) -> int:
    """The ownership lease of a file ledger run, from its label (:func:`file_sync_label`)."""
    return int(label.removeprefix("fsync lease ").removesuffix(" ms"))


@asynccontextmanager
async def backend(kind: str, root: Path, store: CoordinationStore, sync: str) -> AsyncIterator[DurableDataLogFactory]:
    factory: DurableDataLogFactory
    with contextlib.ExitStack() as stack:
        if kind == "file":
            lease_s = file_lease_ms(sync) / 1000
            name = f"file-lease-{file_lease_ms(sync)}"
            config = FileLedgerLogConfig(
                root_dir=root / name, metadata_root=f"/bench/{name}", fsync=True, ownership_lease_s=lease_s
            )
            factory = FileLedgerLogFactory(config, store)
        else:
            size = 1 if kind == "jetstream-r1" else 3
            cluster = NatsCluster.on_free_ports(root / f"{kind}-{sync}", size, sync_interval=sync)
            await asyncio.to_thread(cluster.start)
            stack.callback(cluster.stop)
            config = JetStreamLogConfig(
                servers=tuple(cluster.urls), replicas=size, metadata_root=f"/bench/{kind}-{sync}"
            )
            factory = JetStreamLogFactory(config, store)
        await factory.initialize()
        try:
            yield factory
        finally:
            await factory.close()


async def append_window(
    log: DurableDataLog, payload: bytes, in_flight: int, *, seconds: float | None, count: int | None
) -> Outcome:
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


async def append_at_rate(log: DurableDataLog, payload: bytes, rate: float, seconds: float) -> Outcome:
    """Issue appends on a fixed schedule (``rate`` per second, in ticks of 1 ms); latencies call -> ack."""
    loop = asyncio.get_running_loop()
    latencies: list[float] = []
    futures: list[asyncio.Future[LogAddress]] = []

    def record(began: float, _: asyncio.Future[LogAddress]) -> None:
        latencies.append(loop.time() - began)

    start = loop.time()
    issued = 0
    while (now := loop.time()) - start < seconds:
        due = int((now - start) * rate)
        while issued < due:
            future = log.append(payload)
            future.add_done_callback(functools.partial(record, now))
            futures.append(future)
            issued += 1
        await asyncio.sleep(0.001)
    for future in await asyncio.gather(*futures, return_exceptions=True):
        if isinstance(future, BaseException):
            raise future
    return issued, loop.time() - start, latencies


def summarize(kind: str, sync: str, case: str, size: int, outcome: Outcome) -> Result:
    entries, elapsed, latencies = outcome
    ordered = sorted(latencies)
    return Result(
        kind, sync, case, entries, round(elapsed, 2), round(entries * size / elapsed / 1e6, 1),
        round(entries / elapsed), round(percentile(ordered, 50) * 1000, 2), round(percentile(ordered, 99) * 1000, 2),
    )  # fmt: skip


async def run_backend(
    kind: str, sync: str, args: argparse.Namespace, root: Path, store: CoordinationStore
) -> list[Result]:
    results: list[Result] = []
    log_ids = iter(range(1000))
    async with backend(kind, root, store, sync) as factory:

        async def fresh() -> DurableDataLog:
            log = factory.create_log(next(log_ids))
            await log.initialize()
            return log

        async def case(name: str, size: int, run: Callable[[DurableDataLog], Awaitable[Outcome]]) -> None:
            log = await fresh()
            result = summarize(kind, sync, name, size, await run(log))
            results.append(result)
            print(f"  {kind:<13} {sync:<8} {name:<18} {result.entries_per_s:>9} entries/s {result.mb_per_s:>7} MB/s  "
                  f"p50 {result.p50_ms} ms  p99 {result.p99_ms} ms", flush=True)  # fmt: skip
            await log.close()

        small, rate = args.small_in_flight, args.rate
        await case(
            f"100 B x{small}",
            100,
            lambda log: append_window(log, os.urandom(100), small, seconds=args.seconds, count=None),
        )
        await case(
            "10 KB x32",
            10_000,
            lambda log: append_window(log, os.urandom(10_000), 32, seconds=args.seconds, count=None),
        )
        big_id = next(log_ids)
        big = factory.create_log(big_id)
        await big.initialize()
        outcome = await append_window(big, os.urandom(MIB), 8, seconds=None, count=args.total_mib)
        results.append(summarize(kind, sync, "1 MiB x8", MIB, outcome))
        await case(f"100 B at {rate:,.0f}/s", 100, lambda log: append_at_rate(log, os.urandom(100), rate, args.seconds))

        reader = factory.create_log(big_id)
        began = time.perf_counter()
        await reader.initialize()
        initialized = time.perf_counter()
        count = size = 0
        async for item in reader.read():
            count += 1
            size += len(item.payload)
        elapsed = time.perf_counter() - initialized
        results.append(
            Result(
                kind,
                sync,
                f"recovery read (init {1000 * (initialized - began):.0f} ms)",
                count,
                round(elapsed, 2),
                round(size / elapsed / 1e6, 1),
                round(count / elapsed),
            )
        )
        await reader.close()
        await big.close()
    return results


async def run_all(args: argparse.Namespace, root: Path) -> list[Result]:
    results: list[Result] = []
    async with zookeeper(root) as store:
        for kind in args.backends:
            modes = [file_sync_label(ms) for ms in args.file_lease_ms] if kind == "file" else args.nats_sync
            for sync in modes:
                results += await run_backend(kind, sync, args, root, store)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", nargs="+", choices=BACKENDS, default=list(BACKENDS))
    parser.add_argument("--seconds", type=float, default=None, help="duration of each timed case (3; quick 1)")
    parser.add_argument("--total-mib", type=int, default=None, help="data written in the 1 MiB case (256; quick 64)")
    parser.add_argument("--quick", action="store_true", help="short cases (a smoke run, not for the docs)")
    parser.add_argument("--small-in-flight", type=int, default=256, help="100 B entries outstanding")
    parser.add_argument("--rate", type=float, default=10_000, help="entries/s of the fixed-rate case")
    parser.add_argument(
        "--nats-sync",
        type=lambda text: [mode.strip() for mode in text.split(",") if mode.strip()],
        default=["always"],
        help="the NATS servers' sync_interval, comma-separated: each JetStream backend runs once per mode "
        "(always, default, or a duration such as 10s; default always)",
    )
    parser.add_argument(
        "--file-lease-ms",
        type=lambda text: [int(ms) for ms in text.split(",") if ms.strip()],
        default=[1000],
        help="the file ledger log's ownership lease in ms, comma-separated: the file backend runs once per lease "
        "(1000, the default, and 0: a ZooKeeper check per group commit; default 1000)",
    )
    parser.add_argument("--dir", type=Path, default=None, help="where to put the logs (default: a temp dir)")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "tier1.json")
    args = parser.parse_args()
    args.seconds = args.seconds or (1.0 if args.quick else 3.0)
    args.total_mib = args.total_mib or (64 if args.quick else 256)
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="tier1-bench-") as tmp:
        results = asyncio.run(run_all(args, Path(tmp)))
    table(
        "Tier-1 logs (entries/s, MB/s of payload, latency call -> acknowledgement)",
        [asdict(r) for r in results],
        [("backend", "backend"), ("sync", "sync"), ("case", "case"), ("entries", "entries"), ("seconds", "s"),
         ("mb_per_s", "MB/s"), ("entries_per_s", "entries/s"), ("p50_ms", "p50 ms"), ("p99_ms", "p99 ms")],
    )  # fmt: skip
    verdicts: dict[str, float] = {}
    file_small = next((r for r in results if r.backend == "file" and r.case.startswith("100 B x")), None)
    for sync in args.nats_sync:
        r3 = [r for r in results if r.backend == "jetstream-r3" and r.sync == sync]
        r3_small = next((r for r in r3 if r.case.startswith("100 B x")), None)
        r3_rate = next((r for r in r3 if " at " in r.case), None)
        if file_small and r3_small:
            ratio = r3_small.entries_per_s / file_small.entries_per_s
            verdicts[f"r3_{sync}_vs_file_100B"] = round(ratio, 2)
            print(f"\nJetStream R3 (sync {sync}) / file ledger, 100 B entries/s: {ratio:.2f} (target >= 0.5)")
        if r3_rate and r3_rate.p99_ms is not None:
            verdicts[f"r3_{sync}_p99_ms_at_rate"] = r3_rate.p99_ms
            print(f"JetStream R3 (sync {sync}) p99 at {args.rate:,.0f}/s: {r3_rate.p99_ms} ms (target <= 20 ms)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "benchmark": "tier1",
        "nats_sync": args.nats_sync,
        "file_lease_ms": args.file_lease_ms,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "verdicts": verdicts,
        "results": [asdict(r) for r in results],
    }
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
