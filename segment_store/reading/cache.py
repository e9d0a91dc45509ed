"""The cache budget: how many bytes the read indexes of one process may hold, and which entries go first.

One :class:`CacheBudget` per segment store process (the container registry makes it), shared by the read
index of every container the process runs: a process with four containers holds at most
``CacheConfig.max_bytes`` of cache, not four times that. Each read index works through its own
:class:`CacheAccount`. The read indexes own the data; this module only accounts for it.

Invariants:

* Entries are identified by ``(segment_id, offset)`` within an account and kept in one least-recently-used
  order over all accounts; :attr:`CacheBudget.used_bytes` is the sum of every account's entries.
* :meth:`CacheBudget.evict` (any account may start it) walks that order and drops, down to
  ``target_utilization`` of the budget, only entries their owner allows (a read index allows data already in
  Tier-2, or of segments that no longer exist): data that exists only in Tier-1 and the cache is never
  evicted. If too little is evictable the budget stays over and :attr:`over_budget` tells the containers to
  throttle appends.
* Whenever the budget goes from over to not over (an eviction, a removal, an account closed), every account's
  ``on_room`` is called: a container throttled because *another* container filled the cache resumes then.
* :meth:`CacheAccount.close` removes every entry of the account (a stopped container's read index).
* Every entry carries the time it was last added or touched (``clock``, monotonic, injectable): the LRU order is
  also the order of those times, so :meth:`CacheBudget.evict_idle` drops, oldest first, the entries untouched
  for ``CacheConfig.idle_evict_s`` that their owners allow, and stops at the first younger one. It frees memory
  a budget that never fills would otherwise hold for ever (the container registry calls it periodically).

Use from one event loop (a segment store runs all its containers on one).
"""

from __future__ import annotations

import itertools
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

EntryKey = tuple[int, int]
RELEASE_MIN_BYTES = 16 * 1024 * 1024
"""Cache churn (bytes added, removed or evicted) after which a quiet sweep returns freed memory to the OS."""
_Owned = tuple[int, int, int]  # (account number, segment id, offset)


@dataclass(frozen=True, slots=True)
class CacheConfig:
    """The cache of one segment store process (shared by its containers)."""

    max_bytes: int = 1024 * 1024 * 1024
    """Bytes of segment data the read indexes of the process hold together (default 1 GiB)."""
    target_utilization: float = 0.85
    """Eviction starts above this share of ``max_bytes`` and frees down to it."""
    idle_evict_s: float = 30.0
    """Entries neither added nor read for this long leave the cache (if already in Tier-2) even when it has room,
    so an idle process gives its memory back. 0 turns it off (eviction only when the budget needs room)."""
    idle_check_s: float = 5.0
    """How often the process looks for such entries (and, having evicted some, returns freed memory to the OS)."""

    def __post_init__(self) -> None:
        if self.max_bytes <= 0:
            raise ValueError("max_bytes: must be positive")
        if not 0.1 <= self.target_utilization <= 1.0:
            raise ValueError("target_utilization: must be within [0.1, 1.0]")
        if self.idle_evict_s < 0:
            raise ValueError("idle_evict_s: must not be negative (0: off)")
        if self.idle_check_s <= 0:
            raise ValueError("idle_check_s: must be positive")


class CacheBudget:
    """See module docstring."""

    def __init__(self, config: CacheConfig | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        """``clock``: monotonic seconds, the age of entries for :meth:`evict_idle` (tests inject a manual one)."""
        self.config = config or CacheConfig()
        self._clock = clock
        self._entries: OrderedDict[_Owned, int] = OrderedDict()
        self._used_at: dict[_Owned, float] = {}
        """When each entry was last added or touched (same keys as ``_entries``, same order of times)."""
        self._accounts: dict[int, CacheAccount] = {}
        self._numbers = itertools.count()
        self.used_bytes = 0
        self.evicted_bytes = 0
        """Bytes evicted since the budget was made (a counter, for metrics)."""
        self.additions = 0
        """Entries added (or replaced) since the budget was made: unchanged between two looks, nothing came in."""
        self.churn_bytes = 0
        """Bytes of entries added, removed or evicted since the budget was made (what allocators may hold)."""
        self._sweep_seen = 0  # additions at the previous sweep_idle
        self._released_at = 0  # churn_bytes when sweep_idle last said to release memory
        self._limit = self.config.max_bytes
        self._target = int(self.config.max_bytes * self.config.target_utilization)

    def account(
        self,
        may_evict: Callable[[EntryKey], bool],
        drop: Callable[[EntryKey], None],
        on_room: Callable[[], None] | None = None,
    ) -> CacheAccount:
        """A new account: ``may_evict(key)`` says whether an entry may go, ``drop(key)`` removes it from the
        owner; ``on_room()`` is called when the budget is no longer over (may be set later)."""
        account = CacheAccount(self, next(self._numbers), may_evict, drop, on_room)
        self._accounts[account.number] = account
        return account

    @property
    def over_budget(self) -> bool:
        return self.used_bytes > self._limit

    @property
    def needs_eviction(self) -> bool:
        return self.used_bytes > self._target

    @property
    def accounts(self) -> int:
        return len(self._accounts)

    def evict(self) -> int:
        """Evict least recently used entries their owners allow, down to the target; returns bytes freed."""
        return self._evict_from(list(self._entries), self._target)

    def evict_idle(self) -> int:
        """Evict the entries untouched for ``config.idle_evict_s`` that their owners allow, whatever the budget's
        use (nothing if that is 0); returns bytes freed."""
        idle_s = self.config.idle_evict_s
        if idle_s <= 0:
            return 0
        cutoff = self._clock() - idle_s
        used_at = self._used_at
        # LRU order is the order of times: the idle entries are a prefix (taken before any is dropped)
        return self._evict_from(list(itertools.takewhile(lambda owned: used_at[owned] <= cutoff, self._entries)), -1)

    def _evict_from(self, candidates: list[_Owned], target: int) -> int:
        """Evict ``candidates`` (in order) that their owners allow, until ``used_bytes`` is at most ``target``
        (-1: all of them); returns bytes freed."""
        was_over = self.used_bytes > self._limit
        freed = 0
        accounts = self._accounts
        for owned in candidates:
            if self.used_bytes <= target:
                break
            account = accounts.get(owned[0])
            key = (owned[1], owned[2])
            if account is None or account.may_evict(key):
                freed += self._drop(owned, account, key)
        self.evicted_bytes += freed
        self._room_if(was_over)
        return freed

    def sweep_idle(self) -> bool:
        """One periodic look (every ``config.idle_check_s``): :meth:`evict_idle`, then whether now is the time to
        give freed memory back to the OS: True when the budget has been quiet (nothing added) since the previous
        sweep and at least :data:`RELEASE_MIN_BYTES` came in or left since the last True (so a light trickle of
        appends does not make the process trim its heap every few seconds)."""
        self.evict_idle()
        quiet = self.additions == self._sweep_seen
        self._sweep_seen = self.additions
        if quiet and self.churn_bytes - self._released_at >= RELEASE_MIN_BYTES:
            self._released_at = self.churn_bytes
            return True
        return False

    def _drop(self, owned: _Owned, account: CacheAccount | None, key: EntryKey) -> int:
        size = self._entries.pop(owned)
        del self._used_at[owned]
        self.used_bytes -= size
        self.churn_bytes += size
        if account is not None:
            account.used_bytes -= size
            account.drop(key)
        return size

    # ---- for accounts ---------------------------------------------------------------------------------------

    def _set(self, owned: _Owned, size: int) -> int:
        previous = self._entries.pop(owned, 0)
        self._entries[owned] = size
        self._used_at[owned] = self._clock()
        self.additions += 1
        self.churn_bytes += size
        self.used_bytes += size - previous
        return size - previous

    def _remove(self, owned: _Owned) -> int:
        size = self._entries.pop(owned, 0)
        self._used_at.pop(owned, None)
        if size:
            was_over = self.used_bytes > self._limit
            self.used_bytes -= size
            self.churn_bytes += size
            self._room_if(was_over)
        return size

    def _touch(self, owned: _Owned) -> None:
        if owned in self._entries:
            self._entries.move_to_end(owned)
            self._used_at[owned] = self._clock()

    def _close(self, account: CacheAccount) -> None:
        self._accounts.pop(account.number, None)
        number = account.number
        was_over = self.used_bytes > self._limit
        for owned in [k for k in self._entries if k[0] == number]:
            size = self._entries.pop(owned)
            self.used_bytes -= size
            self.churn_bytes += size
            del self._used_at[owned]
        self._room_if(was_over)

    def _room_if(self, was_over: bool) -> None:
        """Bytes left the budget: if it was over and is no longer, tell every account."""
        if not was_over or self.used_bytes > self._limit:
            return
        for account in list(self._accounts.values()):
            if account.on_room is not None:
                account.on_room()


class CacheAccount:
    """One read index's share of a :class:`CacheBudget` (keys are ``(segment_id, offset)``)."""

    __slots__ = ("_budget", "drop", "may_evict", "number", "on_room", "used_bytes")

    def __init__(
        self,
        budget: CacheBudget,
        number: int,
        may_evict: Callable[[EntryKey], bool],
        drop: Callable[[EntryKey], None],
        on_room: Callable[[], None] | None,
    ) -> None:
        self._budget = budget
        self.number = number
        self.may_evict = may_evict
        self.drop = drop
        self.on_room = on_room
        self.used_bytes = 0
        """Bytes of this account's entries."""

    @property
    def budget(self) -> CacheBudget:
        return self._budget

    @property
    def over_budget(self) -> bool:
        """The whole budget (every account together) is over its maximum."""
        return self._budget.over_budget

    @property
    def needs_eviction(self) -> bool:
        return self._budget.needs_eviction

    def add(self, key: EntryKey, size: int) -> None:
        """Account ``size`` bytes for ``key`` (replacing what it had), most recently used."""
        self.used_bytes += self._budget._set((self.number, key[0], key[1]), size)

    def touch(self, key: EntryKey) -> None:
        self._budget._touch((self.number, key[0], key[1]))

    def remove(self, key: EntryKey) -> None:
        self.used_bytes -= self._budget._remove((self.number, key[0], key[1]))

    def evict(self) -> int:
        """Evict over the whole budget (see :meth:`CacheBudget.evict`); returns bytes freed."""
        return self._budget.evict()

    def close(self) -> None:
        """Remove every entry of this account from the budget; the account is no longer asked anything."""
        self._budget._close(self)
        self.used_bytes = 0
