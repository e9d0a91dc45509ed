"""The ``group`` case of ``bench/e2e.py`` (issue 25): events/s read by a reader group of 1, 2 and 4 reader processes.

``N`` events (``--group-events``; 100 B, the first 8 bytes the event's index) are written with our writer to a
stream of ``--group-segments`` fixed segments (default 8: 4 readers get 2 each) over 1,000 routing keys, flushed,
and checked stored (the segments' lengths). Then for every reader count (``--group-readers``, default 1,2,4) a fresh
group is made over the stream from its head to its tail cut (so the group finishes), and that many processes are
started (``multiprocessing``, spawn). Each process connects its own ``ControllerClient`` and ``StreamManager``,
opens the group and creates its reader (``GroupReaderConfig()``: the defaults), then waits at a barrier with the
others and the bench: all readers are online before any of them reads, so each takes its share at its first
refresh and nothing is rebalanced while the clock runs. The clock starts when the barrier opens; each process
calls ``next_event(0.5)`` until the reader says ``group_finished``, counting its events, summing their indices and
noting the time of its last event (``CLOCK_MONOTONIC``, one clock for every process).

* ``read s``: from the barrier to the last event of any reader; ``events/s`` = ``N`` / ``read s``.
* ``done s``: from the barrier to the last reader seeing the group finished (up to the poll's 0.5 s after its
  last event, or for a reader that ran out of segments before the others, up to its next refresh: 1 s).
* ``per reader``: events each process read (the balance).
* The readers' counts must add up to ``N`` and their index sums to ``N(N-1)/2``, every event 100 B; otherwise
  the run fails (a group that loses or repeats events is a bug, not a number).
* ``cpu rd``: CPU seconds of all reader processes per wall second of ``done s``; ``µs/ev``: their CPU per event.
  The other CPU columns are those of the other cases, over ``done s``.

The reader processes inherit the bench's CPUs: pinned (the default), every reader shares the one client core, as
readers on one other machine would; ``--no-pin`` lets them use both. ``--group-cprofile`` runs every reader under
cProfile and prints each group's top functions (by self time, summed over its readers).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import multiprocessing
import pstats
import queue
import random
import threading
import time
import traceback
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchlib import mb_per_s, table
from e2e_common import EVENT_BYTES, SCOPE, check_stored
from e2e_report import CPU_COLUMNS
from e2e_system import Meter, Standalone
from profiles import cprofile_top

from controller_client import ControllerClient, ControllerClientConfig, StreamManager
from controller_client.model import ScalingPolicy, StreamConfiguration, StreamCut

POLL_S = 0.5
SETUP_TIMEOUT_S = 120.0
INDEX_BYTES = 8
PROFILE_TOP = 15


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--group-events", type=int, help="events written for the group case (default 2,000,000; --quick 500,000)"
    )
    parser.add_argument("--group-segments", type=int, default=8, help="segments of the group case's stream")
    parser.add_argument("--group-readers", default="1,2,4", help="reader processes of the group case's groups")
    parser.add_argument(
        "--group-cprofile", action="store_true", help="run the group case's readers under cProfile (slower)"
    )


# ---- the reader processes -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ReaderJob:
    uri: str
    config: ControllerClientConfig | None
    group: str
    reader: str
    profile_to: str | None


def reader_process(job: ReaderJob, barrier: Any, results: Any) -> None:
    """A reader process (spawned): read its share of the group, put its counts (or its error) on ``results``."""
    try:
        results.put(asyncio.run(_read(job, barrier)))
    except BaseException as error:
        results.put({"reader": job.reader, "error": "".join(traceback.format_exception(error))})
        raise


async def _read(job: ReaderJob, barrier: Any) -> dict[str, Any]:
    async with await ControllerClient.connect(job.uri, job.config) as controller, StreamManager(controller) as manager:
        group = await manager.reader_group(SCOPE, job.group)
        reader = await group.create_reader(job.reader)
        try:
            await asyncio.to_thread(barrier.wait, SETUP_TIMEOUT_S)  # every reader online: no rebalancing later
            profiler = cProfile.Profile() if job.profile_to else None
            started, cpu = time.monotonic(), time.process_time()
            last = started
            count = index_sum = wrong_size = 0
            if profiler is not None:
                profiler.enable()
            while True:
                event = await reader.next_event(POLL_S)
                if event is None:
                    if reader.group_finished:
                        break
                    continue
                data = event.data
                if data is None:
                    continue  # a checkpoint marker: none are made here
                count += 1
                index_sum += int.from_bytes(data[:INDEX_BYTES])
                wrong_size += len(data) != EVENT_BYTES
                last = time.monotonic()
            if profiler is not None:
                profiler.disable()
                profiler.dump_stats(job.profile_to)
            finished, cpu = time.monotonic(), time.process_time() - cpu
        finally:
            await reader.close()
    return {
        "reader": job.reader,
        "events": count,
        "index_sum": index_sum,
        "wrong_size": wrong_size,
        "started": started,
        "last_event": last,
        "finished": finished,
        "cpu_s": cpu,
        "segments_read": len(reader.segments_read),
    }


# ---- the case ---------------------------------------------------------------------------------------------------
@contextlib.asynccontextmanager
async def _manager(system: Standalone) -> AsyncIterator[StreamManager]:
    connected = await ControllerClient.connect(system.uri, system.client_config)
    async with connected as controller, StreamManager(controller) as manager:
        yield manager


async def write_events(system: Standalone, stream: str, segments: int, events: int) -> float:
    """``events`` events (index, then random bytes) to a new stream of ``segments``; flushed and checked stored.
    Returns the seconds it took."""
    keys = [f"key-{k}" for k in range(1000)]
    tail = random.Random(7).randbytes(EVENT_BYTES - INDEX_BYTES)
    started = time.perf_counter()
    async with _manager(system) as manager:
        await manager.create_scope(SCOPE)
        await manager.create_stream(SCOPE, stream, StreamConfiguration(ScalingPolicy.fixed(segments)))
        async with await manager.create_writer(SCOPE, stream) as writer:
            write = writer.write_event
            for i in range(events):
                await write(i.to_bytes(INDEX_BYTES) + tail, keys[i % 1000])
            await writer.flush()
    await check_stored(system.uri, stream, events, system.client_config)
    return time.perf_counter() - started


async def _make_group(system: Standalone, stream: str, group: str) -> None:
    """A group over ``stream`` from its head to its tail cut now."""
    async with _manager(system) as manager:
        end = await manager.tail_cut(SCOPE, stream)
        await manager.create_reader_group(SCOPE, group, [StreamCut(SCOPE, stream, {})], [end])


async def _delete_group(system: Standalone, group: str) -> None:
    async with _manager(system) as manager:
        await manager.delete_reader_group(SCOPE, group)


def _collect(processes: list[Any], results: Any, timeout_s: float) -> list[dict[str, Any]]:
    """Every process's result; fails on a reader's error, a process that died without one, or ``timeout_s``."""
    found: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout_s
    while len(found) < len(processes):
        try:
            result = results.get(timeout=0.5)
        except queue.Empty:
            dead = [p.name for p in processes if p.exitcode not in (None, 0)]
            if dead:  # its error may still be on its way
                with contextlib.suppress(queue.Empty):
                    late = results.get(timeout=1.0)
                    if "error" in late:
                        raise RuntimeError(f"reader {late['reader']} failed:\n{late['error']}") from None
                raise RuntimeError(f"reader processes {dead} died without a result") from None
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(found)} of {len(processes)} readers done after {timeout_s:.0f} s") from None
            continue
        if "error" in result:
            raise RuntimeError(f"reader {result['reader']} failed:\n{result['error']}")
        found.append(result)
    return found


def group_case(
    system: Standalone, stream: str, events: int, readers: int, round_: int, profile_dir: Path | None
) -> dict[str, Any]:
    """Read all of ``stream`` (``events`` events) with a fresh group of ``readers`` processes; the result row."""
    group = f"{stream}g{readers}r{round_}"
    asyncio.run(_make_group(system, stream, group))
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(readers + 1)
    results = context.Queue()
    jobs = [
        ReaderJob(
            system.uri,
            system.client_config,
            group,
            f"reader-{i}",
            str(profile_dir / f"{group}-reader-{i}.prof") if profile_dir is not None else None,
        )
        for i in range(readers)
    ]
    processes = [context.Process(target=reader_process, args=(job, barrier, results), name=job.reader) for job in jobs]
    spawned = time.monotonic()
    for process in processes:
        process.start()
    try:
        try:
            barrier.wait(SETUP_TIMEOUT_S)
        except threading.BrokenBarrierError:
            _collect(processes, results, 5.0)  # raises the reader's error if one failed
            raise
        started = time.monotonic()
        meter = Meter(system)
        found = _collect(processes, results, SETUP_TIMEOUT_S + events / 2_000)
        measured = meter.done()
        for process in processes:
            process.join(30)
    finally:
        for process in processes:
            if process.is_alive():
                process.kill()
                process.join()
    asyncio.run(_delete_group(system, group))
    counts = [r["events"] for r in found]
    index_sum = sum(r["index_sum"] for r in found)
    wrong_size = sum(r["wrong_size"] for r in found)
    if sum(counts) != events or index_sum != events * (events - 1) // 2 or wrong_size:
        raise AssertionError(
            f"group {group}: {events} events written, read {counts} (sum {sum(counts)}), index sum {index_sum} "
            f"(expected {events * (events - 1) // 2}), {wrong_size} not {EVENT_BYTES} B"
        )
    read_s = max(r["last_event"] for r in found) - started
    done_s = measured["seconds"]
    reader_cpu = sum(r["cpu_s"] for r in found)
    measured["cpu_client"] = round(reader_cpu / done_s, 2)  # the readers, not the idle bench process
    measured["cpu_other"] = round(max(0.0, measured["cpu_other"] - reader_cpu / done_s), 2)
    row: dict[str, Any] = {
        "client": "ours",
        "case": "reader group",
        "stream": stream,
        "group": group,
        "segments": None,
        "readers": readers,
        "round": round_,
        "events": events,
        "setup_s": round(started - spawned, 2),
        "read_s": round(read_s, 2),
        **measured,
        "done_s": round(done_s, 2),
        "events_per_s": round(events / read_s),
        "mb_per_s": mb_per_s(events * EVENT_BYTES, read_s),
        "per_reader": "/".join(str(c) for c in sorted(counts, reverse=True)),
        "reader_events": counts,
        "reader_cpu_s": [round(r["cpu_s"], 2) for r in found],
        "cpu_us_per_event": round(reader_cpu / events * 1e6, 2),
        "profiled": profile_dir is not None,
    }
    del row["seconds"]
    if profile_dir is not None:
        dumps = [job.profile_to for job in jobs if job.profile_to is not None]
        merged = pstats.Stats(*dumps)
        merged.dump_stats(str(profile_dir / f"{group}.prof"))
        row["profile"] = cprofile_top(profile_dir / f"{group}.prof", PROFILE_TOP)
    return row


def run_group(args: argparse.Namespace, system: Standalone, results: dict[str, Any]) -> None:
    """The group case: write the stream once, then one fresh group per reader count (``args.rounds`` rounds,
    the counts in reverse order every other round)."""
    counts = [int(n) for n in args.group_readers.split(",")]
    stream = f"group{args.group_segments}s"
    asyncio.run(system.flush_tier2())
    written_s = asyncio.run(write_events(system, stream, args.group_segments, args.group_events))
    print(f"  group: wrote {args.group_events:,} events to {args.group_segments} segments in {written_s:.1f} s "
          f"({args.group_events / written_s:,.0f} events/s)", flush=True)  # fmt: skip
    profile_dir = args.work / "group-profiles" if args.group_cprofile else None
    if profile_dir is not None:
        profile_dir.mkdir(parents=True, exist_ok=True)
    for round_ in range(1, args.rounds + 1):
        for readers in counts if round_ % 2 else counts[::-1]:
            asyncio.run(system.flush_tier2())
            row = group_case(system, stream, args.group_events, readers, round_, profile_dir)
            row["segments"] = args.group_segments
            results.setdefault("group", []).append(row)
            print(f"  round {round_}, group of {readers}: {row['events_per_s']:,} events/s "
                  f"(per reader {row['per_reader']}; read {row['read_s']} s, done {row['done_s']} s)",
                  flush=True)  # fmt: skip


def report_group(results: dict[str, Any]) -> None:
    """The group case's table (and its profiles, if any)."""
    rows = results.get("group")
    if not rows:
        return
    table(
        f"4. reader group, {EVENT_BYTES} B events, {rows[0]['segments']} segments, one process per reader: "
        f"events/s from all readers online to the last event read (cpu = cores busy, rd = all readers)",
        rows,
        [("readers", "readers"), ("round", "round"), ("events", "events"), ("events_per_s", "events/s"),
         ("mb_per_s", "MB/s"), ("read_s", "read s"), ("done_s", "done s"), ("per_reader", "per reader"),
         ("cpu_us_per_event", "µs/ev"), *[(k, "cpu rd" if k == "cpu_client" else h) for k, h in CPU_COLUMNS],
         ("setup_s", "setup s")],
    )  # fmt: skip
    for row in rows:
        if "profile" in row:
            columns = [("self_s", "self s"), ("cum_s", "cum s"), ("calls", "calls"), ("function", "function")]
            table(f"group of {row['readers']} (round {row['round']}), its readers under cProfile, by self time",
                  row["profile"]["by_self"], columns)  # fmt: skip
