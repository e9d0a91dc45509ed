"""Split planning of parallel reads (options maxBytesPerPartition, minPartitions) without Spark or a network: piece
counts, cuts at event starts a fake segment store locates in real event bytes, packing."""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence

import pytest

from pravega_spark.errors import SegstoreOptionError
from pravega_spark.options.read import ReadOptions, SplitOptions
from pravega_spark.read.partition_reader import batches_from_chunks
from pravega_spark.read.planning import ReadRange
from pravega_spark.read.splitting import cut, partition_groups, piece_counts
from segment_store.protocol import encode_events

pytestmark = pytest.mark.unit


class Segments:
    """Event bytes per segment; ``event_starts`` answers as a segstore segment store does (the first event start
    at or after each target, the length past the last one); ``asked`` records each call."""

    def __init__(self, data: dict[int, bytes]) -> None:
        self.data = data
        self.asked: list[tuple[int, list[int]]] = []

    def starts(self, segment_id: int) -> list[int]:
        data, position, found = self.data[segment_id], 0, []
        while position < len(data):
            found.append(position)
            position += 8 + int.from_bytes(data[position + 4 : position + 8], "big")
        return found

    def event_starts(self, segment_id: int, targets: Sequence[int]) -> list[int] | None:
        self.asked.append((segment_id, list(targets)))
        starts = self.starts(segment_id)
        return [next((s for s in starts if s >= t), len(self.data[segment_id])) for t in targets]


class Unsupported:
    def event_starts(self, segment_id: int, targets: Sequence[int]) -> list[int] | None:
        return None


def payloads(rng: random.Random, count: int, largest: int = 90) -> list[bytes]:
    return [rng.randbytes(rng.randrange(largest)) for _ in range(count)]


def read(segments: Segments, r: ReadRange) -> list[tuple[int, bytes]]:
    """The events of ``r`` as an executor reads them (fails if the range does not end at an event end)."""
    chunks = [segments.data[r.segment_id][r.start : r.end]]
    rows = []
    for batch in batches_from_chunks(chunks, r.start, "sc", "st", r.segment_id):
        rows += zip(batch.column("offset").to_pylist(), batch.column("event").to_pylist(), strict=True)
    return rows


def test_piece_counts_with_max_bytes_per_partition_cut_each_range_by_its_size() -> None:
    ranges = [ReadRange(1, 0, 1000), ReadRange(2, 500, 550), ReadRange(3, 0, 100)]
    assert piece_counts(ranges, SplitOptions(max_bytes_per_partition=100)) == [10, 1, 1]
    assert piece_counts(ranges, SplitOptions(max_bytes_per_partition=99)) == [11, 1, 2]
    assert piece_counts(ranges, SplitOptions()) == [1, 1, 1]


def test_piece_counts_with_min_partitions_share_by_bytes_as_kafka_and_reach_the_minimum() -> None:
    ranges = [ReadRange(1, 0, 100), ReadRange(2, 0, 300), ReadRange(3, 0, 600)]
    counts = piece_counts(ranges, SplitOptions(min_partitions=8))
    assert counts == [2, 2, 4] and sum(counts) == 8  # shares 0.8, 2.4, 4.8: largest remainder to the first
    assert piece_counts([ReadRange(1, 0, 10**6)], SplitOptions(min_partitions=8)) == [8]
    assert piece_counts(ranges, SplitOptions(min_partitions=3)) == [1, 1, 1]  # as many ranges as asked: no cut
    tiny = [ReadRange(1, 0, 1), ReadRange(2, 0, 10**6)]
    assert piece_counts(tiny, SplitOptions(min_partitions=8)) == [1, 7]  # at least one each, 8 in all
    assert piece_counts([ReadRange(1, 0, 1), ReadRange(2, 0, 3)], SplitOptions(min_partitions=8)) == [1, 3]  # bytes
    assert piece_counts(ranges, SplitOptions(max_bytes_per_partition=50, min_partitions=8)) == [2, 6, 12]


@pytest.mark.parametrize("pieces", [2, 3, 8, 17])
def test_cut_tiles_the_range_at_event_starts_so_every_event_is_read_once_in_order(pieces: int) -> None:
    rng = random.Random(pieces)
    data = encode_events(payloads(rng, 3000))
    segments = Segments({7: data})
    starts = segments.starts(7)
    whole = ReadRange(7, starts[100], starts[2900])  # a range between two cuts of a read
    parts = cut(whole, pieces, segments)
    assert len(parts) == pieces
    assert parts[0].start == whole.start and parts[-1].end == whole.end
    assert all(a.end == b.start for a, b in itertools.pairwise(parts))
    assert all(p.start in starts and p.size > 0 for p in parts)
    assert max(p.size for p in parts) < 2 * whole.size / pieces  # about even
    assert [row for p in parts for row in read(segments, p)] == read(segments, whole)


def test_cut_with_few_large_events_gives_fewer_pieces_and_never_an_empty_one() -> None:
    data = encode_events([b"x" * 10_000, b"y" * 10_000, b"z"])
    segments = Segments({1: data})
    parts = cut(ReadRange(1, 0, len(data)), 8, segments)
    assert [(p.start, p.end) for p in parts] == [(0, 10_008), (10_008, 20_016), (20_016, len(data))]


def test_cut_without_locate_offset_at_the_segment_store_reads_the_range_whole() -> None:
    whole = ReadRange(1, 0, 10**6)
    assert cut(whole, 8, Unsupported()) == [whole]


def test_cut_with_starts_out_of_order_raises() -> None:
    class Backwards:
        def event_starts(self, segment_id: int, targets: Sequence[int]) -> list[int] | None:
            return list(reversed(targets))

    with pytest.raises(ValueError, match="out of order"):
        cut(ReadRange(1, 0, 1000), 4, Backwards())


def test_partition_groups_without_options_pack_as_before_and_ask_nothing() -> None:
    rng = random.Random(1)
    segments = Segments({s: encode_events(payloads(rng, 200)) for s in (1, 2, 3)})
    ranges = [ReadRange(s, 0, len(d)) for s, d in segments.data.items()]
    assert partition_groups(ranges, SplitOptions(), segments) == [ranges]  # small: one task
    assert segments.asked == []


def test_partition_groups_with_one_segment_and_min_partitions_8_give_8_partitions() -> None:
    rng = random.Random(2)
    segments = Segments({1: encode_events(payloads(rng, 5000))})
    whole = ReadRange(1, 0, len(segments.data[1]))
    groups = partition_groups([whole], SplitOptions(min_partitions=8), segments)
    assert len(groups) == 8 and all(len(g) == 1 for g in groups)
    assert [row for g in groups for row in read(segments, g[0])] == read(segments, whole)
    assert len(partition_groups([whole], SplitOptions(), segments)) == 1  # without the option: one task


def test_partition_groups_pack_small_ranges_up_to_max_bytes_and_cut_large_ones() -> None:
    rng = random.Random(3)
    data = {1: encode_events(payloads(rng, 4000)), 2: encode_events(payloads(rng, 10)), 3: encode_events([b"a"])}
    segments = Segments(data)
    ranges = [ReadRange(s, 0, len(d)) for s, d in data.items()]
    limit = len(data[1]) // 4 + 1
    groups = partition_groups(ranges, SplitOptions(max_bytes_per_partition=limit), segments)
    assert groups[0] == ranges[1:]  # the two small ones packed, within the limit
    pieces = [g[0] for g in groups[1:]]
    assert len(pieces) == 4 and all(len(g) == 1 for g in groups[1:]) and {p.segment_id for p in pieces} == {1}
    with_min = partition_groups(ranges, SplitOptions(min_partitions=8), segments)
    assert all(len(g) == 1 for g in with_min) and len(with_min) >= 8  # nothing packed


def test_options_are_parsed_checked_and_refused_with_metadata() -> None:
    base = {"controller": "tcp://127.0.0.1:1", "scope": "sc", "stream": "st"}
    parsed = ReadOptions.parse({**base, "maxbytesperpartition": "1048576", "minpartitions": "8"})
    assert parsed.split == SplitOptions(1048576, 8)
    assert ReadOptions.parse(base).split == SplitOptions()
    for name in ("maxBytesPerPartition", "minPartitions"):
        with pytest.raises(SegstoreOptionError, match=name):
            ReadOptions.parse({**base, name: "0"})
        with pytest.raises(SegstoreOptionError, match=name):
            ReadOptions.parse({**base, name: "8", "metadata": "StreamInfo"})
