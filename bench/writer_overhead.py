"""The event writer against the segment writer under it: what routing and batching per event cost (issue 39 item 5).

``EventStreamWriter.write_event(payload, key)`` routes each event to its segment by key, queues it and keeps the
acknowledgement bookkeeping of a stream writer; ``SegmentWriter.write(payload)`` appends an event to one
segment's session and nothing else. Both run against ``segstore standalone`` (a child process, as in
``bench/e2e.py``) on one stream per segment count (``--segments``, default 1 and 100 fixed segments):

- ``event writer``: ``await writer.write_event(payload, key)`` over 1,000 routing keys, ``--events`` events, then
  ``flush()``;
- ``segment writer``: one ``SegmentWriter`` per segment of the same stream, ``await write(payload)`` on each in
  turn, ``--events`` events, then ``flush()`` of each.

Events are 100 B. Each round runs both cases back to back, the order reversed every other round
(``--rounds``, default 8): this VM's speed drifts by 20-60 % between minutes, so a ratio is taken within a
round and the table gives the median of the rounds' ratios, never a ratio of two medians taken apart.

Two measures: ``events/s`` (wall time from the first write until ``flush`` returns: what a producer sees) and
``client µs/event`` (the client process's CPU time over the write loop, before the flush: the per-event Python
work the issue is about). The issue's targets: event writer ≥ 0.9x the segment writer's events/s on one
segment, ≥ 0.8x on 100.

Usage::

    .venv/bin/python bench/writer_overhead.py [--segments 1,100] [--events 200000] [--rounds 8] [--dir /tmp]

Prints a table and writes ``bench/results/writer_overhead.json`` (``--out``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import filesystem_of, positive_int, table
from e2e_system import Standalone

from controller_client import ControllerClient, ScalingPolicy, StreamConfiguration, StreamManager
from controller_client.model import qualified_segment_name
from segment_store.client import ClientConfig, SegmentClient

SCOPE = "overhead"
KEYS = 1000
EVENT_BYTES = 100
RESULTS = Path(__file__).resolve().parent / "results"
CASES = ("event writer", "segment writer")


async def event_writer_round(writer: Any, payload: bytes, keys: list[str], events: int) -> tuple[float, float]:
    write = writer.write_event
    started, cpu = time.perf_counter(), time.process_time()
    for i in range(events):
        await write(payload, keys[i % KEYS])
    cpu = time.process_time() - cpu
    await writer.flush()
    return events / (time.perf_counter() - started), cpu / events * 1e6


async def segment_writer_round(writers: list[Any], payload: bytes, events: int) -> tuple[float, float]:
    writes = [writer.write for writer in writers]
    count = len(writes)
    started, cpu = time.perf_counter(), time.process_time()
    for i in range(events):
        await writes[i % count](payload)
    cpu = time.process_time() - cpu
    for writer in writers:
        await writer.flush()
    return events / (time.perf_counter() - started), cpu / events * 1e6


async def measure(system: Standalone, segments: int, events: int, rounds: int) -> dict[str, Any]:
    """Both cases on a stream of ``segments`` fixed segments, ``rounds`` times, alternating their order."""
    payload = os.urandom(EVENT_BYTES)
    keys = [f"key-{k}" for k in range(KEYS)]
    stream = f"s{segments}"
    per_round: dict[str, list[tuple[float, float]]] = {case: [] for case in CASES}
    async with await ControllerClient.connect(system.uri) as controller:
        manager = StreamManager(controller)
        await manager.create_stream(SCOPE, stream, StreamConfiguration(ScalingPolicy.fixed(segments)))
        writer = await manager.create_writer(SCOPE, stream)
        for key in keys:  # every segment's session set up before the measured spans
            await writer.write_event(payload, key)
        await writer.flush()
        async with SegmentClient(("127.0.0.1", system.segmentstore_port), ClientConfig()) as client:
            writers = [
                client.writer(qualified_segment_name(SCOPE, stream, s.segment_id)) for s in writer.current_segments()
            ]
            for each in writers:
                await each.open()
            for round_number in range(rounds):
                order = CASES if round_number % 2 == 0 else CASES[::-1]
                for case in order:
                    if case == "event writer":
                        result = await event_writer_round(writer, payload, keys, events)
                    else:
                        result = await segment_writer_round(writers, payload, events)
                    per_round[case].append(result)
            for each in writers:
                await each.close()
        await writer.close()
        await manager.close()
    rate_ratios = [e[0] / s[0] for e, s in zip(per_round["event writer"], per_round["segment writer"], strict=True)]
    cpu_ratios = [s[1] / e[1] for e, s in zip(per_round["event writer"], per_round["segment writer"], strict=True)]
    rows = [
        {
            "segments": segments,
            "case": case,
            "median_events_per_s": round(statistics.median(r[0] for r in results)),
            "max_events_per_s": round(max(r[0] for r in results)),
            "median_client_us_per_event": round(statistics.median(r[1] for r in results), 2),
            "min_client_us_per_event": round(min(r[1] for r in results), 2),
        }
        for case, results in per_round.items()
    ]
    return {
        "segments": segments,
        "rows": rows,
        "rounds": {case: [[round(r[0]), round(r[1], 3)] for r in results] for case, results in per_round.items()},
        "ratio_events_per_s_median": round(statistics.median(rate_ratios), 3),
        "ratio_events_per_s_range": [round(min(rate_ratios), 3), round(max(rate_ratios), 3)],
        "ratio_client_cpu_median": round(statistics.median(cpu_ratios), 3),
    }


async def run(system: Standalone, segment_counts: list[int], events: int, rounds: int) -> list[dict[str, Any]]:
    async with await ControllerClient.connect(system.uri) as controller:
        manager = StreamManager(controller)
        await manager.create_scope(SCOPE)
        await manager.close()
    return [await measure(system, segments, events, rounds) for segments in segment_counts]


def segment_list(text: str) -> list[int]:
    return [positive_int(part) for part in text.split(",")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--segments", type=segment_list, default=[1, 100], help="segment counts (default 1,100)")
    parser.add_argument("--events", type=positive_int, default=200_000, help="events per case and round")
    parser.add_argument("--rounds", type=positive_int, default=8, help="rounds (each: both cases)")
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()), help="where the data dir goes")
    parser.add_argument("--out", type=Path, default=RESULTS / "writer_overhead.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="bench-overhead-") as directory:
        system = Standalone(Path(directory) / "data")
        system.start()
        try:
            found = asyncio.run(run(system, args.segments, args.events, args.rounds))
        finally:
            system.stop()
    rows = [row for result in found for row in result["rows"]]
    table(
        f"event writer vs segment writer, {EVENT_BYTES} B events, {args.events:,} per case, {args.rounds} rounds",
        rows,
        [("segments", "segments"), ("case", "case"), ("median_events_per_s", "events/s (median)"),
         ("max_events_per_s", "events/s (max)"), ("median_client_us_per_event", "client µs/event (median)"),
         ("min_client_us_per_event", "client µs/event (min)")],
    )  # fmt: skip
    table(
        "event writer / segment writer, median of the rounds' ratios (targets: >= 0.9 on 1 segment, >= 0.8 on 100)",
        [{"segments": r["segments"], "rate": r["ratio_events_per_s_median"],
          "range": "-".join(str(x) for x in r["ratio_events_per_s_range"]), "cpu": r["ratio_client_cpu_median"]}
         for r in found],
        [("segments", "segments"), ("rate", "events/s ratio"), ("range", "rounds' range"),
         ("cpu", "client CPU ratio (segment/event)")],
    )  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    settings = {"segments": args.segments, "events": args.events, "rounds": args.rounds, "event_bytes": EVENT_BYTES,
                "filesystem": filesystem_of(args.dir), "load_average": os.getloadavg()}  # fmt: skip
    args.out.write_text(json.dumps({"settings": settings, "results": found}, indent=2) + "\n")
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
