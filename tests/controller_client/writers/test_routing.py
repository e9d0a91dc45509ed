"""Routing: MurmurHash3 x64 128 test vectors, Pravega's key-to-range mapping, the segment map."""

from __future__ import annotations

import random

import pytest

from controller_client.model import SegmentRange, segment_id
from controller_client.writers.routing import (
    ROUTING_SEED,
    KeyHasher,
    SegmentMap,
    hash_to_range,
    long_to_double_fraction,
    murmur3_x64_128,
)

pytestmark = pytest.mark.unit

# (data, seed, h1, h2): the reference MurmurHash3_x64_128 (as computed by the C implementation).
MURMUR_VECTORS = [
    (b"", 0, 0x0, 0x0),
    (b"", 1, 0x4610ABE56EFF5CB5, 0x51622DAA78F83583),
    (b"The quick brown fox jumps over the lazy dog", 0, 0xE34BBC7BBC071B6C, 0x7A433CA9C49A9347),
    ("".encode("utf-16-le"), ROUTING_SEED, 0x3DBDDE9466A2F7CF, 0xB23567386D8888D3),
    ("a".encode("utf-16-le"), ROUTING_SEED, 0xF18217331898DFC0, 0xC9C2D747F1D2CECA),
    ("hello".encode("utf-16-le"), ROUTING_SEED, 0xA8A1A07BA5F63ABF, 0x1D00C0E3224E556F),
    ("routing-key-17".encode("utf-16-le"), ROUTING_SEED, 0x086377904A00BC11, 0xDEE89D550CBED48A),
    ("0123456789abcdef".encode("utf-16-le"), ROUTING_SEED, 0x2A4543BA6CB0AE0E, 0x61B7118FF24DD70E),
]

# (routing key, position): "hello" is the Rust client's own test vector (shared/src/lib.rs test_hash).
RANGE_VECTORS = [
    ("hello", 0.658716230571337),
    ("", 0.24117842791623523),
    ("a", 0.9433912753816884),
    ("routing-key-17", 0.03276774666483351),
    ("The quick brown fox jumps over the lazy dog", 0.6925408542916907),
    ("ключ", 0.6495940831637739),
    ("k\U0001f600", 0.3435138131984161),  # a surrogate pair: two UTF-16 code units, as Java's chars
]


@pytest.mark.parametrize(("data", "seed", "h1", "h2"), MURMUR_VECTORS)
def test_murmur3_x64_128_with_reference_vectors(data: bytes, seed: int, h1: int, h2: int) -> None:
    assert murmur3_x64_128(data, seed) == (h1, h2)


def test_murmur3_with_every_tail_length_is_stable_and_distinct() -> None:
    data = bytes(range(40))
    hashes = {murmur3_x64_128(data[:n], ROUTING_SEED) for n in range(40)}
    assert len(hashes) == 40
    assert murmur3_x64_128(data, 7) == murmur3_x64_128(bytearray(data), 7)


def test_murmur3_with_negative_seed_widens_like_guava() -> None:
    # Guava's murmur3_128(int) sign-extends the seed to 64 bits: -1 and 0xFFFFFFFF are the same int.
    assert murmur3_x64_128(b"abc", -1) == murmur3_x64_128(b"abc", 0xFFFFFFFF)
    assert murmur3_x64_128(b"abc", -1) != murmur3_x64_128(b"abc", 0x7FFFFFFF)


@pytest.mark.parametrize(("key", "position"), RANGE_VECTORS)
def test_hash_to_range_with_pravega_vectors(key: str, position: float) -> None:
    assert hash_to_range(key) == position


def test_long_to_double_fraction_with_java_vectors() -> None:
    def reverse(value: int) -> int:  # Java Long.reverse
        return int(f"{value:064b}"[::-1], 2)

    assert long_to_double_fraction(0) == 0.0
    assert long_to_double_fraction(2**64 - 1) == pytest.approx(1.0, abs=1e-7)
    assert long_to_double_fraction(2**64 - 1) < 1.0
    for n, expected in [(1, 0.5), (2, 0.25), (3, 0.75), (4, 0.125), (5, 0.625), (6, 0.375), (7, 0.875)]:
        assert long_to_double_fraction(reverse(n)) == expected


def test_key_hasher_with_none_key_is_random_and_with_key_is_cached() -> None:
    draws = iter([0.1, 0.9])
    hasher = KeyHasher(max_cached_keys=2, random_position=lambda: next(draws))
    assert hasher.position(None) == 0.1
    assert hasher.position(None) == 0.9
    for key in ["a", "b", "c", "a"]:
        assert hasher.position(key) == hash_to_range(key)


def test_hash_to_range_is_uniform_enough() -> None:
    rng = random.Random(3)
    buckets = [0] * 10
    for _ in range(20_000):
        key = "".join(rng.choice("abcdefghij0123456789") for _ in range(12))
        buckets[int(hash_to_range(key) * 10)] += 1
    assert min(buckets) > 1_700 and max(buckets) < 2_300


def _three() -> list[SegmentRange]:
    return [
        SegmentRange(segment_id(0, 0), 0.0, 0.25),
        SegmentRange(segment_id(1, 0), 0.25, 0.5),
        SegmentRange(segment_id(2, 0), 0.5, 1.0),
    ]


def test_segment_map_with_boundaries_uses_ceiling_of_upper_bound() -> None:
    segments = _three()
    mapping = SegmentMap.of(reversed(segments))
    assert mapping.segment_for(0.0) == segments[0]
    assert mapping.segment_for(0.1) == segments[0]
    assert mapping.segment_for(0.25) == segments[0]  # Java ceilingEntry: an exact upper bound belongs below
    assert mapping.segment_for(0.2500001) == segments[1]
    assert mapping.segment_for(0.75) == segments[2]
    assert mapping.segment_for(1.0) == segments[2]
    assert mapping.segments() == segments


def test_segment_map_with_gap_or_short_cover_is_rejected() -> None:
    with pytest.raises(ValueError, match="contiguous"):
        SegmentMap.of([SegmentRange(0, 0.0, 0.4), SegmentRange(1, 0.5, 1.0)])
    with pytest.raises(ValueError, match="end at"):
        SegmentMap.of([SegmentRange(0, 0.0, 0.4)])


def test_segment_map_replace_with_split() -> None:
    segments = _three()
    a, b = SegmentRange(segment_id(3, 1), 0.5, 0.8), SegmentRange(segment_id(4, 1), 0.8, 1.0)
    mapping = SegmentMap.of(segments).replace(segments[2].segment_id, {a: [segments[2].segment_id], b: [2]})
    assert mapping.segments() == [*segments[:2], a, b]
    assert mapping.segment_for(0.7) == a
    assert mapping.segment_for(0.9) == b
    assert segments[2].segment_id not in mapping


def test_segment_map_replace_with_merge_clips_to_each_predecessor() -> None:
    segments = _three()
    merged = SegmentRange(segment_id(3, 1), 0.0, 0.5)
    preds = [segments[0].segment_id, segments[1].segment_id]
    first = SegmentMap.of(segments).replace(segments[0].segment_id, {merged: preds})
    # Half applied: the merged segment owns [0, 0.25) while segment 1 still owns [0.25, 0.5).
    assert first.segment_for(0.1) == merged
    assert first.segment_for(0.3) == segments[1]
    second = first.replace(segments[1].segment_id, {merged: preds})
    assert second.segment_for(0.3) == merged
    assert second.segments() == [merged, segments[2]]


def test_segment_map_replace_with_unknown_segment_raises() -> None:
    with pytest.raises(ValueError, match="not a current segment"):
        SegmentMap.of(_three()).replace(99, {})
