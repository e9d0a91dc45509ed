"""How late Parquet chunk encoding makes an event loop: in a thread of the loop's process, or in a worker process.

One process runs an asyncio loop with a 1 ms timer (the segment store's loop, reduced to its clock) and records
how late each tick fires while chunks are encoded through each encoder of ``segment_store/storage/chunk_encoder.py``
(``thread``: ``ThreadChunkEncoder``; ``process``: ``ProcessChunkEncoder(1)``, started before measuring) and while
nothing is encoded (``idle``: the machine's own noise). Each round runs every variant once, in an order rotated
per round, each encoding ``--chunks`` chunks of ``--chunk-mb`` MB of framed 100 B events back to back (as a
storage writer flushing a backlog). Per variant: the timer's lateness p50/p99/p99.9/max over all its rounds, the
share of ticks 5 ms or more late, and the encode throughput (MB of segment data per second, one encode at a time).
The machine is shared: the load average is printed before and after; compare variants of the same run only.

    .venv/bin/python bench/encode_stall.py [--rounds 5] [--chunks 4] [--chunk-mb 8] [--out PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import struct
import time
from pathlib import Path
from typing import Any

import numpy as np
from benchlib import table

from segment_store.storage.chunk_encoder import ChunkEncoder, ProcessChunkEncoder, ThreadChunkEncoder
from segment_store.storage.format.parquet_chunk import DEFAULT_COMPRESSION

RESULTS = Path(__file__).resolve().parent / "results"
TICK_S = 0.001


def chunk_of_events(megabytes: float, event_bytes: int = 100) -> bytes:
    """Framed events (8-byte header) of random payloads (as ``bench/wire.py`` writes), ``megabytes`` MB in all."""
    count = int(megabytes * 1e6 / (8 + event_bytes))
    frames = np.empty((count, 8 + event_bytes), dtype=np.uint8)
    frames[:, :8] = np.frombuffer(struct.pack(">ii", 0, event_bytes), dtype=np.uint8)
    frames[:, 8:] = np.random.default_rng(7).integers(0, 256, (count, event_bytes), dtype=np.uint8)
    return frames.tobytes()


async def ticks_during(work: Any) -> tuple[list[float], float]:
    """Lateness (s) of each 1 ms tick while ``work`` (a coroutine) runs, and its seconds."""
    late: list[float] = []
    done = asyncio.Event()

    async def clock() -> None:
        while not done.is_set():
            due = time.perf_counter() + TICK_S
            await asyncio.sleep(TICK_S)
            late.append(max(0.0, time.perf_counter() - due))

    ticker = asyncio.create_task(clock())
    started = time.perf_counter()
    await work
    elapsed = time.perf_counter() - started
    done.set()
    await ticker
    return late, elapsed


async def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    data = chunk_of_events(args.chunk_mb)
    process = ProcessChunkEncoder(1)
    await process.start()
    encoders: dict[str, ChunkEncoder | None] = {"idle": None, "thread": ThreadChunkEncoder(), "process": process}
    lateness: dict[str, list[float]] = {name: [] for name in encoders}
    seconds: dict[str, float] = dict.fromkeys(encoders, 0.0)
    names = list(encoders)
    idle_s = 0.5

    async def encode_all(encoder: ChunkEncoder | None) -> None:
        if encoder is None:
            await asyncio.sleep(idle_s)
            return
        for i in range(args.chunks):
            await encoder.encode([data], 1_700_000_000_000 + i, "events", DEFAULT_COMPRESSION)

    try:
        for round_ in range(args.rounds):
            order = names[round_ % len(names) :] + names[: round_ % len(names)]
            for name in order:
                late, elapsed = await ticks_during(encode_all(encoders[name]))
                lateness[name] += late
                seconds[name] += elapsed
                if name == "idle":
                    idle_s = max(0.5, elapsed)
            print(f"  round {round_} done (load {os.getloadavg()[0]:.1f})", flush=True)
    finally:
        await process.close()
    rows = []
    for name in names:
        late_ms = np.array(lateness[name]) * 1000
        encoded_mb = 0.0 if name == "idle" else args.rounds * args.chunks * len(data) / 1e6
        rows.append(
            {
                "variant": name,
                "ticks": int(late_ms.size),
                "late_p50_ms": round(float(np.percentile(late_ms, 50)), 2),
                "late_p99_ms": round(float(np.percentile(late_ms, 99)), 2),
                "late_p99_9_ms": round(float(np.percentile(late_ms, 99.9)), 2),
                "late_max_ms": round(float(late_ms.max()), 2),
                "late_5ms_pct": round(float((late_ms >= 5).mean() * 100), 2),
                "encode_mb_per_s": round(encoded_mb / seconds[name], 1) if encoded_mb else "",
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5, help="rounds of every variant (default 5)")
    parser.add_argument("--chunks", type=int, default=4, help="chunks encoded per variant and round (default 4)")
    parser.add_argument("--chunk-mb", type=float, default=8.0, help="MB of segment data per chunk (default 8)")
    parser.add_argument("--out", type=Path, default=RESULTS / "encode_stall.json")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    rows = asyncio.run(run(args))
    load_after = os.getloadavg()[0]
    table(
        f"1 ms timer lateness while encoding {args.chunk_mb:g} MB chunks (ms)",
        rows,
        [("variant", "variant"), ("ticks", "ticks"), ("late_p50_ms", "p50"), ("late_p99_ms", "p99"),
         ("late_p99_9_ms", "p99.9"), ("late_max_ms", "max"), ("late_5ms_pct", ">= 5 ms %"),
         ("encode_mb_per_s", "encode MB/s")],
    )  # fmt: skip
    print(f"\nload average before {load_before:.2f}, after {load_after:.2f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    document = {"benchmark": "encode_stall", "settings": vars(args) | {"out": str(args.out)}, "rows": rows,
                "load_average_before_after": [round(load_before, 2), round(load_after, 2)]}  # fmt: skip
    args.out.write_text(json.dumps(document, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
