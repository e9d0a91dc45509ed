"""``segstore standalone`` as a user runs it: ready line, clean SIGTERM, and a restart on the same data dir
(after a clean stop, and after kill -9) that finds every stream and acknowledged event."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pravega_client  # the official Pravega client: a test dependency (pyproject), never skipped
import pytest
from official_client import official_read
from standalone_process import StandaloneProcess

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _write(uri: str, scope: str, stream: str, events: list[str]) -> None:
    manager = pravega_client.StreamManager(uri)
    manager.create_scope(scope)
    manager.create_stream(scope, stream, 3)
    writer = manager.create_writer(scope, stream, 100)
    for i, event in enumerate(events):
        writer.write_event(event, f"key-{i % 13}")
    writer.flush()


def test_restart_after_sigterm_finds_every_stream_and_event(tmp_path: Path) -> None:
    events = [f"event-{i}" for i in range(2000)]
    first = StandaloneProcess(tmp_path).start()
    try:
        _write(first.controller_uri, "keep", "st", events)
    finally:
        assert first.stop() == 0
    assert any("ready" in line for line in first.output)

    second = StandaloneProcess(tmp_path)
    second.controller_port, second.segmentstore_port = first.controller_port, first.segmentstore_port
    with second:
        events_read = official_read(second.controller_uri, "keep", "st", "after-restart", len(events))
        assert sorted(events_read) == sorted(events)


def test_ctrl_c_stops_the_segment_store_once_and_cleanly(tmp_path: Path) -> None:
    """Ctrl-C sends SIGINT to the terminal's whole process group: the standalone alone gets it and stops its segment
    store with one SIGTERM, so the segment store's clean stop is never cut short by a second signal ("SIGTERM again:
    exiting without waiting further", exit 1, which the segment store in the standalone's group met under load)."""
    standalone = StandaloneProcess(tmp_path).start()
    _write(standalone.controller_uri, "ctrl", "c", [f"event-{i}" for i in range(100)])
    assert standalone.process is not None
    os.killpg(standalone.process.pid, signal.SIGINT)  # the group: as the terminal sends it
    assert standalone.process.wait(60) == 0
    standalone.process = None
    log = (tmp_path / "segmentstore.log").read_text()
    assert "SIGTERM received: stopping" in log, log[-2000:]
    assert "SIGINT" not in log and "again" not in log and "Traceback" not in log, log[-2000:]


def test_restart_after_kill_9_loses_no_acknowledged_event(tmp_path: Path) -> None:
    events = [f"event-{i}" for i in range(2000)]
    first = StandaloneProcess(tmp_path).start()
    _write(first.controller_uri, "crash", "st", events)  # flush() returned: every event acknowledged
    assert first.process is not None
    os.kill(first.process.pid, signal.SIGKILL)
    first.process.wait(30)
    first.process = None

    second = StandaloneProcess(tmp_path)
    with second:
        events_read = official_read(second.controller_uri, "crash", "st", "after-crash", len(events))
        assert sorted(events_read) == sorted(events)
