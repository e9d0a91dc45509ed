"""Segment store processes in cluster mode, and a write load whose every byte can be checked, for the failover tests.

:class:`StoreProcess` is one ``segstore segmentstore --cluster`` child (file Tier-1 fenced through ZooKeeper,
filesystem Tier-2, all processes sharing one data dir) that a test starts, kills with SIGKILL (reaping it is a
separate step: until then its pid stays in the process table) and restarts on the same port. Writers write
numbered events whose payloads are derived from (writer id, number) alone (:func:`payload`), so reading a segment
back tells whether each acknowledged event is there exactly once, in order, byte for byte (:func:`check_stored`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path

from segment_store.client import SegmentAlreadyExistsError, SegmentClient, SegmentWriter
from segment_store.client.retry import RetryPolicy
from segment_store.protocol import parse_events
from segstore_shared.cluster.container_mapping import container_of
from segstore_shared.cluster.layout import ContainerAssignment, host_id

REPO_ROOT = Path(__file__).resolve().parents[1]
TIER1_LOGS = "/segstore/tier1/logs"  # the file ledger logs' metadata nodes: <TIER1_LOGS>/container-<id>


def segment_per_container(prefix: str, container_count: int) -> list[str]:
    """One segment name per container: ``result[c]`` lives in container ``c``."""
    names = (f"{prefix}/{i}.#epoch.0" for i in range(10_000))
    by_container: dict[int, str] = {}
    for name in names:
        by_container.setdefault(container_of(name, container_count), name)
        if len(by_container) == container_count:
            return [by_container[c] for c in range(container_count)]
    raise AssertionError("no segment name for some container")


class StoreProcess:
    """One segment store process in cluster mode on a fixed port (see the module docstring)."""

    def __init__(
        self, data_dir: Path, zookeeper: str, port: int, container_count: int, session_timeout_ms: int
    ) -> None:
        self.data_dir = data_dir
        self.zookeeper = zookeeper
        self.port = port
        self.container_count = container_count
        self.session_timeout_ms = session_timeout_ms
        self.process: subprocess.Popen[str] | None = None

    @property
    def host_id(self) -> str:
        return host_id("127.0.0.1", self.port)

    @property
    def endpoint(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def launch(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "segstore_cli", "segmentstore", "--cluster", "--data-dir", str(self.data_dir),
             "--zookeeper", self.zookeeper, "--port", str(self.port), "--container-count", str(self.container_count),
             "--zookeeper-session-timeout-ms", str(self.session_timeout_ms), "--log-level", "warning"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=REPO_ROOT,
            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        )  # fmt: skip

    def wait_ready(self) -> None:
        """Block until the process says it is ready (registered in ZooKeeper); its containers may still start."""
        assert self.process is not None and self.process.stdout is not None
        line = self.process.stdout.readline()
        assert "ready" in line and "cluster mode" in line, f"segment store on {self.port} did not start: {line!r}"

    async def start(self) -> None:
        self.launch()
        await asyncio.to_thread(self.wait_ready)

    def kill(self) -> None:
        """SIGKILL, without reaping: the pid stays taken (a zombie) until :meth:`reap`."""
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)

    def reap(self) -> None:
        if self.process is not None:
            self.process.wait(10)

    def stop(self) -> None:
        """SIGTERM (SIGKILL if it does not end in time) and reap; nothing if it is not running."""
        process = self.process
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


async def stop_all(nodes: Iterable[StoreProcess]) -> None:
    await asyncio.gather(*(asyncio.to_thread(node.stop) for node in nodes))


def payload(writer_id: uuid.UUID, number: int) -> bytes:
    """Event ``number`` of ``writer_id``: its name, then 64 bytes derived from both."""
    head = f"{writer_id.hex}:{number}|".encode()
    return head + hashlib.sha256(head).digest() + hashlib.sha256(head[::-1]).digest()


async def create_with_retry(client: SegmentClient, segment: str) -> None:
    """Create ``segment`` on whichever process owns it once the assignment is there (repeat-safe)."""
    policy = RetryPolicy(max_attempts=60, initial_delay_ms=50, max_delay_ms=250)

    async def create() -> None:
        with contextlib.suppress(SegmentAlreadyExistsError):
            await client.create_segment(segment)

    await policy.call(create)


async def write_events(writer: SegmentWriter, stop: asyncio.Event) -> None:
    """Numbered events (:func:`payload`) as fast as the window allows, with a short pause so the load stays
    bounded."""
    number = writer.last_event_number
    while not stop.is_set():
        number += 1
        await writer.write(payload(writer.writer_id, number))
        await asyncio.sleep(0.003)


async def read_all(client: SegmentClient, segment: str) -> bytes:
    length = (await client.get_segment_info(segment)).write_offset
    data = bytearray()
    while len(data) < length:
        data += (await client.read_segment(segment, len(data), 1 << 20)).data
    return bytes(data)


async def check_stored(client: SegmentClient, writer: SegmentWriter) -> None:
    """The segment holds exactly events 1..last of ``writer`` (all acknowledged), in order, byte for byte."""
    assert writer.failure is None, f"{writer.segment}: {writer.failure!r}"
    assert writer.acked_event_number == writer.last_event_number
    stored = [event.data for event in parse_events(await read_all(client, writer.segment))]
    expected = [payload(writer.writer_id, n) for n in range(1, writer.last_event_number + 1)]
    if stored != expected:
        numbers = [bytes(e).split(b"|", 1)[0].rsplit(b":", 1)[-1].decode(errors="replace") for e in stored]
        first = next(
            (i for i, (s, e) in enumerate(zip(stored, expected, strict=False)) if s != e),
            min(len(stored), len(expected)),
        )
        raise AssertionError(
            f"{writer.segment}: {len(stored)} events stored, {len(expected)} acknowledged; first difference at "
            f"index {first}; stored numbers around it: {numbers[max(0, first - 3) : first + 3]}"
        )


def balanced(assignment: ContainerAssignment | None, hosts: Iterable[str], per_host: int) -> bool:
    """Whether ``assignment`` gives exactly ``per_host`` containers to each of ``hosts`` (and to no one else)."""
    wanted = set(hosts)
    return (
        assignment is not None
        and {host for host, ids in assignment.hosts.items() if ids} == wanted
        and all(len(assignment.containers_of(h)) == per_host for h in wanted)
    )


async def wait_for(condition: Callable[[], bool], what: str, timeout_s: float) -> None:
    """Poll ``condition()`` every 20 ms until it is true; AssertionError naming ``what`` after ``timeout_s``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():
        if loop.time() > deadline:
            raise AssertionError(f"{what}: not within {timeout_s} s")
        await asyncio.sleep(0.02)


def progressed(writers: Iterable[SegmentWriter], beyond: dict[str, int], events: int = 50) -> bool:
    """Every writer has ``events`` acknowledged beyond the number it had written at ``beyond`` (a moment past).
    Raises AssertionError as soon as a writer failed (it would never progress)."""
    writers = list(writers)
    failed = {w.segment: w.failure for w in writers if w.failure is not None}
    assert not failed, f"writers failed: {failed}"
    return all(w.acked_event_number >= beyond[w.segment] + events for w in writers)
