"""The main job behind ``./run demo``: start what exists and show it working.

It grows with the project: today it starts a real ZooKeeper server, registers a
segment store host the way the cluster will, and runs a Pravega wire exchange
through the codec.
"""

from __future__ import annotations

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


def _zookeeper_step(data_dir: Path) -> None:
    config = ZooKeeperConfig(data_dir=data_dir / "zookeeper", port=free_port())
    started = time.monotonic()
    with EmbeddedZooKeeper(config) as zk:
        print(f"[zookeeper] serving on {zk.connect_string} (pid {zk.pid}) after {time.monotonic() - started:.1f}s")
        client = KazooClient(hosts=zk.connect_string, timeout=10)
        client.start(timeout=15)
        try:
            host = json.dumps({"host": "127.0.0.1", "port": 12345}).encode()
            path = client.create("/segstore/hosts/demo-", host, ephemeral=True, sequence=True, makepath=True)
            print(f"[zookeeper] registered ephemeral host node {path}: {client.get(path)[0].decode()}")
        finally:
            client.stop()
            client.close()


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
    _zookeeper_step(data_dir)
    _wire_step()
    print("demo finished: all steps passed")
    return 0
