"""Which table a segment's chunks belong to: the stream segment names segstore's controller gives.

A stream segment is ``<scope>/<stream>/<number>.#epoch.<epoch>`` (Pravega's naming); its id is
``epoch << 32 | number``, the ``segment_id`` readers see. Transaction and transient segments
(``...#transaction.<id>``, ``...#transient.<id>``) and anything else (table segments, internal streams) are no
table rows of their own: a merged transaction's chunks become rows once they are part of their stream segment.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_SEGMENT = re.compile(r"(?P<scope>[^/#]+)/(?P<stream>[^/#]+)/(?P<number>\d+)\.#epoch\.(?P<epoch>\d+)")


@dataclass(frozen=True, slots=True)
class StreamSegment:
    """A stream segment's coordinates in its table."""

    scope: str
    stream: str
    segment_id: int


def stream_segment(name: str) -> StreamSegment | None:
    """The coordinates of stream segment ``name``; None for any other segment."""
    match = _SEGMENT.fullmatch(name)
    if match is None:
        return None
    number, epoch = int(match["number"]), int(match["epoch"])
    if number >= 1 << 32 or epoch >= 1 << 31:
        return None
    return StreamSegment(match["scope"], match["stream"], epoch << 32 | number)


__all__ = ["StreamSegment", "stream_segment"]
