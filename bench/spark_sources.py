"""Helpers of ``bench/spark.py``: the trivial in-memory Python data source (the upper bound of Spark's Python
data source path), the pre-generated 100 B rows, and a meter of the CPU time of every process of the run.

``bench_numpy`` (:class:`NumpySource`) is a streaming (and batch) Python data source with the segstore
source's schema whose executors yield ``pyarrow.RecordBatch`` es built from numpy buffers without copying
(one random payload block per partition, reused by every batch): no I/O, no framing, no per-row Python
work. Options: ``rows`` (total), ``partitions``, ``batchRows`` (rows per record batch), ``eventBytes``.
One micro-batch holds every row (Trigger.AvailableNow supported).

:class:`ProcessMeter` samples ``/proc`` in a thread (every 0.2 s) and charges every process's user + system
CPU time over a span to a group: the bench process (Spark's Python driver), the Spark JVM (the child
of the bench process running ``java``), Spark's Python workers (every descendant of that JVM: the
daemon, its forked workers, the streaming source and sink runners), the segment store, the controller
(the standalone process), ZooKeeper, and everything else on the machine (``other``: other users' runs).
A process that ends keeps its last sample (at most one interval is lost).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

SCHEMA_DDL = "event binary, scope string, stream string, segment_id bigint, offset bigint"
ARROW_SCHEMA = pa.schema(
    [
        pa.field("event", pa.binary()),
        pa.field("scope", pa.string()),
        pa.field("stream", pa.string()),
        pa.field("segment_id", pa.int64()),
        pa.field("offset", pa.int64()),
    ]
)
HEADER = 8


# ---- rows ----------------------------------------------------------------------------------------------------
def _constant_strings(value: str, count: int) -> pa.Array:
    data = value.encode()
    offsets = np.arange(count + 1, dtype=np.int32) * len(data)
    return pa.Array.from_buffers(pa.string(), count, [None, pa.py_buffer(offsets), pa.py_buffer(data * count)])


def make_batch(payload: np.ndarray, count: int, event_bytes: int, segment_id: int, first_offset: int) -> pa.RecordBatch:
    """``count`` events of ``event_bytes`` from ``payload`` (uint8, at least count * event_bytes), in the
    segstore source's schema, as they would sit in segment ``segment_id`` from ``first_offset`` on."""
    offsets = np.arange(count + 1, dtype=np.int32) * event_bytes
    events = pa.Array.from_buffers(pa.binary(), count, [None, pa.py_buffer(offsets), pa.py_buffer(payload)])
    columns = [
        events,
        _constant_strings("bench", count),
        _constant_strings("rows", count),
        pa.array(np.full(count, segment_id, dtype=np.int64)),
        pa.array(first_offset + np.arange(count, dtype=np.int64) * (HEADER + event_bytes)),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)


def write_rows(directory: Path, rows: int, files: int, event_bytes: int, seed: int = 7) -> int:
    """``rows`` random ``event_bytes`` events in the segstore schema as ``files`` Parquet files (snappy,
    row groups of 128k rows) under ``directory``; returns the bytes written."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    per_file = -(-rows // files)
    for i in range(files):
        count = min(per_file, rows - i * per_file)
        payload = rng.integers(0, 256, count * event_bytes, dtype=np.uint8)
        table = pa.Table.from_batches([make_batch(payload, count, event_bytes, i, 0)])
        pq.write_table(table, directory / f"part-{i:03d}.parquet", row_group_size=128 * 1024)
    return sum(p.stat().st_size for p in directory.iterdir())


# ---- the in-memory Python data source -------------------------------------------------------------------------
@dataclass(frozen=True)
class NumpyPartition(InputPartition):
    index: int
    rows: int
    batch_rows: int
    event_bytes: int


def _read(partition: InputPartition) -> Iterator[pa.RecordBatch]:
    assert isinstance(partition, NumpyPartition)
    rng = np.random.default_rng(partition.index)
    payload = rng.integers(0, 256, partition.batch_rows * partition.event_bytes, dtype=np.uint8)
    done = 0
    while done < partition.rows:
        count = min(partition.batch_rows, partition.rows - done)
        yield make_batch(
            payload, count, partition.event_bytes, partition.index, done * (HEADER + partition.event_bytes)
        )
        done += count


class _Plan:
    def __init__(self, options: dict[str, str]) -> None:
        self.rows = int(options.get("rows", "1000000"))
        self.parts = int(options.get("partitions", "4"))
        self.batch_rows = int(options.get("batchRows", "16384"))
        self.event_bytes = int(options.get("eventBytes", "100"))

    def partitions(self) -> list[InputPartition]:
        share = -(-self.rows // self.parts)
        counts = [min(share, self.rows - i * share) for i in range(self.parts)]
        return [NumpyPartition(i, c, self.batch_rows, self.event_bytes) for i, c in enumerate(counts) if c > 0]


class NumpyBatchReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.plan = _Plan(options)

    def partitions(self) -> list[InputPartition]:
        return self.plan.partitions()

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(partition)


class NumpyStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets ``{"round": 0}`` (start) and ``{"round": 1}`` (every row): one micro-batch."""

    def __init__(self, options: dict[str, str]) -> None:
        self.plan = _Plan(options)

    def initialOffset(self) -> dict[str, Any]:
        return {"round": 0}

    def latestOffset(self, start: dict[str, Any], limit: Any) -> dict[str, Any]:
        return {"round": 1}

    def prepareForTriggerAvailableNow(self) -> None:
        """The target is ``{"round": 1}`` already."""

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        return self.plan.partitions() if end["round"] > start["round"] else []

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to release."""


class NumpySource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "bench_numpy"

    def schema(self) -> str:
        return SCHEMA_DDL

    def reader(self, schema: Any) -> DataSourceReader:
        return NumpyBatchReader(dict(self.options))

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return NumpyStreamReader(dict(self.options))


# ---- CPU of every process --------------------------------------------------------------------------------------
_TICK = os.sysconf("SC_CLK_TCK")
GROUPS = ("driver", "jvm", "pyworkers", "segmentstore", "controller", "zookeeper", "other")


def _processes() -> dict[int, tuple[int, float]]:
    """pid -> (parent pid, user + system CPU seconds) of every process."""
    found: dict[int, tuple[int, float]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = Path(f"/proc/{entry.name}/stat").read_text().rsplit(")", 1)[1].split()
            found[int(entry.name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / _TICK)
    return found


def thread_cpu_s(pid: int) -> float:
    """CPU seconds of the main thread of ``pid`` (an asyncio process's event loop); 0 if it is gone."""
    try:
        fields = Path(f"/proc/{pid}/task/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICK


def machine_busy_s() -> float:
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    guest = sum(fields[8:10]) if len(fields) > 9 else 0
    return (sum(fields) - idle - guest) / _TICK


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


class ProcessMeter:
    """CPU seconds per group (:data:`GROUPS`) over ``with meter.span() as result:``, per wall second; ``roles()``
    names the standalone's pids (it may be restarted between spans). ``cpu_segmentstore_loop``: the segment
    store's main thread (its event loop) alone, part of ``cpu_segmentstore``."""

    def __init__(self, roles: Callable[[], dict[int, str]], interval_s: float = 0.2) -> None:
        self.roles = roles
        self.interval_s = interval_s
        self.me = os.getpid()
        self.jvm = next((p for p, (pp, _) in _processes().items() if pp == self.me and "java" in _cmdline(p)), 0)

    def _group(self, pid: int, parents: dict[int, int], roles: dict[int, str]) -> str | None:
        if pid == self.me:
            return "driver"
        if pid == self.jvm:
            return "jvm"
        if pid in roles:
            return roles[pid]
        seen = 0
        parent = parents.get(pid, 0)
        while parent > 1 and seen < 32:
            if parent == self.jvm:
                return "pyworkers"
            parent, seen = parents.get(parent, 0), seen + 1
        return None

    @contextlib.contextmanager
    def span(self) -> Iterator[dict[str, float]]:
        result: dict[str, float] = {}
        first: dict[int, float] = {}
        last: dict[int, tuple[str, float]] = {}
        roles = self.roles()
        for pid, (_, cpu) in _processes().items():
            first[pid] = cpu
        stop = threading.Event()

        def sample() -> None:
            procs = _processes()
            parents = {pid: pp for pid, (pp, _) in procs.items()}
            for pid, (_, cpu) in procs.items():
                known = last.get(pid)
                group = known[0] if known else self._group(pid, parents, roles)
                if group is not None:
                    last[pid] = (group, cpu)

        def loop() -> None:
            while not stop.wait(self.interval_s):
                sample()

        loop_pid = next((pid for pid, role in roles.items() if role == "segmentstore"), 0)
        loop_start = thread_cpu_s(loop_pid)
        started, busy = time.perf_counter(), machine_busy_s()
        thread = threading.Thread(target=loop, daemon=True)
        thread.start()
        try:
            yield result
        finally:
            stop.set()
            thread.join()
            sample()
            wall = time.perf_counter() - started
            total = dict.fromkeys(GROUPS, 0.0)
            for pid, (group, cpu) in last.items():
                total[group] += cpu - first.get(pid, 0.0)
            total["other"] = max(0.0, machine_busy_s() - busy - sum(total.values()))
            result.update({f"cpu_{g}": round(v / wall, 2) for g, v in total.items()})
            result["cpu_segmentstore_loop"] = round((thread_cpu_s(loop_pid) - loop_start) / wall, 2)
            result["own_cpu_s"] = round(sum(v for g, v in total.items() if g != "other"), 2)
