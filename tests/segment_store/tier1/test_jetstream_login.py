"""The JetStream Tier-1 logs in to NATS: with a credentials file (``--nats-creds``: the user's JWT and nkey seed,
decentralized JWT authentication), or a user and password in the URL; a refused login is one message that names
the servers (never the password) and NATS's reason, and the settings refuse a credentials file that is not there."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from jetstream_helpers import log_config, round_trip
from nats_credentials import OperatorLogin, operator_login, password_login

from segment_store.tier1.config import Tier1Config
from segment_store.tier1.jetstream.config import JetStreamLogConfig, redacted
from segment_store.tier1.jetstream.nats_server import EmbeddedNatsServer, NatsServerConfig
from segment_store.tier1.log import DataLogNotAvailableError
from segstore_shared.coordination.zookeeper_server import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PASSWORD = "s3cret-pw"
ENTRIES = [b"logged in %d" % i for i in range(5)]


@pytest.fixture(scope="module")
def login(tmp_path_factory: pytest.TempPathFactory) -> OperatorLogin:
    return operator_login(tmp_path_factory.mktemp("nats-operator"))


def _server(root: Path, auth_config: Path) -> EmbeddedNatsServer:
    return EmbeddedNatsServer(
        NatsServerConfig(data_dir=root / "nats", port=free_port(), http_port=free_port(), auth_config=auth_config)
    )


@pytest.fixture(scope="module")
def operator_server(tmp_path_factory: pytest.TempPathFactory, login: OperatorLogin) -> Iterator[EmbeddedNatsServer]:
    with _server(tmp_path_factory.mktemp("operator"), login.auth_config) as running:
        yield running


@pytest.fixture(scope="module")
def password_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedNatsServer]:
    root = tmp_path_factory.mktemp("password")
    with _server(root, password_login(root / "auth", "segstore", PASSWORD)) as running:
        yield running


def _run(config: JetStreamLogConfig) -> list[bytes]:
    return asyncio.run(asyncio.wait_for(round_trip(config, ENTRIES), 60))


def _config(url: str, prefix: str, **overrides: object) -> JetStreamLogConfig:
    return log_config([url], prefix, 1, connect_timeout_s=3.0, **overrides)


def test_a_credentials_file_logs_in(operator_server: EmbeddedNatsServer, login: OperatorLogin) -> None:
    read = _run(_config(operator_server.url, "creds", creds=str(login.creds)))
    assert read == ENTRIES


@pytest.mark.parametrize("who", ["nobody", "stranger"])
def test_a_refused_login_says_why(operator_server: EmbeddedNatsServer, login: OperatorLogin, who: str) -> None:
    creds = None if who == "nobody" else str(login.other_creds)
    with pytest.raises(DataLogNotAvailableError) as refused:
        _run(_config(operator_server.url, f"refused-{who}", creds=creds))
    message = str(refused.value)
    assert message.startswith(f"NATS at {operator_server.url} refused the login: "), message
    assert "Authorization Violation" in message


def test_a_user_and_password_in_the_url_log_in(password_server: EmbeddedNatsServer) -> None:
    url = f"nats://segstore:{PASSWORD}@127.0.0.1:{password_server.config.port}"
    assert _run(_config(url, "password")) == ENTRIES


def test_a_wrong_password_is_refused_without_showing_it(password_server: EmbeddedNatsServer) -> None:
    url = f"nats://segstore:wrong-{PASSWORD}@127.0.0.1:{password_server.config.port}"
    with pytest.raises(DataLogNotAvailableError) as refused:
        _run(_config(url, "wrong"))
    message = str(refused.value)
    assert "Authorization Violation" in message
    assert PASSWORD not in message
    assert f"nats://segstore:***@127.0.0.1:{password_server.config.port}" in message


def test_settings_check_the_credentials_file_and_hide_passwords(tmp_path: Path, login: OperatorLogin) -> None:
    with pytest.raises(ValueError, match=r"nats_creds: .*missing.creds: no such file"):
        Tier1Config(backend="jetstream", nats=("nats://h:4222",), nats_creds=str(tmp_path / "missing.creds"))
    environment = {"SEGSTORE_TIER1": "jetstream", "SEGSTORE_NATS": f"nats://u:{PASSWORD}@h:4222"}
    config = Tier1Config.from_env({**environment, "SEGSTORE_NATS_CREDS": str(login.creds)})
    assert config.jetstream().creds == str(login.creds)
    assert PASSWORD not in config.describe()
    assert redacted("tls://u:p@h:1") == "tls://u:***@h:1"
    assert redacted("nats://h:1") == "nats://h:1"
    assert redacted("nats://token@h:1") == "nats://token@h:1"
