"""Tier-2 benchmark: flush and catch-up read throughput of the chunked segment storage, filesystem and S3.

The chunked segment storage (Parquet chunks + system journal, what a container's storage writer
and its Tier-2 reads go through) over two backends:

- ``fs``: the filesystem chunk storage (fsync on) in a temporary directory under ``--dir``
  (a real disk, not tmpfs: the script warns otherwise);
- ``s3``: the S3 chunk storage (boto3) against a moto S3 server started as a child process on
  127.0.0.1 (so its CPU is not the benchmark's; moto is an emulator, so S3 numbers measure the
  client path and moto, not AWS).

For each backend and chunk size (``--chunk-mib``, default 4, 16 and 64 MiB), on a fresh
container storage:

1. ``flush``: ``--mb`` MiB of 1 KB framed events (``--event-bytes``, random payloads, so
   compression gains nothing) written to one segment as chunk-size writes, one at a time,
   as one segment's storage writer does: Parquet encode + chunk write (S3: multipart from
   16 MiB on, 8 MiB parts, 4 at a time) + journal record. MB/s of segment data.
2. ``catch-up read``: a new owner (next epoch: journal boot, nothing cached; fs: chunk pages
   dropped from the page cache with ``posix_fadvise(DONTNEED)``) reads the segment from
   offset 0 in 4 MiB reads (the read index's ``storage_read_block_bytes``), one outstanding.
   Chunks up to the 32 MiB chunk cache are fetched whole once; larger ones (64 MiB) by ranges
   (the Parquet footer once, then the row groups of each read), which the ``fetches`` column
   shows. moto serves a ranged GET by reading the whole object, so on moto a ranged read of a
   64 MiB chunk costs ~50 ms whatever its size; S3 proper costs in proportion to the range.

MB = 10^6 bytes of segment data (frame headers included).

    .venv/bin/python bench/tier2.py [--quick] [--mb 256] [--chunk-mib 4,16,64] [--backends fs,s3]
                                    [--dir /var/tmp] [--out bench/results/tier2.json]

The full run (256 MiB per case) takes about 1-2 minutes on an idle 2-CPU machine, ``--quick``
(64 MiB per case) about 30 s. Prints one table and writes JSON (``bench/results/`` is git-ignored).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchlib import MB, filesystem_of, mb_per_s, table

from segment_store.protocol import encode_events
from segment_store.storage.backends.faulty import FaultyChunkStorage
from segment_store.storage.backends.filesystem import FsChunkStorage
from segment_store.storage.backends.s3 import S3ChunkStorage, make_s3_client
from segment_store.storage.chunk_storage import ChunkStorage
from segment_store.storage.chunked_storage import ChunkedSegmentStorage
from segment_store.storage.data_chunk_names import data_prefix
from segment_store.storage.journal.system_journal import InMemorySnapshotInfoStore
from segment_store.storage.storage_config import ChunkedStorageConfig

MIB = 1024 * 1024
READ_BYTES = 4 * MIB
SEGMENT = "bench/stream/0.#epoch.0"
CONFIG = ChunkedStorageConfig(compaction_enabled=False, gc_delay_s=0)


@contextmanager
def moto_server() -> Iterator[str]:
    """A moto S3 server in a child process on a free loopback port; yields its endpoint; killed at the end."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [sys.executable, "-c", "from moto.server import main; main()", "-H", "127.0.0.1", "-p", str(port)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1):
                    break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the moto S3 server did not start") from None
                time.sleep(0.05)
        yield endpoint
    finally:
        process.kill()
        process.wait(10)


def event_block(size: int, event_bytes: int) -> bytes:
    """About ``size`` bytes of framed events with random payloads (whole events only)."""
    count = max(size // (event_bytes + 8), 1)
    payload = os.urandom(event_bytes * count)
    return encode_events([payload[i * event_bytes : (i + 1) * event_bytes] for i in range(count)])


def drop_page_cache(root: Path) -> None:
    for path in root.rglob("*.parquet"):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


async def run_case(
    backend: str, chunks: ChunkStorage, chunk_mib: int, total_mib: float, event_bytes: int, fs_root: Path | None
) -> dict[str, Any]:
    counted = FaultyChunkStorage(chunks)  # no faults: it only records the calls
    pointer = InMemorySnapshotInfoStore(0)
    block = event_block(chunk_mib * MIB, event_bytes)
    writes = max(round(total_mib / chunk_mib), 1)

    writer = ChunkedSegmentStorage(counted, 0, pointer, CONFIG)
    await writer.open(1)
    await writer.create(SEGMENT, "events")
    started = time.perf_counter()
    length = 0
    for i in range(writes):
        length = await writer.write(SEGMENT, length, [block], 1_700_000_000_000 + i)
    flush_s = time.perf_counter() - started
    await writer.close()
    tier2_bytes = sum(counted.inner.info(n).length for n in counted.inner.list(data_prefix(0)))

    if fs_root is not None:
        drop_page_cache(fs_root)
    counted.calls.clear()
    reader = ChunkedSegmentStorage(counted, 0, pointer, CONFIG)
    started = time.perf_counter()
    await reader.open(2)
    position = 0
    doubled = memoryview(block + block)  # the segment is ``block`` repeated: every read is checked
    while position < length:
        want = min(READ_BYTES, length - position)
        data = await reader.read(SEGMENT, position, want)
        at = position % len(block)
        if data != doubled[at : at + want]:
            raise AssertionError(f"{backend}: read at {position} returned other bytes")
        position += want
    read_s = time.perf_counter() - started
    fetches = sum(1 for op, name in counted.calls if op in ("read", "read_all") and name.startswith("data/"))
    await reader.delete(SEGMENT)  # gc_delay_s 0: the chunks go now (moto keeps objects in memory)
    await reader.close()
    return {
        "backend": backend,
        "chunk_mib": chunk_mib,
        "segment_mb": round(length / MB, 1),
        "chunks": writes,
        "tier2_mb": round(tier2_bytes / MB, 1),
        "flush_s": round(flush_s, 2),
        "flush_mb_s": mb_per_s(length, flush_s),
        "read_s": round(read_s, 2),
        "read_mb_s": mb_per_s(length, read_s),
        "fetches": fetches if fs_root is None else "-",  # fs reads open the files, not counted
    }


async def run(args: argparse.Namespace, endpoint: str | None) -> list[dict[str, Any]]:
    results = []
    for backend in args.backends:
        for chunk_mib in args.chunk_mib:
            with tempfile.TemporaryDirectory(prefix="bench-tier2-", dir=args.dir) as tmp:
                fs_root: Path | None = None
                if backend == "fs":
                    fs_root = Path(tmp) / "tier2"
                    chunks: ChunkStorage = FsChunkStorage(fs_root)
                else:
                    client = make_s3_client(
                        endpoint_url=endpoint, region="us-east-1", access_key_id="bench", secret_access_key="bench"
                    )
                    chunks = S3ChunkStorage(client, f"bench-{chunk_mib}", "segstore/", endpoint_url=endpoint)
                    chunks.check_bucket(create=True, region="us-east-1")
                try:
                    row = await run_case(backend, chunks, chunk_mib, args.mb, args.event_bytes, fs_root)
                finally:
                    chunks.close()
            print(f"  {backend} {chunk_mib:>2} MiB: flush {row['flush_mb_s']} MB/s, read {row['read_mb_s']} MB/s")
            results.append(row)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smoke run: 64 MiB per case")
    parser.add_argument("--mb", type=float, help="MiB written and read per case (default 256; --quick 64)")
    parser.add_argument("--chunk-mib", default="4,16,64", help="chunk sizes in MiB (default 4,16,64)")
    parser.add_argument("--backends", default="fs,s3", help="fs, s3 or both (default fs,s3)")
    parser.add_argument("--event-bytes", type=int, default=1000, help="event payload size (default 1000)")
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="where the filesystem Tier-2 lives (a real disk)")
    parser.add_argument("--out", default="bench/results/tier2.json")
    args = parser.parse_args()
    args.chunk_mib = [int(x) for x in args.chunk_mib.split(",")]
    args.backends = args.backends.split(",")
    if set(args.backends) - {"fs", "s3"}:
        parser.error("--backends: choose from fs, s3")
    if any(not 0 < c <= 64 for c in args.chunk_mib):
        parser.error("--chunk-mib: sizes must be in (0, 64] (the chunk storage's max_chunk_bytes)")
    if args.mb is None:
        args.mb = 64.0 if args.quick else 256.0
    fs_type = filesystem_of(Path(args.dir))
    print(f"filesystem Tier-2 under {args.dir} ({fs_type}); {args.mb:g} MiB per case")
    if "fs" in args.backends and fs_type in ("tmpfs", "ramfs"):
        print(f"warning: {args.dir} is {fs_type}, not a disk (use --dir)", file=sys.stderr)
    load_before = os.getloadavg()
    if load_before[0] > 0.5:
        print(f"warning: load average {load_before[0]:.2f}: other work makes the numbers noisy", file=sys.stderr)
    started = time.perf_counter()
    if "s3" in args.backends:
        with moto_server() as endpoint:
            results = asyncio.run(run(args, endpoint))
    else:
        results = asyncio.run(run(args, None))
    total_s = time.perf_counter() - started
    table(
        "Tier-2 flush and catch-up read (one segment, sequential; MB = 10^6 bytes of segment data)",
        results,
        [
            ("backend", "backend"),
            ("chunk_mib", "chunk MiB"),
            ("segment_mb", "MB"),
            ("chunks", "chunks"),
            ("tier2_mb", "stored MB"),
            ("flush_mb_s", "flush MB/s"),
            ("read_mb_s", "catch-up read MB/s"),
            ("fetches", "fetches"),
        ],
    )
    print(f"\ntotal {total_s:.0f} s")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "benchmark": "tier2",
                "python": platform.python_version(),
                "platform": platform.platform(),
                "cpus": os.cpu_count(),
                "dir": args.dir,
                "filesystem": fs_type,
                "load_average_before": [round(x, 2) for x in load_before],
                "load_average_after": [round(x, 2) for x in os.getloadavg()],
                "quick": args.quick,
                "settings": {
                    "mb": args.mb,
                    "chunk_mib": args.chunk_mib,
                    "backends": args.backends,
                    "event_bytes": args.event_bytes,
                    "read_bytes": READ_BYTES,
                },
                "total_s": round(total_s, 1),
                "results": results,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
