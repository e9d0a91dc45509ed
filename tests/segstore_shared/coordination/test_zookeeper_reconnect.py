"""A ZooKeeper client reconnects promptly however long ZooKeeper was away (real ZooKeeper, killed and restarted).

kazoo's default reconnection backoff doubles up to an hour: after an outage of T seconds the next attempt came about
T seconds later, so a segment store or controller found ZooKeeper back tens of seconds late, its session expired
meanwhile, and a store kept serving (stale) containers the controller had moved (``segstore selftest`` seed
2887744134: a partition overlapping a slow ZooKeeper restart, the tail reader stuck). While ZooKeeper is down a
listener on its port counts the connection attempts (it accepts and closes, as a ZooKeeper that is not ready).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from segstore_shared.coordination.kazoo_store import RECONNECT_MAX_DELAY_S, KazooCoordinationStore
from segstore_shared.coordination.store import SessionState
from segstore_shared.coordination.zookeeper_server import EmbeddedZooKeeper, ZooKeeperConfig, free_port

pytestmark = pytest.mark.integration

OUTAGE_BEFORE_COUNTING_S = 12.0
COUNTING_S = 8.0


async def _count_attempts(port: int, seconds: float) -> int:
    """Accept (and close at once) every connection to 127.0.0.1:``port`` for ``seconds``; how many came."""
    attempts = 0

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal attempts
        attempts += 1
        writer.close()

    server = await asyncio.start_server(accept, "127.0.0.1", port)
    async with server:
        await asyncio.sleep(seconds)  # the window the attempts are counted in (a measurement, not a wait for state)
    return attempts


@pytest.mark.timeout(180)
def test_a_client_reconnects_within_a_second_or_so_after_a_long_outage(tmp_path: Path) -> None:
    server = EmbeddedZooKeeper(ZooKeeperConfig(data_dir=tmp_path / "zk", port=free_port()))
    server.start()

    async def body() -> None:
        store = await KazooCoordinationStore.connect(server.connect_string, session_timeout_s=4.0)
        states: list[SessionState] = []
        await store.add_session_listener(states.append)
        try:
            await asyncio.to_thread(server.kill)
            await asyncio.sleep(OUTAGE_BEFORE_COUNTING_S)  # the outage lasts (fault injection)
            attempts = await _count_attempts(server.config.port, COUNTING_S)
            # kazoo's default (doubling up to 3600 s): at most 2 attempts here (about 12.7 s and 25.5 s in)
            assert attempts >= COUNTING_S / (RECONNECT_MAX_DELAY_S * 1.4) - 1, f"{attempts} attempts in {COUNTING_S} s"
            await asyncio.to_thread(server.start)
            serving = asyncio.get_running_loop().time()
            while states[-1] is not SessionState.CONNECTED:  # a new session (the old one expired) or the old one
                assert asyncio.get_running_loop().time() - serving < 5.0, f"not reconnected 5 s after: {states}"
                await asyncio.sleep(0.05)
            await store.create("/after-the-outage", b"x")
            assert (await store.get("/after-the-outage")).data == b"x"
        finally:
            await store.close()

    try:
        asyncio.run(body())
    finally:
        server.stop()
