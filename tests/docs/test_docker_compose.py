"""``docker-compose.yml`` describes a shared-nothing cluster that fits together (no Docker engine here, so the
file is checked, not run): each segment store has its own volume and Tier-1 on the three NATS nodes, whose
configurations the real ``nats-server`` accepts, route to each other, take a full data frame and fsync before they
acknowledge (``sync_interval: always``, with their monitoring endpoints given to the segment stores); every server's
command line is one ``segstore`` accepts, with TLS and authentication on, from files that are declared secrets."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from segment_store.tier1.config import Tier1Config
from segment_store.tier1.jetstream.config import parse_servers
from segment_store.tier1.jetstream.nats_server import find_nats_server
from segment_store.tier1.jetstream.records import HEADER_ROOM

pytestmark = pytest.mark.unit

COMPOSE = Path(__file__).resolve().parents[2] / "docker-compose.yml"


def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


def test_segment_stores_share_no_volume_and_use_jetstream() -> None:
    document = compose()
    stores = {name: s for name, s in document["services"].items() if name.startswith("segmentstore")}
    assert len(stores) == 3
    volumes = [tuple(service["volumes"]) for service in stores.values()]
    assert len(set(volumes)) == 3 and all(len(v) == 1 for v in volumes), "a segment store shares a volume"
    for service in stores.values():
        assert "--cluster" in service["command"]
        environment = {k: str(v) for k, v in service["environment"].items()}
        tier1 = Tier1Config.from_env(environment)
        assert tier1.backend == "jetstream" and tier1.effective_replicas == 3
        assert environment["SEGSTORE_TIER2_BACKEND"] == "s3"


def test_nats_configurations_are_valid_routed_and_fit_a_frame(tmp_path: Path) -> None:
    document = compose()
    urls = parse_servers(document["x-segmentstore"]["environment"]["SEGSTORE_NATS"])
    listens, routes = [], []
    for name, config in document["configs"].items():
        content = config["content"]
        path = tmp_path / f"{name}.conf"
        path.write_text(content)
        checked = subprocess.run([find_nats_server(), "-c", str(path), "-t"], capture_output=True, text=True)
        assert checked.returncode == 0, f"{name}: {checked.stdout}{checked.stderr}"
        listens.append(re.search(r"^listen: (\S+)$", content, re.MULTILINE)[1])  # type: ignore[index]
        routes.append(re.search(r"routes: \[(.*)\]", content)[1])  # type: ignore[index]
        payload = re.search(r"max_payload: (\d+)MB", content)
        assert payload and int(payload[1]) * 1024 * 1024 >= 1024 * 1024 + 8 * 1024 + HEADER_ROOM
    assert sorted(f"nats://{listen}" for listen in listens) == sorted(urls)
    assert len(set(routes)) == 1 and routes[0].count("nats-route://") == 3


def test_servers_run_with_tls_and_authentication_from_declared_secrets() -> None:
    from segstore_cli.main import build_parser

    document = compose()
    declared = {f"/run/secrets/{name}" for name in document["secrets"]}
    servers = {n: s for n, s in document["services"].items() if n == "controller" or n.startswith("segmentstore")}
    keys = set()
    for name, service in servers.items():
        args = build_parser().parse_args(service["command"])  # flags segstore knows (SystemExit otherwise)
        mounted = {f"/run/secrets/{secret}" for secret in service["secrets"]}
        files = [args.tls_cert, args.tls_key, args.auth_token_signing_key_file]
        assert all(files), f"{name}: TLS and the token signing key must be on"
        if name == "controller":
            files += [args.auth_password_file, args.tls_trust_store]
        assert set(files) <= declared & mounted, f"{name}: {set(files) - (declared & mounted)} is not a mounted secret"
        assert args.advertise_host == "localhost", f"{name}: advertise the name the certificate holds"
        keys.add(args.auth_token_signing_key_file)
    assert len(keys) == 1, "the controller and the segment stores must share one signing key"


def test_nats_nodes_sync_always_and_the_segment_stores_can_check_it() -> None:
    """Every NATS node fsyncs before it acknowledges (segstore's default; the NATS server's own is lazy), and the
    segment stores are given every node's monitoring endpoint, where they check it at start-up."""
    document = compose()
    https = []
    for name, config in document["configs"].items():
        content = config["content"]
        jetstream = re.search(r"jetstream \{([^}]*)\}", content)
        assert jetstream, f"{name}: no jetstream block"
        settings = dict(part.strip().split(":", 1) for part in jetstream[1].split(",") if part.strip())
        assert {k.strip(): v.strip() for k, v in settings.items()}.get("sync_interval") == "always", name
        https.append("http://" + re.search(r"^http: (\S+)$", content, re.MULTILINE)[1])  # type: ignore[index]
    environment = {k: str(v) for k, v in document["x-segmentstore"]["environment"].items()}
    tier1 = Tier1Config.from_env(environment)
    assert sorted(tier1.nats_monitor) == sorted(https)
    assert tier1.jetstream().monitors == tier1.nats_monitor
