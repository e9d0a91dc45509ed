"""Does our writer's throughput fall as segments grow? The interleaved measurement of ``bench/e2e.py``,
repeated in several client processes against one standalone.

Why several processes: the interleaved measurement (``e2e.ours_fall``: a writer per segment count, turns of
writing then ``flush()``, the order reversed every other turn) removes the machine's drift, but not the
difference from one client process to the next: the same code's ratio of 100 to 1 segment spread 0.75-0.93
over 22 processes (sd ~0.045), so one process says little and the mean of several says what the code does.

``segstore standalone`` runs as ``bench/e2e.py`` starts it (the client on the first CPU, the system on the
others unless ``--no-pin``). Then ``--processes`` client processes run one after another, each a fresh
interpreter pinned like the bench, each measuring both producers of ``bench/e2e.py`` (no yield, and
``asyncio.sleep(0)`` every ``--yield-every`` events) over ``--segments`` with ``--slices`` turns of
``--slice-s`` seconds, on its own streams, each checked to hold exactly the acknowledged events, then sealed
and deleted (so every process meets a segment store holding only its own segments). The table
shows every process's ratio (most segments' events/s over the fewest's) and, per producer, their mean,
standard deviation, lowest and highest.

    .venv/bin/python bench/fall.py [--processes 6] [--segments 1,100] [--slices 16] [--slice-s 0.5]
                                   [--yield-every 1000] [--no-pin] [--dir /var/tmp] [--out PATH]

About 40 s per process with the defaults, plus the standalone's start. Writes JSON (default
``bench/results/fall.json``; ``bench/results/`` is git-ignored).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchlib import table
from e2e import FALL_RATIO, ours_fall
from e2e_common import SCOPE
from e2e_system import Standalone, pin_process

from controller_client import ControllerClient, StreamManager

RESULTS = Path(__file__).resolve().parent / "results"


async def _child(uri: str, tag: str, segments: list[int], yield_every: int, slices: int, slice_s: float) -> None:
    """One client process: both producers' interleaved fall, printed as one JSON line."""
    rows = []
    async with await ControllerClient.connect(uri) as controller:
        for producer in (0, yield_every):
            rows.append(await ours_fall(uri, controller, segments, producer, slices, slice_s, prefix=f"{tag}s"))
    print(json.dumps(rows))


async def _create_scope(uri: str) -> None:
    async with await ControllerClient.connect(uri) as controller, StreamManager(controller) as manager:
        await manager.create_scope(SCOPE)


async def _delete_streams(uri: str, prefix: str) -> int:
    """Seal and delete the streams named ``prefix``... (one client process's): the next process then
    measures against a segment store holding only its own segments. Returns how many went."""
    async with await ControllerClient.connect(uri) as controller, StreamManager(controller) as manager:
        streams = [s for s in await manager.list_streams(SCOPE) if s.startswith(prefix)]
        for stream in streams:
            await manager.seal_stream(SCOPE, stream)
            await manager.delete_stream(SCOPE, stream)
    return len(streams)


def run(args: argparse.Namespace, data_dir: Path) -> list[dict[str, Any]]:
    system = Standalone(data_dir)
    rows: list[dict[str, Any]] = []
    try:
        system.start()
        cpus = sorted(os.sched_getaffinity(0))
        pin = args.pin and len(cpus) >= 2
        if pin:
            system.pin(set(cpus[1:]))
        asyncio.run(_create_scope(system.uri))
        for index in range(args.processes):
            command = [sys.executable, __file__, "--child", system.uri, "--tag", f"p{index}",
                       "--segments", args.segments, "--slices", str(args.slices), "--slice-s", str(args.slice_s),
                       "--yield-every", str(args.yield_every)]  # fmt: skip
            child = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
            if pin:
                pin_process(child.pid, {cpus[0]})
            out, _ = child.communicate(timeout=600)
            if child.returncode != 0:
                raise RuntimeError(f"client process {index} failed (exit {child.returncode})")
            for fall in json.loads(out.strip().splitlines()[-1]):
                rows.append({"process": index, **fall})
                print(f"  process {index}, {fall['producer']}: {fall['events_per_s']} events/s, "
                      f"ratio {fall['ratio']}", flush=True)  # fmt: skip
            expected = 2 * len(args.segments.split(","))  # a stream per producer and segment count
            deleted = asyncio.run(_delete_streams(system.uri, f"p{index}s"))
            if deleted != expected:
                raise RuntimeError(f"client process {index}: deleted {deleted} streams, expected {expected}")
    finally:
        system.stop()
    return rows


def summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for producer in dict.fromkeys(row["producer"] for row in rows):
        ratios = [row["ratio"] for row in rows if row["producer"] == producer]
        out.append({
            "producer": producer, "processes": len(ratios), "mean": round(statistics.mean(ratios), 3),
            "sd": round(statistics.pstdev(ratios), 3), "lowest": min(ratios), "highest": max(ratios),
            "verdict": "holds" if statistics.mean(ratios) >= FALL_RATIO else "falls",
        })  # fmt: skip
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--processes", type=int, default=6, help="client processes, one after another")
    parser.add_argument("--segments", default="1,100", help="comma-separated segment counts")
    parser.add_argument("--slices", type=int, default=16, help="turns per writer in each process")
    parser.add_argument("--slice-s", type=float, default=0.5, help="seconds of writing per turn")
    parser.add_argument("--yield-every", type=int, default=1000, help="the yielding producer's events per yield")
    parser.add_argument("--no-pin", dest="pin", action="store_false", help="let client and system share CPUs")
    parser.add_argument("--dir", default=None, help="parent of the standalone's data directory")
    parser.add_argument("--out", type=Path, default=RESULTS / "fall.json", help="JSON output")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--tag", default="p", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.processes < 1 or args.slices < 1 or args.slice_s <= 0:
        parser.error("--processes and --slices must be at least 1 and --slice-s positive")
    segments = sorted({int(s) for s in args.segments.split(",")})
    if len(segments) < 2:
        parser.error("--segments: give at least two counts")
    if args.child:
        asyncio.run(_child(args.child, args.tag, segments, args.yield_every, args.slices, args.slice_s))
        return
    args.segments = ",".join(map(str, segments))
    with tempfile.TemporaryDirectory(prefix="bench-fall-", dir=args.dir) as tmp:
        rows = run(args, Path(tmp))
    columns = [("process", "process"), ("producer", "producer"), ("events_per_s", "events/s"), ("ratio", "ratio")]
    table("interleaved fall per client process (events/s of the most segments / of the fewest)", rows, columns)
    totals = summary(rows)
    table(f"over {args.processes} processes (the line is {FALL_RATIO})", totals,
          [("producer", "producer"), ("processes", "processes"), ("mean", "mean"), ("sd", "sd"),
           ("lowest", "lowest"), ("highest", "highest"), ("verdict", "verdict")])  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "rows": rows,
                                    "summary": totals}, indent=2))  # fmt: skip
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
