"""Choosing Tier-1 from the environment and the command line, with errors that name the setting."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from segment_store.tier1.config import Tier1Config
from segment_store.tier1.jetstream.config import JetStreamLogConfig, parse_servers
from segment_store.tier1.jetstream.nats_server import NatsServerConfig, render_config
from segstore_cli.main import build_parser

pytestmark = pytest.mark.unit


def test_default_is_the_file_ledger_log() -> None:
    assert Tier1Config.from_env({}).backend == "file"
    assert Tier1Config().describe() == "tier1 file ledgers"


def test_replicas_default_to_three_with_several_servers_and_one_with_one() -> None:
    several = Tier1Config.from_env({"SEGSTORE_TIER1": "jetstream", "SEGSTORE_NATS": "h1:4222,h2:4222,h3:4222"})
    assert several.nats == ("nats://h1:4222", "nats://h2:4222", "nats://h3:4222")
    assert several.jetstream().replicas == 3
    one = Tier1Config.from_env({"SEGSTORE_TIER1": "jetstream", "SEGSTORE_NATS": "nats://h1:4222"})
    assert one.jetstream().replicas == 1
    assert "R1" in one.describe()


def test_flags_win_over_the_environment() -> None:
    args = build_parser().parse_args(
        ["segmentstore", "--tier1", "jetstream", "--nats", "nats://a:1,nats://b:2", "--tier1-replicas", "2"]
    )
    config = Tier1Config.from_cli(args, {"SEGSTORE_TIER1": "file", "SEGSTORE_TIER1_REPLICAS": "5"})
    assert (config.backend, config.nats, config.effective_replicas) == ("jetstream", ("nats://a:1", "nats://b:2"), 2)
    assert config.jetstream().stream_name("container-3") == "segstore-tier1-container-3"


def test_the_file_ledger_lease_is_1000_ms_unless_set_by_flag_or_environment() -> None:
    assert Tier1Config().lease_ms == 1000
    assert Tier1Config.from_env({"SEGSTORE_TIER1_LEASE_MS": "250"}).lease_ms == 250
    args = build_parser().parse_args(["segmentstore", "--tier1-lease-ms", "0"])
    assert Tier1Config.from_cli(args, {"SEGSTORE_TIER1_LEASE_MS": "250"}).lease_ms == 0


@pytest.mark.parametrize(
    ("environment", "message"),
    [
        ({"SEGSTORE_TIER1": "jetstream"}, "nats: the JetStream Tier-1 needs NATS server URLs"),
        ({"SEGSTORE_TIER1": "bookkeeper"}, "tier1: must be 'file' or 'jetstream'"),
        ({"SEGSTORE_TIER1": "jetstream", "SEGSTORE_NATS": "h:1", "SEGSTORE_TIER1_REPLICAS": "7"}, "tier1_replicas"),
        ({"SEGSTORE_TIER1": "jetstream", "SEGSTORE_NATS": "h:1", "SEGSTORE_TIER1_REPLICAS": "x"}, "tier1_replicas"),
        ({"SEGSTORE_NATS": "http://h:1"}, "not a NATS server URL"),
        ({"SEGSTORE_TIER1_LEASE_MS": "-1"}, "tier1_lease_ms: must be between 0 and 60000"),
        ({"SEGSTORE_TIER1_LEASE_MS": "1s"}, "tier1_lease_ms: not a number"),
        (
            {"SEGSTORE_TIER1": "jetstream", "SEGSTORE_NATS": "h:1", "SEGSTORE_TIER1_STREAM_PREFIX": "a.b"},
            "stream_prefix",
        ),
    ],
)
def test_bad_settings_name_the_setting(environment: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Tier1Config.from_env(environment).jetstream()


def test_segmentstore_command_refuses_a_bad_tier1(capsys: pytest.CaptureFixture[str]) -> None:
    args = build_parser().parse_args(["segmentstore", "--tier1", "jetstream", "--in-memory"])
    assert isinstance(args, argparse.Namespace)
    assert args.func(args) == 2
    assert "needs NATS server URLs" in capsys.readouterr().err


def test_jetstream_config_checks() -> None:
    with pytest.raises(ValueError, match="servers"):
        JetStreamLogConfig(servers=())
    with pytest.raises(ValueError, match="replicas"):
        JetStreamLogConfig(servers=("nats://h:1",), replicas=0)
    with pytest.raises(ValueError, match="no NATS server"):
        parse_servers(" , ")


def test_nats_server_configuration_of_a_cluster_node(tmp_path: object) -> None:
    from pathlib import Path

    config = NatsServerConfig(
        data_dir=Path(str(tmp_path)), port=4222, http_port=8222, cluster_port=6222,
        routes=("127.0.0.1:6222", "127.0.0.1:6223"), sync_interval="always",
    )  # fmt: skip
    text = render_config(config)
    assert "max_payload: 2097152" in text and "sync_interval: always" in text
    assert "routes: [nats-route://127.0.0.1:6222, nats-route://127.0.0.1:6223]" in text
    with pytest.raises(ValueError, match="sync_interval"):
        NatsServerConfig(data_dir=Path(str(tmp_path)), sync_interval="sometimes")
    with pytest.raises(ValueError, match="cluster_port"):
        NatsServerConfig(data_dir=Path(str(tmp_path)), routes=("h:1",))


def test_nats_tls_ca_from_the_flag_or_the_environment_reaches_the_log_config(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("not read here")
    args = build_parser().parse_args(
        ["segmentstore", "--tier1", "jetstream", "--nats", "tls://n1:4222", "--nats-tls-ca", str(ca)]
    )
    assert Tier1Config.from_cli(args, {}).jetstream().tls_ca == str(ca)
    env = {"SEGSTORE_TIER1": "jetstream", "SEGSTORE_NATS": "n1:4222", "SEGSTORE_NATS_TLS_CA": str(ca)}
    assert Tier1Config.from_env(env).nats_tls_ca == str(ca)
    with pytest.raises(ValueError, match=r"nats_tls_ca: .*missing.pem: no such file"):
        Tier1Config.from_env({**env, "SEGSTORE_NATS_TLS_CA": str(tmp_path / "missing.pem")})


def test_a_nats_server_with_a_certificate_listens_with_tls(tmp_path: Path) -> None:
    config = NatsServerConfig(data_dir=tmp_path, tls_cert=tmp_path / "c.pem", tls_key=tmp_path / "k.pem")
    assert config.url == "tls://127.0.0.1:4222"
    assert f'tls {{\n  cert_file: "{tmp_path / "c.pem"}"\n  key_file: "{tmp_path / "k.pem"}"\n}}' in (
        render_config(config)
    )
    with pytest.raises(ValueError, match="give both or neither"):
        NatsServerConfig(data_dir=tmp_path, tls_cert=tmp_path / "c.pem")
