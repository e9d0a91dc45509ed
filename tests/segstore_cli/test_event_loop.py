"""``segstore segmentstore --event-loop``: the segment store serves on the standard asyncio loop and on uvloop alike
(a real process, a real client writing and reading back), and a bad choice fails naming the flag."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from segment_store.client import ClientConfig, SegmentClient
from segstore_shared import event_loop
from segstore_shared.coordination.zookeeper_server import free_port

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
LOOPS = ["asyncio", "uvloop"]  # uvloop is in the test extra: ./run test installs it


async def _round_trip(port: int) -> bytes:
    async with asyncio.timeout(120), SegmentClient(("127.0.0.1", port), ClientConfig()) as client:
        segment = "loop/test/0.#epoch.0"
        await client.create_segment(segment)
        async with client.writer(segment) as writer:
            await writer.write_many([b"event %d" % i for i in range(1000)])
            await writer.flush()
        length = (await client.get_segment_info(segment)).write_offset
        async with client.reader(segment, offset=0, end_offset=length) as reader:
            data = b""
            while chunk := await reader.read():
                data += chunk
        return data


@pytest.mark.parametrize("loop", LOOPS)
def test_segment_store_with_event_loop_serves_writes_and_reads(tmp_path: Path, loop: str) -> None:
    port = free_port()
    command = [sys.executable, "-m", "segstore_cli", "segmentstore", "--in-memory", "--port", str(port)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    process = subprocess.Popen(
        [*command, "--event-loop", loop], stdout=subprocess.PIPE, text=True, cwd=tmp_path, env=env
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert "ready" in line and f"event loop {loop}" in line, line
        data = asyncio.run(_round_trip(port))
        assert data.count(b"event ") == 1000 and data.endswith(b"event 999")
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    finally:
        process.kill()
        process.wait()


def test_segment_store_with_unknown_event_loop_names_the_flag(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "segstore_cli", "segmentstore", "--in-memory", "--event-loop", "trio"]
    refused = subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert refused.returncode == 2 and "--event-loop" in refused.stderr and "trio" in refused.stderr


@pytest.mark.parametrize("loop", LOOPS)
def test_run_with_each_loop_runs_on_it(loop: str) -> None:
    async def name() -> str:
        return event_loop.loop_name(asyncio.get_running_loop())

    assert event_loop.run(name(), loop) == loop


def test_run_with_auto_takes_uvloop_when_installed() -> None:
    async def name() -> str:
        return event_loop.loop_name(asyncio.get_running_loop())

    assert importlib.util.find_spec("uvloop") is not None, "uvloop is in the test extra: ./run test installs it"
    assert event_loop.run(name(), "auto") == "uvloop"


def test_run_with_unknown_loop_names_the_flag() -> None:
    async def nothing() -> None:
        return None

    with pytest.raises(ValueError, match="--event-loop: 'trio' is not one of auto, uvloop, asyncio"):
        event_loop.run(nothing(), "trio")
