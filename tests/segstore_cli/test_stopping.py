"""A server command never ignores a stop request (``segstore_cli.stopping``): SIGTERM while it starts ends it at
once, a clean stop that hangs ends it after the bound, and a second signal at once; each with one line on stderr.
Two controllers whose ZooKeeper was gone once outlived their SIGTERM by hours."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from segstore_shared.coordination.zookeeper_server import free_port

pytestmark = pytest.mark.integration

HANGING_STOP = """\
import asyncio, logging, sys
from segstore_cli.stopping import Stopping

logging.getLogger().addHandler(logging.NullHandler())  # the commands log to their file, not to stderr

async def main():
    stopping = Stopping("test", bound_s=float(sys.argv[1]))
    async def start():
        return "service"
    assert await stopping.started(start()) == "service"
    print("ready", flush=True)
    async def hang():
        print("stopping", flush=True)
        await asyncio.Event().wait()
    await stopping.stop(hang())

asyncio.run(main())
"""


def wait_for_line(process: subprocess.Popen[str], expected: str) -> None:
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line.strip() == expected, line


def test_a_controller_told_to_stop_while_it_waits_for_zookeeper_ends_at_once(tmp_path: Path) -> None:
    zookeeper = f"127.0.0.1:{free_port()}"  # nothing listens there: the start waits up to its connect timeout
    process = subprocess.Popen(
        [sys.executable, "-m", "segstore_cli", "controller", "--zookeeper", zookeeper, "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
    )  # fmt: skip
    log = tmp_path / "segstore-controller.log"
    deadline = time.monotonic() + 30
    while not (log.exists() and "Connecting to" in log.read_text()):  # the start is under way
        assert process.poll() is None and time.monotonic() < deadline, "the controller never tried ZooKeeper"
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    signalled = time.monotonic()
    _, err = process.communicate(timeout=30)
    assert (process.returncode, err) == (0, "segstore controller: stopped before it was ready\n")
    assert time.monotonic() - signalled < 5, "the stop waited for the start"


def test_a_clean_stop_that_hangs_ends_the_process_after_the_bound() -> None:
    process = subprocess.Popen(
        [sys.executable, "-c", HANGING_STOP, "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    wait_for_line(process, "ready")
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=30)
    assert process.returncode == 1
    assert err == "segstore test: the clean stop did not end within 1 s: exiting without waiting further\n"


def test_a_second_signal_ends_the_process_at_once() -> None:
    process = subprocess.Popen(
        [sys.executable, "-c", HANGING_STOP, "600"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    wait_for_line(process, "ready")
    process.send_signal(signal.SIGINT)
    wait_for_line(process, "stopping")
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=30)
    assert (process.returncode, err) == (1, "segstore test: SIGTERM again: exiting without waiting further\n")


def java_children(pid: int) -> list[int]:
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [int(c) for c in children if Path(f"/proc/{c}/comm").read_text().strip() == "java"]


def test_a_segment_store_told_to_stop_while_it_starts_takes_its_embedded_zookeeper_along(tmp_path: Path) -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "segstore_cli", "segmentstore", "--data-dir", str(tmp_path / "data"), "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not (zookeeper := java_children(process.pid)):  # the embedded ZooKeeper, started first
        assert process.poll() is None and time.monotonic() < deadline, "no embedded ZooKeeper started"
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=60)
    if "ready" in out:  # the start won the race: a clean stop, which stops the ZooKeeper too
        assert (process.returncode, err) == (0, ""), err
    else:
        assert (process.returncode, err) == (0, "segstore segmentstore: stopped before it was ready\n")
    deadline = time.monotonic() + 10
    while alive(zookeeper[0]):
        assert time.monotonic() < deadline, "the embedded ZooKeeper outlived the segment store"
        time.sleep(0.05)


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not yet reaped, does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"
