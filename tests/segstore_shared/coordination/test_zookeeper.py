"""The ZooKeeper fixture runs a real server: kazoo sees real sessions, watches and versions."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NoNodeError

from segstore_shared.coordination.zookeeper_server import (
    EmbeddedZooKeeper,
    ZooKeeperConfig,
    ZooKeeperStartError,
    four_letter_word,
    free_port,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def kazoo(zk_chroot: str):
    client = KazooClient(hosts=zk_chroot, timeout=10)
    client.start(timeout=15)
    try:
        yield client
    finally:
        client.stop()
        client.close()


def test_ruok_with_running_server(zookeeper: EmbeddedZooKeeper) -> None:
    assert four_letter_word("127.0.0.1", zookeeper.config.port, "ruok") == "imok"
    assert "Zookeeper version" in four_letter_word("127.0.0.1", zookeeper.config.port, "srvr")


def test_ephemeral_node_with_session_end(zk_chroot: str, kazoo: KazooClient) -> None:
    other = KazooClient(hosts=zk_chroot, timeout=10)
    other.start(timeout=15)
    other.create("/hosts/a", b"host-a", ephemeral=True, makepath=True)
    assert kazoo.get("/hosts/a")[0] == b"host-a"
    other.stop()
    other.close()
    with pytest.raises(NoNodeError):
        kazoo.get("/hosts/a")


def test_sequential_nodes_with_increasing_names(kazoo: KazooClient) -> None:
    names = [kazoo.create("/seq/n-", b"", sequence=True, makepath=True) for _ in range(3)]
    assert names == sorted(names)
    assert len(set(names)) == 3
    assert sorted(kazoo.get_children("/seq")) == [n.rsplit("/", 1)[1] for n in names]


def test_watch_with_data_change(kazoo: KazooClient) -> None:
    kazoo.create("/watched", b"v0")
    fired = threading.Event()
    seen: list[bytes] = []

    def on_change(data: bytes | None, stat: object) -> None:
        if data is not None:
            seen.append(data)
            if data == b"v1":
                fired.set()

    kazoo.DataWatch("/watched", on_change)
    kazoo.set("/watched", b"v1")
    assert fired.wait(10)
    assert seen[0] == b"v0" and seen[-1] == b"v1"


def test_versioned_set_with_stale_version(kazoo: KazooClient) -> None:
    kazoo.create("/cas", b"a")
    _, stat = kazoo.get("/cas")
    kazoo.set("/cas", b"b", version=stat.version)
    with pytest.raises(BadVersionError):
        kazoo.set("/cas", b"c", version=stat.version)
    assert kazoo.get("/cas")[0] == b"b"


def test_restart_with_same_data_dir(tmp_path: Path) -> None:
    config = ZooKeeperConfig(data_dir=tmp_path, port=free_port())
    with EmbeddedZooKeeper(config) as server:
        client = KazooClient(hosts=server.connect_string, timeout=10)
        client.start(timeout=15)
        client.create("/durable", b"kept")
        client.stop()
        client.close()
        pid = server.pid
    assert pid is not None
    with EmbeddedZooKeeper(config) as server:
        client = KazooClient(hosts=server.connect_string, timeout=10)
        client.start(timeout=15)
        assert client.get("/durable")[0] == b"kept"
        client.stop()
        client.close()


def test_start_with_port_in_use(tmp_path: Path, zookeeper: EmbeddedZooKeeper) -> None:
    config = ZooKeeperConfig(data_dir=tmp_path, port=zookeeper.config.port, start_timeout_s=15)
    server = EmbeddedZooKeeper(config)
    with pytest.raises(ZooKeeperStartError):
        server.start()
    assert server.pid is None
