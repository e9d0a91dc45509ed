"""Idle eviction: entries untouched for ``idle_evict_s`` leave the cache on a manual clock, reads stay exact."""

from __future__ import annotations

import pytest
from test_read_index import Tier2, add_segment, commit_append, read_all

from segment_store.metadata import ContainerMetadata
from segment_store.reading.cache import RELEASE_MIN_BYTES, CacheBudget, CacheConfig, EntryKey
from segment_store.reading.read_index import ReadIndex, ReadIndexConfig

pytestmark = pytest.mark.unit

MIB = 1024 * 1024


class ManualClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def budget_with_clock(idle_evict_s: float = 30.0) -> tuple[CacheBudget, ManualClock]:
    clock = ManualClock()
    return CacheBudget(CacheConfig(max_bytes=1 << 30, idle_evict_s=idle_evict_s), clock=clock), clock


def test_evict_idle_with_old_and_touched_entries_drops_only_the_untouched() -> None:
    budget, clock = budget_with_clock()
    dropped: list[EntryKey] = []
    pinned = {(2, 0)}
    account = budget.account(lambda key: key not in pinned, dropped.append)
    account.add((1, 0), 100)
    account.add((2, 0), 200)  # not yet in Tier-2: never evicted
    clock.now += 20
    account.add((3, 0), 300)
    account.touch((1, 0))  # read again: young
    clock.now += 15  # (1, 0) and (3, 0): 15 s; (2, 0): 35 s
    assert budget.evict_idle() == 0 and dropped == []
    clock.now += 16  # (1, 0) and (3, 0): 31 s
    assert budget.evict_idle() == 400
    assert sorted(dropped) == [(1, 0), (3, 0)]
    assert budget.used_bytes == account.used_bytes == 200 and budget.evicted_bytes == 400
    pinned.clear()  # it reached Tier-2
    assert budget.evict_idle() == 200 and budget.used_bytes == 0


def test_evict_idle_with_zero_setting_is_off() -> None:
    budget, clock = budget_with_clock(idle_evict_s=0)
    account = budget.account(lambda _key: True, lambda _key: None)
    account.add((1, 0), 100)
    clock.now += 1e6
    assert budget.evict_idle() == 0 and budget.used_bytes == 100


def test_sweep_idle_with_quiet_budget_says_release_once_per_change() -> None:
    budget, clock = budget_with_clock(idle_evict_s=10)
    account = budget.account(lambda _key: True, lambda _key: None)
    assert not budget.sweep_idle()  # never anything: nothing to give back
    account.add((1, 0), MIB)
    assert not budget.sweep_idle() and not budget.sweep_idle()  # quiet, but too little came in
    account.add((1, 1), RELEASE_MIN_BYTES)
    assert not budget.sweep_idle()  # something came in since the previous look: not quiet
    assert budget.sweep_idle()  # quiet for a whole period after enough came in: release
    assert not budget.sweep_idle()  # nothing changed since
    clock.now += 11
    assert budget.sweep_idle()  # evicted during this look, quiet since the previous one: release ...
    assert budget.used_bytes == 0 and budget.evicted_bytes == MIB + RELEASE_MIN_BYTES
    assert not budget.sweep_idle()  # ... once


def test_sweep_idle_with_eviction_while_quiet_says_release() -> None:
    budget, clock = budget_with_clock(idle_evict_s=10)
    account = budget.account(lambda _key: True, lambda _key: None)
    account.add((1, 0), RELEASE_MIN_BYTES)
    clock.now += 5
    assert not budget.sweep_idle()
    assert budget.sweep_idle()  # quiet: release what the appends left behind
    clock.now += 6
    assert budget.sweep_idle()  # the entry aged out while quiet: release again, once
    assert budget.used_bytes == 0
    assert not budget.sweep_idle()
    account.add((2, 0), MIB)
    account.remove((2, 0))  # removed data counts too, but 2 MiB of churn is not enough
    assert not budget.sweep_idle() and not budget.sweep_idle()


def test_cache_config_with_negative_idle_eviction_names_the_key() -> None:
    with pytest.raises(ValueError, match="idle_evict_s"):
        CacheConfig(idle_evict_s=-1)
    with pytest.raises(ValueError, match="idle_check_s"):
        CacheConfig(idle_check_s=0)


async def test_read_index_with_idle_data_in_tier2_empties_the_cache_and_reads_back_exactly() -> None:
    budget, clock = budget_with_clock(idle_evict_s=30)
    meta = ContainerMetadata(0)
    tier2 = Tier2()
    index = ReadIndex(meta, tier2.read, budget, ReadIndexConfig(4096, 8192))
    segment = add_segment(meta, 1, "s")
    payload = bytes(range(256)) * 100
    for i in range(0, len(payload), 500):
        commit_append(meta, index, 1, payload[i : i + 500])
    clock.now += 60
    assert budget.evict_idle() == 0  # nothing is in Tier-2 yet: all of it stays
    assert index.cached_bytes(1) == len(payload)
    tier2.data["s"] = bytearray(payload)
    segment.storage_length = len(payload)  # the storage writer flushed it
    assert budget.evict_idle() > 0
    assert budget.used_bytes == 0 and index.cached_bytes(1) == 0
    assert await read_all(index, 1, 0, len(payload)) == payload  # from Tier-2, exactly
    assert tier2.reads > 0 and budget.used_bytes > 0  # what was read is cached again, young
    assert budget.evict_idle() == 0
