"""Wire benchmark: the async client against a segment store process over loopback TCP.

The server is a real ``segstore segmentstore`` in its own process (file Tier-1 with fsync,
filesystem Tier-2 with Parquet chunks, an embedded ZooKeeper it starts itself), so client and
server each get a core; ``--in-memory`` runs it with in-memory tiers instead, to tell disk
effects from protocol and CPU effects. Its data directory is a temporary directory under
``--dir`` (a real disk, not tmpfs; the script warns otherwise). The client is
``segment_store.client`` with its default configuration. Payloads are random bytes. Every
writer case ends with a check that the segment holds exactly what was acknowledged, then
``flush_to_storage`` of every container, so one case's Tier-2 backlog does not slow the next.
Before the first case, ``--warm-up`` seconds of traffic (100 B and 10 KB) keep one-time costs
out of the numbers (the ZooKeeper JVM's JIT, lazy imports on the first Parquet encode).

Cases:

1. ``write``: one writer, 100 B and 10 KB events, for ``--seconds`` each after a short warm-up,
   through ``write_many`` (batches of ``--batch`` 100 B events or ~512 KiB of 10 KB events, as a
   producer that batches would) and through per-event ``write``. Events/s and MB/s are counted
   up to the acknowledgement of the last event (``flush``).
2. ``latency``: an open-loop producer at 100,000 and 10,000 events/s of 100 B: it wakes about
   every millisecond and writes (``write_many``) every event whose scheduled time has come, never
   waiting for acks. Latency = ack time - scheduled time, so queueing (and a late producer)
   counts; ``lag`` is write time - scheduled time, ``service`` is ack time - write time.
   Then what overlapped the slowest 1 % of acks (``bench/wire_stalls.py``): the server's event-loop stalls by
   cause (fetched from its metrics port's ``/stalls``), the client's (the same recorder on this process's loop),
   long GC passes, fsyncs, Parquet encodes, group commits and flushes, each against the share of all events it
   overlapped. The server's RSS while idle (``--idle-s``, default 45: the cache evicts data idle for 30 s,
   ``--cache-idle-evict-s``, and the process then returns freed memory) is watched before the first latency case
   (so the warm-up's and the write cases' cached data are not counted in its peak RSS) and after the 100,000 events/s
   case.
3. ``read``: a segment of ``--read-gb`` of 10 KB events (``--read-event-bytes``), written in
   ~512 KiB batches and flushed to Tier-2, then read sequentially with the prefetching reader
   (``reader.read()``, default ``ReaderConfig``):

   * ``cache``: the tail still cached after writing (half the server's ``CacheConfig.max_bytes``;
     the cache evicts flushed data beyond ~85 % of it), in passes adding up to the segment size;
   * ``whole segment after writing``: all of it, as a reader catching up right after the writer
     would; the head was evicted, so this streams through Tier-2 and the cache;
   * ``tier2``: all of it after restarting the server process. Recovery replays Tier-1 from its
     truncation point into the cache, so first a filler larger than the durable log's
     checkpoint size goes to the same container and is flushed: the log checkpoints after the
     segment and truncates there, and every byte of the segment is decoded from the Parquet
     chunks. Their files stay in the page cache unless ``--cold`` drops them. The first 4 MiB
     are read before the measured pass (first decode: imports, file opens) and left out of it.

   The server's ``read()`` bytes (``/proc/<pid>/io`` rchar, files and sockets) during a pass show
   where its bytes came from (~0: the cache).

``cpu srv``/``cpu cli``/``cpu zk`` are the CPU seconds per wall second (1.0 = one core busy) of the
server process (``srv loop``: its main thread, the event loop; the rest is its worker threads:
Tier-1 writes and fsyncs, Parquet encoding, Tier-2 writes, kazoo), the client process and the
embedded ZooKeeper's JVM (a child of the server);
``cpu other`` is everything else on the machine (kernel threads, other programs: a run with a
high value was disturbed and should be repeated);
``srv peak MB``/``cli peak MB`` are the peak RSS (``VmHWM``) of the server and of this client process within the
case (each process's peak is reset when the case begins, ``/proc/<pid>/clear_refs``);
``disk wr MB/s`` is what the server process wrote towards the disk (``/proc/<pid>/io``
write_bytes: Tier-1 ledgers and Tier-2 chunks, each fsync'd, so about twice the data). After the 10 KB
``write_many`` case the disk alone writes the same bytes with the same fsyncs (``bench/disk_limit.py``): the
segment data rate this disk allows, and the share of it the case reached.
MB = 10^6 bytes of segment data (frame headers included).

``--profile`` runs one writer case (``--profile-api``, default ``write_many``) for each of
``--profile-sizes`` (100 B and 10 KB) on a fresh server, with both processes profiled, and
prints their top functions: by default the server runs under ``python -m cProfile`` (its main
thread only, the event loop, over the whole process life: start, warm-up, case) and the client
enables ``cProfile`` around the case (which slows the client's per-event work several fold, so
the server then sees a lighter load); with ``--py-spy PATH`` both are sampled by py-spy instead
(``--threads``, 200 Hz, every thread, only the case), which also gives each thread's busy share
(time on a CPU or in a blocking call such as ``write``/``fsync``; 1.0 = all the time). Server
threads: ``MainThread`` runs the event loop, ``tier1-container-N`` the Tier-1 ledger writes and
fsyncs of container N, ``asyncio`` the default executor (Tier-2 flushes: Parquet encoding and
chunk writes; Tier-2 reads), ``zk_loop`` kazoo's connection. Profiles land in ``bench/results/``.

    .venv/bin/python bench/wire.py [--quick] [--seconds 5] [--in-memory] [--read-gb 1] [--cold]
                                   [--only write,latency,read] [--dir /var/tmp] [--out PATH]
    .venv/bin/python bench/wire.py --profile [--profile-sizes 100,10000] [--profile-api write]
                                   [--py-spy /path/to/py-spy]

The full run takes about 70 s on 2 cores, ``--quick`` about 35 s. Prints one table per case and
writes JSON (default ``bench/results/wire.json``; ``bench/results/`` is git-ignored).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchlib import MB, filesystem_of, mb_per_s, table
from disk_limit import DiskProbe, disk_alone
from profiles import cprofile_top, py_spy, pyspy_top, report_profile
from wire_common import FRAME_HEADER, batches_of, check_length, drain, new_segment, payloads
from wire_latency import IDLE_RSS_MB, case_latency, idle_memory
from wire_server import CONTAINERS, Meter, ServerProcess

from segment_store.client import ClientConfig, SegmentClient
from segment_store.logs.config import DurableLogConfig
from segment_store.reading.cache import CacheConfig
from segstore_shared.cluster.container_mapping import container_of
from segstore_shared.loop_stalls import ACTIVITY, LoopStallRecorder

BLOCK_BYTES = 512 * 1024
WARM_READ_BYTES = 4 * 1024 * 1024
REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
TARGETS = {
    "events_per_s_100B": 1_000_000,
    "mb_per_s_10KB": 350,
    "of_disk_limit_10KB": 0.8,
    "p99_ms_at_100k": 10,
    "p99_ms_at_10k": 5,
    "peak_rss_mb_at_100k": 500,
    "idle_rss_mb": IDLE_RSS_MB,
}


async def case_write(
    client: SegmentClient, server: ServerProcess, size: int, api: str, per_batch: int, seconds: float
) -> dict[str, Any]:
    segment = new_segment()
    await client.create_segment(segment)
    events = payloads(size, max(4 * per_batch, 4096 if size < 1000 else 256))
    batches = batches_of(events, per_batch)
    async with client.writer(segment) as writer:

        async def run(for_s: float) -> None:
            deadline = time.perf_counter() + for_s
            i = 0
            if api == "write_many":
                while time.perf_counter() < deadline:
                    await writer.write_many(batches[i % len(batches)])
                    i += 1
            else:
                write = writer.write
                while time.perf_counter() < deadline:
                    for payload in events:
                        await write(payload)
            await writer.flush()

        await run(min(0.5, seconds / 4))  # warm-up: connection, setup, first Tier-2 flush
        before, blocks_before = writer.acked_event_number, writer.blocks_sent
        meter = Meter(server)
        await run(seconds)
        measured = meter.done()
        count = writer.acked_event_number - before
        blocks = writer.blocks_sent - blocks_before
        total = writer.acked_event_number
    await check_length(client, segment, total, size)
    elapsed = measured["seconds"]
    return {
        "event_bytes": size,
        "api": api,
        "batch": per_batch if api == "write_many" else 1,
        **measured,
        "events": count,
        "events_per_s": round(count / elapsed),
        "mb_per_s": mb_per_s(count * (size + FRAME_HEADER), elapsed),
        "avg_block_kib": round(count * (size + FRAME_HEADER) / max(1, blocks) / 1024, 1),
        "drain_s": await drain(client),
        "segment_bytes": total * (size + FRAME_HEADER),
    }


async def read_pass(
    client: SegmentClient, server: ServerProcess, segment: str, start: int, end: int, passes: int = 1
) -> dict[str, Any]:
    """Read ``[start, end)`` ``passes`` times with the prefetching reader; MB/s and server read() bytes."""
    before = server.io("rchar")
    meter = Meter(server)
    got = requests = 0
    for _ in range(passes):
        async with client.reader(segment, offset=start, end_offset=end) as reader:
            while chunk := await reader.read():
                got += len(chunk)
            requests += reader.requests_sent
    measured = meter.done()
    if got != (end - start) * passes:
        raise AssertionError(f"read {got} bytes of {segment}, expected {passes} x {end - start}")
    return {
        **measured,
        "mb": round(got / MB, 1),
        "passes": passes,
        "mb_per_s": mb_per_s(got, measured["seconds"]),
        "requests": requests,
        "server_read_mb": round((server.io("rchar") - before) / MB, 1),
    }


async def warm_up(client: SegmentClient, seconds: float) -> float:
    """Traffic before anything is measured, so one-time costs stay out of the cases: the JIT of the
    ZooKeeper JVM, lazy imports on the first Parquet encode (pyarrow loads pandas), first chunks."""
    started = time.perf_counter()
    for size, per_batch in ((100, 1000), (10_000, BLOCK_BYTES // (10_000 + FRAME_HEADER))):
        segment = new_segment()
        await client.create_segment(segment)
        batches = batches_of(payloads(size, 4 * per_batch), per_batch)
        async with client.writer(segment) as writer:
            deadline = time.perf_counter() + seconds / 2
            i = 0
            while time.perf_counter() < deadline:
                await writer.write_many(batches[i % len(batches)])
                i += 1
    await drain(client)
    return round(time.perf_counter() - started, 1)


async def fill(client: SegmentClient, segment: str, size: int, total_bytes: int) -> int:
    """Write ``total_bytes`` of ``size`` B events to a new ``segment`` in ~512 KiB batches; returns its length."""
    await client.create_segment(segment)
    per_batch = max(1, BLOCK_BYTES // (size + FRAME_HEADER))
    batches = batches_of(payloads(size, 8 * per_batch), per_batch)
    async with client.writer(segment) as writer:
        i = written = 0
        while written < total_bytes:
            batch = batches[i % len(batches)]
            await writer.write_many(batch)
            written += len(batch) * (size + FRAME_HEADER)
            i += 1
    return (await client.get_segment_info(segment)).write_offset


async def case_read(args: argparse.Namespace, server: ServerProcess, client: SegmentClient) -> list[dict[str, Any]]:
    """One segment read from the cache, then (durable server) from Tier-2 after a restart.

    A restart replays Tier-1 from its truncation point into the cache, so before it a filler of more
    than ``checkpoint_total_commit_length_bytes`` goes to the same container and is flushed: the
    durable log checkpoints after the segment's data and truncates there, and what recovery replays
    (hence caches) is filler only.
    """
    size = args.read_event_bytes
    segment = new_segment()
    disk_before = server.tier2_disk_bytes() if not server.in_memory else 0
    meter = Meter(server)
    length = await fill(client, segment, size, int(args.read_gb * 1e9))
    write = meter.done()
    flush_s = await drain(client)
    chunks = await client.list_storage_chunks(segment)
    common = {
        "event_bytes": size,
        "segment_mb": round(length / MB, 1),
        "write_mb_per_s": mb_per_s(length, write["seconds"]),
        "flush_s": flush_s,
        "tier2_chunks": len(chunks),
        "tier2_disk_mb": None if server.in_memory else round((server.tier2_disk_bytes() - disk_before) / MB, 1),
    }
    # The cache (CacheConfig.max_bytes per process) evicts flushed data beyond ~85 % of it: the
    # cached tail is read in passes; a whole segment larger than that streams through Tier-2.
    span = min(length, CacheConfig().max_bytes // 2)
    passes = max(1, -(-length // span))
    tail = await read_pass(client, server, segment, length - span, length, passes)
    rows = [{"source": "cache (cached tail)", **common, **tail}]
    whole = await read_pass(client, server, segment, 0, length)
    rows.append({"source": "whole segment after writing", **common, **whole})
    if server.in_memory:
        print("read: no Tier-2 pass with --in-memory (a restart loses the data)")
        return rows
    container = container_of(segment, CONTAINERS)
    filler = next(n for n in iter(new_segment, None) if container_of(n, CONTAINERS) == container)
    checkpoint_bytes = DurableLogConfig().checkpoint_total_commit_length_bytes
    await fill(client, filler, 10_000, checkpoint_bytes + 32 * BLOCK_BYTES)
    await drain(client)
    await client.close()
    server.stop()
    restart_s = round(server.start(), 1)
    if args.cold:
        server.drop_tier2_page_cache()
    async with SegmentClient(("127.0.0.1", server.port), ClientConfig()) as fresh:
        if (await fresh.get_segment_info(segment)).write_offset != length:
            raise AssertionError(f"{segment} changed length over the restart")
        await read_pass(fresh, server, segment, 0, WARM_READ_BYTES)  # first decode: imports, file opens
        row = await read_pass(fresh, server, segment, WARM_READ_BYTES, length)
    source = "tier2 (page cache dropped)" if args.cold else "tier2 (page cache warm)"
    rows.append({"source": source, **common, "restart_s": restart_s, **row})
    return rows


# ---- profiles --------------------------------------------------------------------------------------------
async def run_profile(args: argparse.Namespace, root: Path) -> list[dict[str, Any]]:
    """The ``write_many`` case of each ``--profile-sizes`` event size, both processes profiled."""
    results = []
    for size in (int(s) for s in args.profile_sizes.split(",")):
        server = ServerProcess(root / f"profile-{size}", args.in_memory)
        server.root.mkdir()
        name = f"wire-{size}B-{args.profile_api}"
        server_out = RESULTS / (f"{name}-server.pyspy.txt" if args.py_spy else f"{name}-server.prof")
        client_out = RESULTS / (f"{name}-client.pyspy.txt" if args.py_spy else f"{name}-client.prof")
        server.start(cprofile_out=None if args.py_spy else server_out)
        per_batch = args.batch if size < 1000 else max(1, BLOCK_BYTES // (size + FRAME_HEADER))
        profiler = cProfile.Profile()
        try:
            async with SegmentClient(("127.0.0.1", server.port), ClientConfig()) as client:
                await warm_up(client, args.warm_up)
                with py_spy(args.py_spy, server.pid, server_out), py_spy(args.py_spy, os.getpid(), client_out):
                    spied = time.perf_counter()
                    if not args.py_spy:
                        profiler.enable()
                    row = await case_write(client, server, size, args.profile_api, per_batch, args.seconds)
                    profiler.disable()
                    spied = time.perf_counter() - spied
        finally:
            server.stop()
        if args.py_spy:
            server_top, client_top = pyspy_top(server_out, spied), pyspy_top(client_out, spied)
        else:
            profiler.dump_stats(str(client_out))
            server_top, client_top = cprofile_top(server_out), cprofile_top(client_out)
        results.append(
            {
                "case": row,
                "files": [str(server_out), str(client_out)],
                "server": server_top,
                "client": client_top,
            }
        )
    return results


# ---- driver ----------------------------------------------------------------------------------------------
async def run_cases(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    only = set(args.only.split(",")) if args.only else {"write", "latency", "read"}
    server = ServerProcess(root, args.in_memory, extra_args=args.server_arg)
    results: dict[str, Any] = {"server_start_s": round(server.start(), 1)}
    ACTIVITY.hook_gc()
    stalls = LoopStallRecorder(ACTIVITY)  # the client's own loop (this process); the server's: its /stalls
    stalls.start()
    try:
        client = SegmentClient(("127.0.0.1", server.port), ClientConfig())
        try:
            results["warm_up_s"] = await warm_up(client, args.warm_up)
            if "write" in only:
                rows = []
                for size, per_batch in ((100, args.batch), (10_000, BLOCK_BYTES // (10_000 + FRAME_HEADER))):
                    for api in ("write_many", "write"):
                        measure_disk = size == 10_000 and api == "write_many" and not server.in_memory
                        probe = DiskProbe(server) if measure_disk else None
                        rows.append(await case_write(client, server, size, api, per_batch, args.seconds))
                        if probe is not None:  # the disk's limit (bench/disk_limit.py)
                            pattern = await asyncio.to_thread(probe.pattern, rows[-1]["segment_bytes"])
                            rows[-1].update(await asyncio.to_thread(disk_alone, root / "disk-alone", pattern))
                            rows[-1]["tier1_ms_per_group"] = probe.tier1_ms_per_group
                            rows[-1]["server_threads"] = probe.server_threads
                            rows[-1]["of_limit"] = round(rows[-1]["mb_per_s"] / rows[-1]["limit_mb_per_s"], 2)
                        print(f"  write {size} B {api}: {rows[-1]['events_per_s']:,} events/s", flush=True)
                results["write"] = rows
            if "latency" in only:
                # the warm-up's and the write cases' data leave the cache first, so each latency case's peak RSS is
                # its own (and this also shows the memory given back after the 10 KB burst)
                results["idle_before_latency"] = await idle_memory(server, args.idle_s)
                results["latency"] = [await case_latency(client, server, stalls, 100_000, args.seconds)]
                results["idle_after_100k"] = await idle_memory(server, args.idle_s)
                results["latency"].append(await case_latency(client, server, stalls, 10_000, args.seconds))
                print("  latency done", flush=True)
            if "read" in only:
                results["read"] = await case_read(args, server, client)
        finally:
            await client.close()
    finally:
        stalls.stop()
        results["memory"] = server.memory()
        server.stop()
    return results


def verdicts(results: dict[str, Any]) -> list[dict[str, Any]]:
    out = []

    def check(name: str, value: float, target: float, higher_is_better: bool = True) -> None:
        met = value >= target if higher_is_better else value <= target
        goal = f"{'>=' if higher_is_better else '<='} {target:,}"
        out.append({"target": name, "value": value, "goal": goal, "met": "yes" if met else "NO"})

    for r in results.get("write", []):
        if r["event_bytes"] == 100:
            check(f"events/s, 100 B, {r['api']}", r["events_per_s"], TARGETS["events_per_s_100B"])
        else:
            check(f"MB/s, 10 KB, {r['api']}", r["mb_per_s"], TARGETS["mb_per_s_10KB"])
        if "of_limit" in r:
            check(f"10 KB {r['api']}: share of the disk's limit", r["of_limit"], TARGETS["of_disk_limit_10KB"])
    for r in results.get("latency", []):
        if r["offered_events_per_s"] == 100_000:
            check("p99 ms at 100,000 events/s", r["p99_ms"], TARGETS["p99_ms_at_100k"], higher_is_better=False)
            check("srv peak MB at 100,000 events/s", r["srv_peak_rss_mb"], TARGETS["peak_rss_mb_at_100k"], False)
        else:
            check("p99 ms at 10,000 events/s", r["p99_ms"], TARGETS["p99_ms_at_10k"], higher_is_better=False)
    for key in ("idle_before_latency", "idle_after_100k"):
        if key in results:
            idle = results[key]["srv_rss_lowest_mb"]
            check(f"srv lowest RSS MB, {key.replace('_', ' ')}", idle, TARGETS["idle_rss_mb"], higher_is_better=False)
    return out


def report(results: dict[str, Any]) -> None:
    if "write" in results:
        table(
            "1. one writer, acknowledged (cpu = cores busy per process)",
            results["write"],
            [("event_bytes", "event B"), ("api", "api"), ("batch", "batch"), ("events_per_s", "events/s"),
             ("mb_per_s", "MB/s"), ("avg_block_kib", "block KiB"), ("cpu_server", "cpu srv"),
             ("cpu_server_loop", "srv loop"), ("cpu_client", "cpu cli"), ("cpu_zookeeper", "cpu zk"),
             ("cpu_other", "cpu other"), ("disk_write_mb_per_s", "disk wr MB/s"), ("drain_s", "drain s"),
             ("srv_peak_rss_mb", "srv peak MB"), ("cli_peak_rss_mb", "cli peak MB")],
        )  # fmt: skip
        for row in (r for r in results["write"] if "limit_mb_per_s" in r):
            print(
                f"{row['event_bytes']:,} B {row['api']}: the disk alone, same bytes and fsyncs (Tier-1 "
                f"{row['tier1_fsyncs']:,} x {row['tier1_kib_per_fsync']} KiB, Tier-2 {row['tier2_fsyncs']:,} x "
                f"{row['tier2_kib_per_fsync']} KiB), wrote {row['disk_alone_mb_per_s']} MB/s; segstore writes "
                f"{row['disk_bytes_per_byte']} B to disk per B of data, so the disk's limit is {row['limit_mb_per_s']} "
                f"MB/s of data: {row['mb_per_s']} MB/s is {row['of_limit']} of it"
            )
            steps = ", ".join(f"{step} {ms}" for step, ms in row["tier1_ms_per_group"].items())
            threads = row["server_threads"]
            print(
                f"  a Tier-1 group commit took (ms): {steps}; the server's threads used {threads['user']} cores of "
                f"user and {threads['system']} of kernel time and waited {threads['waiting_for_cpu']} s/s for a CPU"
            )
    if "latency" in results:
        table(
            "2. latency of 100 B events, open loop, from scheduled time to ack (ms)",
            results["latency"],
            [("offered_events_per_s", "offered ev/s"), ("acked_events_per_s", "acked ev/s"),
             ("events_per_write", "ev/write"), ("p50_ms", "p50"), ("p99_ms", "p99"), ("p99_9_ms", "p99.9"),
             ("max_ms", "max"), ("lag_p99_ms", "lag p99"), ("service_p99_ms", "service p99"),
             ("cpu_server", "cpu srv"), ("cpu_server_loop", "srv loop"), ("cpu_client", "cpu cli"),
             ("cpu_zookeeper", "cpu zk"), ("cpu_other", "cpu other"), ("srv_stalls", "srv stalls"),
             ("srv_stall_ms", "srv stall ms"), ("cli_stalls", "cli stalls"), ("cli_stall_ms", "cli stall ms"),
             ("srv_peak_rss_mb", "srv peak MB"), ("cli_peak_rss_mb", "cli peak MB")],
        )  # fmt: skip
        for row in results["latency"]:
            table(
                f"2b. what overlapped the slowest 1 % of acks at {row['offered_events_per_s']:,} events/s "
                "(% of the slow 1 % / % of all events; lift = their ratio)",
                row["slow_1pct_overlaps"],
                [("overlapped", "overlapped"), ("slow_pct", "slow 1 % %"), ("all_pct", "all %"), ("lift", "lift"),
                 ("count", "count"), ("total_ms", "total ms"), ("max_ms", "max ms")],
            )  # fmt: skip
            print(f"server activity during the case (count / total): {row['srv_activity']}")
    if "idle_before_latency" in results:
        print(f"\nsegment store RSS idle before the latency cases: {results['idle_before_latency']}")
    if "idle_after_100k" in results:
        print(f"segment store RSS idle after the 100,000 events/s case: {results['idle_after_100k']}")
    if "memory" in results:
        print(f"memory at the end (MB): {results['memory']}")
    if "read" in results:
        table(
            "3. sequential read with the prefetching reader",
            results["read"],
            [("source", "source"), ("segment_mb", "segment MB"), ("mb", "MB read"), ("passes", "passes"),
             ("mb_per_s", "MB/s"), ("requests", "requests"), ("server_read_mb", "srv read() MB"),
             ("cpu_server", "cpu srv"), ("cpu_server_loop", "srv loop"), ("cpu_client", "cpu cli"),
             ("cpu_other", "cpu other"), ("write_mb_per_s", "write MB/s"), ("flush_s", "flush s"),
             ("tier2_disk_mb", "T2 disk MB"), ("tier2_chunks", "chunks"), ("restart_s", "restart s")],
        )  # fmt: skip
    checks = verdicts(results)
    if checks:
        columns = [("target", "target"), ("value", "value"), ("goal", "goal"), ("met", "met")]
        table("targets (issues 4 and 39)", checks, columns)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smoke run (~35 s): 1.5 s cases, 0.25 GB read")
    parser.add_argument("--seconds", type=float, help="duration of each write and latency case (default 5)")
    parser.add_argument("--warm-up", type=float, default=2.0, help="seconds of traffic before measuring (default 2)")
    parser.add_argument("--batch", type=int, default=1000, help="100 B events per write_many (default 1000)")
    parser.add_argument("--read-gb", type=float, help="size of the segment read back (default 1)")
    parser.add_argument(
        "--read-event-bytes", type=int, default=10_000, help="event size of the read segment (default 10000)"
    )
    parser.add_argument(
        "--idle-s",
        type=float,
        default=45.0,
        help="watch the server's RSS idle before the latency cases and after the 100k/s case (default 45)",
    )
    parser.add_argument(
        "--server-arg",
        action="append",
        default=[],
        help="a flag for the segment store process, repeatable (--server-arg=--cache-idle-evict-s=0: before/after)",
    )
    parser.add_argument("--cold", action="store_true", help="drop the Tier-2 files' page cache before the tier2 pass")
    parser.add_argument("--in-memory", action="store_true", help="run the server with in-memory tiers")
    parser.add_argument("--only", help="comma-separated cases: write,latency,read")
    parser.add_argument("--profile", action="store_true", help="profile one writer case instead (see above)")
    parser.add_argument("--profile-sizes", default="100,10000", help="event sizes to profile (default 100,10000)")
    parser.add_argument(
        "--profile-api", choices=("write_many", "write"), default="write_many", help="API profiled (default write_many)"
    )
    parser.add_argument("--py-spy", help="path of a py-spy binary: sample both processes with it (with --profile)")
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="where the server's data lives (a real disk)")
    parser.add_argument("--out", type=Path, help="JSON output (default bench/results/wire[-profile-*].json)")
    args = parser.parse_args()
    for key, quick, full in (("seconds", 1.5, 5.0), ("read_gb", 0.25, 1.0)):
        if getattr(args, key) is None:
            setattr(args, key, quick if args.quick else full)
    fs_type = filesystem_of(Path(args.dir))
    tiers = "in memory" if args.in_memory else f"under {args.dir} ({fs_type})"
    print(f"segment store process with tiers {tiers}; client: one process, default ClientConfig", flush=True)
    if fs_type in ("tmpfs", "ramfs") and not args.in_memory:
        print(f"warning: {args.dir} is {fs_type}, not a disk; fsync costs nothing here (use --dir)", file=sys.stderr)
    RESULTS.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()
    if load_before[0] > 0.5:
        print(f"warning: load average {load_before[0]:.2f} before starting; something else uses the CPUs", flush=True)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-wire-", dir=args.dir) as tmp:
        try:
            if args.profile:
                results = {"profile": asyncio.run(run_profile(args, Path(tmp)))}
                report_profile(results["profile"])
            else:
                results = asyncio.run(run_cases(args, Path(tmp)))
                report(results)
        except BaseException:
            for log in Path(tmp).rglob("server.log"):
                with contextlib.suppress(OSError):
                    print(f"{log} tail:\n{log.read_text(errors='replace')[-3000:]}", file=sys.stderr)
            raise
    total_s = time.perf_counter() - started
    load_after = os.getloadavg()
    print(f"\ntotal {total_s:.0f} s; load average before {load_before[0]:.2f}, after {load_after[0]:.2f}")
    profile_name = f"wire-profile-{'py-spy' if args.py_spy else 'cprofile'}.json"
    out = args.out or RESULTS / (profile_name if args.profile else "wire.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    settings = (
        "seconds",
        "warm_up",
        "batch",
        "idle_s",
        "server_arg",
        "read_gb",
        "read_event_bytes",
        "cold",
        "in_memory",
        "only",
    )
    document = {
        "benchmark": "wire",
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "dir": args.dir,
        "filesystem": fs_type,
        "tiers": "memory" if args.in_memory else "file tier-1 (fsync) + filesystem tier-2 + embedded zookeeper",
        "quick": args.quick,
        "settings": {k: getattr(args, k) for k in settings},
        "targets": TARGETS,
        "verdicts": verdicts(results),
        "total_s": round(total_s, 1),
        "load_average_before_after": [round(load_before[0], 2), round(load_after[0], 2)],
        "results": results,
    }
    out.write_text(json.dumps(document, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
