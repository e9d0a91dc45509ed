"""Safe by default: every NATS server segstore starts fsyncs before it acknowledges (``sync_interval: always``);
the lazy mode is an explicit choice whose help says what it can lose; ``--nats-monitor`` endpoints are parsed, and
a ``/varz`` document tells the fsync policy. (The warning against real servers: ``test_jetstream_sync_warning``.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from segment_store.tier1.config import Tier1Config
from segment_store.tier1.jetstream.nats_server import (
    LAZY_SYNC_RISK,
    SYNC_ALWAYS,
    SYNC_DEFAULT,
    NatsCluster,
    NatsServerConfig,
    render_config,
)
from segment_store.tier1.jetstream.sync_check import SyncUnknownError, parse_monitors, parse_varz
from segstore_cli.main import build_parser

pytestmark = pytest.mark.unit


def test_a_nats_server_config_syncs_always_unless_told_otherwise(tmp_path: Path) -> None:
    config = NatsServerConfig(data_dir=tmp_path)
    assert config.sync_interval == SYNC_ALWAYS == "always"
    assert "  sync_interval: always\n" in render_config(config)
    lazy = NatsServerConfig(data_dir=tmp_path, sync_interval=SYNC_DEFAULT)
    assert "sync_interval" not in render_config(lazy)  # the server's own default: every 2 minutes
    assert "  sync_interval: 10s\n" in render_config(NatsServerConfig(data_dir=tmp_path, sync_interval="10s"))
    assert config.monitor_url == "http://127.0.0.1:8222"


def test_clusters_the_tests_and_the_selftest_start_sync_always(tmp_path: Path) -> None:
    cluster = NatsCluster.on_free_ports(tmp_path, 3)
    assert {node.config.sync_interval for node in cluster.nodes} == {SYNC_ALWAYS}
    assert cluster.monitors == ",".join(node.config.monitor_url for node in cluster.nodes)
    lazy = NatsCluster.on_free_ports(tmp_path / "lazy", 1, sync_interval=SYNC_DEFAULT)
    assert lazy.nodes[0].config.sync_interval == SYNC_DEFAULT
    assert "no_advertise" not in render_config(cluster.nodes[0].config)
    hidden = NatsCluster.on_free_ports(tmp_path / "hidden", 3, advertise=False)  # the selftest's, behind proxies
    assert "  no_advertise: true\n" in render_config(hidden.nodes[0].config)


def test_segstore_nats_defaults_to_sync_always(tmp_path: Path) -> None:
    from segstore_cli.commands.nats import _choose_ports, _nats_cluster

    args = build_parser().parse_args(["nats", "--data-dir", str(tmp_path), "--port", "0"])
    assert args.sync == "always"
    cluster = _nats_cluster(args, tmp_path, _choose_ports(args))
    assert [node.config.sync_interval for node in cluster.nodes] == ["always"]
    assert "sync_interval: always" in render_config(cluster.nodes[0].config)
    lazy = build_parser().parse_args(["nats", "--data-dir", str(tmp_path), "--sync", "default", "--nodes", "3"])
    cluster = _nats_cluster(lazy, tmp_path, _choose_ports(lazy))
    assert [node.config.sync_interval for node in cluster.nodes] == ["default"] * 3


def test_segstore_nats_help_says_what_the_lazy_mode_can_lose(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["nats", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "'always' (the default)" in help_text
    assert " ".join(LAZY_SYNC_RISK.split()) in help_text
    for words in ("power loss", "OS crash of one server", "network partition", "Jepsen, NATS 2.12.1"):
        assert words in help_text


def test_monitoring_endpoints_from_flags_and_environment() -> None:
    assert parse_monitors("h1:8222, http://h2:8223/,https://h3:8224") == (
        "http://h1:8222", "http://h2:8223", "https://h3:8224"
    )  # fmt: skip
    for bad in ("nats://h:4222", "http://h:8222/varz", " , "):
        with pytest.raises(ValueError):
            parse_monitors(bad)
    env = {"SEGSTORE_TIER1": "jetstream", "SEGSTORE_NATS": "h1:4222", "SEGSTORE_NATS_MONITOR": "h1:8222"}
    assert Tier1Config.from_env(env).jetstream().monitors == ("http://h1:8222",)
    args = build_parser().parse_args(["segmentstore", "--tier1", "jetstream", "--nats", "h1:4222",
                                      "--nats-monitor", "h1:9000,h2:9001"])  # fmt: skip
    assert Tier1Config.from_cli(args, env).nats_monitor == ("http://h1:9000", "http://h2:9001")
    assert Tier1Config.from_env({"SEGSTORE_NATS": "h1:4222"}).jetstream().monitors == ()
    with pytest.raises(ValueError, match="nats_monitor"):
        Tier1Config.from_env({**env, "SEGSTORE_NATS_MONITOR": "nats://h1:4222"})


def test_the_standalone_passes_the_monitoring_endpoints_on() -> None:
    from segstore_cli.commands.standalone import _storage_flags

    args = build_parser().parse_args(["standalone", "--tier1", "jetstream", "--nats", "h:4222",
                                      "--nats-monitor", "http://h:8222"])  # fmt: skip
    flags = _storage_flags(args)
    assert flags[flags.index("--nats-monitor") + 1] == "http://h:8222"


def test_the_fsync_policy_in_a_varz_document() -> None:
    always = {"server_name": "n0", "jetstream": {"config": {"sync_interval": 120_000_000_000, "sync_always": True}}}
    assert parse_varz("http://h:1", always).always
    lazy = parse_varz("http://h:1", {"server_name": "n1", "jetstream": {"config": {"sync_interval": 10**10}}})
    assert not lazy.always and lazy.interval_s == 10.0
    assert lazy.describe() == "n1 (http://h:1: fsync every 10 s)"
    old = parse_varz("http://h:1", {"server_id": "NABC", "jetstream": {"config": {"store_dir": "/d"}}})
    assert not old.always and old.describe() == "NABC (http://h:1: fsync lazily)"
    no_config: list[dict[str, object]] = [{"server_name": "n2"}, {"jetstream": {}}, {"jetstream": "x"}]
    for no_jetstream in no_config:
        with pytest.raises(SyncUnknownError, match=r"jetstream\.config"):
            parse_varz("http://h:1", no_jetstream)
