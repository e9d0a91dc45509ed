"""ZooKeeper server settings for an ensemble member: the checks that name the key, and the ensemble built on free
ports (no server is started here; ``tests/segstore_shared/coordination/test_zookeeper_ensemble.py`` runs one)."""

from __future__ import annotations

from pathlib import Path

import pytest

from segstore_shared.coordination.zookeeper_server import QuorumPeer, ZooKeeperConfig, ZooKeeperEnsemble

pytestmark = pytest.mark.unit

PEERS = (
    QuorumPeer(1, "127.0.0.1", 2181, peer_port=2888, election_port=3888),
    QuorumPeer(2, "127.0.0.1", 2182, peer_port=2889, election_port=3889),
    QuorumPeer(3, "127.0.0.1", 2183, peer_port=2890, election_port=3890),
)


def test_quorum_peer_config_line_names_peer_and_election_ports() -> None:
    assert PEERS[1].config_line == "server.2=127.0.0.1:2889:3889"


@pytest.mark.parametrize(
    ("changes", "key"),
    [
        ({"server_id": 0}, "server_id"),
        ({"server_id": 256}, "server_id"),
        ({"peer_port": 0}, "peer_port"),
        ({"election_port": 70000}, "election_port"),
    ],
)
def test_quorum_peer_with_invalid_field_raises_naming_it(changes: dict[str, int], key: str) -> None:
    fields = {"server_id": 1, "host": "127.0.0.1", "client_port": 2181, "peer_port": 2888, "election_port": 3888}
    with pytest.raises(ValueError, match=key):
        QuorumPeer(**{**fields, **changes})  # type: ignore[arg-type]


def test_config_of_a_member_finds_its_own_entry(tmp_path: Path) -> None:
    config = ZooKeeperConfig(data_dir=tmp_path, port=2182, server_id=2, ensemble=PEERS)
    assert config.member == PEERS[1]
    assert ZooKeeperConfig(data_dir=tmp_path).member is None


@pytest.mark.parametrize(
    ("changes", "key"),
    [
        ({"server_id": 2}, "server_id"),  # no ensemble
        ({"ensemble": PEERS}, "server_id"),  # no server id
        ({"ensemble": PEERS, "server_id": 4, "port": 2181}, "server_id"),  # not a member
        ({"ensemble": (*PEERS, PEERS[0]), "server_id": 1, "port": 2181}, "ensemble"),  # an id twice
        ({"ensemble": PEERS, "server_id": 1, "port": 2999}, "ensemble"),  # its entry names another port
        ({"ensemble": PEERS, "server_id": 1, "port": 2181, "init_limit_ticks": 0}, "init_limit_ticks"),
    ],
)
def test_config_with_inconsistent_ensemble_raises_naming_the_key(
    tmp_path: Path, changes: dict[str, object], key: str
) -> None:
    with pytest.raises(ValueError, match=key):
        ZooKeeperConfig(data_dir=tmp_path, **changes)  # type: ignore[arg-type]


def test_ensemble_on_free_ports_gives_each_member_its_id_dir_and_the_same_member_list(tmp_path: Path) -> None:
    ensemble = ZooKeeperEnsemble.on_free_ports(tmp_path, 3)
    configs = [member.config for member in ensemble.members]
    assert [c.server_id for c in configs] == [1, 2, 3]
    assert len({c.data_dir for c in configs}) == 3
    assert all(c.ensemble == configs[0].ensemble for c in configs)
    ports = [p for peer in configs[0].ensemble for p in (peer.client_port, peer.peer_port, peer.election_port)]
    assert len(set(ports)) == 9
    assert ensemble.connect_string == ",".join(f"127.0.0.1:{c.port}" for c in configs)


def test_ensemble_of_one_member_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="size"):
        ZooKeeperEnsemble.on_free_ports(tmp_path, 1)
