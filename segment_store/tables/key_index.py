"""The in-memory index of one table segment: key -> (version, offset, length) of its live entry.

Values stay in the segment; the index holds keys, versions and offsets only. It covers the entries in
``[head, tail)``: ``head`` is where the live data starts (the compaction offset, or the start offset if
higher) and ``tail`` the end of the last entry applied. Entries are applied strictly in segment order.

Iteration order is stable across calls: by an 8-byte BLAKE2b hash of the key, then the key (hash tables,
as Pravega orders by key hash), or by the key itself (fixed-key tables). A continuation token is the
position of the last key returned, so keys added or removed between pages never make an unchanged key
appear twice or be skipped.
"""

from __future__ import annotations

import bisect
import hashlib
from typing import NamedTuple

from segment_store.tables.entry_serializer import ParsedEntry

_TOKEN_FORMAT = b"\x01"
_HASH_BYTES = 8


class KeySlot(NamedTuple):
    """Where a live key's entry is: its version, the entry's offset and serialized length."""

    version: int
    offset: int
    length: int


class KeyIndex:
    """Index of one table segment (see module docstring). Mutated only under the table's lock."""

    __slots__ = ("_order", "hashed", "head", "live_bytes", "slots", "tail")

    def __init__(self, head: int, hashed: bool = True) -> None:
        self.head = head
        self.tail = head
        self.hashed = hashed
        self.slots: dict[bytes, KeySlot] = {}
        self.live_bytes = 0
        self._order: list[bytes] = []  # positions of the live keys, sorted

    def __len__(self) -> int:
        return len(self.slots)

    def get(self, key: bytes) -> KeySlot | None:
        return self.slots.get(key)

    # ---- positions -------------------------------------------------------------------------------------------
    def position(self, key: bytes) -> bytes:
        """The key's place in iteration order."""
        if not self.hashed:
            return key
        return hashlib.blake2b(key, digest_size=_HASH_BYTES).digest() + key

    def key_at(self, position: bytes) -> bytes:
        return position[_HASH_BYTES:] if self.hashed else position

    def token(self, position: bytes) -> bytes:
        return _TOKEN_FORMAT + position

    def position_of_token(self, token: bytes) -> bytes | None:
        """The position a token resumes after; None for an empty token; raises ValueError for a foreign one."""
        if not token:
            return None
        if token[:1] != _TOKEN_FORMAT or len(token) < 1 + (_HASH_BYTES + 1 if self.hashed else 1):
            raise ValueError("not a continuation token of this table")
        return token[1:]

    # ---- updates ---------------------------------------------------------------------------------------------
    def apply(self, entry: ParsedEntry) -> None:
        """Apply the next entry of the segment (its offset must be ``tail``)."""
        if entry.offset != self.tail:
            raise ValueError(f"entry at {entry.offset} applied to an index whose tail is {self.tail}")
        self.tail = entry.offset + entry.length
        current = self.slots.get(entry.key)
        if entry.removed:
            if current is not None:
                self._drop(entry.key, current)
            return
        if current is not None and current.version > entry.version:
            return  # a stale copy: the key was written again after the compaction read it
        if current is None:
            bisect.insort(self._order, self.position(entry.key))
        else:
            self.live_bytes -= current.length
        self.slots[entry.key] = KeySlot(entry.version, entry.offset, entry.length)
        self.live_bytes += entry.length

    def _drop(self, key: bytes, slot: KeySlot) -> None:
        del self.slots[key]
        self.live_bytes -= slot.length
        position = self.position(key)
        i = bisect.bisect_left(self._order, position)
        if i < len(self._order) and self._order[i] == position:
            del self._order[i]

    # ---- iteration -------------------------------------------------------------------------------------------
    def positions_after(
        self, after: bytes | None, count: int, low: bytes | None = None, high: bytes | None = None
    ) -> list[bytes]:
        """Up to ``count`` positions after ``after`` (from the start if None), within ``[low, high]``."""
        start = 0 if after is None else bisect.bisect_right(self._order, after)
        if low is not None:
            start = max(start, bisect.bisect_left(self._order, low))
        stop = len(self._order) if high is None else bisect.bisect_right(self._order, high)
        return self._order[start : min(stop, start + count)]

    def utilization_percent(self) -> float:
        """Share of ``[head, tail)`` taken by live entries."""
        total = self.tail - self.head
        return 100.0 if total <= 0 else 100.0 * self.live_bytes / total
