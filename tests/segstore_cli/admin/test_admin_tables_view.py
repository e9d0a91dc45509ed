"""``segstore admin tables`` without a system: the views of several segment stores merge into one row per table
(newest snapshot, lag summed, oldest age, each failing store's error), rendered as text and JSON."""

from __future__ import annotations

import json

import pytest

from segment_store.protocol import IcebergTableInfo
from segstore_cli.admin import render
from segstore_cli.admin.tables import NONE_CONFIGURED, STALE_AFTER_MS, TablesView, _merge

pytestmark = pytest.mark.unit


NOW_MS = 1_800_000_000_000


def info(
    snapshot: int, committed: int, lag: int, age: int, failures: int = 0, error: str = "", passed_at: int = NOW_MS - 400
) -> IcebergTableInfo:
    return IcebergTableInfo("shop/orders", snapshot, committed, 3, lag, 1 if lag else 0, age, passed_at, failures,
                            failures, error)  # fmt: skip


def test_merge_with_two_stores_takes_newest_snapshot_and_sums_lag() -> None:
    views = [("a:1", info(7, 2000, 100, 1500)), ("b:2", info(9, 3000, 50, 4000, 2, "locked"))]
    row = _merge("shop/orders", views, NOW_MS)
    assert (row.snapshot_id, row.committed_at_ms, row.lag_bytes, row.lag_chunks, row.lag_age_ms) == (9, 3000, 150, 2,
                                                                                                      4000)  # fmt: skip
    assert row.failures == 2 and row.last_error == "b:2: locked" and row.state == "failing (2 passes): b:2: locked"
    text = render.to_text(TablesView(True, (row,)))
    assert "shop/orders" in text and "4.0" in text and "failing (2 passes)" in text
    (listed,) = json.loads(render.dumps(TablesView(True, (row,))))["tables"]
    assert listed["state"] == "failing" and listed["segment_stores"] == ["a:1", "b:2"]


def test_merge_before_the_first_snapshot_says_none() -> None:
    row = _merge("shop/orders", [("a:1", info(-1, -1, 10, 20))], NOW_MS)
    assert row.snapshot_id is None and row.committed_at_ms is None and row.state == "ok"
    assert render.to_text(TablesView(False, ())).strip() == NONE_CONFIGURED


def test_a_store_whose_last_pass_is_old_makes_the_table_stale() -> None:
    """A maintainer that stopped passing (a pass hanging on a catalog that never answers) shows as stale, naming the
    segment store; one that has not passed yet is waiting, never stale."""
    old = NOW_MS - STALE_AFTER_MS - 5_000
    row = _merge("shop/orders", [("a:1", info(7, 2000, 0, 0)), ("b:2", info(7, 2000, 10, 900, passed_at=old))], NOW_MS)
    assert row.stale == ("b:2",) and row.last_pass_age_ms == STALE_AFTER_MS + 5_000
    assert row.state == "stale: no pass for 125 s on b:2 (a pass hangs?)"
    (listed,) = json.loads(render.dumps(TablesView(True, (row,))))["tables"]
    assert listed["state"] == "stale" and listed["last_pass_age_ms"] == STALE_AFTER_MS + 5_000
    fresh = _merge("shop/orders", [("a:1", info(7, 2000, 0, 0, passed_at=NOW_MS - STALE_AFTER_MS))], NOW_MS)
    assert fresh.state == "ok" and fresh.stale == ()
    waiting = _merge("shop/orders", [("a:1", info(-1, -1, 10, 20, passed_at=0))], NOW_MS)
    assert waiting.state == "waiting for the first pass" and waiting.last_pass_age_ms is None
