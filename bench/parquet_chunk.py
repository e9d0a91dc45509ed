"""Benchmark of the Parquet chunk format: encode and decode throughput per compression.

For each event size (100 B, 100 B of varying size 50..150 B, 10 KB), chunk size (4 MiB,
16 MiB) and compression, it times ``encode`` of a chunk of framed events, ``decode`` of the
whole chunk and ``decode_range`` of 1 MiB in the middle; MB/s counts segment bytes (header
included), events/s counts events. Payloads are slices of JSON-like text, so compression has
something to do. Two smaller tables follow: row-group size (100 B±50, lz4), and the frame
finder against the plain header walk. Prints the tables and writes JSON (``--out``).

    .venv/bin/python bench/parquet_chunk.py [--repeat 7] [--out bench/results/parquet_chunk.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import struct
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from segment_store.storage.format import parquet_chunk
from segstore_shared.event_frames import find_frames, walk_frames

MIB = 1 << 20
COMPRESSIONS = ["none", "snappy", "lz4", "zstd"]
SHAPES = [("100B", 100, 0), ("100B±50", 100, 50), ("10KB", 10_000, 0)]
CHUNKS = [4 * MIB, 16 * MIB]


@dataclass
class Row:
    events: str
    chunk_mib: int
    compression: str
    event_count: int
    ratio: float
    encode_mb_s: float
    encode_ev_s: float
    decode_mb_s: float
    decode_ev_s: float
    range_1mib_ms: float


def corpus(size: int, seed: int = 7) -> bytes:
    """JSON-lines text with random numbers and a few repeating keys and values."""
    rng = random.Random(seed)
    lines: list[str] = []
    total = 0
    while total < size:
        line = (
            f'{{"sensor":"s-{rng.randrange(5000):04d}","ts":{1_700_000_000_000 + rng.randrange(10**9)},'
            f'"value":{rng.uniform(-100, 100):.4f},"status":"{rng.choice(["ok", "warn", "fail"])}",'
            f'"site":"{rng.choice(["berlin", "lisbon", "osaka", "quito"])}"}}\n'
        )
        lines.append(line)
        total += len(line)
    return "".join(lines).encode()


def framed_events(chunk_bytes: int, size: int, spread: int, text: bytes, seed: int = 1) -> tuple[bytes, int]:
    """Whole frames filling about ``chunk_bytes``; returns the data and the event count."""
    rng = np.random.default_rng(seed)
    parts: list[bytes] = []
    total = 0
    count = 0
    header = struct.Struct(">ii")
    while True:
        length = size + (int(rng.integers(-spread, spread + 1)) if spread else 0)
        if total + 8 + length > chunk_bytes:
            break
        start = int(rng.integers(0, len(text) - length))
        parts.append(header.pack(0, length))
        parts.append(text[start : start + length])
        total += 8 + length
        count += 1
    return b"".join(parts), count


def timed(fn: Callable[[], object], repeat: int) -> float:
    """Median wall time of ``repeat`` calls after one warm-up call."""
    fn()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def run(repeat: int) -> list[Row]:
    text = corpus(8 * MIB)
    rows: list[Row] = []
    for label, size, spread in SHAPES:
        for chunk in CHUNKS:
            data, count = framed_events(chunk, size, spread, text)
            times = parquet_chunk.IngestRanges(
                np.arange(0, len(data), 64 * 1024, dtype=np.int64),
                1_700_000_000_000 + np.arange(0, len(data), 64 * 1024, dtype=np.int64) // 1024,
            )
            for compression in COMPRESSIONS:
                encoded = parquet_chunk.encode(data, times, compression=compression)
                assert parquet_chunk.decode(encoded) == data
                buf = pa.py_buffer(encoded)
                t_enc = timed(lambda: parquet_chunk.encode(data, times, compression=compression), repeat)  # noqa: B023
                t_dec = timed(lambda: parquet_chunk.decode_range(buf, 0, len(data)), repeat)  # noqa: B023
                mid = len(data) // 2
                t_rng = timed(lambda: parquet_chunk.decode_range(buf, mid, MIB), repeat)  # noqa: B023
                rows.append(
                    Row(
                        events=label,
                        chunk_mib=chunk // MIB,
                        compression=compression,
                        event_count=count,
                        ratio=round(len(data) / len(encoded), 2),
                        encode_mb_s=round(len(data) / t_enc / 1e6, 1),
                        encode_ev_s=round(count / t_enc),
                        decode_mb_s=round(len(data) / t_dec / 1e6, 1),
                        decode_ev_s=round(count / t_dec),
                        range_1mib_ms=round(t_rng * 1e3, 2),
                    )
                )
                print_row(rows[-1])
    return rows


def run_row_groups(repeat: int) -> list[dict[str, object]]:
    """Encode/decode speed and 64 KiB range-read latency per row-group size (100 B±50, lz4)."""
    text = corpus(8 * MIB)
    out: list[dict[str, object]] = []
    print(f"\n{'chunk':>5} {'row group':>9} {'groups':>6} {'enc MB/s':>8} {'dec MB/s':>8} {'64KiB rng ms':>12}")
    for chunk in CHUNKS:
        data, _ = framed_events(chunk, 100, 50, text)
        for group in (256 << 10, MIB, 4 * MIB, chunk):
            encoded = parquet_chunk.encode(data, 0, row_group_bytes=group)
            buf = pa.py_buffer(encoded)
            t_enc = timed(lambda: parquet_chunk.encode(data, 0, row_group_bytes=group), repeat)  # noqa: B023
            t_dec = timed(lambda: parquet_chunk.decode_range(buf, 0, len(data)), repeat)  # noqa: B023
            t_rng = timed(lambda: parquet_chunk.decode_range(buf, len(data) // 2, 64 << 10), repeat)  # noqa: B023
            row: dict[str, object] = {
                "chunk_mib": chunk // MIB,
                "row_group_kib": group >> 10,
                "row_groups": parquet_chunk.chunk_info(encoded).row_groups,
                "encode_mb_s": round(len(data) / t_enc / 1e6, 1),
                "decode_mb_s": round(len(data) / t_dec / 1e6, 1),
                "range_64kib_ms": round(t_rng * 1e3, 2),
            }
            out.append(row)
            print(
                f"{chunk // MIB:>4}M {group >> 10:>8}K {row['row_groups']:>6} {row['encode_mb_s']:>8.0f} "
                f"{row['decode_mb_s']:>8.0f} {row['range_64kib_ms']:>12.2f}",
                flush=True,
            )
    return out


def run_frame_finder(repeat: int) -> list[dict[str, object]]:
    """``find_frames`` against the one-header-at-a-time walk on 4 MiB of events."""
    text = corpus(8 * MIB)
    rng = random.Random(3)
    header = struct.Struct(">ii")
    cases = {
        "100B text": framed_events(4 * MIB, 100, 0, text)[0],
        "100B±50 text": framed_events(4 * MIB, 100, 50, text)[0],
        "100B±50 random": b"".join(
            header.pack(0, n) + rng.randbytes(n) for n in (rng.randint(50, 150) for _ in range(38_000))
        ),
        "100B±50 zeros": b"".join(header.pack(0, n) + bytes(n) for n in (rng.randint(50, 150) for _ in range(38_000))),
        "10KB text": framed_events(4 * MIB, 10_000, 0, text)[0],
    }
    out: list[dict[str, object]] = []
    print(f"\n{'payloads':16} {'find ms':>8} {'walk ms':>8}")
    for label, data in cases.items():
        t_find = timed(lambda: find_frames(data), repeat)  # noqa: B023
        t_walk = timed(lambda: walk_frames(data), repeat)  # noqa: B023
        out.append({"payloads": label, "find_ms": round(t_find * 1e3, 2), "walk_ms": round(t_walk * 1e3, 2)})
        print(f"{label:16} {t_find * 1e3:>8.2f} {t_walk * 1e3:>8.2f}", flush=True)
    return out


def print_header() -> None:
    print(
        f"{'events':8} {'chunk':>5} {'codec':6} {'count':>7} {'ratio':>5} "
        f"{'enc MB/s':>8} {'enc ev/s':>10} {'dec MB/s':>8} {'dec ev/s':>10} {'1MiB rng ms':>11}"
    )


def print_row(r: Row) -> None:
    print(
        f"{r.events:8} {r.chunk_mib:>4}M {r.compression:6} {r.event_count:>7} {r.ratio:>5.2f} "
        f"{r.encode_mb_s:>8.0f} {r.encode_ev_s:>10,} {r.decode_mb_s:>8.0f} {r.decode_ev_s:>10,} "
        f"{r.range_1mib_ms:>11.2f}",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7, help="timed runs per case (median is reported)")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "parquet_chunk.json")
    args = parser.parse_args()
    print_header()
    rows = run(args.repeat)
    row_groups = run_row_groups(args.repeat)
    finder = run_frame_finder(args.repeat)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    result = {
        "benchmark": "parquet_chunk",
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "pyarrow": pa.__version__,
        },
        "default_compression": parquet_chunk.DEFAULT_COMPRESSION,
        "row_group_bytes": parquet_chunk.ROW_GROUP_BYTES,
        "repeat": args.repeat,
        "rows": [asdict(r) for r in rows],
        "row_groups": row_groups,
        "frame_finder": finder,
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
