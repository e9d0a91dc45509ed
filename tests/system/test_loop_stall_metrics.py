"""``segstore standalone --metrics-port``: the segment store's event-loop lag, stall and activity histograms on its
/metrics, and its recent stalls and activity spans on /stalls, after real writes."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from metrics_scrape import get, scrape
from standalone_process import StandaloneProcess

from controller_client import ScalingPolicy, StreamConfiguration
from controller_client.blocking.streams import BlockingStreamManager

pytestmark = [pytest.mark.integration, pytest.mark.slow]

LOOP_FAMILIES = (
    "segstore_loop_lag_seconds",
    "segstore_loop_stall_seconds",
    "segstore_activity_seconds",
    "segstore_gc_pause_seconds",
)


def test_loop_stall_metrics_with_writes(tmp_path: Path) -> None:
    with StandaloneProcess(tmp_path, extra_args=("--metrics-port", "0")) as standalone:
        _, segment_store = standalone.metrics_ports
        families, before = scrape(segment_store)
        assert set(LOOP_FAMILIES) <= families, set(LOOP_FAMILIES) - families
        with BlockingStreamManager.connect(standalone.controller_uri) as manager:
            manager.create_scope("loop")
            manager.create_stream("loop", "s", StreamConfiguration(ScalingPolicy.fixed(1)))
            with manager.create_writer("loop", "s") as writer:
                for i in range(50):
                    writer.write_event(b"event %d" % i)
                    writer.flush()  # one group commit (write + fsync) each
        deadline = time.monotonic() + 60
        while True:  # the histograms count what the process did; a tick follows within milliseconds
            _, after = scrape(segment_store)
            fsyncs = after.get('segstore_activity_seconds_count{cause="tier1_fsync"}', 0)
            if fsyncs >= 50 or time.monotonic() > deadline:
                break
        assert fsyncs >= 50
        assert after['segstore_activity_seconds_count{cause="tier1_group_commit"}'] >= 50
        assert after["segstore_loop_lag_seconds_count{}"] > before["segstore_loop_lag_seconds_count{}"]
        status, body = get(segment_store, "/stalls")
        assert status == 200
        document = json.loads(body)
        assert document["ticks"] > 0
        assert document["interval_s"] > 0
        assert all({"window_start", "end", "lateness", "cause", "overlap"} <= set(s) for s in document["stalls"])
