"""``segstore standalone --metrics-port``: both processes' /metrics, /healthz and /readyz over HTTP, under load."""

from __future__ import annotations

from pathlib import Path

import pytest
from metrics_scrape import get, scrape
from standalone_process import StandaloneProcess

from controller_client import ScalingPolicy, StreamConfiguration
from controller_client.blocking.streams import BlockingStreamManager

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SEGMENT_STORE = (
    "segstore_appends",
    "segstore_append_bytes",
    "segstore_append_latency_seconds",
    "segstore_throttled_appends",
    "segstore_reads",
    "segstore_read_bytes",
    "segstore_tier1_write_latency_seconds",
    "segstore_tier1_written_bytes",
    "segstore_tier2_write_latency_seconds",
    "segstore_tier2_written_bytes",
    "segstore_tier2_backlog_bytes",
    "segstore_cache_used_bytes",
    "segstore_cache_limit_bytes",
    "segstore_cache_evicted_bytes",
    "segstore_connections",
    "segstore_containers_owned",
    "segstore_container_recovery_seconds",
    "segstore_ready",
)
CONTROLLER = (
    "segstore_controller_rpcs",
    "segstore_controller_rpc_latency_seconds",
    "segstore_controller_scales",
    "segstore_controller_truncations",
    "segstore_controller_streams",
    "segstore_controller_active_segments",
    "segstore_controller_open_transactions",
    "segstore_controller_leader",
    "segstore_controller_buckets_owned",
    "segstore_controller_background_runs",
    "segstore_controller_ready",
)


def total(samples: dict[str, float], name: str) -> float:
    return sum(v for k, v in samples.items() if k.startswith(name + "{"))


def test_metrics_with_load(tmp_path: Path) -> None:
    with StandaloneProcess(tmp_path, extra_args=("--metrics-port", "0")) as standalone:
        controller, segment_store = standalone.metrics_ports
        for where in (controller, segment_store):
            assert get(where, "/healthz") == (200, "ok\n")
            assert get(where, "/readyz") == (200, "ready\n")
            assert get(where, "/nothing")[0] == 404
        families, before = scrape(segment_store)
        assert set(SEGMENT_STORE) <= families, set(SEGMENT_STORE) - families
        assert before["segstore_containers_owned{}"] == standalone.container_count
        assert before["segstore_ready{}"] == 1
        with BlockingStreamManager.connect(standalone.controller_uri) as manager:
            manager.create_scope("m")
            manager.create_stream("m", "s", StreamConfiguration(ScalingPolicy.fixed(2)))
            with manager.create_writer("m", "s") as writer:
                for i in range(200):
                    writer.write_event(b"event %d" % i, routing_key=f"k{i % 4}")
                writer.flush()
            end = manager.tail_cut("m", "s")
            with manager.create_reader("m", "s", end=end) as reader:
                assert sum(1 for _ in reader) == 200
            manager.truncate(end)
            with manager.create_txn_writer("m", "s") as txn_writer:
                txn = txn_writer.begin()
                txn.write_event(b"in a transaction")
                txn.flush()
                families, after = scrape(segment_store)
                assert after["segstore_appends_total{}"] > before["segstore_appends_total{}"]
                assert after["segstore_append_bytes_total{}"] >= before["segstore_append_bytes_total{}"] + 200 * 9
                assert (
                    after["segstore_append_latency_seconds_count{}"] > before["segstore_append_latency_seconds_count{}"]
                )
                assert total(after, "segstore_tier1_written_bytes_total") > total(
                    before, "segstore_tier1_written_bytes_total"
                )
                assert total(after, "segstore_reads_total") > total(before, "segstore_reads_total")
                assert after["segstore_connections{}"] >= 1
                families, controller_samples = scrape(controller)
                assert set(CONTROLLER) <= families, set(CONTROLLER) - families
                assert controller_samples['segstore_controller_rpcs_total{code="OK",rpc="createStream"}'] == 1
                assert controller_samples['segstore_controller_rpc_latency_seconds_count{rpc="createScope"}'] == 1
                assert controller_samples['segstore_controller_truncations_total{cause="request"}'] == 1
                assert controller_samples["segstore_controller_streams{}"] >= 1
                assert controller_samples["segstore_controller_active_segments{}"] >= 2
                assert controller_samples["segstore_controller_open_transactions{}"] == 1
                assert controller_samples["segstore_controller_leader{}"] == 1
                assert controller_samples["segstore_controller_buckets_owned{}"] >= 1
                assert controller_samples["segstore_controller_ready{}"] == 1
                txn.abort()
