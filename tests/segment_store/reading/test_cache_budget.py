"""The process-wide cache budget: accounts, one LRU order over all of them, eviction by owner, room callbacks."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from segment_store.reading.cache import CacheAccount, CacheBudget, CacheConfig, EntryKey

pytestmark = pytest.mark.unit


class Owner:
    """What a read index gives its account: which entries may go, and the entries themselves."""

    def __init__(self, budget: CacheBudget, pinned: set[EntryKey] | None = None) -> None:
        self.entries: dict[EntryKey, int] = {}
        self.pinned = pinned if pinned is not None else set()  # e.g. data not yet in Tier-2
        self.rooms = 0
        self.account: CacheAccount = budget.account(self.may_evict, self.drop, self.room)

    def may_evict(self, key: EntryKey) -> bool:
        return key not in self.pinned

    def drop(self, key: EntryKey) -> None:
        del self.entries[key]

    def room(self) -> None:
        self.rooms += 1

    def add(self, key: EntryKey, size: int) -> None:
        self.entries[key] = size
        self.account.add(key, size)


def test_accounts_share_one_budget_and_one_lru_order() -> None:
    budget = CacheBudget(CacheConfig(max_bytes=1000, target_utilization=0.5))
    a, b = Owner(budget), Owner(budget)
    a.add((1, 0), 300)
    b.add((1, 0), 300)  # same key, another account: another entry
    a.add((1, 300), 300)
    assert budget.used_bytes == 900 and a.account.used_bytes == 600 and b.account.used_bytes == 300
    assert not budget.over_budget and budget.needs_eviction
    a.account.touch((1, 0))  # now b's entry is the oldest
    assert a.account.evict() == 600  # down to the target (500): b's entry, then a's (1, 300)
    assert b.entries == {} and a.entries == {(1, 0): 300}
    assert budget.used_bytes == 300 and a.account.used_bytes == 300 and b.account.used_bytes == 0


def test_eviction_skips_what_its_owner_pins_and_stays_over_budget_if_it_must() -> None:
    budget = CacheBudget(CacheConfig(max_bytes=1000, target_utilization=0.5))
    pinned = {(7, 0), (7, 400)}
    a, b = Owner(budget, pinned), Owner(budget)
    a.add((7, 0), 400)
    b.add((2, 0), 200)
    a.add((7, 400), 500)
    assert budget.over_budget
    assert b.account.evict() == 200  # only b's entry may go
    assert budget.used_bytes == 900 and not budget.over_budget and set(a.entries) == pinned
    pinned.add((7, 900))
    a.add((7, 900), 300)
    assert a.account.evict() == 0 and budget.over_budget  # nothing evictable: the containers throttle


def test_room_is_announced_to_every_account_when_the_budget_stops_being_over() -> None:
    budget = CacheBudget(CacheConfig(max_bytes=1000, target_utilization=0.9))
    a, b = Owner(budget, pinned={(1, 0)}), Owner(budget)
    a.add((1, 0), 800)
    b.add((1, 0), 300)
    assert budget.over_budget and a.rooms == b.rooms == 0
    a.pinned.clear()  # a's data reached Tier-2
    b.account.evict()  # evicts a's entry: b's eviction gives room to both
    assert not budget.over_budget and a.rooms == b.rooms == 1
    b.account.remove((1, 0))  # not over before: nobody is told
    assert a.rooms == b.rooms == 1
    a.add((1, 0), 1200)
    a.account.remove((1, 0))
    assert a.rooms == b.rooms == 2


def test_closing_an_account_gives_its_bytes_back_and_it_is_never_asked_again() -> None:
    budget = CacheBudget(CacheConfig(max_bytes=1000, target_utilization=0.5))
    a, b = Owner(budget, pinned={(1, 0)}), Owner(budget)
    a.add((1, 0), 700)
    a.add((1, 700), 500)
    b.add((3, 0), 100)
    assert budget.over_budget and budget.accounts == 2
    a.account.close()
    assert budget.used_bytes == 100 and budget.accounts == 1 and a.account.used_bytes == 0
    assert b.rooms == 1 and a.rooms == 0  # a is gone: not told
    b.add((3, 100), 500)
    assert b.account.evict() == 100  # a's old entries are not in the order any more
    assert a.entries == {(1, 0): 700, (1, 700): 500}  # the owner keeps its data; the budget forgot it


def test_cache_config_refuses_nonsense() -> None:
    with pytest.raises(ValueError, match="max_bytes"):
        CacheConfig(max_bytes=0)
    with pytest.raises(ValueError, match="target_utilization"):
        CacheConfig(target_utilization=0.05)


_op = st.tuples(
    st.sampled_from(["add", "remove", "touch", "evict", "pin", "unpin", "close"]),
    st.integers(0, 2),  # account
    st.integers(0, 5),  # segment
    st.integers(1, 400),  # size
)


@settings(max_examples=150, deadline=None)
@given(st.lists(_op, max_size=120))
def test_budget_accounting_holds_for_any_sequence_of_operations(ops: list[tuple[str, int, int, int]]) -> None:
    budget = CacheBudget(CacheConfig(max_bytes=1500, target_utilization=0.6))
    owners = [Owner(budget) for _ in range(3)]
    closed: set[int] = set()
    for op, which, segment, size in ops:
        owner = owners[which]
        key = (segment, 0)
        if which in closed:
            continue
        if op == "add":
            owner.add(key, size)
        elif op == "remove" and key in owner.entries:
            del owner.entries[key]
            owner.account.remove(key)
        elif op == "touch":
            owner.account.touch(key)
        elif op == "pin":
            owner.pinned.add(key)
        elif op == "unpin":
            owner.pinned.discard(key)
        elif op == "close":
            owner.account.close()
            closed.add(which)
        elif op == "evict":
            owner.account.evict()
            live = [o for i, o in enumerate(owners) if i not in closed]
            evictable = any(k not in o.pinned for o in live for k in o.entries)
            assert budget.used_bytes <= 900 or not evictable  # down to the target unless all is pinned
        live = [o for i, o in enumerate(owners) if i not in closed]
        for o in live:
            assert o.account.used_bytes == sum(o.entries.values())
        assert budget.used_bytes == sum(o.account.used_bytes for o in live)
        assert budget.over_budget == (budget.used_bytes > 1500)
