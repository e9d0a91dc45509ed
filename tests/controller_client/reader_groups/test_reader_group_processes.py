"""Reader groups as users run them (issue 25): four reader processes share a stream on ``segstore standalone``
while it is written and scaled up and down; one of them killed with -9; and a group shared by one of our
readers and one of the official client's."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pravega_client  # the official Pravega client: a test dependency (pyproject), never skipped
import pytest
from standalone_process import StandaloneProcess

from controller_client import ControllerClient, StreamManager
from controller_client.model import ScalingPolicy, StreamConfiguration, StreamCut
from controller_client.reader_groups.reader import GroupReaderConfig

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SCOPE = "groups"
KEYS = 24
READER = Path(__file__).resolve().parents[2] / "fixtures" / "group_reader_process.py"


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    with StandaloneProcess(tmp_path_factory.mktemp("standalone")) as process:
        yield process


class Readers:
    """Reader processes of one group, each appending ``<ns> <event>`` lines to its own file."""

    def __init__(self, standalone: StandaloneProcess, tmp_path: Path, group: str, timeout_s: float) -> None:
        self.standalone, self.tmp_path, self.group, self.timeout_s = standalone, tmp_path, group, timeout_s
        self.processes: dict[str, subprocess.Popen[str]] = {}

    def start(self, name: str) -> None:
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[3])}
        out = self.tmp_path / f"{name}.txt"
        args = [self.standalone.controller_uri, SCOPE, self.group, name, str(out), str(self.timeout_s)]
        process = subprocess.Popen(
            [sys.executable, str(READER), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        assert process.stdout is not None and process.stdout.readline() == "joined\n", process.stderr
        self.processes[name] = process

    def lines(self, name: str) -> list[tuple[int, str]]:
        path = self.tmp_path / f"{name}.txt"
        if not path.exists():
            return []
        found = []
        for line in path.read_text().splitlines():
            stamp, _, event = line.partition(" ")
            if event:  # a line cut by kill -9 has no event yet
                found.append((int(stamp), event))
        return found

    def wait(self, timeout_s: float = 120) -> None:
        for name, process in self.processes.items():
            if process.poll() is None or process.returncode != -signal.SIGKILL:
                _, err = process.communicate(timeout=timeout_s)
                assert process.returncode in (0, -signal.SIGKILL), f"{name}: {err}"

    def stop_all(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.kill()
                process.wait()


def _merged(readers: Readers) -> list[tuple[int, str, str]]:
    return sorted((stamp, event, name) for name in readers.processes for stamp, event in readers.lines(name))


def _first_deliveries_in_key_order(merged: list[tuple[int, str, str]], total_per_key: int) -> None:
    """Each key's events, first deliveries only, in the order they were returned (across all processes), are
    its sequence 0, 1, 2, ... with nothing missing."""
    seen: dict[str, list[int]] = {}
    delivered: set[str] = set()
    for _, event, _ in merged:
        if event in delivered:
            continue
        delivered.add(event)
        key, seq = event.split(":")
        seen.setdefault(key, []).append(int(seq))
    assert len(seen) == KEYS
    for key, seqs in seen.items():
        assert seqs == list(range(total_per_key)), f"{key}: first deliveries {seqs[:20]}..."


async def _write_and_scale(uri: str, stream: str, per_key: int, progress: asyncio.Event | None = None) -> None:
    """``per_key`` events per key (``key:seq``), scaling the stream up (2 -> 4 segments) a third of the way and
    down (merging three) at two thirds, then sealing it."""
    controller = await ControllerClient.connect(uri)
    async with controller, StreamManager(controller) as manager:
        async with await manager.create_writer(SCOPE, stream) as writer:
            for seq in range(per_key):
                for key in range(KEYS):
                    await writer.write_event(f"k{key}:{seq}".encode(), f"k{key}")
                if seq in (per_key // 3, 2 * per_key // 3):
                    await writer.flush()
                    await _scale(manager, stream, up=seq == per_key // 3)
                if progress is not None and seq == per_key // 10:
                    progress.set()
        await manager.seal_stream(SCOPE, stream)


async def _scale(manager: StreamManager, stream: str, up: bool) -> None:
    segments = sorted(await manager.current_segments(SCOPE, stream), key=lambda s: s.key_start)
    if up:  # split each of the two segments in two
        sealed = [s.segment_id for s in segments]
        ranges = []
        for s in segments:
            middle = (s.key_start + s.key_end) / 2
            ranges += [(s.key_start, middle), (middle, s.key_end)]
    else:  # merge the three highest into one
        sealed = [s.segment_id for s in segments[1:]]
        ranges = [(segments[1].key_start, segments[-1].key_end)]
    started = await manager.controller.scale(SCOPE, stream, sealed, ranges, 0)
    while not await manager.controller.check_scale(SCOPE, stream, started.epoch):
        await asyncio.sleep(0.01)  # the controller's scale workflow runs on its own


async def _create(uri: str, stream: str, group: str) -> None:
    controller = await ControllerClient.connect(uri)
    async with controller, StreamManager(controller) as manager:
        await manager.create_scope(SCOPE)
        await manager.create_stream(SCOPE, stream, StreamConfiguration(ScalingPolicy.fixed(2)))
        await manager.create_reader_group(SCOPE, group, [StreamCut(SCOPE, stream, {})])


def test_four_reader_processes_read_a_scaling_stream_exactly_once_in_key_order(
    standalone: StandaloneProcess, tmp_path: Path
) -> None:
    uri, per_key = standalone.controller_uri, 150
    asyncio.run(_create(uri, "four", "four"))
    readers = Readers(standalone, tmp_path, "four", timeout_s=30)
    try:
        for i in range(4):
            readers.start(f"r{i}")
        asyncio.run(_write_and_scale(uri, "four", per_key))
        readers.wait()
    finally:
        readers.stop_all()
    merged = _merged(readers)
    events = [event for _, event, _ in merged]
    assert len(events) == len(set(events)) == KEYS * per_key, "every event exactly once"
    _first_deliveries_in_key_order(merged, per_key)
    busy = {name for _, _, name in merged}
    assert len(busy) >= 3, f"the segments were shared: readers with events {busy}"


def test_a_reader_killed_with_sigkill_loses_nothing_and_keys_stay_in_order(
    standalone: StandaloneProcess, tmp_path: Path
) -> None:
    uri, per_key = standalone.controller_uri, 150
    asyncio.run(_create(uri, "killed", "killed"))
    readers = Readers(standalone, tmp_path, "killed", timeout_s=2.0)
    try:
        for i in range(4):
            readers.start(f"r{i}")

        async def write_and_kill() -> None:
            progress = asyncio.Event()
            writing = asyncio.create_task(_write_and_scale(uri, "killed", per_key, progress))
            await progress.wait()
            deadline = time.monotonic() + 60
            while not readers.lines("r0"):  # r0 holds segments and has returned events
                assert time.monotonic() < deadline, "r0 never read an event"
                await asyncio.sleep(0.05)
            readers.processes["r0"].send_signal(signal.SIGKILL)
            await writing

        asyncio.run(write_and_kill())
        readers.wait()
    finally:
        readers.stop_all()
    assert readers.processes["r0"].returncode == -signal.SIGKILL
    merged = _merged(readers)
    assert {event for _, event, _ in merged} == {f"k{k}:{s}" for k in range(KEYS) for s in range(per_key)}
    _first_deliveries_in_key_order(merged, per_key)


def test_our_reader_and_an_official_reader_share_a_group(standalone: StandaloneProcess) -> None:
    """One group, one reader of each client: they split the segments and together read everything once. Ours
    joins first and holds all four segments; when the official reader joins, ours gives two back (balance), the
    events are written, and the official reader takes its two at its next rebalance (every 10 s in that client)."""
    uri, total = standalone.controller_uri, 2000
    official = pravega_client.StreamManager(uri)
    official.create_scope(SCOPE)
    official.create_stream(SCOPE, "mixed", 4)

    def write() -> None:
        writer = official.create_writer(SCOPE, "mixed")
        for i in range(total):
            writer.write_event(f"k{i % KEYS}:{i}", f"k{i % KEYS}")
        writer.flush()

    their_group = official.create_reader_group("mixed", SCOPE, "mixed")
    their_events: list[str] = []
    our_events: list[str] = []
    theirs: list[pravega_client.StreamReader] = []

    async def official_reads() -> None:
        reader = theirs[0]
        while True:
            segment_slice = await reader.get_segment_slice_async()
            their_events.extend(event.data().decode() for event in segment_slice)
            reader.release_segment(segment_slice)

    async def both() -> None:
        controller = await ControllerClient.connect(uri)
        async with controller, StreamManager(controller) as manager:
            group = await manager.reader_group(SCOPE, "mixed")
            config = GroupReaderConfig(refresh_interval_s=0.1, reader_timeout_s=None)
            async with await group.create_reader("ours", config) as reader:
                assert await reader.next_event(timeout_s=0.5) is None and len(reader.positions) == 4
                theirs.append(await asyncio.to_thread(their_group.create_reader, "official"))
                official_task = asyncio.create_task(official_reads())
                while len(reader.positions) > 2:  # ours gives two back, one per refresh
                    assert await reader.next_event(timeout_s=0.1) is None
                await asyncio.to_thread(write)
                deadline = time.monotonic() + 90
                while len(our_events) + len(their_events) < total:
                    assert time.monotonic() < deadline, f"read {len(our_events)} + {len(their_events)}"
                    event = await reader.next_event(timeout_s=0.1)
                    if event is not None and event.data is not None:
                        our_events.append(event.data.decode())
                assert len(reader.positions) == 2, "ours kept half the segments"
                official_task.cancel()

    try:
        asyncio.run(both())
    finally:
        if theirs:
            theirs[0].reader_offline()
    assert our_events and their_events, "both readers read"
    assert sorted(our_events + their_events) == sorted(f"k{i % KEYS}:{i}" for i in range(total))
