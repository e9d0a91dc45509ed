"""Engine benchmark: the whole segment container over real tiers, on the local disk.

Tier-1 is the fenced file ledger log (fsync on) with its metadata in an in-process
coordination store (``--zookeeper``: an embedded ZooKeeper through kazoo); Tier-2 is the
chunked segment storage (Parquet chunks, one row per event, and its system journal) over the
filesystem chunk storage. Both live in a temporary directory under ``--dir`` (default: the
system temp dir), which must be a real disk, not tmpfs: the script prints the filesystem type
and warns otherwise. Appends arrive as the wire delivers them: blocks of framed events
(``encode_events``), one ~512 KiB block = one append, ``--in-flight`` blocks outstanding (a
connection's window). Payloads are random bytes, so Parquet compression gains nothing.

Cases (each on a fresh container and directory, default configuration unless said):

1. ``throughput``: 100 B and 10 KB events for ``--seconds`` each; events/s and MB/s
   acknowledged, over the whole run and over its second half. Up to ``max_unflushed_bytes``
   (512 MiB) may wait for Tier-2 before appends are throttled to the Tier-2 rate, so a short
   run partly measures that buffer filling; the second half is nearer the steady state. The
   storage writer flushes to Tier-2 concurrently (Tier-2 MB flushed during the run,
   ``unflushed_bytes`` at the end, and how long the final drain took).
2. ``latency``: an open-loop client sends one append every 1 ms holding the 100 B events that
   arrived in that ms (100 at 100,000 events/s, 10 at 10,000 events/s); latency is measured
   from the *scheduled* send time to the acknowledgement, so queueing delay counts. The send
   lag (actual minus scheduled send, from the event loop's ~1 ms timer resolution and from a
   busy loop) is shown apart; ``service`` is from actual send to ack.
3. ``replay``: ``--replay-mb`` of 100 B events with checkpoints (hence Tier-1 truncation)
   disabled, stop, then time ``start()`` of a new instance: cold (Tier-1 and Tier-2 pages
   dropped with ``posix_fadvise(DONTNEED)``) and warm (page cache). ``replay`` is fencing plus
   reading and applying Tier-1; ``start`` adds the Tier-2 journal boot and reconciliation.
4. ``flush``: ``--flush-mb`` appended with flushing paused (``flush_max_age_s`` huge and every
   segment kept below ``flush_threshold_bytes`` = ``max_flush_bytes`` = 32 MiB, the default
   chunk size, so the data is spread over ``--flush-mb / 32`` segments), then time
   ``flush_to_storage()``; MB/s, chunks written, Tier-2 bytes on disk. 100 B events are the
   hard case (one Parquet row per event).
5. ``read``: one segment of ``--read-mb`` with a 128 MiB cache; after ``flush_to_storage()``
   and ``read_index.evict()`` the tail is still cached and the head only in Tier-2. Reads of
   1 MiB at a time, one outstanding: the cached tail (several passes), then the head (every
   byte decoded from Parquet chunks; the Tier-2 bytes read are counted to prove it).

Targets of the issue: >= 1,000,000 events/s of 100 B events; >= 350 MB/s with 10 KB events;
append p99 <= 10 ms at 100,000 events/s; Tier-1 replay >= 200 MB/s. MB = 10^6 bytes of segment
data (frame headers included).

    .venv/bin/python bench/engine.py [--quick] [--seconds 5] [--zookeeper] [--only throughput,latency]
                                     [--dir /var/tmp] [--out bench/results/engine.json]

The full run takes about a minute, ``--quick`` about 20 s, on an idle 2-CPU machine (other
load makes the numbers swing by 2x; the JSON records the load average). Prints one table per
case and writes JSON (``bench/results/`` is git-ignored).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import math
import os
import platform
import random
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from benchlib import MB, filesystem_of, mb_per_s, percentile
from engine_report import TARGETS, report, verdicts

from segment_store.containers.config import ContainerConfig
from segment_store.containers.segment_container import SegmentContainer
from segment_store.logs.config import DurableLogConfig
from segment_store.logs.durable_log import LogState
from segment_store.logs.operations import AppendOperation, Operation
from segment_store.protocol import encode_events
from segment_store.reading.cache import CacheConfig
from segment_store.storage.backends.filesystem import FsChunkStorage
from segment_store.storage.chunked_storage import ChunkedSegmentStorage
from segment_store.storage.journal.system_journal import SnapshotInfoStore
from segment_store.tier1.file.config import FileLedgerLogConfig
from segment_store.tier1.file.ledger_log import FileLedgerLog
from segment_store.writer.config import WriterConfig
from segstore_shared.coordination.memory_store import MemoryCoordinationServer
from segstore_shared.coordination.store import CoordinationStore

MIB = 1024 * 1024
BLOCK_BYTES = 512 * 1024

CASES = {"throughput", "latency", "replay", "flush", "read"}

StoreFactory = Callable[[], Awaitable[CoordinationStore]]


# ---- environment ---------------------------------------------------------------------------------------------
class CountingStorage(ChunkedSegmentStorage):
    """Tier-2 that counts the bytes the read index reads from it (to tell cache hits from Tier-2 reads)."""

    read_bytes = 0

    async def read(self, name: str, offset: int, length: int) -> bytes:
        data = await super().read(name, offset, length)
        self.read_bytes += len(data)
        return data


class Env:
    """Tier-1 and Tier-2 of one case under ``root``; they outlive container instances (stop and restart)."""

    def __init__(self, root: Path, stores: StoreFactory) -> None:
        self.root = root
        self.tier1 = FileLedgerLogConfig(root_dir=root / "tier1", metadata_root=f"/bench/{root.name}/logs", fsync=True)
        self.chunks = FsChunkStorage(root / "tier2")
        self.storage: CountingStorage | None = None
        self._stores = stores
        self._opened: list[CoordinationStore] = []

    def _storage(self, container_id: int, snapshot_info: SnapshotInfoStore) -> CountingStorage:
        self.storage = CountingStorage(self.chunks, container_id, snapshot_info)
        return self.storage

    async def create(self, config: ContainerConfig) -> SegmentContainer:
        store = await self._stores()
        self._opened.append(store)
        return SegmentContainer(0, FileLedgerLog("container-0", self.tier1, store), self._storage, config)

    async def start(self, config: ContainerConfig, segments: Sequence[str] = ()) -> SegmentContainer:
        container = await self.create(config)
        await container.start()
        for name in segments:
            await container.create_segment(name)
        return container

    async def close(self) -> None:
        for store in self._opened:
            await store.close()

    def drop_page_cache(self) -> None:
        """Drop the (clean, fsync'd) pages of every file of both tiers, so the next read comes from the disk."""
        for path in self.root.rglob("*"):
            if path.is_file():
                fd = os.open(path, os.O_RDONLY)
                try:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                finally:
                    os.close(fd)

    def tier2_disk_bytes(self) -> int:
        return sum(p.stat().st_size for p in (self.root / "tier2").rglob("*.parquet"))


def segment_names(count: int) -> list[str]:
    return [f"bench/stream/{i}.#epoch.0" for i in range(count)]


def event_blocks(event_size: int, events_per_block: int, count: int = 4, seed: int = 1) -> list[bytes]:
    """``count`` distinct blocks of ``events_per_block`` framed events of random payload."""
    rng = random.Random(seed + event_size)
    blocks = []
    for _ in range(count):
        payload = rng.randbytes(event_size * events_per_block)
        blocks.append(encode_events(payload[i : i + event_size] for i in range(0, len(payload), event_size)))
    return blocks


def wire_blocks(event_size: int) -> tuple[list[bytes], int]:
    """~512 KiB append blocks of ``event_size`` events, and the events per block."""
    per_block = max(1, BLOCK_BYTES // (event_size + 8))
    return event_blocks(event_size, per_block), per_block


class Pumped:
    """What :func:`pump` got acknowledged, in total and after the run's half-time (the steady state)."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.appends = 0
        self.bytes = 0
        self.seconds = 0.0
        self.half: tuple[float, int, int] | None = None  # (time, appends, bytes) at half-time

    def second_half(self) -> tuple[int, int, float]:
        """(appends, bytes, seconds) acknowledged after half-time."""
        if self.half is None:
            return self.appends, self.bytes, self.seconds
        at, appends, count = self.half
        return self.appends - appends, self.bytes - count, self.started + self.seconds - at


async def pump(
    container: SegmentContainer,
    names: Sequence[str],
    blocks: Sequence[bytes],
    window: int,
    *,
    seconds: float = math.inf,
    total_bytes: float = math.inf,
) -> Pumped:
    """Keep ``window`` appends outstanding (round-robin over ``names``) until ``seconds`` or ``total_bytes``."""
    counter = itertools.count()
    issued = 0
    done = Pumped()
    deadline = done.started + seconds
    half_time = done.started + seconds / 2

    async def connection() -> None:
        nonlocal issued
        while time.perf_counter() < deadline and issued < total_bytes:
            i = next(counter)
            block = blocks[i % len(blocks)]
            issued += len(block)
            await container.append(names[i % len(names)], block)
            done.appends += 1
            done.bytes += len(block)
            if done.half is None and time.perf_counter() >= half_time:
                done.half = (time.perf_counter(), done.appends, done.bytes)

    await asyncio.gather(*(connection() for _ in range(window)))
    done.seconds = time.perf_counter() - done.started
    return done


async def flush_to_storage(container: SegmentContainer) -> None:
    await container.flush_to_storage()


async def stop(container: SegmentContainer) -> None:
    await container.stop()


# ---- cases ---------------------------------------------------------------------------------------------------
async def case_throughput(env: Env, event_size: int, seconds: float, window: int) -> dict[str, Any]:
    names = segment_names(1)
    container = await env.start(ContainerConfig(), names)
    blocks, per_block = wire_blocks(event_size)
    run = await pump(container, names, blocks, window, seconds=seconds)
    appends, acked, elapsed = run.appends, run.bytes, run.seconds
    half_appends, half_bytes, half_s = run.second_half()
    flushed, chunks, unflushed = container.writer.flushed_bytes, container.writer.flush_count, container.unflushed_bytes
    drain_started = time.perf_counter()
    await flush_to_storage(container)
    drain_s = time.perf_counter() - drain_started
    await stop(container)
    return {
        "event_bytes": event_size,
        "block_bytes": len(blocks[0]),
        "in_flight": window,
        "seconds": round(elapsed, 2),
        "events_per_s": round(appends * per_block / elapsed),
        "mb_per_s": mb_per_s(acked, elapsed),
        "second_half_events_per_s": round(half_appends * per_block / half_s),
        "second_half_mb_per_s": mb_per_s(half_bytes, half_s),
        "tier2_mb_flushed": round(flushed / MB, 1),
        "tier2_mb_per_s": mb_per_s(flushed, elapsed),
        "tier2_chunks": chunks,
        "unflushed_mb_at_end": round(unflushed / MB, 1),
        "drain_s": round(drain_s, 2),
    }


async def case_latency(env: Env, rate: int, seconds: float) -> dict[str, Any]:
    names = segment_names(1)
    container = await env.start(ContainerConfig(), names)
    interval = 0.001
    per_append = max(1, round(rate * interval))
    blocks = event_blocks(100, per_append, count=16)
    warmup = min(0.5, seconds / 10)
    count = round((seconds + warmup) / interval)
    first_measured = round(warmup / interval)
    latencies: list[float] = []
    service: list[float] = []
    lags: list[float] = []
    tasks: set[asyncio.Task[None]] = set()

    async def send(i: int, scheduled: float) -> None:
        sent = time.perf_counter()
        await container.append(names[0], blocks[i % len(blocks)])
        if i >= first_measured:
            done = time.perf_counter()
            latencies.append(done - scheduled)
            service.append(done - sent)
            lags.append(sent - scheduled)

    start = time.perf_counter() + 0.005
    for i in range(count):
        scheduled = start + i * interval
        delay = scheduled - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        task = asyncio.create_task(send(i, scheduled))  # open loop: never waits for earlier appends
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    await asyncio.gather(*tasks)
    elapsed = time.perf_counter() - start
    await flush_to_storage(container)
    await stop(container)
    latencies.sort()
    service.sort()
    lags.sort()

    def ms(values: list[float], q: float) -> float:
        return round(percentile(values, q) * 1000, 2)

    return {
        "offered_events_per_s": rate,
        "events_per_append": per_append,
        "append_bytes": len(blocks[0]),
        "appends_measured": len(latencies),
        "warmup_s": warmup,
        "acked_events_per_s": round(count * per_append / elapsed),
        "p50_ms": ms(latencies, 50),
        "p99_ms": ms(latencies, 99),
        "p99_9_ms": ms(latencies, 99.9),
        "max_ms": ms(latencies, 100),
        "service_p50_ms": ms(service, 50),
        "service_p99_ms": ms(service, 99),
        "send_lag_p50_ms": ms(lags, 50),
        "send_lag_p99_ms": ms(lags, 99),
    }


class ReplayCounter:
    """A durable log listener counting the append bytes replayed by recovery and when the last batch came."""

    def __init__(self, container: SegmentContainer) -> None:
        self._log = container.durable_log
        self.bytes = 0
        self.last_at = 0.0

    def __call__(self, ops: list[Operation]) -> None:
        if self._log.state is LogState.NEW:
            self.bytes += sum(len(op.data) for op in ops if isinstance(op, AppendOperation))
            self.last_at = time.perf_counter()


async def case_replay(env: Env, total_mb: float, window: int) -> list[dict[str, Any]]:
    config = ContainerConfig(
        durable_log=DurableLogConfig(checkpoint_commit_count=10**9, checkpoint_total_commit_length_bytes=1 << 50)
    )
    names = segment_names(1)
    container = await env.start(config, names)
    blocks, _ = wire_blocks(100)
    acked = (await pump(container, names, blocks, window, total_bytes=total_mb * MB)).bytes
    await flush_to_storage(container)  # a clean stop; Tier-1 keeps everything (no checkpoint to truncate at)
    await stop(container)
    results = []
    for label in ("cold", "warm"):
        if label == "cold":
            env.drop_page_cache()
        container = await env.create(config)
        replayed = ReplayCounter(container)
        container.durable_log.add_listener(replayed)
        started = time.perf_counter()
        await container.start()
        start_s = time.perf_counter() - started
        replay_s = replayed.last_at - started
        if replayed.bytes != acked:
            raise AssertionError(f"replayed {replayed.bytes} bytes of appends, {acked} were acknowledged")
        await flush_to_storage(container)
        await stop(container)
        results.append(
            {
                "page_cache": label,
                "mb_replayed": round(replayed.bytes / MB, 1),
                "replay_s": round(replay_s, 2),
                "start_s": round(start_s, 2),
                "replay_mb_per_s": mb_per_s(replayed.bytes, replay_s),
                "start_mb_per_s": mb_per_s(replayed.bytes, start_s),
            }
        )
    return results


async def case_flush(env: Env, event_size: int, total_mb: float, window: int) -> dict[str, Any]:
    chunk = 32 * MIB
    per_segment = 32 * MB  # below the threshold: no segment flushes before flush_to_storage()
    names = segment_names(max(1, math.ceil(total_mb * MB / per_segment)))
    config = ContainerConfig(
        writer=WriterConfig(flush_threshold_bytes=chunk, max_flush_bytes=chunk, flush_max_age_s=1e6),
        cache=CacheConfig(max_bytes=4 << 30),
        max_unflushed_bytes=4 << 30,
    )
    container = await env.start(config, names)
    blocks, per_block = wire_blocks(event_size)
    run = await pump(container, names, blocks, window, total_bytes=len(names) * per_segment)
    appends, acked, append_s = run.appends, run.bytes, run.seconds
    if container.writer.flushed_bytes:
        raise AssertionError(f"the writer flushed {container.writer.flushed_bytes} bytes before flush_to_storage()")
    started = time.perf_counter()
    await flush_to_storage(container)
    flush_s = time.perf_counter() - started
    assert env.storage is not None
    chunks = sum([(await env.storage.info(name)).chunk_count for name in names])
    await stop(container)
    return {
        "event_bytes": event_size,
        "segments": len(names),
        "mb": round(acked / MB, 1),
        "events": appends * per_block,
        "append_mb_per_s": mb_per_s(acked, append_s),
        "flush_s": round(flush_s, 2),
        "flush_mb_per_s": mb_per_s(acked, flush_s),
        "flush_events_per_s": round(appends * per_block / flush_s),
        "chunks": chunks,
        "max_concurrent_flushes": config.writer.max_concurrent_flushes,
        "tier2_disk_mb": round(env.tier2_disk_bytes() / MB, 1),
    }


async def read_range(container: SegmentContainer, name: str, start: int, end: int, passes: int = 1) -> float:
    """Read ``[start, end)`` ``passes`` times, 1 MiB at a time, one read outstanding; returns seconds."""
    started = time.perf_counter()
    for _ in range(passes):
        offset = start
        while offset < end:
            result = await container.read(name, offset, min(MIB, end - offset))
            if not result.data:
                raise AssertionError(f"empty read at {offset}")
            offset += len(result.data)
    return time.perf_counter() - started


async def case_read(env: Env, event_size: int, total_mb: float, window: int) -> dict[str, Any]:
    cache_bytes = 128 * MIB
    names = segment_names(1)
    container = await env.start(ContainerConfig(cache=CacheConfig(max_bytes=cache_bytes)), names)
    blocks, _ = wire_blocks(event_size)
    length = (await pump(container, names, blocks, window, total_bytes=total_mb * MB)).bytes
    await flush_to_storage(container)
    container.read_index.evict()
    segment = container.metadata.get_by_name(names[0])
    assert segment is not None and env.storage is not None
    cached = container.read_index.cached_bytes(segment.segment_id)
    cached_span = (cached - 2 * MIB) // MIB * MIB  # the cached tail, less a margin for a partly kept block
    if cached_span <= 0:
        raise AssertionError(f"only {cached} bytes cached after eviction")
    passes = max(1, math.ceil(256 * MB / cached_span))
    before = env.storage.read_bytes
    cache_s = await read_range(container, names[0], length - cached_span, length, passes)
    cache_tier2 = env.storage.read_bytes - before
    tier2_end = length - cache_bytes
    before = env.storage.read_bytes
    tier2_s = await read_range(container, names[0], 0, tier2_end)
    tier2_read = env.storage.read_bytes - before
    if tier2_read < tier2_end:
        raise AssertionError(f"{tier2_end - tier2_read} bytes of the Tier-2 pass came from the cache")
    await stop(container)
    return {
        "event_bytes": event_size,
        "segment_mb": round(length / MB, 1),
        "cached_mb_after_evict": round(cached / MB, 1),
        "cache_read_mb": round(cached_span * passes / MB, 1),
        "cache_mb_per_s": mb_per_s(cached_span * passes, cache_s),
        "cache_read_tier2_mb": round(cache_tier2 / MB, 1),
        "tier2_read_mb": round(tier2_end / MB, 1),
        "tier2_mb_per_s": mb_per_s(tier2_end, tier2_s),
        "tier2_bytes_from_tier2": tier2_read,
    }


# ---- driver --------------------------------------------------------------------------------------------------
async def run_cases(args: argparse.Namespace, stores: StoreFactory) -> dict[str, Any]:
    results: dict[str, Any] = {}
    only = set(args.only.split(",")) if args.only else None
    sizes = [int(s) for s in args.event_sizes.split(",")]

    async def fresh(case: Callable[..., Awaitable[Any]], *case_args: Any) -> Any:
        with tempfile.TemporaryDirectory(prefix="bench-engine-", dir=args.dir) as tmp:
            env = Env(Path(tmp), stores)
            try:
                return await case(env, *case_args)
            finally:
                await env.close()

    def wanted(case: str) -> bool:
        return only is None or case in only

    if wanted("throughput"):
        results["throughput"] = [await fresh(case_throughput, s, args.seconds, args.in_flight) for s in sizes]
    if wanted("latency"):
        results["latency"] = [await fresh(case_latency, r, args.seconds) for r in (100_000, 10_000)]
    if wanted("replay"):
        results["replay"] = await fresh(case_replay, args.replay_mb, args.in_flight)
    if wanted("flush"):
        results["flush"] = [await fresh(case_flush, s, args.flush_mb, args.in_flight) for s in sizes]
    if wanted("read"):
        results["read"] = [await fresh(case_read, s, args.read_mb, args.in_flight) for s in sizes]
    return results


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    if not args.zookeeper:
        server = MemoryCoordinationServer()

        async def memory_store() -> CoordinationStore:
            return server.connect()

        return await run_cases(args, memory_store)

    from segstore_shared.coordination.kazoo_store import KazooCoordinationStore
    from segstore_shared.coordination.zookeeper_server import EmbeddedZooKeeper, ZooKeeperConfig, free_port

    with tempfile.TemporaryDirectory(prefix="bench-zk-", dir=args.dir) as zk_dir:
        zk = EmbeddedZooKeeper(ZooKeeperConfig(data_dir=Path(zk_dir), port=free_port()))
        zk.start()
        try:

            async def kazoo_store() -> CoordinationStore:
                return await KazooCoordinationStore.connect(zk.connect_string)

            return await run_cases(args, kazoo_store)
        finally:
            zk.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smoke run (~30 s): shorter cases, less data")
    parser.add_argument("--seconds", type=float, help="duration of each throughput and latency case (default 5)")
    parser.add_argument("--in-flight", type=int, default=8, help="append blocks outstanding (default 8)")
    parser.add_argument("--replay-mb", type=float, help="Tier-1 data replayed on start (default 256)")
    parser.add_argument("--flush-mb", type=float, help="data flushed to Tier-2 at once (default 512)")
    parser.add_argument("--read-mb", type=float, help="segment size of the read case (default 384)")
    parser.add_argument("--event-sizes", default="100,10000", help="event payload sizes (default 100,10000)")
    parser.add_argument("--only", help="comma-separated cases: throughput,latency,replay,flush,read")
    parser.add_argument("--zookeeper", action="store_true", help="keep Tier-1 metadata in a real ZooKeeper")
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="where the temporary tiers live (a real disk)")
    parser.add_argument("--out", default="bench/results/engine.json")
    args = parser.parse_args()
    unknown = set(args.only.split(",")) - CASES if args.only else set()
    if unknown:
        parser.error(f"--only: unknown cases {sorted(unknown)}; choose from {sorted(CASES)}")
    quick = {"seconds": 1.5, "replay_mb": 208, "flush_mb": 128, "read_mb": 192}
    full = {"seconds": 5.0, "replay_mb": 256, "flush_mb": 512, "read_mb": 384}
    for key, value in (quick if args.quick else full).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.read_mb * MB <= 160 * MIB:
        parser.error("--read-mb: must exceed the 128 MiB cache by a margin (> 168)")
    fs_type = filesystem_of(Path(args.dir))
    print(f"tiers under {args.dir} ({fs_type}); coordination: {'zookeeper' if args.zookeeper else 'memory'}")
    if fs_type in ("tmpfs", "ramfs"):
        print(f"warning: {args.dir} is {fs_type}, not a disk; fsync costs nothing here (use --dir)", file=sys.stderr)
    load_before = os.getloadavg()
    if load_before[0] > 0.5:
        print(
            f"warning: load average {load_before[0]:.2f}: other work on this machine makes the numbers noisy",
            file=sys.stderr,
        )
    started = time.perf_counter()
    results = asyncio.run(main_async(args))
    report(results)
    total_s = time.perf_counter() - started
    print(f"\ntotal {total_s:.0f} s")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "benchmark": "engine",
                "python": platform.python_version(),
                "platform": platform.platform(),
                "cpus": os.cpu_count(),
                "dir": args.dir,
                "filesystem": fs_type,
                "load_average_before": [round(x, 2) for x in load_before],
                "load_average_after": [round(x, 2) for x in os.getloadavg()],
                "coordination": "zookeeper" if args.zookeeper else "memory",
                "quick": args.quick,
                "settings": {k: getattr(args, k) for k in ("seconds", "in_flight", "replay_mb", "flush_mb", "read_mb")},
                "targets": TARGETS,
                "verdicts": verdicts(results),
                "total_s": round(total_s, 1),
                "results": results,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
