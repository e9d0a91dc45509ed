"""``WrongHost`` to an append session: it asks its resolver for the segment's host again, sets up there, and counts
the reply in ``wrong_hosts`` (what the cluster failover tests assert on)."""

from __future__ import annotations

import asyncio

import pytest
from client_fakes import FakeNetwork, FakePeer, FakeStore, Handler

from segment_store.client import ClientConfig, ConnectionConfig, ConnectionPool, RetryPolicy, SegmentClient
from segment_store.client.config import WriterConfig
from segment_store.client.connection import Connection, Endpoint
from segment_store.protocol import SetupAppend, WireCommand, WrongHost

pytestmark = pytest.mark.unit

SEGMENT = "scope/stream/0"
OLD: Endpoint = ("old-host", 1)
NEW: Endpoint = ("new-host", 1)


async def _noop_sleep(seconds: float) -> None:
    await asyncio.sleep(0)


def _not_here(peer: FakePeer, command: WireCommand) -> None:
    """A segment store that does not run the segment's container: every setup is answered ``WrongHost``."""
    if isinstance(command, SetupAppend):
        peer.reply(WrongHost(command.request_id, command.segment, "", ""))


class _Cluster:
    """Two endpoints over one store; ``owner`` is where the resolver sends the segment, ``asked`` counts lookups."""

    def __init__(self, store: FakeStore, old_handler: Handler) -> None:
        self.networks = {OLD: FakeNetwork(old_handler), NEW: FakeNetwork(store)}
        self.owner = OLD
        self.asked = 0

    async def connect(self, endpoint: Endpoint, config: ConnectionConfig) -> Connection:
        return await self.networks[endpoint].connect(endpoint, config)

    async def resolve(self, segment: str) -> Endpoint:
        self.asked += 1
        return self.owner

    def client(self) -> SegmentClient:
        config = ClientConfig(
            connection=ConnectionConfig(keepalive_interval_ms=0),
            writer=WriterConfig(retry=RetryPolicy(max_attempts=5, sleep=_noop_sleep)),
        )
        return SegmentClient(self.resolve, config, ConnectionPool(config.connection, config.pool, self.connect))


async def test_setup_answered_wrong_host_asks_the_resolver_again_and_counts_it() -> None:
    store = FakeStore()
    store.create(SEGMENT)
    cluster = _Cluster(store, _not_here)
    writer = cluster.client().writer(SEGMENT)

    async def move_after_first_lookup() -> None:
        while cluster.asked < 1:
            await asyncio.sleep(0)
        cluster.owner = NEW

    await asyncio.gather(writer.open(), move_after_first_lookup())
    await writer.append(b"one")
    assert writer.wrong_hosts == 1 and cluster.asked == 2
    assert writer.connection is not None and writer.connection.endpoint == NEW
    assert store.events(SEGMENT) == [b"one"]
    await writer.close()


async def test_append_answered_wrong_host_sets_up_where_the_resolver_says_and_loses_nothing() -> None:
    store = FakeStore()
    store.create(SEGMENT)
    cluster = _Cluster(store, store)  # the old host serves the segment until it moves
    writer = cluster.client().writer(SEGMENT)
    await writer.append(b"1")
    cluster.owner = NEW
    old_peer = cluster.networks[OLD].peers[0]
    old_peer.reply(WrongHost(writer._request_id, SEGMENT, "", ""))  # the container left the old host
    await writer.append(b"2")
    assert writer.wrong_hosts == 1 and writer.setups == 2
    assert writer.connection is not None and writer.connection.endpoint == NEW
    assert store.events(SEGMENT) == [b"1", b"2"]
    await writer.close()
