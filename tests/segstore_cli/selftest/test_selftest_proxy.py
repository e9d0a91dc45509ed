"""The self-tester's TCP proxy on real loopback sockets: it forwards, a ``drop`` partition resets, a ``blackhole``
holds the bytes and delivers them in order once healed. And the ports of the processes it restarts are outside the
ephemeral range (no outgoing connection takes one while its process is down)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from segstore_cli.selftest.cluster import restartable_port
from segstore_cli.selftest.proxy import TcpProxy
from segstore_shared.processes import port_is_free

pytestmark = pytest.mark.unit


async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(1024):
        writer.write(data)
        await writer.drain()
    writer.close()


@pytest.fixture
async def proxy() -> AsyncIterator[TcpProxy]:
    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    proxy = TcpProxy("127.0.0.1", server.sockets[0].getsockname()[1])
    await proxy.start()
    yield proxy
    await proxy.stop()
    server.close()


async def connect(proxy: TcpProxy) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", proxy.port)


async def test_bytes_go_through_both_ways_in_order(proxy: TcpProxy) -> None:
    reader, writer = await connect(proxy)
    payload = bytes(range(256)) * 1000
    writer.write(payload)
    await writer.drain()
    assert await reader.readexactly(len(payload)) == payload
    writer.close()


async def test_a_drop_resets_open_and_new_connections_until_healed(proxy: TcpProxy) -> None:
    reader, writer = await connect(proxy)
    writer.write(b"ping")
    assert await reader.readexactly(4) == b"ping"
    proxy.cut("drop")
    assert await asyncio.wait_for(reader.read(10), 5) == b""  # reset
    reader2, writer2 = await connect(proxy)
    assert await asyncio.wait_for(reader2.read(10), 5) == b""
    proxy.heal()
    reader3, writer3 = await connect(proxy)
    writer3.write(b"again")
    assert await asyncio.wait_for(reader3.readexactly(5), 5) == b"again"
    for w in (writer, writer2, writer3):
        w.close()


async def test_a_blackhole_holds_the_bytes_and_delivers_them_in_order_when_healed(proxy: TcpProxy) -> None:
    reader, writer = await connect(proxy)
    writer.write(b"a")
    assert await reader.readexactly(1) == b"a"
    proxy.cut("blackhole")
    writer.write(b"bcd")
    await writer.drain()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(reader.readexactly(1), 0.5)  # held (a bounded wait for nothing to happen)
    new_reader, new_writer = await connect(proxy)
    new_writer.write(b"x")
    proxy.heal()
    assert await asyncio.wait_for(reader.readexactly(3), 5) == b"bcd"
    assert await asyncio.wait_for(new_reader.readexactly(1), 5) == b"x"
    writer.close()
    new_writer.close()


async def test_an_unknown_mode_is_refused(proxy: TcpProxy) -> None:
    with pytest.raises(ValueError, match="mode: one of drop, blackhole"):
        proxy.cut("slow")


def test_restarted_processes_get_free_ports_below_the_ephemeral_range() -> None:
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = [restartable_port() for _ in range(20)]
    assert all(1024 <= port < low and port_is_free("127.0.0.1", port) for port in ports), ports
