"""``docker-compose.yml`` describes a shared-nothing cluster that fits together (no Docker engine here, so the
file is checked here, and its services' command lines run as processes in tests/system/test_compose_commands.py):
each segment store has its own volume and Tier-1 on the three NATS nodes, whose configurations the real
``nats-server`` accepts, route to each other, take a full data frame and fsync before they acknowledge
(``sync_interval: always``, with their monitoring endpoints given to the segment stores); every server's command line
is one ``segstore`` accepts, with TLS and authentication on, from files that are declared secrets; one segstore image,
built once, and every other image pinned to a release; ZooKeeper, NATS and MinIO reachable only inside the network."""

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
from segstore_cli.commands.dev_secrets import COMPOSE_HOSTS

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
    clients, routes, cluster = [], [], []
    for name, config in document["configs"].items():
        content = config["content"]
        path = tmp_path / f"{name}.conf"
        path.write_text(content)
        checked = subprocess.run([find_nats_server(), "-c", str(path), "-t"], capture_output=True, text=True)
        assert checked.returncode == 0, f"{name}: {checked.stdout}{checked.stderr}"
        assert name in document["services"], f"config {name} is no service's"
        listen = re.search(r"^listen: 0\.0\.0\.0:(\d+)$", content, re.MULTILINE)
        assert listen, f"{name}: listen on every address of its container"
        clients.append(f"nats://{name}:{listen[1]}")
        cluster_listen = re.search(r"^\s+listen: 0\.0\.0\.0:(\d+)$", content, re.MULTILINE)
        assert cluster_listen, f"{name}: no cluster listen address"
        cluster.append(f"nats-route://{name}:{cluster_listen[1]}")
        routes.append(re.search(r"routes: \[(.*)\]", content)[1])  # type: ignore[index]
        payload = re.search(r"max_payload: (\d+)MB", content)
        assert payload and int(payload[1]) * 1024 * 1024 >= 1024 * 1024 + 8 * 1024 + HEADER_ROOM
    assert sorted(clients) == sorted(urls)
    assert len(set(routes)) == 1 and sorted(route.strip() for route in routes[0].split(",")) == sorted(cluster)


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
        assert args.advertise_host == name, f"{name}: advertise the service name, which the network resolves"
        assert args.advertise_host in COMPOSE_HOSTS, f"{name}: segstore dev-secrets' certificate does not name it"
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
        port = re.search(r"^http: 0\.0\.0\.0:(\d+)$", content, re.MULTILINE)[1]  # type: ignore[index]
        https.append(f"http://{name}:{port}")
    environment = {k: str(v) for k, v in document["x-segmentstore"]["environment"].items()}
    tier1 = Tier1Config.from_env(environment)
    assert sorted(tier1.nats_monitor) == sorted(https)
    assert tier1.jetstream().monitors == tier1.nats_monitor


SEGSTORE_SERVICES = ("controller", "segmentstore-1", "segmentstore-2", "segmentstore-3")
PINNED = re.compile(r"^[\w./-]+:(v?\d+\.\d+\.\d+(-[a-z]+)?|RELEASE\.[\dT-]+Z)$")
"""An image named by one release: ``name:1.2.3``, ``name:v1.2.3``, ``name:1.2.3-alpine``, ``RELEASE.<date>Z``."""


def test_one_segstore_image_built_once_and_every_image_pinned() -> None:
    services = compose()["services"]
    built = {name: service["image"] for name, service in services.items() if "build" in service}
    assert list(built) == ["controller"], f"one service builds the segstore image, not {list(built)}"
    for name in SEGSTORE_SERVICES:
        assert services[name]["image"] == built["controller"], f"{name} does not run the one segstore image"
    for name, service in services.items():
        if name not in SEGSTORE_SERVICES:
            assert PINNED.match(service["image"]), f"{name}: {service['image']} is not pinned to a release"
    (base,) = re.findall(r"^FROM (\S+)", (COMPOSE.parent / "Dockerfile").read_text(), re.MULTILINE)
    assert PINNED.match(base.replace("-slim-", "-")) and base.endswith("-bookworm"), f"{base}: Java 17 is bookworm's"


def test_zookeeper_nats_and_minio_are_reachable_only_inside_the_compose_network() -> None:
    """No service uses the host's network; only the segstore servers, Prometheus and Grafana publish ports, and only
    on 127.0.0.1: ZooKeeper (no authentication), NATS and MinIO are reached by service name, inside the network."""
    services = compose()["services"]
    for name, service in services.items():
        assert "network_mode" not in service, f"{name}: {service['network_mode']}"
        for published in service.get("ports", []):
            assert str(published).startswith("127.0.0.1:"), f"{name}: {published} is published on every interface"
    for name in ("zookeeper", "nats-1", "nats-2", "nats-3", "minio"):
        assert "ports" not in services[name] and "expose" not in services[name], f"{name} publishes a port"


def test_pinned_versions_are_the_ones_the_tests_run() -> None:
    """ZooKeeper's image is the release of the jars ``segstore zookeeper`` runs; NATS's, the server the tests run."""
    import pyspark

    services = compose()["services"]
    jars = sorted((Path(pyspark.__file__).parent / "jars").glob("zookeeper-3*.jar"))
    assert jars, "pyspark ships no ZooKeeper jar"
    assert services["zookeeper"]["image"] == f"zookeeper:{jars[0].name.removeprefix('zookeeper-')[:-4]}"
    version = subprocess.run([find_nats_server(), "--version"], capture_output=True, text=True, check=True).stdout
    assert services["nats-1"]["image"].startswith(f"nats:{version.split()[-1].removeprefix('v')}-")


def test_the_dockerfile_copies_every_package_the_install_needs() -> None:
    """``pip install .`` in the image finds every package pyproject.toml lists, its modules and its license file."""
    import tomllib

    project = tomllib.loads((COMPOSE.parent / "pyproject.toml").read_text())
    copied = set(re.findall(r"^COPY (.+) \S+$", (COMPOSE.parent / "Dockerfile").read_text(), re.MULTILINE))
    sources = {part for line in copied for part in line.split()}
    needed = {p.rstrip("*") for p in project["tool"]["setuptools"]["packages"]["find"]["include"]}
    needed |= {f"{m}.py" for m in project["tool"]["setuptools"]["py-modules"]}
    needed |= {"pyproject.toml", project["project"]["readme"], *project["project"]["license-files"]}
    assert needed <= sources, f"the Dockerfile does not copy {needed - sources}"
