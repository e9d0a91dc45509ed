"""``docker-compose.yml``, ``prometheus.yml`` and ``grafana/``: every segstore server has a metrics port, its health
check asks that port's ``/readyz``, Prometheus scrapes exactly those ports, and Grafana reads that Prometheus with a
dashboard whose every query names a metric the processes export."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from exported_metrics import exported_series

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "grafana" / "dashboards" / "segstore.json"
METRIC = re.compile(r"segstore_[a-z0-9_]+")


def services() -> dict[str, Any]:
    return cast(dict[str, Any], yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"])


def test_servers_with_metrics_port_are_checked_and_scraped() -> None:
    compose = services()
    servers = {name: s for name, s in compose.items() if name == "controller" or name.startswith("segmentstore")}
    ports = set()
    for name, service in servers.items():
        command = service["command"]
        port = command[command.index("--metrics-port") + 1]
        ports.add(f"{name}:{port}")  # Prometheus, on the project's network, reaches it by service name
        assert command[command.index("--metrics-host") + 1] == "0.0.0.0", f"{name}: metrics unreachable by name"
        assert f"http://127.0.0.1:{port}/readyz" in " ".join(service["healthcheck"]["test"]), name
    scraped = yaml.safe_load((ROOT / "prometheus.yml").read_text())["scrape_configs"]
    targets = {t for job in scraped for config in job["static_configs"] for t in config["targets"]}
    assert targets == ports
    assert "prometheus.yml" in services()["prometheus"]["volumes"][0]


def test_grafana_mounts_the_repository_provisioning_and_reads_the_compose_prometheus() -> None:
    compose = services()
    grafana = compose["grafana"]
    assert grafana["image"].startswith("grafana/grafana")
    assert "prometheus" in grafana["depends_on"]
    environment = {k: str(v) for k, v in grafana["environment"].items()}
    assert environment["GF_SERVER_HTTP_PORT"] == "3000" and grafana["ports"] == ["127.0.0.1:3000:3000"]
    assert environment["GF_SECURITY_ADMIN_PASSWORD"].startswith("${"), "no password in the file"
    mounts = {}
    for volume in grafana["volumes"]:
        source, target, *_ = volume.split(":")
        if source.startswith("./"):
            assert (ROOT / source).is_dir(), f"{source} is mounted but not in the repository"
            mounts[target] = ROOT / source
    provisioning = mounts["/etc/grafana/provisioning"]
    (datasource,) = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())["datasources"]
    assert datasource["uid"] == "prometheus" and datasource["type"] == "prometheus"
    # Grafana reaches Prometheus by its service name and listen port, on the project's network.
    prometheus_command = " ".join(compose["prometheus"]["command"])
    listen = re.search(r"--web\.listen-address=:(\d+)", prometheus_command)
    assert listen and datasource["url"] == f"http://prometheus:{listen[1]}"
    (provider,) = yaml.safe_load((provisioning / "dashboards" / "segstore.yml").read_text())["providers"]
    assert provider["type"] == "file"
    dashboards = mounts[provider["options"]["path"]]
    assert (dashboards / DASHBOARD.name).samefile(DASHBOARD)


def dashboard_queries() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    assert 36 <= dashboard["schemaVersion"] <= 41
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])
    queries = []
    for panel in panels:
        assert panel["datasource"]["uid"] == "prometheus", panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "prometheus", panel["title"]
            queries.append(target["expr"])
    return queries


def test_dashboard_queries_only_exported_metrics() -> None:
    exported = exported_series()
    used = {name for query in dashboard_queries() for name in METRIC.findall(query)}
    assert used - exported == set(), f"the dashboard queries metrics no process exports: {used - exported}"
    families = {re.sub(r"_(total|bucket|sum|count)$", "", name) for name in used}
    first_looks = {
        "segstore_appends",
        "segstore_append_bytes",
        "segstore_append_latency_seconds",
        "segstore_tier1_write_latency_seconds",
        "segstore_tier2_backlog_bytes",
        "segstore_cache_used_bytes",
        "segstore_cache_limit_bytes",
        "segstore_reads",
        "segstore_throttled_appends",
        "segstore_containers_owned",
        "segstore_ready",
        "segstore_controller_rpcs",
        "segstore_controller_rpc_latency_seconds",
        "segstore_controller_background_runs",
        "segstore_controller_buckets_owned",
        "segstore_controller_open_transactions",
        "segstore_controller_streams",
        "segstore_controller_active_segments",
    }
    assert first_looks <= families, f"no panel for {first_looks - families}"


def test_exported_series_follow_the_exposition_rules() -> None:
    """The check above is only as good as its list: counters as ``_total``, histograms as ``_bucket``."""
    exported = exported_series()
    assert {"segstore_appends_total", "segstore_append_latency_seconds_bucket", "segstore_ready"} <= exported
    assert {"segstore_controller_rpcs_total", "segstore_controller_background_runs_total"} <= exported
    assert "segstore_appends" not in exported and "segstore_ready_total" not in exported
