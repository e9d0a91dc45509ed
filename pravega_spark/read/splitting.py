"""Parallel reads: a segment range cut into several input partitions at event starts.

Options ``maxBytesPerPartition`` and ``minPartitions`` (Kafka's name and rule) ask for more input partitions than
one per segment range (:func:`~pravega_spark.read.planning.plan_ranges`), in batch reads and in each micro-batch:

* ``maxBytesPerPartition = M``: a range of ``S`` bytes becomes ``ceil(S / M)`` pieces;
* ``minPartitions = P``: when the ranges are fewer than ``P``, each range gets a share of ``P`` proportional to its
  bytes (largest remainders, at least one each), so there are at least ``P`` pieces in all;
* with both, each range gets the larger count.

Pieces are cut at event starts, never at a guess: the driver asks the segment store for the first event that
starts at or after each even cut (``S * i / n`` into the range) with Pravega's ``LocateOffset`` (a segstore segment
store answers it exactly, from the event rows of the Tier-2 chunks or by walking the frames from an append it
knows: :mod:`segment_store.reading.event_starts`). Every piece is a range ``[a, b)`` whose both ends are event starts,
so every event of the range is in exactly one piece, and the executor reads it as it reads any range (reading from
the segment store, its framing check fails the task if a range ends inside an event). Two cuts that land on the same
event start make one piece: a range of few large events gives fewer pieces than asked. A segment store that does not
know ``LocateOffset`` (older than wire version 17) gets no cuts (logged), nor does a segment truncated or deleted
meanwhile (its read applies ``failOnDataLoss``); a Pravega one answers from its index segment, or the segment's
length without one (no cut).

Order: the pieces of a segment range hold consecutive events in offset order, piece ``i`` before piece ``i + 1``,
and each is read in offset order. Spark runs them as separate tasks, concurrently and in no order, and gives no
order between partitions downstream: a routing key's events of one segment range may be spread over consecutive
pieces. Whoever needs one key's events in order orders by ``offset`` within ``segment_id`` (an event's position).

Packing: small ranges are read together by one task (:func:`~pravega_spark.read.planning.pack_ranges`) up to
``maxBytesPerPartition`` if it is lower than the usual 4 MiB; with ``minPartitions`` nothing is packed (the count
asked for is kept); pieces of a cut range are never packed.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Protocol

from pravega_spark.options.read import SplitOptions
from pravega_spark.read.planning import PACK_BYTES, ReadRange, pack_ranges


def pack_limit_bytes(options: SplitOptions) -> int:
    """Small ranges are packed together up to this many bytes (0: never packed)."""
    if options.min_partitions is not None:
        return 0
    if options.max_bytes_per_partition is not None:
        return min(PACK_BYTES, options.max_bytes_per_partition)
    return PACK_BYTES


class EventLocator(Protocol):
    """Where events start (:class:`~pravega_spark.read.planning.LiveCatalog` asks the segment store)."""

    def event_starts(self, segment_id: int, targets: Sequence[int]) -> list[int] | None:
        """Per target offset, an event start of the segment at or after it (the first one, from segstore); None if
        the segment store cannot tell (it does not know ``LocateOffset``)."""
        ...


def piece_counts(ranges: Sequence[ReadRange], options: SplitOptions) -> list[int]:
    """How many pieces each range is cut into (see the module docstring); never more than its bytes."""
    counts = [1] * len(ranges)
    if options.max_bytes_per_partition is not None:
        counts = [max(1, math.ceil(r.size / options.max_bytes_per_partition)) for r in ranges]
    wanted = options.min_partitions
    total = sum(r.size for r in ranges)
    if wanted is not None and len(ranges) < wanted and total > 0:
        exact = [r.size * wanted / total for r in ranges]
        shares = [max(1, math.floor(e)) for e in exact]
        by_remainder = sorted(range(len(ranges)), key=lambda i: (-(exact[i] - math.floor(exact[i])), i))
        for i in by_remainder[: max(0, wanted - sum(shares))]:
            shares[i] += 1
        counts = [max(c, s) for c, s in zip(counts, shares, strict=True)]
    return [min(c, max(1, r.size)) for c, r in zip(counts, ranges, strict=True)]


def cut(r: ReadRange, pieces: int, locator: EventLocator) -> list[ReadRange]:
    """``r`` cut into at most ``pieces`` ranges at event starts (fewer when cuts meet the same event start)."""
    if pieces <= 1:
        return [r]
    targets = [r.start + r.size * i // pieces for i in range(1, pieces)]
    found = locator.event_starts(r.segment_id, targets)
    if found is None:
        return [r]
    bounds = [r.start]
    for start in found:
        if start < bounds[-1]:
            raise ValueError(f"segment {r.segment_id}: event starts out of order: {found} for {targets}")
        if bounds[-1] < start < r.end:
            bounds.append(start)
    bounds.append(r.end)
    return [ReadRange(r.segment_id, a, b) for a, b in itertools.pairwise(bounds)]


def partition_groups(
    ranges: Sequence[ReadRange], options: SplitOptions, locator: EventLocator | None
) -> list[list[ReadRange]]:
    """The input partitions of ``ranges``: each a list of ranges read in turn by one task."""
    counts = piece_counts(ranges, options) if locator is not None else [1] * len(ranges)
    whole = [r for r, n in zip(ranges, counts, strict=True) if n == 1]
    limit = pack_limit_bytes(options)
    groups = pack_ranges(whole, limit) if limit > 0 else [[r] for r in whole]
    for r, n in zip(ranges, counts, strict=True):
        if n > 1:
            assert locator is not None
            groups.extend([piece] for piece in cut(r, n, locator))
    return groups
