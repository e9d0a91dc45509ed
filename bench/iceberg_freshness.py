"""How soon an acknowledged event is in its stream's Iceberg table, at a steady write rate.

A ``segstore standalone`` (its own data directory under a temporary directory) keeps ``bench/*`` streams as
tables (``--iceberg-tables``, default catalog: SQLite under the data directory, default commit interval and
flush age). A writer (our client library, in this process) appends ``--rate`` events/s of ``--event-bytes``
bytes to a stream of ``--segments`` segments over 16 routing keys for ``--seconds``; each event starts with its
number, and the time each batch of events (one every 5 ms) is acknowledged is noted. A watcher thread loads the
table every ``--poll-ms`` through the catalog, as a reader would; for each new snapshot it reads the ``event``
column of the data files new to it and notes, for every event number seen for the first time, when.

The stream is made and its (empty) table awaited before the first write, so the numbers are steady state (the
first table of a segment store waits for pyiceberg's imports and the catalog: seconds). Freshness of an
event = the time the watcher first saw it in the table minus its acknowledgement (so it
includes up to one poll interval of the watcher). At the end every event written must be in the table exactly
once (the run fails otherwise). Printed: freshness percentiles, acknowledgement latency, and what the table
is made of (data files, snapshots kept, manifests, files under the table's metadata directory), and data files per
hour at this rate: those that came into the table (every chunk the segment stores committed: before compaction) and
those left at the end (after compaction merged them).

``--no-tables`` runs the same writes on a standalone without tables: the acknowledgement latency to compare
(what the maintainer's commits, on a worker thread of the segment store, cost the appends); ``--no-watcher`` keeps
the tables but runs no watcher (its CPU then does not weigh on the writer and the segment store; no freshness).
Every run also prints the segment store's own view of the timed part (:mod:`server_view`): its append and Tier-1
write latencies, its event loop's stalls and timed activities.

    PYTHONPATH=. .venv/bin/python bench/iceberg_freshness.py [--rate 10000] [--seconds 30] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import os
import re
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchlib import percentile, table
from server_view import View, server_view, span

SCOPE, STREAM = "bench", "fresh"
KEYS = 16


def wait_for_table(data_dir: Path, timeout_s: float = 60) -> None:
    """Until the stream's table exists (made at the maintainer's first pass after the stream's segments are)."""
    deadline = time.monotonic() + timeout_s
    while True:
        if (data_dir / "iceberg" / "catalog.db").exists():
            query = "SELECT 1 FROM iceberg_tables WHERE table_namespace = ? AND table_name = ?"
            database = sqlite3.connect(data_dir / "iceberg" / "catalog.db")
            with contextlib.closing(database), contextlib.suppress(sqlite3.OperationalError):  # no table yet
                if database.execute(query, (SCOPE, STREAM)).fetchone():
                    return
        if time.monotonic() > deadline:
            raise TimeoutError(f"no table {SCOPE}.{STREAM} within {timeout_s} s")
        time.sleep(0.1)


def event(number: int, size: int) -> bytes:
    head = b"%012d" % number
    return head + b"x" * max(size - len(head), 0)


WARM_UP = KEYS
"""Events 0..WARM_UP-1, one per routing key, are written (and their table awaited) before the timed run."""


async def write(
    uri: str,
    args: argparse.Namespace,
    acked: dict[int, float],
    latencies: list[float],
    data_dir: Path | None,
    metrics_port: int,
    views: list[View],
) -> tuple[int, float]:
    """Create the stream (``args.segments``), write the warm-up events and wait for the table, then write
    ``args.rate`` events/s of ``args.event_bytes`` for ``args.seconds``; ``acked[n]`` = when event n's batch was
    acknowledged (epoch s), ``latencies`` gets each timed event's acknowledgement latency (s); ``views`` the
    segment store's own view (:mod:`server_view`) before and after the timed part. No table is awaited without
    ``data_dir``. Returns how many in all, and the seconds the timed part took."""
    from controller_client import ControllerClient, ScalingPolicy, StreamConfiguration, StreamManager

    rate, seconds, size, segments = args.rate, args.seconds, args.event_bytes, args.segments

    async with await ControllerClient.connect(uri) as controller, StreamManager(controller) as manager:
        await manager.create_scope(SCOPE)
        await manager.create_stream(SCOPE, STREAM, StreamConfiguration(ScalingPolicy.fixed(segments)))
        async with await manager.create_writer(SCOPE, STREAM) as writer:
            await (await writer.write_events([(event(n, size), f"key-{n % KEYS}") for n in range(WARM_UP)]))
            if data_dir is not None:
                await asyncio.to_thread(wait_for_table, data_dir)
            views.append(await asyncio.to_thread(server_view, metrics_port))
            started = time.monotonic()
            written = WARM_UP
            pending: list[asyncio.Future[None]] = []
            while (elapsed := time.monotonic() - started) < seconds:
                due = int(elapsed * rate) - (written - WARM_UP)
                if due > 0:
                    numbers = range(written, written + due)
                    sent = time.time()
                    future = await writer.write_events([(event(n, size), f"key-{n % KEYS}") for n in numbers])

                    def done(_: object, numbers: range = numbers, sent: float = sent) -> None:
                        now = time.time()
                        for n in numbers:
                            acked[n] = now
                        latencies.extend([now - sent] * len(numbers))

                    future.add_done_callback(done)
                    pending.append(future)
                    written += due
                await asyncio.sleep(0.005)
            await writer.flush()
            await asyncio.gather(*pending)
            took = time.monotonic() - started
            views.append(await asyncio.to_thread(server_view, metrics_port))
    return written, took


class Watcher:
    """Loads the table every ``poll_s`` until ``stop`` exists; ``seen[n]`` = when event n was first in it (epoch
    s). Runs in a process of its own (``--watch``), so neither it nor the writer slows the other."""

    def __init__(self, data_dir: Path, poll_s: float, stop: Path) -> None:
        self.data_dir, self.poll_s, self.stop = data_dir, poll_s, stop
        self.seen: dict[int, float] = {}
        self.files: set[str] = set()
        self.files_added = 0  # data files that came into the table (chunks committed, compaction's merged files)
        self.snapshots_seen = 0

    def catalog(self) -> Any:
        from pyiceberg.catalog.sql import SqlCatalog

        home = self.data_dir / "iceberg"
        return SqlCatalog("segstore", uri=f"sqlite:///{home / 'catalog.db'}", warehouse=(home / "warehouse").as_uri())

    def watch(self) -> None:
        import pyarrow.parquet as pq
        from pyiceberg.exceptions import NoSuchTableError

        while not (self.data_dir / "iceberg" / "catalog.db").exists():
            time.sleep(self.poll_s)
        catalog = self.catalog()
        last = None
        while not self.stop.exists():
            time.sleep(self.poll_s)
            try:
                tbl = catalog.load_table((SCOPE, STREAM))
            except NoSuchTableError:
                continue
            if tbl.metadata_location == last:
                continue
            now = time.time()
            last = tbl.metadata_location
            self.snapshots_seen += 1
            paths = {task.file.file_path for task in tbl.scan().plan_files()}
            self.files_added += len(paths - self.files)
            for path in sorted(paths - self.files):
                events = pq.read_table(path.removeprefix("file://"), columns=["event", "framed"])
                for value, framed in zip(events.column("event").to_pylist(), events.column("framed").to_pylist(),
                                         strict=True):  # fmt: skip
                    if framed:
                        self.seen.setdefault(int(value[:12]), now)
            self.files = paths

    def final(self) -> tuple[collections.Counter[int], dict[str, int]]:
        """Every event number in the table now (with its count) and what the table is made of."""
        tbl = self.catalog().load_table((SCOPE, STREAM))
        rows = tbl.scan(selected_fields=("event", "framed")).to_arrow()
        counts = collections.Counter(
            int(v[:12])
            for v, f in zip(rows.column("event").to_pylist(), rows.column("framed").to_pylist(), strict=True)
            if f
        )
        snapshot = tbl.current_snapshot()
        assert snapshot is not None
        metadata_dir = Path(tbl.metadata_location.removeprefix("file://")).parent
        shape = {
            "data_files": len(list(tbl.scan().plan_files())),
            "snapshots_kept": len(tbl.metadata.snapshots),
            "manifests": len(snapshot.manifests(tbl.io)),
            "metadata_dir_files": len(list(metadata_dir.iterdir())),
        }
        return counts, shape


def watched(
    args: argparse.Namespace,
    data_dir: Path,
    temporary: Path,
    uri: str,
    env: dict[str, str],
    acked: dict[int, float],
    latencies: list[float],
    metrics_port: int,
    views: list[View],
) -> tuple[int, float, Watcher, collections.Counter[int], dict[str, int]]:
    """The timed writes with a watcher process noting when each event is first in the table."""
    stop, seen_json = temporary / "stop", temporary / "seen.json"
    watch = [sys.executable, __file__, "--watch", str(data_dir), str(args.poll_ms), str(stop), str(seen_json)]
    watcher_process = subprocess.Popen(watch, env=env)
    try:
        sent_at, written_s = asyncio.run(write(uri, args, acked, latencies, data_dir, metrics_port, views))
        watcher = Watcher(data_dir, args.poll_ms / 1000, stop)
        deadline = time.monotonic() + 60
        while len(watcher.final()[0]) < sent_at and time.monotonic() < deadline:
            time.sleep(0.5)
        time.sleep(2 * args.poll_ms / 1000)  # the watcher's last poll sees it too
    finally:
        stop.touch()
        if watcher_process.wait(60) != 0:
            raise RuntimeError("the watcher failed")
    report = json.loads(seen_json.read_text())
    watcher.seen = {int(n): t for n, t in report["seen"].items()}
    watcher.snapshots_seen = report["snapshots_seen"]
    watcher.files_added = report["files_added"]
    counts, shape = watcher.final()
    return sent_at, written_s, watcher, counts, shape


def watch_main(data_dir: str, poll_ms: str, stop: str, out: str) -> None:
    """``--watch DATA_DIR POLL_MS STOP_FILE OUT_JSON``: watch until STOP_FILE exists, then write what was seen."""
    watcher = Watcher(Path(data_dir), int(poll_ms) / 1000, Path(stop))
    watcher.watch()
    report = {"seen": watcher.seen, "snapshots_seen": watcher.snapshots_seen, "files_added": watcher.files_added}
    Path(out).write_text(json.dumps(report))


def main() -> None:
    if sys.argv[1:2] == ["--watch"]:
        watch_main(*sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=10_000, help="events/s (default 10000)")
    parser.add_argument("--seconds", type=float, default=30.0, help="how long to write (default 30)")
    parser.add_argument("--event-bytes", type=int, default=100, help="event size (default 100)")
    parser.add_argument("--segments", type=int, default=4, help="segments of the stream (default 4)")
    parser.add_argument("--poll-ms", type=int, default=100, help="the watcher's poll interval (default 100)")
    parser.add_argument("--json", default="bench/results/iceberg_freshness.json", help="where to write the JSON")
    parser.add_argument(
        "--no-tables", action="store_true", help="the same writes without tables: acknowledgement latency only"
    )
    parser.add_argument(
        "--no-watcher", action="store_true",
        help="tables on, but no watcher process (its CPU out of the acknowledgement latency): no freshness",
    )  # fmt: skip
    args = parser.parse_args()

    from segstore_shared.coordination.zookeeper_server import free_port
    from segstore_shared.processes import die_with_parent_env

    acked: dict[int, float] = {}
    latencies: list[float] = []
    views: list[View] = []
    with tempfile.TemporaryDirectory() as temporary:
        data_dir = Path(temporary) / "data"
        port = free_port()
        command = [sys.executable, "-m", "segstore_cli", "standalone", "--data-dir", str(data_dir),
                   "--controller-port", str(port), "--segmentstore-port", str(free_port()), "--metrics-port", "0",
                   *([] if args.no_tables else ["--iceberg-tables", f"{SCOPE}/*"])]  # fmt: skip
        env = die_with_parent_env({**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)})
        standalone = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env)
        try:
            assert standalone.stdout is not None
            ready = next(line for line in standalone.stdout if "ready" in line)
            found = re.search(r":(\d+) \(segment store\)", ready)
            assert found is not None, ready
            metrics_port = int(found.group(1))
            uri = f"tcp://127.0.0.1:{port}"
            if args.no_tables or args.no_watcher:
                sent_at, written_s = asyncio.run(
                    write(uri, args, acked, latencies, None if args.no_tables else data_dir, metrics_port, views)
                )
            else:
                sent_at, written_s, watcher, counts, shape = watched(
                    args, data_dir, Path(temporary), uri, env, acked, latencies, metrics_port, views
                )
        finally:
            standalone.terminate()
            standalone.wait(60)
    latencies.sort()
    result: dict[str, Any] = {
        "tables": not args.no_tables,
        "watcher": not (args.no_tables or args.no_watcher),
        "rate_events_per_s": args.rate,
        "achieved_events_per_s": round((sent_at - WARM_UP) / written_s),
        "seconds": args.seconds,
        "events": sent_at,
        "event_bytes": args.event_bytes,
        "segments": args.segments,
        "ack_latency_ms": {q: round(1000 * percentile(latencies, float(q)), 1) for q in ("50", "99", "99.9")},
        "cpus": os.cpu_count(),
        "load_1m": round(os.getloadavg()[0], 1),
    }
    title = (
        f"{sent_at:,} events of {args.event_bytes} B at {result['achieved_events_per_s']:,}/s, {args.segments} segments"
    )
    if not (args.no_tables or args.no_watcher):
        missing = sent_at - len(counts)
        twice = sum(1 for c in counts.values() if c > 1)
        assert missing == 0 and twice == 0 and set(counts) == set(range(sent_at)), (missing, twice)
        fresh = sorted(watcher.seen[n] - acked[n] for n in range(WARM_UP, sent_at))
        result["poll_ms"] = args.poll_ms
        result["freshness_s"] = {q: round(percentile(fresh, float(q)), 3) for q in ("50", "90", "99", "100")}
        result["snapshots_seen"] = watcher.snapshots_seen
        result.update(shape)
        # files per hour at this rate: those that came in (before compaction) and those left (after it)
        result["files_added"] = watcher.files_added
        result["files_added_per_hour"] = round(watcher.files_added * 3600 / args.seconds)
        result["data_files_per_hour"] = round(shape["data_files"] * 3600 / args.seconds)
        table(
            f"Iceberg freshness: {title} (acknowledged -> in the table, seen by a reader polling every "
            f"{args.poll_ms} ms)",
            [{"q": f"p{q}", "s": v} for q, v in result["freshness_s"].items()],
            [("q", "percentile"), ("s", "freshness s")],
        )
        columns = ("data_files", "files_added", "files_added_per_hour", "data_files_per_hour", "snapshots_kept",
                   "manifests", "metadata_dir_files", "snapshots_seen")  # fmt: skip
        table("The table at the end", [{k: result[k] for k in columns}], [(k, k) for k in columns])
    table(
        f"Acknowledgement latency, tables {'off' if args.no_tables else 'on'}: {title}",
        [{"q": f"p{q}", "ms": v} for q, v in result["ack_latency_ms"].items()],
        [("q", "percentile"), ("ms", "latency ms")],
    )
    server = result["server"] = span(views[0], views[1])
    quantiles = ("p50", "p99", "p99.9")
    rows = [{"what": f"{key} ({server[key]['count']:,})", **{q: server[key][f"{q}_le_ms"] for q in quantiles}}
            for key in ("append", "tier1_write")]  # fmt: skip
    table("The segment store's view of the timed part (ms, upper bound of the histogram bucket)", rows,
          [("what", "what (count)"), ("p50", "p50 <="), ("p99", "p99 <="), ("p99.9", "p99.9 <=")])  # fmt: skip
    causes = [{"kind": kind, "cause": cause, **numbers} for kind in ("stall", "activity")
              for cause, numbers in server[kind].items()]  # fmt: skip
    table("Its event loop's stalls and timed activities meanwhile", causes,
          [("kind", "kind"), ("cause", "cause"), ("count", "count"), ("ms", "ms")])  # fmt: skip
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwritten {args.json}")


if __name__ == "__main__":
    main()
