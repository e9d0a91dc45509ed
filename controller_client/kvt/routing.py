"""Which partition (table segment) of a key-value table holds a key: by its primary key, as Pravega's clients.

Java's ``KeyValueTableSegments.getSegmentForKey(primaryKey)`` hashes the primary key's bytes with
``HashHelper.seededWith("KeyValueTableRouter").hashToRange(ByteBuffer)``: MurmurHash3 x64 128-bit (Guava's
``hashBytes``) with seed ``"KeyValueTableRouter".hashCode()`` (-2020233499), the first 64-bit half made a double in
``[0, 1)`` from its leading 52 bits, and the segment is the one whose key range's upper end is the ceiling of that
position (``TreeMap.ceilingEntry`` over the ranges the controller returned). The secondary key plays no part, so
every key of a primary key is in one segment. Same bytes, same partition, whichever client wrote them.
"""

from __future__ import annotations

from collections.abc import Iterable

from controller_client.model import SegmentRange
from controller_client.writers.routing import SegmentMap, long_to_double_fraction, murmur3_x64_128

KVT_ROUTING_SEED = -2020233499
"""``"KeyValueTableRouter".hashCode()`` in Java: the seed of the primary-key hash in Pravega's clients."""


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode()`` (over UTF-16 code units), as a signed 32-bit int."""
    value = 0
    data = text.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        value = (31 * value + int.from_bytes(data[i : i + 2], "big")) & 0xFFFFFFFF
    return value - 2**32 if value >= 2**31 else value


def primary_key_position(primary_key: bytes) -> float:
    """The key-space position in ``[0, 1)`` of ``primary_key`` (identical to the Java client's)."""
    h1, _ = murmur3_x64_128(primary_key, KVT_ROUTING_SEED)
    return long_to_double_fraction(h1)


class Partitions:
    """A table's segments by key range; :meth:`segment_for` routes a primary key. Raises ValueError if the ranges
    do not cover ``[0, 1]`` contiguously."""

    def __init__(self, segments: Iterable[SegmentRange]) -> None:
        self._map = SegmentMap.of(segments)
        self.segments = self._map.segments()

    def segment_for(self, primary_key: bytes) -> SegmentRange:
        return self._map.segment_for(primary_key_position(primary_key))
