"""Server cost per append block: many segments, small blocks, a segment store process over loopback TCP.

What limits a writer spread over many segments is what the segment store pays per append block, not
per byte: each segment's writer has about one block in flight, so with 100 segments the blocks are
small (a few KB) and come by the thousand per second. This bench measures that cost alone: a minimal
client (no client library: pre-framed ``AppendBlockEnd`` frames straight on one connection, next block
of a segment sent when its ack arrives) keeps ``--in-flight`` blocks of ``--events`` 100 B events in
flight, spread evenly over ``--segments`` segments (100 in flight: 100 per segment with 1 segment, 1 per
segment with 100), so the server is the only thing that works hard and every case offers it the same
concurrency: what differs is how many segments the blocks go to.

The server is a real ``segstore segmentstore`` (4 containers, file Tier-1 with fsync, filesystem Tier-2,
its own embedded ZooKeeper; ``bench/wire_server.py``) under ``--dir``. By default the client runs on
CPU 0 and the server on the others (``--no-pin`` to share), so ``cpu srv`` near 1.0 means the server
is saturated and ``us/block`` (server CPU per block: all its threads) is its cost per block. Each case
uses new segments, starts with every container flushed to Tier-2 (no backlog from the case before),
warms up for 1 s, measures ``--seconds``, and checks every segment's length against what was
acknowledged. ``--rounds`` repeats the cases (later rounds in reverse order); the table shows each run.

    .venv/bin/python bench/wire_blocks.py [--segments 1,10,100] [--events 40] [--in-flight 100]
                                          [--seconds 5] [--rounds 2] [--no-pin] [--dir /var/tmp] [--out PATH]

About 30 s per round with the defaults. Prints a table and writes JSON (default
``bench/results/wire_blocks.json``; ``bench/results/`` is git-ignored).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from benchlib import filesystem_of, table
from wire_server import CONTAINERS, Meter, ServerProcess

from segment_store.client import SegmentClient
from segment_store.protocol import (
    AppendSetup,
    DataAppended,
    FrameDecoder,
    SetupAppend,
    encode,
    encode_events,
    local_hello,
)
from segment_store.protocol.assembler import frame_append_block_end

EVENT_BYTES = 100
FRAME_HEADER = 8
REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
_names = iter(range(1_000_000))


class BlockPump:
    """One connection writing pre-framed blocks to ``segments``: ``in_flight`` per segment at all times."""

    def __init__(self, segments: list[str], events: int, in_flight: int) -> None:
        self.segments = segments
        self.events = events
        self.in_flight = in_flight
        payload = random.Random(7).randbytes(EVENT_BYTES * events)
        self.block = encode_events(payload[i : i + EVENT_BYTES] for i in range(0, len(payload), EVENT_BYTES))
        self.writers = [uuid.uuid4() for _ in segments]
        self.sent = {w: 0 for w in self.writers}  # last event number sent
        self.acked = {w: 0 for w in self.writers}
        self.sending = True
        self._decoder = FrameDecoder()

    async def open(self, port: int) -> None:
        self._reader, self._writer = await asyncio.open_connection("127.0.0.1", port)
        self._writer.write(encode(local_hello()))
        for number, (segment, writer) in enumerate(zip(self.segments, self.writers, strict=True)):
            self._writer.write(encode(SetupAppend(number + 1, writer, segment, "")))
        set_up = 0
        while set_up < len(self.segments):
            self._decoder.feed(await self._reader.read(1 << 16))
            set_up += sum(isinstance(reply, AppendSetup) for reply in self._decoder)

    def _send(self, writer: uuid.UUID) -> None:
        last = self.sent[writer] = self.sent[writer] + self.events
        self._writer.write(frame_append_block_end(writer, [self.block], len(self.block), self.events, last, 1))

    def start(self) -> None:
        for writer in self.writers:
            for _ in range(self.in_flight):
                self._send(writer)

    @property
    def acked_blocks(self) -> int:
        return sum(self.acked.values()) // self.events

    async def run_until(self, deadline: float) -> None:
        """Read acks and send the next blocks until ``deadline``, then until every sent block is acked."""
        while True:
            outstanding = any(self.acked[w] < self.sent[w] for w in self.writers)
            if time.perf_counter() >= deadline:
                self.sending = False
                if not outstanding:
                    return
            data = await asyncio.wait_for(self._reader.read(1 << 20), 60)
            if not data:
                raise ConnectionError("the segment store closed the connection")
            self._decoder.feed(data)
            for reply in self._decoder:
                if not isinstance(reply, DataAppended):
                    raise AssertionError(f"unexpected reply {reply}")
                blocks = (reply.event_number - self.acked[reply.writer_id]) // self.events
                self.acked[reply.writer_id] = reply.event_number
                if self.sending:
                    for _ in range(blocks):
                        self._send(reply.writer_id)

    def close(self) -> None:
        self._writer.close()


async def case(server: ServerProcess, client: SegmentClient, count: int, args: argparse.Namespace) -> dict[str, Any]:
    segments = [f"bench/blocks/{next(_names)}.#epoch.0" for _ in range(count)]
    for segment in segments:
        await client.create_segment(segment)
    await asyncio.gather(*(client.flush_to_storage(c) for c in range(CONTAINERS)))
    pump = BlockPump(segments, args.events, max(1, args.in_flight // count))
    await pump.open(server.port)
    try:
        pump.start()
        await pump.run_until(time.perf_counter() + 1.0)  # warm-up, not counted; ends with nothing in flight
        pump.sending = True
        before = pump.acked_blocks
        meter = Meter(server)
        pump.start()
        await pump.run_until(time.perf_counter() + args.seconds)
        measured = meter.done()
        blocks = pump.acked_blocks - before
    finally:
        pump.close()
    for segment, writer in zip(segments, pump.writers, strict=True):
        length = (await client.get_segment_info(segment)).write_offset
        if length != pump.acked[writer] * (EVENT_BYTES + FRAME_HEADER):
            raise AssertionError(f"{segment}: {length} bytes, but {pump.acked[writer]} events were acked")
    seconds = measured["seconds"]
    return {
        "segments": count,
        "events_per_block": args.events,
        "in_flight": pump.in_flight * count,
        "block_bytes": len(pump.block),
        "blocks_per_s": round(blocks / seconds),
        "events_per_s": round(blocks * args.events / seconds),
        "us_per_block": round(measured["cpu_server"] * seconds / max(1, blocks) * 1e6, 1),
        **measured,
    }


def pin(server: ServerProcess) -> None:
    """The client on CPU 0, every thread of the server (and its ZooKeeper) on the other CPUs."""
    others = set(range(os.cpu_count() or 1)) - {0} or {0}
    os.sched_setaffinity(0, {0})
    for pid in (server.pid, *server.children):
        for task in Path(f"/proc/{pid}/task").iterdir():
            os.sched_setaffinity(int(task.name), others)


async def run(args: argparse.Namespace, root: Path) -> list[dict[str, Any]]:
    counts = [int(c) for c in args.segments.split(",")]
    server = ServerProcess(root, in_memory=False)
    server.start()
    rows: list[dict[str, Any]] = []
    try:
        if not args.no_pin:
            pin(server)
        async with SegmentClient(("127.0.0.1", server.port)) as client:
            for round_ in range(1, args.rounds + 1):
                for count in counts if round_ % 2 else reversed(counts):
                    row = {"round": round_, **await case(server, client, count, args)}
                    print(f"  round {round_}, {count} segments: {row['us_per_block']} us/block", flush=True)
                    rows.append(row)
    finally:
        server.stop()
    return rows


def report(rows: list[dict[str, Any]]) -> None:
    table(
        "server cost per append block (us/block = server CPU seconds / blocks acked; cpu = cores busy)",
        rows,
        [("round", "round"), ("segments", "segments"), ("events_per_block", "ev/block"), ("in_flight", "in flight"),
         ("block_bytes", "block B"), ("blocks_per_s", "blocks/s"), ("events_per_s", "events/s"),
         ("us_per_block", "us/block"), ("cpu_server", "cpu srv"), ("cpu_server_loop", "srv loop"),
         ("cpu_client", "cpu cli"), ("cpu_other", "cpu other")],
    )  # fmt: skip
    print("\nmedian us/block by segments: " + ", ".join(
        f"{count}: {statistics.median(r['us_per_block'] for r in rows if r['segments'] == count)}"
        for count in dict.fromkeys(r["segments"] for r in rows)
    ))  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--segments", default="1,10,100", help="segment counts (default 1,10,100)")
    parser.add_argument("--events", type=int, default=40, help="100 B events per block (default 40: ~4.3 KB)")
    parser.add_argument("--in-flight", type=int, default=100, help="blocks in flight in all (default 100)")
    parser.add_argument("--seconds", type=float, default=5.0, help="measured seconds per case (default 5)")
    parser.add_argument("--rounds", type=int, default=2, help="times each case runs (default 2)")
    parser.add_argument("--no-pin", action="store_true", help="let client and server share every CPU")
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="where the server's data lives (a real disk)")
    parser.add_argument("--out", type=Path, default=RESULTS / "wire_blocks.json", help="JSON output")
    args = parser.parse_args()
    if args.events < 1 or args.in_flight < 1 or args.rounds < 1:
        parser.error("--events, --in-flight and --rounds must be at least 1")
    with tempfile.TemporaryDirectory(prefix="bench-blocks-", dir=args.dir) as tmp:
        print(f"data in {tmp} ({filesystem_of(Path(tmp))}); {args.segments} segments, {args.events} events/block")
        rows = asyncio.run(run(args, Path(tmp)))
    report(rows)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"python": platform.python_version(), "cpus": os.cpu_count(), "load_avg": os.getloadavg()}
    args.out.write_text(json.dumps({"meta": meta, "args": {k: str(v) for k, v in vars(args).items()}, "rows": rows},
                                   indent=2))  # fmt: skip
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
