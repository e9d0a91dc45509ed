"""The main job behind ``./run demo``: start what exists and show it working.

It grows with the project: today it starts a real ZooKeeper server, registers a
segment store host the way the cluster will, runs a Pravega wire exchange through
the codec, then runs a durable segment store (file Tier-1 fenced through that
ZooKeeper, filesystem Tier-2) and writes, reads and flushes events through the
client library over TCP, and reads the Tier-2 Parquet chunk with pyarrow.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path

from kazoo.client import KazooClient

from segment_store.coordination.zookeeper_server import EmbeddedZooKeeper, ZooKeeperConfig, free_port
from segment_store.protocol import (
    Append,
    AppendAssembler,
    FrameDecoder,
    SetupAppend,
    encode,
    encode_append_batch,
    local_hello,
    parse_events,
)


def _zookeeper_step(zk: EmbeddedZooKeeper) -> None:
    client = KazooClient(hosts=zk.connect_string, timeout=10)
    client.start(timeout=15)
    try:
        host = json.dumps({"host": "127.0.0.1", "port": 12345}).encode()
        path = client.create("/segstore/hosts/demo-", host, ephemeral=True, sequence=True, makepath=True)
        print(f"[zookeeper] registered ephemeral host node {path}: {client.get(path)[0].decode()}")
    finally:
        client.stop()
        client.close()


async def _segment_store_step(data_dir: Path, zookeeper: str) -> None:
    """A durable segment store on a free port, driven through the client library over TCP."""
    import pyarrow.parquet as pq

    from segment_store.client import SegmentClient
    from segment_store.server.config import ServerConfig
    from segment_store.server.service import SegmentStoreService, ServiceConfig

    config = ServiceConfig(server=ServerConfig(port=0), data_dir=data_dir / "segstore", zookeeper=zookeeper)
    service = await SegmentStoreService.start_durable(config)
    try:
        segment = "demo/stream/0.#epoch.0"
        print(f"[segment store] serving containers {service.registry.running} on {service.endpoint}")
        async with SegmentClient(service.endpoint) as client:
            await client.create_segment(segment)
            started = time.monotonic()
            async with client.writer(segment) as writer:
                for batch in range(100):
                    await writer.write_many([b"event-%06d" % (batch * 1000 + i) for i in range(1000)])
            elapsed = time.monotonic() - started
            info = await client.get_segment_info(segment)
            print(f"[segment store] 100,000 events acknowledged in {elapsed:.2f}s (fsync'd in Tier-1), "
                  f"segment length {info.write_offset} bytes")
            count, first = 0, b""
            async for event in client.reader(segment, end_offset=info.write_offset):
                first = first or event.data
                count += 1
            print(f"[segment store] read back {count} events over the wire, first {first!r}")
            await client.flush_to_storage(service.registry.container_id(segment))
        container = service.registry.for_segment(segment)
        chunks = await container.storage.chunks(segment)
        table = pq.read_table(chunks[0].location) if chunks[0].location else None
        rows = table.num_rows if table is not None else 0
        print(f"[tier-2] {len(chunks)} Parquet chunk(s) under {config.data_dir}/tier2; the first has {rows} rows "
              f"(one per event), columns {table.column_names if table is not None else []}")
    finally:
        await service.stop()


def _wire_step() -> None:
    """A client's side and a server's side of a Pravega wire exchange, through the sans-I/O codec."""
    writer = uuid.uuid4()
    segment = "demo/stream/0.#epoch.0"
    client_bytes = b"".join(
        [
            encode(local_hello()),
            encode(SetupAppend(request_id=1, writer_id=writer, segment=segment, delegation_token="")),
            encode_append_batch(
                writer, [f"event-{i}".encode() for i in range(1000)], last_event_number=1000, request_id=2
            ),
        ]
    )
    decoder, assembler = FrameDecoder(), AppendAssembler()
    for i in range(0, len(client_bytes), 1500):  # the bytes arrive in TCP-sized pieces
        decoder.feed(client_bytes[i : i + 1500])
    appends = [a for a in (assembler.process(c) for c in decoder) if isinstance(a, Append)]
    events = parse_events(appends[0].data)
    print(
        f"[wire] {len(client_bytes)} bytes decoded: 1 append of {appends[0].event_count} events from writer "
        f"{writer}, last event number {appends[0].event_number}; first event {bytes(events[0].data)!r}"
    )


def run_demo(data_dir: Path) -> int:
    """Run every demo step against state under ``data_dir``; returns the process exit code."""
    data_dir.mkdir(parents=True, exist_ok=True)
    print(f"segstore demo, state under {data_dir}")
    config = ZooKeeperConfig(data_dir=data_dir / "zookeeper", port=free_port())
    started = time.monotonic()
    with EmbeddedZooKeeper(config) as zk:
        print(f"[zookeeper] serving on {zk.connect_string} (pid {zk.pid}) after {time.monotonic() - started:.1f}s")
        _zookeeper_step(zk)
        _wire_step()
        asyncio.run(_segment_store_step(data_dir, zk.connect_string))
    print("demo finished: all steps passed")
    return 0
