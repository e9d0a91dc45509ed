"""The cache budget: how many bytes the read index may hold, and which entries to evict first.

The read index owns the data; this module only accounts for it. Entries are
identified by ``(segment_id, offset)`` and kept in least-recently-used order.
:meth:`CacheBudget.evict` asks a predicate whether an entry may go (the read
index allows it only for data already in Tier-2), so data that exists only in
Tier-1 and the cache is never evicted; if too little is evictable the cache
stays over budget and :attr:`over_budget` tells the throttler.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

EntryKey = tuple[int, int]


@dataclass(frozen=True, slots=True)
class CacheConfig:
    max_bytes: int = 1024 * 1024 * 1024
    target_utilization: float = 0.85

    def __post_init__(self) -> None:
        if self.max_bytes <= 0:
            raise ValueError("max_bytes: must be positive")
        if not 0.1 <= self.target_utilization <= 1.0:
            raise ValueError("target_utilization: must be within [0.1, 1.0]")


class CacheBudget:
    def __init__(self, config: CacheConfig | None = None) -> None:
        self.config = config or CacheConfig()
        self._entries: OrderedDict[EntryKey, int] = OrderedDict()
        self.used_bytes = 0

    def add(self, key: EntryKey, size: int) -> None:
        previous = self._entries.pop(key, 0)
        self._entries[key] = size
        self.used_bytes += size - previous

    def resize(self, key: EntryKey, size: int) -> None:
        self.add(key, size)

    def touch(self, key: EntryKey) -> None:
        if key in self._entries:
            self._entries.move_to_end(key)

    def remove(self, key: EntryKey) -> None:
        self.used_bytes -= self._entries.pop(key, 0)

    @property
    def over_budget(self) -> bool:
        return self.used_bytes > self.config.max_bytes

    @property
    def needs_eviction(self) -> bool:
        return self.used_bytes > self.config.max_bytes * self.config.target_utilization

    def evict(self, may_evict: Callable[[EntryKey], bool], drop: Callable[[EntryKey], None]) -> int:
        """Evict least recently used entries allowed by ``may_evict`` down to the target; returns bytes freed."""
        target = int(self.config.max_bytes * self.config.target_utilization)
        freed = 0
        for key in list(self._entries):
            if self.used_bytes <= target:
                break
            if may_evict(key):
                size = self._entries.pop(key)
                self.used_bytes -= size
                freed += size
                drop(key)
        return freed
