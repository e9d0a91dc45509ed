"""What a streaming query's driver keeps between micro-batches stays in proportion to the segments alive, not to the
stream's history: the successor cache (pravega_spark.read.planning.forget_successors) and the watermark cache, over
2,000 scales and 20,000 watermarks of bench/long_running.py's simulated stream, with the replanned batch still
answered from the cache (no restart)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from pravega_spark.read.planning import forget_successors

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))
from long_running import Query, SimulatedStream

pytestmark = pytest.mark.unit


def test_forget_successors_keeps_the_segments_of_the_start() -> None:
    cache = {1: {3: [1, 2]}, 2: {3: [1, 2]}, 4: {5: [4]}}
    forget_successors(cache, {2: 10, 3: 0})
    assert cache == {2: {3: [1, 2]}}


def test_a_query_over_a_long_history_keeps_bounded_caches() -> None:
    stream = SimulatedStream()
    query = Query(stream)
    largest = [(0, 0), (0, 0)]  # over hours 100-1,000 and 1,000-2,000
    for hour in range(2_000):
        stream.scale()
        for _ in range(10):
            stream.write()
            stream.note()
        query.micro_batch()
        if hour >= 100:
            half = largest[hour >= 1_000]
            largest[hour >= 1_000] = (max(half[0], len(query.cache)), max(half[1], len(query.successors)))
    assert stream.watermarks == 20_000 and stream.epoch == 2_000
    assert largest[1][0] <= largest[0][0] <= 100 and largest[1][1] <= 6, largest
    assert query.cache.restarts == 0
