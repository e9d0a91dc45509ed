"""The JetStream Tier-1 over TLS, against a real NATS server with a certificate (``tls { cert_file, key_file }``):
appends and reads with the CA trusted (``tls://`` URLs, or ``nats://`` ones with ``tls_ca``), and a clear refusal
when the certificate is not trusted or the client speaks plain text."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from jetstream_helpers import log_config, round_trip
from tls_fixtures import TlsFiles, make_tls_files

from segment_store.tier1.jetstream.config import JetStreamLogConfig
from segment_store.tier1.jetstream.nats_server import EmbeddedNatsServer, NatsServerConfig
from segment_store.tier1.log import DataLogNotAvailableError
from segstore_shared.coordination.zookeeper_server import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ENTRIES = [b"over TLS %d" % i for i in range(5)]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_tls_files(tmp_path_factory.mktemp("nats-tls"))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, files: TlsFiles) -> Iterator[EmbeddedNatsServer]:
    config = NatsServerConfig(
        data_dir=tmp_path_factory.mktemp("nats"),
        port=free_port(),
        http_port=free_port(),
        tls_cert=files.cert,
        tls_key=files.key,
    )
    with EmbeddedNatsServer(config) as running:
        yield running


def _config(url: str, prefix: str, **overrides: object) -> JetStreamLogConfig:
    return log_config([url], prefix, 1, connect_timeout_s=3.0, **overrides)


@pytest.mark.parametrize("scheme", ["tls", "nats"])
def test_appends_and_reads_over_tls_with_the_ca_trusted(
    server: EmbeddedNatsServer, files: TlsFiles, scheme: str
) -> None:
    port = server.config.port
    config = _config(f"{scheme}://localhost:{port}", f"tls-{scheme}", tls_ca=str(files.ca))
    read = asyncio.run(asyncio.wait_for(round_trip(config, ENTRIES), 60))
    assert read == ENTRIES


def test_an_untrusted_certificate_is_not_available(server: EmbeddedNatsServer) -> None:
    config = _config(f"tls://localhost:{server.config.port}", "tls-untrusted")  # the system's trust store
    with pytest.raises(DataLogNotAvailableError, match="cannot connect to NATS"):
        asyncio.run(round_trip(config, ENTRIES))


def test_a_plain_text_client_is_refused(server: EmbeddedNatsServer) -> None:
    config = _config(f"nats://localhost:{server.config.port}", "tls-plain")
    with pytest.raises(DataLogNotAvailableError, match="cannot connect to NATS"):
        asyncio.run(round_trip(config, ENTRIES))


def test_a_certificate_for_another_host_is_not_available(server: EmbeddedNatsServer, files: TlsFiles) -> None:
    config = _config(f"tls://127.0.0.1:{server.config.port}", "tls-ip", tls_ca=str(files.ca))  # names localhost
    with pytest.raises(DataLogNotAvailableError, match="cannot connect to NATS"):
        asyncio.run(round_trip(config, ENTRIES))


def test_the_ca_file_is_what_trust_hangs_on(tmp_path: Path, server: EmbeddedNatsServer) -> None:
    other = make_tls_files(tmp_path)  # another CA: it did not sign the server's certificate
    config = _config(f"tls://localhost:{server.config.port}", "tls-other", tls_ca=str(other.ca))
    with pytest.raises(DataLogNotAvailableError, match="cannot connect to NATS"):
        asyncio.run(round_trip(config, ENTRIES))
