"""The segment store process's collector settings (process-wide: the test restores them)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from segment_store.server.gc_policy import YOUNG_THRESHOLD, settle_after_start

pytestmark = pytest.mark.unit


@pytest.fixture
def restore_gc() -> Iterator[None]:
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


def test_settle_freezes_what_lives_and_raises_only_the_young_threshold(restore_gc: None) -> None:
    _, middle, old = gc.get_threshold()
    alive = [[i] for i in range(1000)]  # tracked objects alive at "start-up"
    settle_after_start()
    assert gc.get_freeze_count() >= len(alive)
    assert gc.get_threshold() == (YOUNG_THRESHOLD, middle, old)
    assert all(gc.is_tracked(x) for x in alive)  # frozen, not untracked: still freed by reference counting


def test_settle_rejects_a_threshold_that_would_disable_the_collector(restore_gc: None) -> None:
    with pytest.raises(ValueError, match="young_threshold"):
        settle_after_start(0)
