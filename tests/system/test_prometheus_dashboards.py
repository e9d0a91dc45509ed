"""``prometheus.yml`` and the Grafana dashboards against a real Prometheus server (Debian's ``prometheus``, which
``./run test`` installs): it scrapes a standalone's two metrics ports with the repository's scrape configuration
(targets and intervals rewritten), and every panel query of every dashboard draws at least one series."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from prometheus_server import PrometheusServer, drawn, panel_queries, prometheus_binary, scrape_config, values
from standalone_process import StandaloneProcess

from controller_client import ScalingPolicy, StreamConfiguration
from controller_client.blocking.streams import BlockingStreamManager

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SCRAPE_INTERVAL_S = 1
STEP_S = 2
"""Grafana's ``$__interval``: the step of a panel's range query."""
GRAFANA_BUILTINS = {
    "__rate_interval": "15s",  # Grafana: max(4 x scrape interval, step + scrape interval); 15 leaves slack for lag
    "__interval": f"{STEP_S}s",
    "interval": f"{STEP_S}s",
    "__range": "5m",
}
NO_SERIES_EXPECTED: dict[str, str] = {}
"""Panel queries (``PanelQuery.name``) allowed to draw nothing in this test, each with the reason. None today:
every panel, throttling included (a rate of 0), draws something on a standalone under a little load."""
PERIODIC_EVERY_1S = ("--retention-period-s", "1", "--watermark-period-s", "1", "--auto-scale-period-s", "1")
"""The controller's periodic work every second, so "Background runs by kind" has runs within the test."""


def write_and_read(controller_uri: str, stream: str, events: int) -> None:
    """A new stream in the scope ``dash``: ``events`` written, then read back."""
    with BlockingStreamManager.connect(controller_uri) as manager:
        manager.create_scope("dash")  # False after the first time
        manager.create_stream("dash", stream, StreamConfiguration(ScalingPolicy.fixed(4)))
        with manager.create_writer("dash", stream) as writer:
            for i in range(events):
                writer.write_event(b"event %d" % i, routing_key=f"k{i % 8}")
            writer.flush()
        end = manager.tail_cut("dash", stream)
        with manager.create_reader("dash", stream, end=end) as reader:
            assert sum(1 for _ in reader) == events


def test_prometheus_scrapes_the_standalone_and_every_dashboard_panel_draws(tmp_path: Path) -> None:
    binary = prometheus_binary()
    if binary is None:
        pytest.fail(
            "no prometheus binary (PATH, /usr/bin/prometheus): ./run test installs it as root with apt-get "
            "(apt-get install prometheus)",
            pytrace=False,
        )
    queries = panel_queries(GRAFANA_BUILTINS)
    assert set(NO_SERIES_EXPECTED) <= {query.name for query in queries}, "an exception names no panel query"
    (tmp_path / "standalone").mkdir()
    (tmp_path / "prometheus").mkdir()
    extra = ("--metrics-port", "0", *PERIODIC_EVERY_1S)
    with StandaloneProcess(tmp_path / "standalone", container_count=2, extra_args=extra) as standalone:
        ports = standalone.metrics_ports
        targets = {"segstore-controller": [f"127.0.0.1:{ports[0]}"], "segstore-segmentstore": [f"127.0.0.1:{ports[1]}"]}
        config = scrape_config(targets, SCRAPE_INTERVAL_S)
        with PrometheusServer(binary, config, tmp_path / "prometheus") as prometheus:
            print(prometheus.version())
            up = prometheus.wait_for('up{job=~"segstore-.*"} == 1', lambda series: len(series) == 2, 60)
            assert {one["metric"]["job"] for one in up} == set(targets)
            write_and_read(standalone.controller_uri, "first", 200)
            # A labelled series is born at its first observation, which rate() cannot see (no earlier sample):
            # the RPC latency panel draws an RPC from its second call on. So the same calls again, once scraped.
            prometheus.wait_for('segstore_controller_rpc_latency_seconds_count{rpc="createStream"}', bool, 60)
            write_and_read(standalone.controller_uri, "second", 200)
            rate = f"sum(rate(segstore_appends_total[{GRAFANA_BUILTINS['__rate_interval']}]))"
            prometheus.wait_for(rate, lambda series: any(v > 0 for v in values(series)), 60)
            pending = {query.name: query for query in queries if query.name not in NO_SERIES_EXPECTED}
            answers: dict[str, object] = {}
            deadline = time.monotonic() + 60  # levels the controller counts at most every 10 s, periodic runs
            while pending and time.monotonic() < deadline:
                for name, query in list(pending.items()):
                    answers[name] = series = prometheus.query_range(query.expr, since_s=300, step_s=STEP_S)
                    if drawn(series):
                        del pending[name]
                if pending:
                    time.sleep(1)
            failing = {name: (query.expr, answers[name]) for name, query in pending.items()}
            assert not failing, f"panel queries that draw nothing: {failing}"
