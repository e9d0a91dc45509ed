"""A/B of the segment store's open-loop latency: variants of the server process side by side, in one run.

This machine drifts 20-60 % between runs (and other programs load it), so a change to the server is judged
against the unchanged server in the same run: each variant is its own ``segstore segmentstore`` process
(``bench/wire_server.py``, file Tier-1 with fsync, filesystem Tier-2, its own ZooKeeper), all started at once, and
the ``latency`` case of ``bench/wire.py`` (open loop, 100 B events) runs on each in turn, ``--rounds`` times, the
order reversed every other round. A variant is Python run before the server's entry point (``--variant
NAME=CODE``; ``CODE`` may import from ``--path`` directories), so what is tried needs no change to the server:

    .venv/bin/python bench/wire_ab.py --variant "switch1ms=import sys; sys.setswitchinterval(0.001)"
    .venv/bin/python bench/wire_ab.py --path /tmp/uvloop-lib \\
        --variant "uvloop=import asyncio, uvloop; asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())"

The unchanged server is always variant ``base``. Prints every run and each variant's median p50/p99/p99.9 per
rate; writes JSON (default ``bench/results/wire_ab.json``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchlib import table
from wire_common import drain
from wire_latency import case_latency
from wire_server import ServerProcess

from segment_store.client import ClientConfig, SegmentClient
from segstore_shared.loop_stalls import ACTIVITY, LoopStallRecorder

RESULTS = Path(__file__).resolve().parent / "results"


async def run(args: argparse.Namespace, root: Path) -> list[dict[str, Any]]:
    variants = {"base": "", **dict(v.split("=", 1) for v in args.variant)}
    servers = {}
    for name, code in variants.items():
        server = ServerProcess(root / name, in_memory=False, prelude=code or None, extra_path=args.path)
        server.root.mkdir(parents=True)
        servers[name] = server
    rows: list[dict[str, Any]] = []
    clients: dict[str, SegmentClient] = {}
    ACTIVITY.hook_gc()
    stalls = LoopStallRecorder(ACTIVITY)
    stalls.start()
    try:
        for name, server in servers.items():
            print(f"  {name}: started in {server.start():.1f} s", flush=True)
            clients[name] = SegmentClient(("127.0.0.1", server.port), ClientConfig())
            await case_latency(clients[name], server, stalls, 10_000, 1.0)  # warm-up: connection, first chunks
        order = list(variants)
        for round_ in range(args.rounds):
            for name in order if round_ % 2 == 0 else order[::-1]:
                for rate in args.rates:
                    row = await case_latency(clients[name], servers[name], stalls, rate, args.seconds)
                    await drain(clients[name])
                    rows.append({"variant": name, "round": round_, "load": round(os.getloadavg()[0], 1), **row})
                    print(f"  round {round_} {name} {rate:,}/s: p99 {row['p99_ms']} ms", flush=True)
    finally:
        stalls.stop()
        for client in clients.values():
            await client.close()
        for server in servers.values():
            server.stop()
    return rows


def medians(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for variant in dict.fromkeys(r["variant"] for r in rows):
        for rate in dict.fromkeys(r["offered_events_per_s"] for r in rows):
            mine = [r for r in rows if r["variant"] == variant and r["offered_events_per_s"] == rate]
            out.append(
                {
                    "variant": variant,
                    "offered_events_per_s": rate,
                    "runs": len(mine),
                    **{
                        f"median_{k}": round(statistics.median(r[k] for r in mine), 2)
                        for k in ("p50_ms", "p99_ms", "p99_9_ms", "cpu_server_loop", "srv_stall_ms")
                    },
                }
            )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variant", action="append", default=[], help="NAME=CODE run before the server (repeat)")
    parser.add_argument("--path", action="append", default=[], help="a directory the variants import from")
    parser.add_argument("--rounds", type=int, default=4, help="rounds of every variant (default 4)")
    parser.add_argument("--seconds", type=float, default=1.5, help="seconds per case (default 1.5)")
    parser.add_argument("--rates", default="10000,100000", help="offered events/s (default 10000,100000)")
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="where the servers' data lives (a real disk)")
    parser.add_argument("--out", type=Path, default=RESULTS / "wire_ab.json")
    args = parser.parse_args()
    args.rates = [int(r) for r in args.rates.split(",")]
    for variant in args.variant:
        if "=" not in variant or variant.startswith("base="):
            parser.error(f"--variant: NAME=CODE with a name other than base, not {variant!r}")
    started = time.perf_counter()
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench-wire-ab-", dir=args.dir) as tmp:
        rows = asyncio.run(run(args, Path(tmp)))
    columns = [("variant", "variant"), ("round", "round"), ("offered_events_per_s", "offered ev/s"),
               ("p50_ms", "p50"), ("p99_ms", "p99"), ("p99_9_ms", "p99.9"), ("cpu_server_loop", "srv loop"),
               ("srv_stall_ms", "srv stall ms"), ("load", "load")]  # fmt: skip
    table("every run (ms)", rows, columns)
    summary = medians(rows)
    table(
        "medians (ms)",
        summary,
        [("variant", "variant"), ("offered_events_per_s", "offered ev/s"), ("runs", "runs"),
         ("median_p50_ms", "p50"), ("median_p99_ms", "p99"), ("median_p99_9_ms", "p99.9"),
         ("median_cpu_server_loop", "srv loop"), ("median_srv_stall_ms", "srv stall ms")],
    )  # fmt: skip
    print(f"\ntotal {time.perf_counter() - started:.0f} s; load average before {load_before:.2f}, "
          f"after {os.getloadavg()[0]:.2f}")  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    variants = {"base": "", **dict(v.split("=", 1) for v in args.variant)}
    args.out.write_text(json.dumps({"variants": variants, "medians": summary, "runs": rows}, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
