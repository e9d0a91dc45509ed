"""What a pass sends the table worker (``segment_store.iceberg.worker``): the snapshot as the change from the one the
worker holds. Applied to what the worker holds, the change gives exactly the snapshot; a pass in which nothing
changed sends no chunk file."""

from __future__ import annotations

import pickle
import random
from dataclasses import replace

import pytest

from segment_store.iceberg.names import StreamSegment
from segment_store.iceberg.stream_table import ChunkFile
from segment_store.iceberg.worker import Snapshot, apply_change, change_of

pytestmark = pytest.mark.unit


def chunk(stream: str, number: int) -> ChunkFile:
    segment = f"lake/{stream}/0.#epoch.0"
    return ChunkFile(f"/t2/{stream}/{number}.parquet", segment, StreamSegment("lake", stream, 0), f"c{number}",
                     number * 100, 0, 100, 1_700_000_000_000 + number)  # fmt: skip


def snapshot(tables: dict[str, list[ChunkFile]]) -> Snapshot:
    return Snapshot(
        {("lake", t): {c.location: c for c in files} for t, files in tables.items()},
        {("lake", t): {0} for t in tables},
        {("lake", t): 1 for t in tables},
    )


def test_changes_applied_in_turn_give_each_snapshot_exactly() -> None:
    rng = random.Random(7)
    files = {t: [chunk(t, n) for n in range(20)] for t in ("a", "b", "c")}
    held: dict = {}
    sent_before = None
    for _ in range(30):
        for t in list(files):
            if rng.random() < 0.5:
                files[t].append(chunk(t, len(files[t]) + rng.randrange(1000, 2000)))  # a new chunk
            if files[t] and rng.random() < 0.3:
                files[t].pop(rng.randrange(len(files[t])))  # compacted or truncated away
            if files[t] and rng.random() < 0.3:
                i = rng.randrange(len(files[t]))
                files[t][i] = replace(files[t][i], cut=rng.randrange(1, 50))  # the truncation boundary moved
        tables = {t: f for t, f in files.items() if rng.random() < 0.9}  # a container moved away: its table is gone
        wanted = snapshot(tables)
        change = pickle.loads(pickle.dumps(change_of(wanted, sent_before)))  # as it crosses the pipe
        got = apply_change(change, held)
        assert got.chunks == wanted.chunks and got.segments == wanted.segments
        assert got.incarnations == wanted.incarnations
        sent_before = wanted.chunks


def test_a_pass_with_nothing_changed_sends_no_chunk_file_and_a_new_worker_gets_all() -> None:
    first = snapshot({"a": [chunk("a", n) for n in range(1000)]})
    again = Snapshot({k: dict(v) for k, v in first.chunks.items()}, first.segments, first.incarnations)
    change = change_of(again, first.chunks)
    assert not change.full and change.added == {("lake", "a"): {}} and change.gone == {("lake", "a"): []}
    everything = change_of(again, None)
    assert everything.full and len(everything.added[("lake", "a")]) == 1000
    assert len(pickle.dumps(change)) * 50 < len(pickle.dumps(everything))
