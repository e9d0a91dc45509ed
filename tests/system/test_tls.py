"""TLS on both planes, end to end: ``segstore standalone --tls-cert ... --tls-key ...`` as a user runs it.

The certificates come from a throwaway CA made here (subjectAltName ``DNS:localhost`` only), so every client
connects by the name ``localhost`` and checks it, as Pravega's clients must (they refuse IP addresses as TLS
host names). Checked: our client library over ``tls://localhost:PORT`` (controller and segment stores),
the blocking forms, the official Pravega client, clear certificate errors that are not retried, a plain-text
client on the TLS wire port costing only its own connection, and client-certificate mode (``--tls-ca``).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pravega_client  # the official Pravega client: a test dependency (pyproject), never skipped
import pytest
from official_client import read_with_group
from standalone_process import StandaloneProcess
from tls_fixtures import TlsFiles, make_tls_files

from controller_client import (
    BlockingStreamManager,
    ControllerClient,
    ControllerClientConfig,
    ControllerTlsError,
    ControllerUnavailableError,
    ScalingPolicy,
    StreamConfiguration,
    StreamManager,
    StreamManagerConfig,
)
from segment_store.client import (
    ClientConfig,
    ConnectionConfig,
    ConnectionLostError,
    NoSuchSegmentError,
    SegmentClient,
    TlsError,
)
from segstore_shared.auth.tls import TrustConfig
from segstore_shared.coordination.zookeeper_server import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_tls_files(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def stranger(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    """Certificates of another CA: a client trusting only it trusts nothing the standalone has."""
    return make_tls_files(tmp_path_factory.mktemp("stranger"))


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory, files: TlsFiles) -> Iterator[StandaloneProcess]:
    flags = ("--tls-cert", str(files.cert), "--tls-key", str(files.key))
    with StandaloneProcess(tmp_path_factory.mktemp("standalone"), extra_args=flags) as process:
        yield process


def _uri(process: StandaloneProcess) -> str:
    return f"tls://localhost:{process.controller_port}"


def _ready_line(process: StandaloneProcess) -> str:
    return next(line for line in process.output if "segstore standalone ready" in line)


async def _write_and_read(manager: StreamManager, scope: str, count: int) -> list[bytes]:
    await manager.create_scope(scope)
    await manager.create_stream(scope, "events", StreamConfiguration(ScalingPolicy.fixed(2)))
    async with await manager.create_writer(scope, "events") as writer:
        for i in range(count):
            await writer.write_event(b"event %d" % i, routing_key=f"key-{i % 7}")
    end = await manager.tail_cut(scope, "events")
    async with manager.create_reader(scope, "events", end=end) as reader:
        return [event.data async for event in reader]


def test_standalone_with_tls_advertises_localhost(standalone: StandaloneProcess) -> None:
    line = _ready_line(standalone)
    assert f"controller tls://localhost:{standalone.controller_port}" in line
    assert f"segment store localhost:{standalone.segmentstore_port} (TLS)" in line


async def test_client_library_over_tls_creates_a_stream_writes_and_reads_back(
    standalone: StandaloneProcess, files: TlsFiles
) -> None:
    config = ControllerClientConfig(trust_store=str(files.ca))
    async with await ControllerClient.connect(_uri(standalone), config, wait_ready=True) as controller:
        assert controller.tls == TrustConfig(files.ca)
        async with StreamManager(controller) as manager:
            events = await _write_and_read(manager, "tls-lib", 1_000)
            assert await controller.get_uri("tls-lib", "events", 0) == ("localhost", standalone.segmentstore_port)
            connections = manager.client.pool.connections(("localhost", standalone.segmentstore_port))
            assert connections and all(c._transport.get_extra_info("ssl_object") for c in connections)  # type: ignore[union-attr]
    assert sorted(events) == sorted(b"event %d" % i for i in range(1_000))


def test_blocking_manager_takes_the_trust_store_from_its_config(standalone: StandaloneProcess, files: TlsFiles) -> None:
    config = StreamManagerConfig(trust_store=str(files.ca))
    with BlockingStreamManager.connect(_uri(standalone), config) as manager:
        manager.create_scope("tls-blocking")
        manager.create_stream("tls-blocking", "events", StreamConfiguration(ScalingPolicy.fixed(1)))
        with manager.create_writer("tls-blocking", "events") as writer:
            writer.write_events([(b"blocking %d" % i, None) for i in range(100)]).result(30)
        end = manager.tail_cut("tls-blocking", "events")
        events = [event.data for event in manager.create_reader("tls-blocking", "events", end=end)]
    assert events == [b"blocking %d" % i for i in range(100)]


async def test_client_trusting_another_ca_fails_at_once_with_a_certificate_error(
    standalone: StandaloneProcess, stranger: TlsFiles
) -> None:
    config = ControllerClientConfig(trust_store=str(stranger.ca), retry_timeout_s=60.0)
    started = time.monotonic()
    with pytest.raises(ControllerTlsError, match="certificate is not trusted: check that the trust store") as caught:
        await ControllerClient.connect(_uri(standalone), config, wait_ready=True)
    assert str(stranger.ca) in str(caught.value)
    async with await ControllerClient.connect(_uri(standalone), config) as controller:
        with pytest.raises(ControllerTlsError, match="not trusted"):
            await controller.create_scope("never")
    segment_config = ClientConfig(connection=ConnectionConfig(tls=TrustConfig(stranger.ca)))
    async with SegmentClient(("localhost", standalone.segmentstore_port), segment_config) as client:
        with pytest.raises(TlsError, match="certificate was refused") as refused:
            await client.get_segment_info("tls-lib/events/0")
    assert not refused.value.retriable
    assert time.monotonic() - started < 30.0  # not retried for retry_timeout_s


async def test_controller_uri_with_an_ip_address_fails_the_host_name_check(
    standalone: StandaloneProcess, files: TlsFiles
) -> None:
    config = ControllerClientConfig(trust_store=str(files.ca), retry_timeout_s=60.0)
    async with await ControllerClient.connect(f"tls://127.0.0.1:{standalone.controller_port}", config) as controller:
        with pytest.raises(ControllerTlsError, match=r"does not name host '127\.0\.0\.1'"):
            await controller.create_scope("never")


async def test_plain_text_clients_of_tls_ports_fail_cleanly_and_tls_clients_go_on(
    standalone: StandaloneProcess, files: TlsFiles
) -> None:
    endpoint = ("localhost", standalone.segmentstore_port)
    tls_config = ClientConfig(connection=ConnectionConfig(tls=TrustConfig(files.ca)))
    async with SegmentClient(endpoint, tls_config) as tls_client:
        with pytest.raises(NoSuchSegmentError):  # answered: the TLS connection is up
            await tls_client.get_segment_info("tls-plain/events/0")
        (connection,) = tls_client.pool.connections(endpoint)
        async with SegmentClient(endpoint) as plain:
            with pytest.raises(ConnectionLostError, match="does it want TLS"):
                await asyncio.wait_for(plain.get_segment_info("tls-plain/events/0"), 30.0)
        assert connection.is_open
        with pytest.raises(NoSuchSegmentError):
            await tls_client.get_segment_info("tls-plain/events/0")
        assert tls_client.pool.connections(endpoint) == [connection]
    log = (standalone.data_dir / "segmentstore.log").read_text()
    plain_failures = [line for line in log.splitlines() if "TLS handshake failed" in line and "plain-text" in line]
    assert plain_failures, "one line per refused connection"
    assert "Traceback" not in log
    plain_controller = ControllerClientConfig(retry_timeout_s=2.0)
    async with await ControllerClient.connect(f"tcp://127.0.0.1:{standalone.controller_port}", plain_controller) as c:
        with pytest.raises(ControllerUnavailableError, match="use a tls:// URI"):
            await c.create_scope("never")


def test_official_client_writes_and_reads_over_tls(
    standalone: StandaloneProcess, files: TlsFiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("pravega_client_tls_cert_path", str(files.ca))  # read when a StreamManager is made
    manager = pravega_client.StreamManager(_uri(standalone), tls_enabled=True)
    assert manager.create_scope("tls-official")
    assert manager.create_stream("tls-official", "events", 2)
    writer = manager.create_writer("tls-official", "events", 100)
    for i in range(500):
        writer.write_event(f"official-{i}", f"key-{i % 5}")
    writer.flush()
    events = read_with_group(manager, "tls-official", "events", "tls-group", 500, timeout_s=120)
    assert sorted(events) == sorted(f"official-{i}" for i in range(500))


@pytest.fixture(scope="module")
def mutual(tmp_path_factory: pytest.TempPathFactory, files: TlsFiles) -> Iterator[StandaloneProcess]:
    """A standalone requiring client certificates from the CA (its controller presents its own to its
    segment store, which requires one too)."""
    flags = ("--tls-cert", str(files.cert), "--tls-key", str(files.key), "--tls-ca", str(files.ca))
    with StandaloneProcess(tmp_path_factory.mktemp("mutual"), extra_args=flags) as process:
        yield process


async def test_client_certificate_mode_refuses_a_client_without_one(mutual: StandaloneProcess, files: TlsFiles) -> None:
    no_certificate = ControllerClientConfig(trust_store=str(files.ca), retry_timeout_s=60.0)
    started = time.monotonic()
    async with await ControllerClient.connect(_uri(mutual), no_certificate) as controller:
        with pytest.raises(ControllerTlsError, match="requires a client certificate"):
            await controller.create_scope("never")
    assert time.monotonic() - started < 30.0  # not retried for retry_timeout_s
    segment_config = ClientConfig(connection=ConnectionConfig(tls=TrustConfig(files.ca)))
    async with SegmentClient(("localhost", mutual.segmentstore_port), segment_config) as client:
        with pytest.raises(TlsError, match="requires a client certificate"):
            await client.get_segment_info("tls-mutual/events/0")

    with_certificate = ControllerClientConfig(
        trust_store=str(files.ca), client_cert=str(files.client_cert), client_key=str(files.client_key)
    )
    async with (
        await ControllerClient.connect(_uri(mutual), with_certificate) as controller,
        StreamManager(controller) as manager,
    ):
        events = await _write_and_read(manager, "tls-mutual", 200)
    assert sorted(events) == sorted(b"event %d" % i for i in range(200))
    log = (mutual.data_dir / "segmentstore.log").read_text()
    assert any("TLS handshake failed" in line and "certificate" in line for line in log.splitlines())


def test_standalone_with_a_key_of_another_certificate_exits_2_naming_it(
    tmp_path: Path, files: TlsFiles, stranger: TlsFiles
) -> None:
    command = [sys.executable, "-m", "segstore_cli", "standalone", "--data-dir", str(tmp_path)]
    flags = ["--tls-cert", str(files.cert), "--tls-key", str(stranger.key)]
    result = subprocess.run([*command, *flags], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip() == (
        f"segstore standalone: --tls-key {stranger.key}: does not belong to the certificate in --tls-cert {files.cert}"
    )


def test_standalone_whose_controller_does_not_trust_its_segment_store_exits_1_saying_so(
    tmp_path: Path, files: TlsFiles, stranger: TlsFiles
) -> None:
    command = [sys.executable, "-m", "segstore_cli", "standalone", "--data-dir", str(tmp_path)]
    ports = ["--controller-port", "0", "--segmentstore-port", str(free_port())]
    flags = ["--tls-cert", str(files.cert), "--tls-key", str(files.key), "--tls-trust-store", str(stranger.ca)]
    result = subprocess.run([*command, *ports, *flags], capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stderr[-2000:]
    assert "failed to start: TLS: the segment store's certificate was refused" in result.stderr
    assert f"trust store ({stranger.ca})" in result.stderr
