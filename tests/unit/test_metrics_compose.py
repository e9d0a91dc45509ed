"""``docker-compose.yml`` and ``prometheus.yml``: every segstore server has a metrics port, its health check asks
that port's ``/readyz``, and Prometheus scrapes exactly those ports."""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def test_servers_with_metrics_port_are_checked_and_scraped() -> None:
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    servers = {name: s for name, s in services.items() if name == "controller" or name.startswith("segmentstore")}
    ports = set()
    for name, service in servers.items():
        command = service["command"]
        port = command[command.index("--metrics-port") + 1]
        ports.add(f"127.0.0.1:{port}")
        assert f"http://127.0.0.1:{port}/readyz" in " ".join(service["healthcheck"]["test"]), name
    scraped = yaml.safe_load((ROOT / "prometheus.yml").read_text())["scrape_configs"]
    targets = {t for job in scraped for config in job["static_configs"] for t in config["targets"]}
    assert targets == ports
    assert "prometheus.yml" in services["prometheus"]["volumes"][0]
