"""Routing keys to key-space positions, and key-space positions to segments, as Pravega's clients do.

A routing key is hashed exactly like Java's ``HashHelper.seededWith("EventRouter").hashToRange(key)`` and the
Rust client's ``StreamSegments::get_segment_for_string``: MurmurHash3 x64 128-bit of the key's UTF-16LE
code units (Guava's ``hashUnencodedChars``) with seed ``"EventRouter".hashCode()`` (1741865571); the first
64-bit half (``HashCode.asLong``) becomes a double in ``[0, 1)`` from its leading 52 bits. So an event with
the same routing key lands in the same segment whichever client wrote it. No routing key: a uniformly
random position.

A position is mapped to the segment whose range is the *ceiling* of the position by upper bound (Java's
``TreeMap.ceilingEntry`` over key-range ends, Rust's ``get_next``): the first piece with ``key_end >= pos``.
:class:`SegmentMap` keeps that map and replaces a sealed segment's part of the key space by its successors
(Rust ``apply_replacement_range``), clipping each successor to the piece it replaces, so after a merge a
successor may own several pieces until all its predecessors are replaced.
"""

from __future__ import annotations

import bisect
import random
import struct
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from controller_client.model import SegmentRange

ROUTING_SEED = 1741865571
"""``"EventRouter".hashCode()`` in Java: the seed of the routing-key hash in every Pravega client."""

_M64 = 0xFFFFFFFFFFFFFFFF
_C1 = 0x87C37B91114253D5
_C2 = 0x4CF5AD432745937F
_BLOCKS = struct.Struct("<QQ")
_LEADING_BITS = 0x3FF0000000000000
_MASK_52 = 0x000FFFFFFFFFFFFF
_DOUBLE = struct.Struct("<d")
_LONG = struct.Struct("<Q")


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _M64


def _fmix(k: int) -> int:
    k ^= k >> 33
    k = (k * 0xFF51AFD7ED558CCD) & _M64
    k ^= k >> 33
    k = (k * 0xC4CEB9FE1A85EC53) & _M64
    k ^= k >> 33
    return k


def murmur3_x64_128(data: bytes, seed: int = 0) -> tuple[int, int]:
    """MurmurHash3 x64 128-bit of ``data``: ``(h1, h2)`` as unsigned 64-bit ints (h1 is Guava's ``asLong``).

    ``seed`` is taken as a signed 32-bit int widened to 64 bits, as Guava's ``murmur3_128(int)`` does.
    """
    if not -(2**31) <= seed < 2**32:
        raise ValueError(f"seed: must fit 32 bits, not {seed}")
    if seed >= 2**31:
        seed -= 2**32
    h1 = h2 = seed & _M64
    length = len(data)
    whole = length - length % 16
    for i in range(0, whole, 16):
        k1, k2 = _BLOCKS.unpack_from(data, i)
        k1 = (k1 * _C1) & _M64
        k1 = _rotl(k1, 31)
        k1 = (k1 * _C2) & _M64
        h1 ^= k1
        h1 = _rotl(h1, 27)
        h1 = (h1 + h2) & _M64
        h1 = (h1 * 5 + 0x52DCE729) & _M64
        k2 = (k2 * _C2) & _M64
        k2 = _rotl(k2, 33)
        k2 = (k2 * _C1) & _M64
        h2 ^= k2
        h2 = _rotl(h2, 31)
        h2 = (h2 + h1) & _M64
        h2 = (h2 * 5 + 0x38495AB5) & _M64
    tail = data[whole:]
    if tail:
        k1 = int.from_bytes(tail[:8], "little")
        k2 = int.from_bytes(tail[8:], "little")
        if k2:
            k2 = (k2 * _C2) & _M64
            k2 = _rotl(k2, 33)
            k2 = (k2 * _C1) & _M64
            h2 ^= k2
        k1 = (k1 * _C1) & _M64
        k1 = _rotl(k1, 31)
        k1 = (k1 * _C2) & _M64
        h1 ^= k1
    h1 ^= length
    h2 ^= length
    h1 = (h1 + h2) & _M64
    h2 = (h2 + h1) & _M64
    h1 = _fmix(h1)
    h2 = _fmix(h2)
    h1 = (h1 + h2) & _M64
    h2 = (h2 + h1) & _M64
    return h1, h2


def long_to_double_fraction(value: int) -> float:
    """The leading 52 bits of a 64-bit value as a double in ``[0, 1)`` (Java ``longToDoubleFraction``)."""
    shifted = (value >> 12) & _MASK_52
    return float(_DOUBLE.unpack(_LONG.pack(_LEADING_BITS + shifted))[0]) - 1.0


def hash_to_range(routing_key: str) -> float:
    """The key-space position of ``routing_key`` in ``[0, 1)``, identical to the Java and Rust clients."""
    h1, _ = murmur3_x64_128(routing_key.encode("utf-16-le", "surrogatepass"), ROUTING_SEED)
    return long_to_double_fraction(h1)


class KeyHasher:
    """Routing key -> position with a bounded cache (routing keys repeat); None -> ``random_position()``."""

    def __init__(self, max_cached_keys: int = 65_536, random_position: Callable[[], float] = random.random) -> None:
        self._cache: dict[str, float] = {}
        self._max = max_cached_keys
        self._random = random_position

    def position(self, routing_key: str | None) -> float:
        if routing_key is None:
            return self._random()
        cached = self._cache.get(routing_key)
        if cached is None:
            cached = hash_to_range(routing_key)
            if len(self._cache) >= self._max:
                self._cache.clear()
            self._cache[routing_key] = cached
        return cached


@dataclass(frozen=True, slots=True)
class _Piece:
    low: float
    high: float
    segment: SegmentRange


class SegmentMap:
    """The current segments of a stream as contiguous pieces of ``[0, 1]``, looked up by ceiling of the end.

    Invariants: pieces are sorted, contiguous, start at 0.0 and end at 1.0; each piece names the segment
    that owns it (a segment may own several pieces after a merge is half applied).
    """

    def __init__(self, pieces: Iterable[_Piece]) -> None:
        self._pieces = sorted(pieces, key=lambda p: p.high)
        if not self._pieces:
            raise ValueError("segments: a stream has at least one segment")
        expected = 0.0
        for piece in self._pieces:
            if piece.low != expected or piece.high <= piece.low:
                raise ValueError(f"segments: key ranges are not contiguous at {expected} ({piece})")
            expected = piece.high
        if expected != 1.0:
            raise ValueError(f"segments: key ranges end at {expected}, not 1.0")
        self._highs = [p.high for p in self._pieces]

    @classmethod
    def of(cls, segments: Iterable[SegmentRange]) -> SegmentMap:
        """The map of a stream's current segments (each owning its whole range)."""
        return cls(_Piece(s.key_start, s.key_end, s) for s in segments)

    def segment_for(self, position: float) -> SegmentRange:
        """The segment owning ``position`` (0 <= position <= 1)."""
        index = bisect.bisect_left(self._highs, position)
        if index == len(self._pieces):
            index -= 1
        return self._pieces[index].segment

    def segments(self) -> list[SegmentRange]:
        """Every distinct segment of the map, by key order."""
        seen: dict[int, SegmentRange] = {}
        for piece in self._pieces:
            seen.setdefault(piece.segment.segment_id, piece.segment)
        return list(seen.values())

    def __contains__(self, segment_id: object) -> bool:
        return any(p.segment.segment_id == segment_id for p in self._pieces)

    def replace(self, sealed: int, successors: Mapping[SegmentRange, Iterable[int]]) -> SegmentMap:
        """The map after segment ``sealed`` is replaced by those of ``successors`` (successor -> its
        predecessors) that name it as a predecessor, each clipped to the pieces ``sealed`` owned.

        Raises ValueError if ``sealed`` is not in the map or the successors leave part of its range
        uncovered.
        """
        replacements = sorted((s for s, preds in successors.items() if sealed in set(preds)), key=lambda s: s.key_start)
        pieces: list[_Piece] = []
        found = False
        for piece in self._pieces:
            if piece.segment.segment_id != sealed:
                pieces.append(piece)
                continue
            found = True
            for successor in replacements:
                low = max(piece.low, successor.key_start)
                high = min(piece.high, successor.key_end)
                if low < high:
                    pieces.append(_Piece(low, high, successor))
        if not found:
            raise ValueError(f"segment {sealed}: not a current segment of this map")
        return SegmentMap(pieces)
