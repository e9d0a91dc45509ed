"""Throughput of the wire codec on the append path.

Cases: ``AppendBlockEnd`` frames (the Rust client's append shape) carrying 100 B or 10 KB events, in a
large block (~512 KiB of events per frame) and a small one. Operations:

* ``encode``: client side, ``encode_append_batch`` (frame each event + encode the frame);
* ``decode``: server side, ``FrameDecoder`` fed 64 KiB chunks (frames split across chunks) and every
  command run through ``AppendAssembler``;
* ``parse``: reader side, ``EventParser`` splitting the stored event data back into events.

Prints a table and writes JSON (default ``bench/results/codec.json``).

    python bench/codec.py [--seconds 2] [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from segment_store.protocol import (
    AppendAssembler,
    EventParser,
    FrameDecoder,
    SetupAppend,
    encode,
    encode_append_batch,
    encode_events,
)

WRITER = uuid.UUID("3f2a9c1e-8b7d-4e6f-a5c4-1d2e3f4a5b6c")
CHUNK = 64 * 1024


@dataclass(frozen=True)
class Case:
    name: str
    event_bytes: int
    events_per_frame: int


CASES = [
    Case("100B x 4855 (~512 KiB)", 100, 4855),
    Case("100B x 10 (~1 KiB)", 100, 10),
    Case("10KB x 52 (~512 KiB)", 10_000, 52),
    Case("10KB x 4 (~40 KiB)", 10_000, 4),
]


@dataclass(frozen=True)
class Result:
    case: str
    op: str
    event_bytes: int
    events_per_frame: int
    frame_bytes: int
    iterations: int
    seconds: float
    mb_per_s: float
    frames_per_s: float
    events_per_s: float


def measure(run: Callable[[], None], seconds: float) -> tuple[int, float]:
    """Call ``run`` until ``seconds`` have passed (at least 3 times); return (calls, elapsed)."""
    run()  # warm up
    calls, start = 0, time.perf_counter()
    while True:
        run()
        calls += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds and calls >= 3:
            return calls, elapsed


def bench_case(case: Case, seconds: float) -> list[Result]:
    payload = bytes(range(256)) * (case.event_bytes // 256 + 1)
    events = [payload[i % 7 : i % 7 + case.event_bytes] for i in range(case.events_per_frame)]
    frame = encode_append_batch(WRITER, events, case.events_per_frame, 1)
    frames_per_stream = max(1, (8 << 20) // len(frame))  # decode ~8 MiB per call
    setup = encode(SetupAppend(0, WRITER, "scope/stream/0.#epoch.0", ""))
    stream = setup + frame * frames_per_stream
    chunks = [stream[i : i + CHUNK] for i in range(0, len(stream), CHUNK)]
    data = encode_events(events)

    def do_encode() -> None:
        encode_append_batch(WRITER, events, case.events_per_frame, 1)

    def do_decode() -> None:
        decoder, assembler = FrameDecoder(), AppendAssembler()
        appended = 0
        for chunk in chunks:
            decoder.feed(chunk)
            for command in decoder:
                if assembler.process(command) is not None:
                    appended += 1
        assert appended == frames_per_stream + 1

    def do_parse() -> None:
        parser = EventParser()
        parser.feed(data)
        count = sum(1 for _ in parser)
        assert count == case.events_per_frame

    results = []
    for op, run, frames in (
        ("encode", do_encode, 1),
        ("decode", do_decode, frames_per_stream),
        ("parse", do_parse, 1),
    ):
        calls, elapsed = measure(run, seconds)
        total_frames = calls * frames
        total_bytes = total_frames * (len(frame) if op != "parse" else len(data))
        results.append(
            Result(
                case=case.name,
                op=op,
                event_bytes=case.event_bytes,
                events_per_frame=case.events_per_frame,
                frame_bytes=len(frame),
                iterations=calls,
                seconds=round(elapsed, 3),
                mb_per_s=round(total_bytes / elapsed / 1e6, 1),
                frames_per_s=round(total_frames / elapsed, 1),
                events_per_s=round(total_frames * case.events_per_frame / elapsed, 1),
            )
        )
    return results


def print_table(results: list[Result]) -> None:
    header = f"{'case':<24} {'op':<7} {'frame B':>9} {'MB/s':>9} {'frames/s':>11} {'events/s':>12}"
    print(header)
    print("-" * len(header))
    for r in results:
        print(
            f"{r.case:<24} {r.op:<7} {r.frame_bytes:>9} {r.mb_per_s:>9.1f} "
            f"{r.frames_per_s:>11,.0f} {r.events_per_s:>12,.0f}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=2.0, help="measuring time per case and op")
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "results" / "codec.json", help="JSON output"
    )
    args = parser.parse_args(argv)
    results = [r for case in CASES for r in bench_case(case, args.seconds)]
    print_table(results)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "benchmark": "codec",
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "seconds_per_case": args.seconds,
        "decode_chunk_bytes": CHUNK,
        "results": [asdict(r) for r in results],
    }
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
