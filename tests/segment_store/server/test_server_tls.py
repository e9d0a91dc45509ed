"""The wire server with TLS: TLS from the first byte, failed handshakes cost one connection and one log line.

A real in-memory segment store on 127.0.0.1 with a certificate for ``localhost`` (a throwaway CA made here);
clients connect to ``localhost``, so the host name check is the real one.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tls_fixtures import TlsFiles, make_tls_files
from wire_peer import WirePeer

from segment_store.client import (
    ClientConfig,
    Connection,
    ConnectionConfig,
    ConnectionPool,
    Endpoint,
    NoSuchSegmentError,
    SegmentClient,
    TlsError,
    open_connection,
)
from segment_store.protocol import FrameDecoder, GetStreamSegmentInfo, Hello, NoSuchSegment, encode, local_hello
from segment_store.server.config import ServerConfig
from segment_store.server.service import SegmentStoreService, ServiceConfig
from segstore_shared.auth.tls import TlsConfig, TrustConfig

pytestmark = pytest.mark.integration

HANDSHAKE_LOG = "segment_store.server.tls_accept"


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_tls_files(tmp_path_factory.mktemp("tls"))


async def _start(tls: TlsConfig, **server: object) -> SegmentStoreService:
    config = ServiceConfig(server=ServerConfig(tls=tls, **server))  # type: ignore[arg-type]
    return await SegmentStoreService.start_in_memory(container_count=2, config=config)


@pytest.fixture
async def service(files: TlsFiles) -> AsyncIterator[SegmentStoreService]:
    service = await _start(TlsConfig(files.cert, files.key))
    try:
        yield service
    finally:
        await service.stop()


def _client(trust: TrustConfig | None, port: int) -> SegmentClient:
    config = ClientConfig(connection=ConnectionConfig(connect_timeout_ms=5_000, tls=trust))
    return SegmentClient(("localhost", port), config)


async def _tls_peer(port: int, trust: TrustConfig) -> WirePeer:
    """A raw wire peer over TLS whose Hello leaves with the end of the handshake (the server buffers it)."""
    reader, writer = await asyncio.open_connection("localhost", port, ssl=trust.client_context())
    peer = WirePeer(reader, writer)
    peer.send(local_hello())
    assert isinstance(await peer.receive(), Hello)
    return peer


def _handshake_failures(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == HANDSHAKE_LOG and "TLS handshake failed" in r.message]


async def test_client_with_the_ca_writes_and_reads_over_tls(service: SegmentStoreService, files: TlsFiles) -> None:
    port = service.endpoint[1]
    async with _client(TrustConfig(files.ca), port) as client:
        await client.create_segment("tls/s/0")
        async with client.writer("tls/s/0") as writer:
            await writer.write_many([b"event %d" % i for i in range(2_000)])
        length = (await client.get_segment_info("tls/s/0")).write_offset
        events = [e.data async for e in client.reader("tls/s/0", end_offset=length)]
        connection = await client.connection_for("tls/s/0")
    assert events == [b"event %d" % i for i in range(2_000)]
    assert connection.endpoint == ("localhost", port)


async def test_plain_text_client_is_closed_and_logged_once_while_a_tls_client_goes_on(
    service: SegmentStoreService, files: TlsFiles, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=HANDSHAKE_LOG)
    port = service.endpoint[1]
    tls_peer = await _tls_peer(port, TrustConfig(files.ca))
    plain = await WirePeer.connect(("127.0.0.1", port), hello=False)
    plain.send(local_hello())
    assert await plain.closed_by_server(timeout=10.0)
    await plain.close()
    reply = await tls_peer.request(GetStreamSegmentInfo(7, "tls/missing/0", ""))
    assert isinstance(reply, NoSuchSegment) and reply.request_id == 7
    await tls_peer.close()
    failures = _handshake_failures(caplog)
    assert len(failures) == 1, failures
    assert "plain-text client" in failures[0] and "127.0.0.1" in failures[0]
    assert not [r for r in caplog.records if r.exc_info], "no tracebacks in the log"
    assert len(service.connections) == 0 or all(c.peer != "?" for c in service.connections)


async def test_client_trusting_another_ca_fails_at_once_with_a_certificate_error(
    service: SegmentStoreService, tmp_path: Path
) -> None:
    stranger = make_tls_files(tmp_path / "stranger")
    attempts: list[Endpoint] = []

    async def counted(endpoint: Endpoint, config: ConnectionConfig) -> Connection:
        attempts.append(endpoint)
        return await open_connection(endpoint, config)

    config = ConnectionConfig(tls=TrustConfig(stranger.ca))
    pool = ConnectionPool(config, connect=counted)
    client = SegmentClient(("localhost", service.endpoint[1]), ClientConfig(connection=config), pool=pool)
    with pytest.raises(TlsError, match=r"certificate was refused .*trust store") as caught:
        await asyncio.wait_for(client.get_segment_info("tls/s/0"), 10.0)
    await pool.close()
    assert not caught.value.retriable
    assert str(stranger.ca) in str(caught.value)
    assert len(attempts) == 1  # not retried


async def test_client_connecting_by_ip_address_fails_the_host_name_check(
    service: SegmentStoreService, files: TlsFiles
) -> None:
    config = ClientConfig(connection=ConnectionConfig(tls=TrustConfig(files.ca)))
    async with SegmentClient(("127.0.0.1", service.endpoint[1]), config) as client:
        with pytest.raises(TlsError, match=r"names host '127.0.0.1'"):
            await asyncio.wait_for(client.get_segment_info("tls/s/0"), 10.0)
    lenient = ClientConfig(connection=ConnectionConfig(tls=TrustConfig(files.ca, verify_hostname=False)))
    async with SegmentClient(("127.0.0.1", service.endpoint[1]), lenient) as client:
        with pytest.raises(NoSuchSegmentError):  # answered: connected
            await client.get_segment_info("tls/s/0")


async def test_tls_client_to_a_plain_text_server_fails_cleanly(files: TlsFiles) -> None:
    plain = await SegmentStoreService.start_in_memory(container_count=1)
    try:
        async with _client(TrustConfig(files.ca), plain.endpoint[1]) as client:
            with pytest.raises(ConnectionError):
                await asyncio.wait_for(client.get_segment_info("tls/s/0"), 10.0)
    finally:
        await plain.stop()


async def test_client_certificates_required_refuses_a_client_without_one(
    files: TlsFiles, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=HANDSHAKE_LOG)
    service = await _start(TlsConfig(files.cert, files.key, files.ca))
    try:
        port = service.endpoint[1]
        async with _client(TrustConfig(files.ca), port) as client:
            with pytest.raises(TlsError, match="client certificate") as caught:
                await asyncio.wait_for(client.get_segment_info("tls/s/0"), 10.0)
        assert not caught.value.retriable
        failures = _handshake_failures(caplog)
        assert len(failures) == 1 and "certificate" in failures[0], failures
        mutual = TrustConfig(files.ca, cert_path=files.client_cert, key_path=files.client_key)
        async with _client(mutual, port) as client:
            with pytest.raises(NoSuchSegmentError):  # answered: connected
                await client.get_segment_info("tls/s/0")
    finally:
        await service.stop()


async def test_a_silent_peer_is_closed_after_the_handshake_timeout(
    files: TlsFiles, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=HANDSHAKE_LOG)
    service = await _start(TlsConfig(files.cert, files.key), tls_handshake_timeout_s=0.3)
    try:
        silent = await WirePeer.connect(("127.0.0.1", service.endpoint[1]), hello=False)
        assert await silent.closed_by_server(timeout=10.0)
        await silent.close()
        assert "longer than 0.3 seconds" in " ".join(_handshake_failures(caplog))
    finally:
        await service.stop()


async def test_handshakes_in_progress_count_against_max_connections(files: TlsFiles) -> None:
    service = await _start(TlsConfig(files.cert, files.key), max_connections=1)
    try:
        port = service.endpoint[1]
        silent = await WirePeer.connect(("127.0.0.1", port), hello=False)  # holds the one slot, handshaking
        with pytest.raises((ConnectionError, ssl.SSLError)):  # accepted after it (in order), refused
            await asyncio.wait_for(_tls_peer(port, TrustConfig(files.ca)), 10.0)
        silent.writer.write_eof()  # its handshake fails: the slot is free once the server closes it
        assert await silent.closed_by_server(timeout=10.0)
        await silent.close()
        assert not service._handshakes
        peer = await _tls_peer(port, TrustConfig(files.ca))
        await peer.close()
    finally:
        await service.stop()


async def test_stop_ends_handshakes_in_progress(files: TlsFiles) -> None:
    service = await _start(TlsConfig(files.cert, files.key), tls_handshake_timeout_s=60.0)
    port = service.endpoint[1]
    silent = await WirePeer.connect(("127.0.0.1", port), hello=False)
    peer = await _tls_peer(port, TrustConfig(files.ca))  # accepted after the silent one: that one is handshaking
    await peer.close()
    assert len(service._handshakes) == 1
    await asyncio.wait_for(service.stop(), 10.0)
    assert await silent.closed_by_server(timeout=10.0)
    await silent.close()


async def test_requests_pipelined_with_the_hello_are_answered_in_order(
    service: SegmentStoreService, files: TlsFiles
) -> None:
    """Bytes that arrive with the end of the handshake reach the connection after its start, in order."""
    context = TrustConfig(files.ca).client_context()
    reader, writer = await asyncio.open_connection("localhost", service.endpoint[1], ssl=context)
    writer.write(encode(local_hello()) + b"".join(encode(GetStreamSegmentInfo(i, f"p/s/{i}", "")) for i in range(50)))
    decoder = FrameDecoder()
    replies: list[object] = []
    while len(replies) < 51:
        data = await asyncio.wait_for(reader.read(1 << 16), 10.0)
        assert data, "closed early"
        decoder.feed(data)
        replies.extend(decoder)
    writer.close()
    assert isinstance(replies[0], Hello)
    assert sorted(r.request_id for r in replies[1:]) == list(range(50))  # type: ignore[attr-defined]
