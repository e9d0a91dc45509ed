"""Driver side of :func:`pravega_spark.history`: which Tier-2 chunk files hold which part of a stream, and where the
Python source takes over.

A read of a stream from its head cut to its tail cut is cut in two at the *frontier*:

* below the frontier, every segment range lies in Tier-2 chunks that this process can open (the segment store lists
  them through segstore's ``ListStorageChunkLocations``): :class:`HistoryFile` rows say which file holds which
  segment and from which absolute offset its rows start, and which absolute offsets of it to keep (``[lo, hi)``:
  rows below a truncation or above the tail are left out);
* from the frontier on, the ``segstore`` Python source reads the rest (``startingOffsets`` = the frontier,
  ``endingOffsets`` = the tail).

The frontier is where a walk over the stream (:class:`~pravega_spark.read.planning.Walk`, the very walk the source's
planning makes, following scaling) stops when every segment is seen as ending where its reachable Tier-2 chunks end
(:class:`Tier2Catalog`): a segment read to the end of its chunks is finished (its successors start) only if that is
its real end and it is sealed. So the two parts never overlap, and together they are exactly the ranges
:func:`~pravega_spark.read.planning.plan_ranges` gives from head to tail: every event once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from pravega_spark.offsets import ReadState
from pravega_spark.read.planning import SegmentCatalog, SegmentState, Walk


@dataclass(frozen=True, slots=True)
class ChunkFile:
    """One Tier-2 chunk of a segment: segment bytes ``[start, start + length)`` in the file at ``uri`` (chunk
    ``name`` to the segment store)."""

    start: int
    length: int
    uri: str
    name: str = ""

    @property
    def end(self) -> int:
        return self.start + self.length


@dataclass(frozen=True, slots=True)
class HistoryFile:
    """A chunk file read by Spark's Parquet reader: its rows belong to ``segment_id``, their absolute offset is
    ``chunk_start + offset``, and the rows kept are the framed ones whose absolute offset is in ``[lo, hi)``."""

    uri: str
    segment_id: int
    chunk_start: int
    lo: int
    hi: int
    name: str = ""


@dataclass(frozen=True, slots=True)
class HistoryPlan:
    """The files below the frontier, and the frontier (where the Python source starts)."""

    files: tuple[HistoryFile, ...]
    frontier: ReadState
    history_bytes: int
    """Segment bytes the files' kept rows span."""


class Tier2Catalog:
    """A :class:`SegmentCatalog` in which each segment ends where its reachable Tier-2 chunks end.

    ``chunks(segment_id)`` gives the contiguous chunks this process can open from the one holding the segment's
    start offset on (empty if none), ``inner`` the real segments. A segment whose chunks reach its length keeps its
    real state; any other is seen as open and ending at the end of its chunks (at least its start offset)."""

    def __init__(self, inner: SegmentCatalog, chunks: Mapping[int, Sequence[ChunkFile]]) -> None:
        self.inner = inner
        self.scope = inner.scope
        self.stream = inner.stream
        self._chunks = chunks

    def tier2_end(self, segment_id: int, start_offset: int) -> int:
        listed = self._chunks.get(segment_id, ())
        if not listed or not listed[0].start <= start_offset < listed[-1].end:
            return start_offset
        return listed[-1].end

    def status(self, segment_id: int) -> SegmentState | None:
        state = self.inner.status(segment_id)
        if state is None:
            return None
        end = self.tier2_end(segment_id, state.start_offset)
        if end >= state.length:
            return state
        return SegmentState(state.start_offset, max(end, state.start_offset), False)

    def successors(self, segment_id: int) -> Mapping[int, Sequence[int]]:
        return self.inner.successors(segment_id)

    def chunks(self, segment_id: int, start: int, end: int) -> Iterable[bytes]:
        return self.inner.chunks(segment_id, start, end)


def plan_history(
    head: ReadState, tail: ReadState, catalog: SegmentCatalog, chunks: Mapping[int, Sequence[ChunkFile]]
) -> HistoryPlan:
    """The history files and the frontier of a read from ``head`` to ``tail`` (see the module docstring).

    ``chunks``: per segment id, its contiguous openable chunks from its start offset (:class:`Tier2Catalog`).
    Raises DataLossError or UnreachableEndError as :func:`~pravega_spark.read.planning.plan_ranges` does."""
    capped = Tier2Catalog(catalog, chunks)
    walk = Walk(head, capped, fail_on_data_loss=True, cap=tail.positions)
    walk.run_out()
    files: list[HistoryFile] = []
    size = 0
    for segment, (lo, hi) in sorted(walk.ranges.items()):
        if hi <= lo:
            continue
        size += hi - lo
        for chunk in chunks.get(segment, ()):
            if chunk.end > lo and chunk.start < hi:
                files.append(HistoryFile(chunk.uri, segment, chunk.start, lo, hi, chunk.name))
    return HistoryPlan(tuple(files), walk.state(), size)


__all__ = ["ChunkFile", "HistoryFile", "HistoryPlan", "Tier2Catalog", "plan_history"]
