"""Engine benchmark: durable log appends over the fenced file ledger log (fsync on), then recovery.

Appends arrive as blocks of framed events the way the wire delivers them (one AppendBlockEnd
of ~512 KiB = one append operation). Measures events/s and MB/s for 100 B and 10 KB events with
several blocks in flight, and Tier-1 replay MB/s on recovery. The storage writer and Tier-2
flush are not part of the engine yet; their cases arrive with them.

    .venv/bin/python bench/engine.py [--seconds 5] [--zookeeper] [--out bench/results/engine.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from segment_store.containers.metadata import ContainerMetadata
from segment_store.coordination.memory_store import MemoryCoordinationServer
from segment_store.logs.durable_log import DurableLog
from segment_store.logs.operations import AppendOperation, MapSegmentOperation
from segment_store.protocol import encode_events
from segment_store.tier1.file_ledger_config import FileLedgerLogConfig
from segment_store.tier1.file_ledger_log import FileLedgerLog


async def run_case(root: Path, store_factory: Any, event_size: int, seconds: float, in_flight: int) -> dict[str, Any]:
    events_per_block = max(1, (512 * 1024) // (event_size + 8))
    block = encode_events([b"x" * event_size] * events_per_block)
    config = FileLedgerLogConfig(root_dir=root, metadata_root=f"/bench/{root.name}/logs")
    log = DurableLog(ContainerMetadata(0), FileLedgerLog("container-0", config, await store_factory()))
    await log.recover()
    log.start()
    sid = (await log.add(MapSegmentOperation(name="bench/stream/0"))).segment_id  # type: ignore[attr-defined]
    pending: set[asyncio.Future[Any]] = set()
    blocks = 0
    started = time.perf_counter()
    deadline = started + seconds
    while time.perf_counter() < deadline:
        while len(pending) < in_flight:
            pending.add(log.add(AppendOperation(segment_id=sid, data=block)))
        done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        for f in done:
            f.result()
        blocks += len(done)
    await asyncio.gather(*pending)
    blocks += len(pending)
    elapsed = time.perf_counter() - started
    await log.close()

    replay_started = time.perf_counter()
    again = DurableLog(ContainerMetadata(0), FileLedgerLog("container-0", config, await store_factory()))
    await again.recover()
    replay_s = time.perf_counter() - replay_started
    total = blocks * len(block)
    assert again.metadata.get(sid).length == total  # type: ignore[union-attr]
    await again.close()
    return {
        "event_bytes": event_size, "block_bytes": len(block), "in_flight": in_flight, "seconds": round(elapsed, 2),
        "events_per_s": round(blocks * events_per_block / elapsed), "mb_per_s": round(total / elapsed / 1e6, 1),
        "replay_mb_per_s": round(total / replay_s / 1e6, 1),
    }


def _zookeeper_stores(connect: str) -> Any:
    from segment_store.coordination.kazoo_store import KazooCoordinationStore

    async def factory() -> Any:
        return await KazooCoordinationStore.connect(connect)

    return factory


def _memory_stores() -> Any:
    server = MemoryCoordinationServer()

    async def factory() -> Any:
        return server.connect()

    return factory


async def main_async(args: argparse.Namespace) -> list[dict[str, Any]]:
    results = []
    zk = None
    if args.zookeeper:
        from segment_store.coordination.zookeeper_server import EmbeddedZooKeeper, ZooKeeperConfig, free_port

        zk_dir = tempfile.mkdtemp(prefix="bench-zk-")
        zk = EmbeddedZooKeeper(ZooKeeperConfig(data_dir=Path(zk_dir), port=free_port()))
        zk.start()
    try:
        for event_size in (100, 10_000):
            with tempfile.TemporaryDirectory(prefix="bench-engine-") as tmp:
                factory = _zookeeper_stores(zk.connect_string) if zk is not None else _memory_stores()
                result = await run_case(Path(tmp), factory, event_size, args.seconds, args.in_flight)
                result["metadata_store"] = "zookeeper" if zk else "memory"
                results.append(result)
    finally:
        if zk is not None:
            zk.stop()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--in-flight", type=int, default=8, help="append blocks in flight")
    parser.add_argument("--zookeeper", action="store_true", help="keep Tier-1 metadata in a real ZooKeeper")
    parser.add_argument("--out", default="bench/results/engine.json")
    args = parser.parse_args()
    results = asyncio.run(main_async(args))
    header = f"{'event B':>8} {'store':>9} {'events/s':>12} {'MB/s':>8} {'replay MB/s':>12}"
    print(header)
    print("-" * len(header))
    for r in results:
        print(
            f"{r['event_bytes']:>8} {r['metadata_store']:>9} {r['events_per_s']:>12,} {r['mb_per_s']:>8} "
            f"{r['replay_mb_per_s']:>12}"
        )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"benchmark": "engine", "results": results}, indent=2))


if __name__ == "__main__":
    main()
