"""``segstore standalone`` with Parquet encoding in worker processes (``SEGSTORE_SLTS_ENCODE_PROCESSES``): the
workers run under its segment store, a stream written with the official client flushes chunks they encoded,
every event reads back (from Tier-2 once the idle cache has let go of it), and the standalone stops cleanly."""

from __future__ import annotations

import time
from pathlib import Path

import pravega_client  # the official Pravega client: a test dependency (pyproject), never skipped
import pytest
from official_client import official_read
from standalone_process import StandaloneProcess

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (from /proc)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        below = children.get(todo.pop(), [])
        found += below
        todo += below
    return found


def encoder_workers(pid: int) -> list[int]:
    workers = []
    for child in descendants(pid):
        try:
            command = Path(f"/proc/{child}/cmdline").read_bytes()
        except OSError:
            continue
        if b"spawn_main" in command:
            workers.append(child)
    return workers


def test_standalone_with_encode_processes_writes_chunks_and_reads_every_event_back(tmp_path: Path) -> None:
    events = [f"{i:06d}-" + "x" * 1000 for i in range(15_000)]  # 15 MB: chunks of ~4 MiB flushed per segment
    standalone = StandaloneProcess(
        tmp_path, extra_args=("--cache-idle-evict-s", "1"), env={"SEGSTORE_SLTS_ENCODE_PROCESSES": "1"}
    )
    with standalone:
        assert standalone.process is not None
        assert len(encoder_workers(standalone.process.pid)) == 1  # one pool of one worker, in the segment store
        manager = pravega_client.StreamManager(standalone.controller_uri)
        manager.create_scope("pool")
        manager.create_stream("pool", "st", 3)
        writer = manager.create_writer("pool", "st", 100)
        for i, event in enumerate(events):
            writer.write_event(event, f"key-{i % 7}")
        writer.flush()
        deadline = time.monotonic() + 120
        while len([p for p in tmp_path.rglob("*.parquet") if "/data/" in str(p)]) < 3:
            assert time.monotonic() < deadline, "no data chunks written to Tier-2"
            time.sleep(0.1)
        read = official_read(standalone.controller_uri, "pool", "st", "back", len(events), timeout_s=120)
        assert sorted(read) == events
        pid = standalone.process.pid
        assert len(encoder_workers(pid)) == 1
        assert standalone.stop() == 0  # a clean stop, the pool's worker included
        assert not encoder_workers(pid)
