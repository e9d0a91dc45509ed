"""What losing the stream leader costs writers of a JetStream Tier-1 log (R3 on a 3-node NATS cluster).

A writer appends 100-byte entries at a fixed rate (``--rate``, default 1,000/s) to one log, with metadata in an
embedded ZooKeeper. ``--kills`` times (default 5) the benchmark stops the NATS server leading the log's stream
(``kill -9``; ``--signal term``: a clean shutdown, in which the leader hands its streams over), waits ``--settle``
seconds, starts it again and waits until it is healthy. An append that fails is appended again on a new instance
of the log, which first takes the log over and reads it to its end, as a segment container restarting would; its
wait counts from the first attempt. Per kill, the *stall* is the longest wait of an append issued from 1 s before
the kill to ``--settle`` s after it. Prints a table (one row per kill and a summary: p50/p99/max stall, re-fences,
restarts) and writes JSON (default ``bench/results/leader_loss.json``).

    python bench/leader_loss.py [--kills 5] [--rate 1000] [--settle 15] [--signal kill|term]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import nats
from benchlib import percentile, table
from tier1 import zookeeper

from segment_store.tier1.jetstream.config import JetStreamLogConfig
from segment_store.tier1.jetstream.factory import JetStreamLogFactory
from segment_store.tier1.jetstream.log import JetStreamLog
from segment_store.tier1.jetstream.nats_server import NatsCluster
from segment_store.tier1.log import DurableDataLogError

PAYLOAD = b"x" * 100


@dataclass
class Kill:
    kill: int
    leader: str
    at: float
    """Event loop time of the kill."""
    refences: int
    restarts: int
    stall_s: float = 0.0


class Writer:
    """Appends at a fixed rate; an append that fails goes again on a new instance (a container restart)."""

    def __init__(self, factory: JetStreamLogFactory, rate: float) -> None:
        self.factory = factory
        self.rate = rate
        self.log: JetStreamLog | None = None
        self.waits: list[tuple[float, float]] = []  # (issued at, wait until acknowledged)
        self.restarts = 0
        self.refences = 0
        self._reopening: asyncio.Task[JetStreamLog] | None = None
        self._stop = asyncio.Event()

    async def open(self) -> JetStreamLog:
        while True:
            log = self.factory.create_log(0)
            try:
                await log.initialize(timeout=120)
                async for _ in log.read():  # what a restarting container does before it serves again
                    pass
                return log
            except DurableDataLogError:  # NATS still electing, or fenced by a newer instance: again
                await log.close()

    async def _current(self, failed: JetStreamLog | None) -> JetStreamLog:
        if self.log is not None and self.log is not failed:
            return self.log
        if self._reopening is None or self._reopening.done():
            if failed is not None:
                self.refences += failed.refences
                await failed.close()
            self.restarts += 1
            self._reopening = asyncio.create_task(self.open())
        self.log = await self._reopening
        return self.log

    async def _one(self, issued: float) -> None:
        loop = asyncio.get_running_loop()
        log = self.log
        while True:
            if log is None:
                log = await self._current(None)
            try:
                await log.append(PAYLOAD)
                break
            except DurableDataLogError:
                log = await self._current(log)
        self.waits.append((issued, loop.time() - issued))

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        self.log = await self.open()
        self.restarts = 0
        tasks: set[asyncio.Task[None]] = set()
        start, issued = loop.time(), 0
        while not self._stop.is_set():
            due = start + issued / self.rate
            if due > loop.time():
                await asyncio.sleep(due - loop.time())
            task = asyncio.create_task(self._one(loop.time()))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            issued += 1
        await asyncio.gather(*tasks)
        if self.log is not None:
            self.refences += self.log.refences
            await self.log.close()

    def stop(self) -> None:
        self._stop.set()


async def leader_of(cluster: NatsCluster, stream: str) -> str:
    connection = await nats.connect(cluster.urls)
    try:
        while True:
            info = (await connection.jsm().stream_info(stream)).cluster
            if info is not None and info.leader:
                return info.leader
            await asyncio.sleep(0.1)
    finally:
        await connection.close()


async def run(args: argparse.Namespace, root: Path) -> list[Kill]:
    cluster = NatsCluster.on_free_ports(root / "nats", 3, name="leaderloss")
    await asyncio.to_thread(cluster.start)
    kills: list[Kill] = []
    try:
        async with zookeeper(root) as store:
            config = JetStreamLogConfig(servers=tuple(cluster.urls), replicas=3, metadata_root="/bench/leader-loss")
            factory = JetStreamLogFactory(config, store)
            await factory.initialize()
            writer = Writer(factory, args.rate)
            writing = asyncio.create_task(writer.run())
            loop = asyncio.get_running_loop()
            await asyncio.sleep(3)  # warm up
            for number in range(1, args.kills + 1):
                assert writer.log is not None
                leader = await leader_of(cluster, writer.log.stream)
                victim = next(node for node in cluster.nodes if node.config.server_name == leader)
                refences_before = writer.refences + (writer.log.refences if writer.log else 0)
                restarts_before = writer.restarts
                killed_at = loop.time()
                await asyncio.to_thread(victim.kill if args.signal == "kill" else victim.stop)
                await asyncio.sleep(args.settle)
                refences_now = writer.refences + (writer.log.refences if writer.log else 0)
                restarts = writer.restarts - restarts_before
                kills.append(Kill(number, leader, killed_at, refences_now - refences_before, restarts))
                await asyncio.to_thread(cluster.start, [victim])
                await asyncio.sleep(3)  # the restarted server catches up
            writer.stop()
            await writing  # every append issued is acknowledged by now: the stalls are complete
            await factory.close()
            for kill in kills:
                window = [wait for issued, wait in writer.waits if kill.at - 1 <= issued <= kill.at + args.settle]
                kill.stall_s = round(max(window, default=0.0), 2)
                print(f"kill {kill.kill}: leader {kill.leader}, stall {kill.stall_s} s", flush=True)
    finally:
        cluster.stop()
    return kills


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--rate", type=float, default=1000.0, help="appends/s")
    parser.add_argument("--settle", type=float, default=15.0, help="seconds watched after each kill")
    parser.add_argument("--signal", choices=("kill", "term"), default="kill", help="how the leader is stopped")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "leader_loss.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="segstore-bench-leader-") as tmp:
        kills = asyncio.run(run(args, Path(tmp)))
    stalls = sorted(kill.stall_s for kill in kills)
    summary = {
        "kills": len(kills),
        "stall_p50_s": percentile(stalls, 50),
        "stall_p99_s": percentile(stalls, 99),
        "stall_max_s": stalls[-1] if stalls else None,
        "refences": sum(kill.refences for kill in kills),
        "restarts": sum(kill.restarts for kill in kills),
    }
    how = "kill -9" if args.signal == "kill" else "SIGTERM"
    title = f"losing the stream leader ({how}), JetStream R3, 100 B appends at {args.rate:,.0f}/s"
    table(title, [asdict(kill) for kill in kills],
          [("kill", "kill"), ("leader", "leader"), ("stall_s", "stall s"), ("refences", "re-fences"),
           ("restarts", "restarts")])  # fmt: skip
    table("summary", [summary], [(key, key) for key in summary])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    document = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "machine": platform.node(),
                "python": sys.version.split()[0], "args": {k: str(v) for k, v in vars(args).items()},
                "kills": [asdict(kill) for kill in kills], "summary": summary}  # fmt: skip
    args.out.write_text(json.dumps(document, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
