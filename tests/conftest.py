"""Shared fixtures: a real ZooKeeper server on a free loopback port."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from segment_store.coordination.zookeeper_server import EmbeddedZooKeeper, ZooKeeperConfig, free_port


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedZooKeeper]:
    """A real ZooKeeper server (jars from pyspark) shared by the session; stopped by its pid."""
    data_dir: Path = tmp_path_factory.mktemp("zookeeper")
    server = EmbeddedZooKeeper(ZooKeeperConfig(data_dir=data_dir, port=free_port()))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def zk_chroot(zookeeper: EmbeddedZooKeeper, request: pytest.FixtureRequest) -> str:
    """A connect string with a chroot unique to the test, so tests never see each other's nodes."""
    safe = "".join(c if c.isalnum() else "_" for c in request.node.nodeid)[-120:]
    root = KazooClient(hosts=zookeeper.connect_string, timeout=10)
    root.start(timeout=15)
    try:
        root.ensure_path(f"/t_{safe}")
    finally:
        root.stop()
        root.close()
    return f"{zookeeper.connect_string}/t_{safe}"
