"""End-to-end benchmark: event writers through the controller against ``segstore standalone``.

The system under test is ``segstore standalone`` started as a child process (its controller in that
process, the segment store and ZooKeeper as its children; file Tier-1 with fsync, filesystem Tier-2)
on a temporary data directory under ``--dir`` (a real disk; the script warns on tmpfs). It never runs
in the bench's own process: the official client holds the GIL while it blocks. The bench is the
client process. Events are 100 B (random bytes; the official client's ``write_event_async`` takes
``str`` only, so its events are 100 random ASCII characters). MB = 10^6 bytes of event payload.

Cases:

1. ``official``: the official Pravega Python client (``pravega_client``, Rust underneath) on a stream
   of 4 segments, 100 routing keys.

   * throughput: ``write_event_bytes`` in a loop for ``--seconds``, then ``flush()``; events/s and MB/s
     counted until ``flush`` returns. The writer is made with ``max_inflight_events`` =
     ``--official-inflight`` (default 10,000). What was tried (100 B, 4 segments): ``write_event`` waits
     for each event's ack when ``max_inflight_events`` is 0 (~300 events/s); with N in flight it waits
     only for the oldest ack once N are outstanding, so throughput grows with N (100: ~5k/s, 1,000:
     ~50k/s, 10,000: ~70-115k/s; 100,000: about the same, with more memory and a longer flush).
     ``await write_event_async`` per event in an asyncio loop is far slower (a window of 1,000
     futures: ~11k/s: every ack crosses from a tokio thread into the Python event loop), so it
     serves the latency case only.
   * latency: ``write_event_async`` futures in one asyncio loop with a bounded window (``--windows``,
     default 1 and 100 outstanding): a new event is submitted as soon as the window has room; latency =
     the time its future is seen done by the loop - the time it was submitted.
   * fall: the interleaved measurement described for ours below, with ``write_event_bytes`` over 1,000
     keys, on the same segment counts capped at 64: the official client (0.3.7) cannot write to a stream
     of more segments (README).

2. ``ours``: this repo's client library (``controller_client``: ``StreamManager``, ``EventStreamWriter``).

   * throughput over streams of 1, 10 and 100 fixed segments (``--segments``), 1,000 routing keys (every
     segment gets traffic), ``await writer.write_event(payload, key)`` in a loop for ``--seconds`` (the
     returned futures are not awaited), then ``flush()``; two producers:

     - ``no yield``: the loop alone. ``write_event`` suspends only when the writer's window
       (``EventWriterConfig.max_unacked_bytes``, 16 MiB over all segments) is full; sessions send from the
       event loop, so they send while the producer waits for acknowledgements.
     - ``yield every 1000`` (``--yield-every``): ``await asyncio.sleep(0)`` after every 1,000 events, as a
       producer that awaits its own input would; sessions send while the producer runs.

     Before the measured span one event per key is written and flushed, so every segment's append
     session is set up. The cases run in ``--rounds`` rounds (default 3), the segment counts in reverse
     order every other round; ``block B`` is the average append block (events with their 8 B headers)
     the sessions sent. These rows give each case's own numbers (CPU, blocks, read-back).

   * fall: the issue requires that throughput does not fall as segments grow. This VM's speed drifts
     by ±20 % within seconds to minutes (the same code, 8 s cases a minute apart: 223k and 322k events/s),
     so the ratio of two cases run apart mixes the drift into the effect. The ratio is measured in one
     span per producer: a writer per segment count (``--segments``) takes turns of ``--fall-slice-s``
     (0.5 s) of writing then ``flush()``, ``--fall-slices`` (24) turns each, their order reversed every
     other turn; each stream is then checked to hold exactly the acknowledged events (by its segments'
     lengths); the ratio is the most segments' events/s over the fewest's. That removes the drift, not
     all the noise: from one client process to the next the 100-segment writer's cost per event still
     differs (yield every 1000, 1 vs 100 segments, 22 client processes of the same code against one
     standalone: 0.75-0.91, mean 0.84, sd 0.045), so compare means of several runs (``bench/fall.py``).
     Longer turns do not change it (1 s turns: mean 0.837 over 6 processes, 0.5 s: 0.838 over 8). Below
     0.8 for a producer (or with ``--profile``), the worse producer's largest case runs again for half the
     time with the client under cProfile (which slows it several fold) and, with ``--py-spy PATH``, the
     segment store process sampled by py-spy; the top functions are printed and kept in the JSON.
   * latency: as for the official client (4 segments, 100 keys), with ``write_event`` futures.
   * open loop (``--open-loop-rates``, default 10,000 events/s): ``write_event`` at a fixed offered rate, never
     waiting for acknowledgements; latency from each event's scheduled time (``bench/e2e_open_loop.py``).

   The client's default configuration is used: the pool's ``max_connections_per_endpoint`` (``conns``, 4)
   connections per segment store carry every segment session (each has its own writer id).

CPUs: by default the bench process (the client) runs on the first CPU and the standalone with the
segment store and ZooKeeper on the others (``sched_setaffinity`` of every thread), as a client on another
machine would; ``--no-pin`` lets them share every CPU. Shared, on 2 cores, the segment store's work for
many small blocks takes CPU from the client: measured on 2 vCPUs, the yield-every-1000 producer at 100
segments makes 0.6 of its 1-segment events/s shared and 0.87 pinned.

Before every throughput and latency case the standalone's containers are flushed to Tier-2
(``FlushToStorage``), so no case pays for the Tier-2 backlog the one before it left.

3. Read-back: after every write case, the stream is read with our ``StreamReader`` from the head to
   ``tail_cut`` and its events counted (and their sizes checked); a case whose count differs from the
   number of acknowledged events fails the run. ``read ev/s`` is that reader's rate.

4. ``group``: our reader group (issue 25) of 1, 2 and 4 reader processes (``--group-readers``, each with its own
   ``StreamManager``) reading a stream of 8 segments holding ``--group-events`` events (2M; ``--quick`` 500k) written
   first: a fresh group per case, head to tail cut, all readers online before the clock starts; events/s = events /
   (last event read by any reader - all online). Their counts must add up to the events written, each index once.
   ``cpu rd``: the readers' CPU. Details: :mod:`e2e_group`; ``--group-cprofile`` profiles the readers.

``cpu cli`` / ``cpu ctl`` / ``cpu ss`` / ``ss loop`` / ``cpu zk`` / ``cpu other``: CPU seconds per wall
second (1.0 = one core busy) of the bench process (all its threads: the official client's tokio
threads too), the standalone process (controller), the segment store process, its main thread (the
event loop), ZooKeeper's JVM, and everything else on the machine (a high value: the run was disturbed).
Warnings and errors in the standalone's output and ``<data-dir>/segmentstore.log`` are counted and
the first ones printed.

    .venv/bin/python bench/e2e.py [--quick] [--seconds 10] [--latency-seconds 4] [--segments 1,10,100]
                                  [--windows 1,100] [--yield-every 1000] [--official-inflight 10000]
                                  [--rounds 3] [--fall-slices 24] [--fall-slice-s 0.5]
                                  [--only official,ours,group] [--group-events N] [--group-segments 8]
                                  [--group-readers 1,2,4] [--group-cprofile]
                                  [--profile [no-yield|yield]] [--no-pin] [--tls] [--auth]
                                  [--metrics] [--py-spy /path/to/py-spy] [--no-cprofile]
                                  [--tier1 file,jetstream-r1,jetstream-r3] [--nats-sync always,default]
                                  [--dir /var/tmp] [--out PATH]

The full run takes about 12 minutes on 2 cores, ``--quick`` about 1 minute. Prints one table per case
and writes JSON (default ``bench/results/e2e.json``; ``bench/results/`` is git-ignored).

``--tls`` runs the whole bench twice on each Tier-1 backend, in plain text and then on a standalone with TLS on
both planes (controller ``tls://localhost:PORT``, segment store TLS from the first byte; a throwaway CA made at
run time, see :mod:`e2e_variants`), prints both reports and a table of plain against TLS with the ratio, and
writes both runs and the comparison (``by_tier1``, ``tls_by_tier1``, ``tls_vs_plain``). ``--auth`` does the same
with authentication on in the second run (a password file with one user, delegation tokens checked by the segment
store on every command; our client and the official one log in); with ``--tls`` too, the second run has both
(the JSON keys keep their names). A third run, plain again, follows the secured one: the ratio is against the mean
of the two plain runs, so that whatever the order of the runs costs does not pass for the cost of security.
``--metrics`` likewise runs the second time with Prometheus metrics on (``--metrics-port``; the append path's cost of
the metrics, target at most 3%).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchlib import MB, filesystem_of, positive_int
from e2e_common import (
    EVENT_BYTES,
    FRAME_HEADER,
    SCOPE,
    check_read_back,
    check_stored,
    count_events,
    fall_result,
    latency_row,
    ours_writer,
    payload_bytes,
    throughput_row,
    turn_order,
    windowed,
)
from e2e_group import add_arguments as add_group_arguments
from e2e_group import report_group, run_group
from e2e_official import official_fall, official_latency, official_throughput
from e2e_open_loop import ours_open_loop
from e2e_report import report
from e2e_system import Auth, Meter, Standalone, pin_process
from e2e_variants import (
    add_tier1_arguments,
    auth_flags,
    compare_tier1,
    compare_tls,
    tier1_backends,
    tier1_flags,
    tls_flags,
)
from profiles import cprofile_top, py_spy, pyspy_top

from controller_client import ControllerClient, EventStreamWriter, StreamManager
from segment_store.client.config import ClientConfig
from segstore_shared.coordination.zookeeper_server import free_port

FALL_RATIO = 0.8
PROFILE_TOP = 12
REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"


# ---- 2. our client library ---------------------------------------------------------------------------------
async def produce(
    writer: EventStreamWriter, payload: bytes, keys: list[str], n: int, until: float, yield_every: int
) -> int:
    """Our producer: ``write_event`` over ``keys`` in turn, event ``n`` first, until ``until`` (perf_counter), the
    returned futures not awaited; ``asyncio.sleep(0)`` after every ``yield_every`` events (0: never), checking the
    clock every 1,000 events then. Returns the number of the next event."""
    write = writer.write_event
    per_round = yield_every or 1000
    while time.perf_counter() < until:
        for _ in range(per_round):
            await write(payload, keys[n % len(keys)])
            n += 1
        if yield_every:
            await asyncio.sleep(0)
    return n


def blocks_sent(writer: EventStreamWriter) -> int:
    """Append blocks sent by all segment sessions of ``writer`` (its private sinks: a bench-only look)."""
    return sum(sink.writer.blocks_sent for sink in getattr(writer, "_sinks", {}).values())


async def ours_throughput(
    system: Standalone,
    controller: ControllerClient,
    segments: int,
    seconds: float,
    yield_every: int,
    profiled: str | None = None,
    cprofile: bool = True,
    round_: int = 1,
) -> dict[str, Any]:
    """``yield_every``: events between ``asyncio.sleep(0)`` (0: never). ``profiled``: a path prefix; the
    client runs under cProfile unless ``cprofile`` is false (then the case runs at full speed, for py-spy)."""
    keys = [f"key-{k}" for k in range(1000)]
    name = f"ours{segments}y{yield_every}r{round_}" + ("profiled" if profiled else "")  # a new stream per case
    stream = name
    manager, writer = await ours_writer(controller, name, segments, keys)
    payload = payload_bytes()
    profiler = cProfile.Profile()
    flushed = 0.0
    try:

        async def run(for_s: float) -> int:
            nonlocal flushed
            n = await produce(writer, payload, keys, 0, time.perf_counter() + for_s, yield_every)
            flushed = time.perf_counter()
            await writer.flush()
            flushed = time.perf_counter() - flushed
            return n

        warm = len(keys) + await run(min(0.5, seconds / 4))
        blocks_before = blocks_sent(writer)
        meter = Meter(system)
        if profiled and cprofile:
            profiler.enable()
        count = await run(seconds)
        profiler.disable()
        measured = meter.done()
        blocks = blocks_sent(writer) - blocks_before
        await writer.close()
    finally:
        await manager.close()
    producer = f"write_event, yield every {yield_every}" if yield_every else "write_event, no yield"
    row = throughput_row("ours", producer, stream, segments, len(keys), count, measured)
    row["yield_every"] = yield_every
    row["flush_s"] = round(flushed, 2)
    row["avg_block_bytes"] = round(count * (EVENT_BYTES + FRAME_HEADER) / max(1, blocks))
    row["pool_connections"] = ClientConfig().pool.max_connections_per_endpoint
    if profiled and cprofile:
        profiler.dump_stats(f"{profiled}-client.prof")
    row.update(await count_events(system.uri, stream, system.client_config))
    check_read_back(row, warm + count)
    return row


async def ours_fall(
    system: Standalone,
    controller: ControllerClient,
    segment_counts: list[int],
    yield_every: int,
    slices: int,
    slice_s: float,
    prefix: str = "fall",
) -> dict[str, Any]:
    """The fall ratio measured in one span: a writer per segment count (set up as in ``ours_writer``, streams
    named ``<prefix><segments>y<yield_every>``) and ``slices`` turns each of ``slice_s`` seconds of writing then
    ``flush()``, the writers taking turns (``turn_order``). Returns events/s per count over all its turns and
    the ratio of the most segments to the fewest; checks that each stream holds exactly the acknowledged
    events (its segments' lengths)."""
    keys = [f"key-{k}" for k in range(1000)]
    payload = payload_bytes()
    writers: dict[int, tuple[StreamManager, EventStreamWriter]] = {}
    events = dict.fromkeys(segment_counts, 0)
    seconds = dict.fromkeys(segment_counts, 0.0)
    try:
        for segments in segment_counts:
            writers[segments] = await ours_writer(controller, f"{prefix}{segments}y{yield_every}", segments, keys)
        for segments in turn_order(segment_counts, slices):
            writer = writers[segments][1]
            started = time.perf_counter()
            events[segments] = await produce(writer, payload, keys, events[segments], started + slice_s, yield_every)
            await writer.flush()
            seconds[segments] += time.perf_counter() - started
        for segments, (_, writer) in writers.items():
            await writer.close()
            stream = f"{prefix}{segments}y{yield_every}"
            await check_stored(system.uri, stream, events[segments] + len(keys), system.client_config)
    finally:
        for manager, _ in writers.values():
            with contextlib.suppress(Exception):
                await manager.close()
    producer = f"write_event, yield every {yield_every}" if yield_every else "write_event, no yield"
    return {"yield_every": yield_every, **fall_result("ours", producer, slices, slice_s, events, seconds)}


async def ours_latency(system: Standalone, controller: ControllerClient, seconds: float, window: int):
    keys = [f"key-{k}" for k in range(100)]
    stream = f"ourslat{window}"
    manager, writer = await ours_writer(controller, stream, 4, keys)
    payload = payload_bytes()
    try:

        async def submit(i: int) -> asyncio.Future[Any]:
            return await writer.write_event(payload, keys[i % 100])

        warm = len(keys) + len(await windowed(submit, min(0.5, seconds / 4), window))
        meter = Meter(system)
        latencies = await windowed(submit, seconds, window)
        measured = meter.done()
        await writer.close()
    finally:
        await manager.close()
    row = latency_row("ours", window, latencies, measured)
    row["stream"] = stream
    row.update(await count_events(system.uri, stream, system.client_config))
    check_read_back(row, warm + len(latencies))
    return row


async def run_ours(args: argparse.Namespace, system: Standalone, results: dict[str, Any]) -> None:
    segment_counts = [int(s) for s in args.segments.split(",")]
    async with await ControllerClient.connect(system.uri, system.client_config) as controller:
        async with StreamManager(controller) as manager:
            await manager.create_scope(SCOPE)
        rates: dict[tuple[int, int], list[int]] = {}
        for round_ in range(1, args.rounds + 1):
            order = segment_counts if round_ % 2 else segment_counts[::-1]  # alternate: drift hits both ends
            for yield_every in (0, args.yield_every):
                for segments in order:
                    await system.flush_tier2()
                    row = await ours_throughput(system, controller, segments, args.seconds, yield_every, round_=round_)
                    row["round"] = round_
                    results["throughput"].append(row)
                    rates.setdefault((yield_every, segments), []).append(row["events_per_s"])
                    print(f"  round {round_}, {row['producer']}, {segments} segments: "
                          f"{row['events_per_s']:,} events/s", flush=True)  # fmt: skip
        medians = {case: statistics.median(found) for case, found in rates.items()}
        results["ours_median_events_per_s"] = {f"{y}/{n}": round(v) for (y, n), v in medians.items()}
        results["ours_largest_over_smallest"] = {
            str(y): round(medians[(y, segment_counts[-1])] / medians[(y, segment_counts[0])], 2)
            for y in (0, args.yield_every)
        }
        falls: dict[int, float] = {}
        for yield_every in (0, args.yield_every):
            await system.flush_tier2()
            fall = await ours_fall(system, controller, segment_counts, yield_every, args.fall_slices, args.fall_slice_s)
            results.setdefault("fall", []).append(fall)
            falls[yield_every] = fall["ratio"]
            print(f"  interleaved, yield every {yield_every}: {fall['events_per_s']} events/s, "
                  f"ratio {fall['ratio']}", flush=True)  # fmt: skip
        worst = min(falls, key=lambda k: falls[k])
        if args.profile in ("no-yield", "yield"):
            worst = 0 if args.profile == "no-yield" else args.yield_every
        if falls[worst] < FALL_RATIO or args.profile:
            segments = segment_counts[-1]
            prefix = args.work / f"e2e-ours-{segments}seg-yield{worst}"  # deleted with the data dir
            out = Path(f"{prefix}-segmentstore.pyspy.txt")
            started = time.perf_counter()
            with py_spy(args.py_spy, system.segmentstore_pid, out):
                row = await ours_throughput(
                    system, controller, segments, args.seconds / 2, worst, str(prefix), not args.no_cprofile
                )
            spied = time.perf_counter() - started
            results["profile"] = {
                "case": row,
                "client": None if args.no_cprofile else cprofile_top(Path(f"{prefix}-client.prof"), PROFILE_TOP),
                "segmentstore": pyspy_top(out, spied, PROFILE_TOP) if args.py_spy else None,
            }
        for window in (int(w) for w in args.windows.split(",")):
            await system.flush_tier2()
            results["latency"].append(await ours_latency(system, controller, args.latency_seconds, window))
            print(f"  ours latency, window {window}: p99 {results['latency'][-1]['p99_ms']} ms", flush=True)
        for rate in (int(r) for r in args.open_loop_rates.split(",") if r.strip()):
            await system.flush_tier2()
            row = await ours_open_loop(system, controller, rate, args.latency_seconds)
            results.setdefault("open_loop", []).append(row)
            print(f"  ours open loop, {rate:,} events/s: p99 {row['p99_ms']} ms", flush=True)


# ---- driver ----------------------------------------------------------------------------------------------
def run(
    args: argparse.Namespace,
    data_dir: Path,
    extra_args: tuple[str, ...] = (),
    trust_store: Path | None = None,
    auth: Auth | None = None,
) -> dict[str, Any]:
    """The whole bench on one standalone (``trust_store``: it runs with TLS, ``auth``: with authentication;
    ``extra_args`` has their flags)."""
    only = set(args.only.split(",")) if args.only else {"official", "ours", "group"}
    system = Standalone(data_dir, extra_args, trust_store, auth)
    results: dict[str, Any] = {"throughput": [], "latency": [], "rounds": args.rounds}
    try:
        results["standalone_start_s"] = round(system.start(), 1)
        cpus = sorted(os.sched_getaffinity(0))
        if args.pin and len(cpus) >= 2:  # the client on one core, the system on the others: separate machines
            pin_process(0, {cpus[0]})
            system.pin(set(cpus[1:]))
            results["pinned"] = {"client": [cpus[0]], "system": cpus[1:]}
        print(f"standalone ready in {results['standalone_start_s']} s (pid {system.pid}, segment store "
              f"{system.segmentstore_pid}, zookeeper {system.zookeeper_pid})", flush=True)  # fmt: skip
        if "official" in only:
            results["throughput"].append(official_throughput(system, args.seconds, args.official_inflight))
            print(f"  official: {results['throughput'][-1]['events_per_s']:,} events/s", flush=True)
            for window in (int(w) for w in args.windows.split(",")):
                asyncio.run(system.flush_tier2())
                results["latency"].append(asyncio.run(official_latency(system, args.latency_seconds, window)))
                print(f"  official latency, window {window}: p99 {results['latency'][-1]['p99_ms']} ms", flush=True)
            asyncio.run(system.flush_tier2())
            fall = official_fall(
                system,
                [int(s) for s in args.segments.split(",")],
                args.fall_slices,
                args.fall_slice_s,
                args.official_inflight,
            )
            results.setdefault("fall", []).append(fall)
            print(f"  official, interleaved: {fall['events_per_s']} events/s, ratio {fall['ratio']}", flush=True)
        if "ours" in only:
            asyncio.run(run_ours(args, system, results))
        if "group" in only:
            run_group(args, system, results)
    except BaseException:
        print("standalone output tail:\n" + "\n".join(system.output[-30:]), file=sys.stderr)
        with contextlib.suppress(OSError):
            log = (data_dir / "segmentstore.log").read_text(errors="replace")
            print(f"segmentstore.log tail:\n{log[-3000:]}", file=sys.stderr)
        raise
    finally:
        system.stop()
        results["problems"] = system.problems()
    return results


def report_run(found: dict[str, Any]) -> None:
    report(found, EVENT_BYTES, FALL_RATIO)
    report_group(found)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smoke run: 2 s throughput cases, 1 s latency cases")
    parser.add_argument("--seconds", type=float, help="duration of each throughput case (default 10)")
    parser.add_argument("--latency-seconds", type=float, help="duration of each latency case (default 5)")
    parser.add_argument("--segments", default="1,10,100", help="segment counts of our throughput cases")
    parser.add_argument("--windows", default="1,100", help="outstanding events of the latency cases")
    parser.add_argument(
        "--open-loop-rates", default="10000", help="events/s offered in our open-loop latency cases ('' for none)"
    )
    parser.add_argument(
        "--rounds",
        type=positive_int,
        help="rounds of our throughput cases, segment order reversed every other round (default 3; --quick 1)",
    )
    parser.add_argument(
        "--fall-slices",
        type=positive_int,
        help="turns of each writer in the interleaved fall measurement (default 24; --quick 4)",
    )
    parser.add_argument(
        "--fall-slice-s", type=float, default=0.5, help="seconds of one turn of the fall measurement (default 0.5)"
    )
    parser.add_argument(
        "--yield-every", type=int, default=1000, help="events between yields of our second producer (default 1000)"
    )
    parser.add_argument(
        "--official-inflight", type=int, default=10_000, help="max_inflight_events of the official writer"
    )
    parser.add_argument(
        "--no-pin",
        dest="pin",
        action="store_false",
        help="let the client and the system share every CPU (default: the client on the first, the system on the rest)",
    )
    parser.add_argument("--only", help="comma-separated: official,ours,group (default all)")
    add_group_arguments(parser)
    add_tier1_arguments(parser)
    parser.add_argument(
        "--tls",
        action="store_true",
        help="run everything twice, in plain text and with TLS on both planes (a throwaway CA), and compare",
    )
    parser.add_argument(
        "--auth",
        action="store_true",
        help="run everything twice, without and with authentication (users, delegation tokens checked on every "
        "command), and compare; with --tls the second run has both",
    )
    parser.add_argument(
        "--metrics",
        action="store_true",
        help="run everything twice, without and with Prometheus metrics on (--metrics-port), and compare",
    )
    parser.add_argument(
        "--profile",
        nargs="?",
        const="worse",
        choices=["worse", "no-yield", "yield"],
        help="profile our largest case even if it does not fall (of the worse producer, or of the one named)",
    )
    parser.add_argument("--py-spy", help="path of a py-spy binary: sample the segment store in the profiled case")
    parser.add_argument(
        "--no-cprofile", action="store_true", help="run the profiled case without cProfile (py-spy only, full speed)"
    )
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="where the data directory lives (a real disk)")
    parser.add_argument("--out", type=Path, default=RESULTS / "e2e.json", help="JSON output")
    args = parser.parse_args()
    for key, quick, full in (
        ("seconds", 2.0, 10.0), ("latency_seconds", 1.0, 4.0), ("rounds", 1, 3), ("fall_slices", 4, 24),
        ("group_events", 500_000, 2_000_000),
    ):  # fmt: skip
        if getattr(args, key) is None:
            setattr(args, key, quick if args.quick else full)
    fs_type = filesystem_of(Path(args.dir))
    print(f"segstore standalone with data under {args.dir} ({fs_type}); {os.cpu_count()} CPUs; "
          f"Python {platform.python_version()}; client: this process", flush=True)  # fmt: skip
    if fs_type in ("tmpfs", "ramfs"):
        print(f"warning: {args.dir} is {fs_type}, not a disk; fsync costs nothing here (use --dir)", file=sys.stderr)
    load_before = os.getloadavg()
    if load_before[0] > 0.5:
        print(f"warning: load average {load_before[0]:.2f} before starting; something else uses the CPUs", flush=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    runs = tier1_backends(args)
    backends = [backend for backend, _ in runs]
    variants = (("TLS", args.tls), ("authentication", args.auth), ("metrics", args.metrics))
    secured = " and ".join(name for name, on in variants if on)
    by_tier1: dict[str, dict[str, Any]] = {}
    tls_by_tier1: dict[str, dict[str, Any]] = {}
    plain_after: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-e2e-", dir=args.dir) as tmp:
        args.work = Path(tmp)
        for backend, sync in runs:
            print(f"\n== Tier-1: {backend}", flush=True)
            with tier1_flags(backend, args.work / f"nats-{backend}", sync) as flags:
                by_tier1[backend] = run(args, args.work / f"data-{backend}", flags)
            if secured:
                print(f"\n== Tier-1: {backend}, {secured}", flush=True)
                certificates, ca = tls_flags(args.work / "certs") if args.tls else ((), None)
                users, auth = auth_flags(args.work / "auth") if args.auth else ((), None)
                metrics = ("--metrics-port", str(free_port())) if args.metrics else ()
                with tier1_flags(backend, args.work / f"nats-{backend}-secured", sync) as flags:
                    data = args.work / f"data-{backend}-secured"
                    tls_by_tier1[backend] = run(args, data, (*flags, *certificates, *users, *metrics), ca, auth)
                print(f"\n== Tier-1: {backend}, plain again (so that the order of the runs is no cost)", flush=True)
                with tier1_flags(backend, args.work / f"nats-{backend}-again", sync) as flags:
                    plain_after[backend] = run(args, args.work / f"data-{backend}-again", flags)
    for backend, found in by_tier1.items():
        print(f"\n== Tier-1: {backend}")
        report_run(found)
    for backend, found in tls_by_tier1.items():
        print(f"\n== Tier-1: {backend}, {secured}")
        report_run(found)
    results: dict[str, Any] = by_tier1[backends[0]] if len(backends) == 1 else {"by_tier1": by_tier1}
    if len(backends) > 1:
        compare_tier1(by_tier1)
    if secured:
        comparison = compare_tls(by_tier1, tls_by_tier1, secured, plain_after)
        results = {
            "by_tier1": by_tier1,
            "tls_by_tier1": tls_by_tier1,
            "plain_after_by_tier1": plain_after,
            "tls_vs_plain": comparison,
        }
    total_s = time.perf_counter() - started
    load_after = os.getloadavg()
    print(f"\ntotal {total_s:.0f} s; load average before {load_before[0]:.2f}, after {load_after[0]:.2f}")
    settings = {k: v for k, v in vars(args).items() if k not in ("work", "out")}  # every flag, as given
    document = {
        "benchmark": "e2e",
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "dir": args.dir,
        "filesystem": fs_type,
        "event_bytes": EVENT_BYTES,
        "megabyte": MB,
        "quick": args.quick,
        "settings": settings,
        "total_s": round(total_s, 1),
        "load_average_before_after": [round(load_before[0], 2), round(load_after[0], 2)],
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(document, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
