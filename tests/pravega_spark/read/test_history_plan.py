"""The split of a history read (``pravega_spark.read.history_plan``): files below the frontier, the source above it;
together exactly the ranges a plain read plans from head to tail, across scaling and truncation."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence

import pytest

from pravega_spark.offsets import ReadState
from pravega_spark.read.history_plan import ChunkFile, HistoryFile, plan_history
from pravega_spark.read.planning import SegmentState, plan_ranges

pytestmark = pytest.mark.unit


class Catalog:
    """Segment 1 (sealed, 0..300) split into 2 and 3 (open); segment 4 open throughout."""

    scope = "s"
    stream = "t"

    def __init__(self, start_1: int = 0) -> None:
        self.states = {
            1: SegmentState(start_1, 300, True),
            2: SegmentState(0, 200, False),
            3: SegmentState(0, 100, False),
            4: SegmentState(0, 500, False),
        }

    def status(self, segment_id: int) -> SegmentState | None:
        return self.states.get(segment_id)

    def successors(self, segment_id: int) -> Mapping[int, Sequence[int]]:
        return {2: [1], 3: [1]} if segment_id == 1 else {}

    def chunks(self, segment_id: int, start: int, end: int) -> Iterable[bytes]:
        raise AssertionError("planning a history read reads no bytes")


def _chunks(*bounds: int, segment: int) -> list[ChunkFile]:
    return [ChunkFile(a, b - a, f"/t2/{segment}/{a}", f"c{segment}-{a}") for a, b in itertools.pairwise(bounds)]


HEAD = ReadState("s", "t", {1: 0, 4: 0})
TAIL = ReadState("s", "t", {2: 200, 3: 100, 4: 500})


def _union(plan_files: Sequence[HistoryFile], frontier: ReadState, catalog: Catalog) -> dict[int, list[int]]:
    """Per segment, the [lo, hi) of history and the ranges from the frontier to the tail, as one span."""
    spans: dict[int, list[int]] = {f.segment_id: [f.lo, f.hi] for f in plan_files}
    for r in plan_ranges(frontier, TAIL, catalog):
        if r.segment_id in spans:
            assert spans[r.segment_id][1] == r.start, "the parts meet exactly"
            spans[r.segment_id][1] = r.end
        else:
            spans[r.segment_id] = [r.start, r.end]
    return spans


def test_a_sealed_segment_wholly_in_tier2_hands_over_to_its_successors() -> None:
    catalog = Catalog()
    chunks = {1: _chunks(0, 100, 300, segment=1), 2: _chunks(0, 150, segment=2), 4: _chunks(0, 250, segment=4)}
    plan = plan_history(HEAD, TAIL, catalog, chunks)
    assert plan.frontier == ReadState("s", "t", {2: 150, 3: 0, 4: 250})
    assert [(f.segment_id, f.chunk_start, f.lo, f.hi) for f in plan.files] == [
        (1, 0, 0, 300), (1, 100, 0, 300), (2, 0, 0, 150), (4, 0, 0, 250)
    ]  # fmt: skip
    expected = {s: [r.start, r.end] for r in plan_ranges(HEAD, TAIL, catalog) for s in [r.segment_id]}
    assert (
        _union(plan.files, plan.frontier, catalog) == expected == {1: [0, 300], 2: [0, 200], 3: [0, 100], 4: [0, 500]}
    )


def test_a_sealed_segment_partly_in_tier2_stays_at_the_frontier_and_its_successors_wait() -> None:
    catalog = Catalog()
    plan = plan_history(HEAD, TAIL, catalog, {1: _chunks(0, 100, segment=1), 2: _chunks(0, 200, segment=2)})
    assert plan.frontier == ReadState("s", "t", {1: 100, 4: 0})
    assert [(f.segment_id, f.lo, f.hi) for f in plan.files] == [(1, 0, 100)] and plan.history_bytes == 100
    assert _union(plan.files, plan.frontier, catalog) == {1: [0, 300], 2: [0, 200], 3: [0, 100], 4: [0, 500]}


def test_truncation_cuts_the_first_kept_chunk_at_the_segment_start() -> None:
    catalog = Catalog(start_1=150)
    head = ReadState("s", "t", {1: 150, 4: 0})
    plan = plan_history(head, TAIL, catalog, {1: _chunks(100, 300, segment=1)})
    assert [(f.segment_id, f.chunk_start, f.lo, f.hi) for f in plan.files] == [(1, 100, 150, 300)]
    assert plan.frontier == ReadState("s", "t", {2: 0, 3: 0, 4: 0})


def test_chunks_that_do_not_hold_the_start_are_not_used() -> None:
    catalog = Catalog(start_1=150)
    plan = plan_history(ReadState("s", "t", {1: 150, 4: 0}), TAIL, catalog, {1: _chunks(200, 300, segment=1)})
    assert plan.files == () and plan.frontier == ReadState("s", "t", {1: 150, 4: 0})
