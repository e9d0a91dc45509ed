"""The Event frame scanner moved to the wire codec: :mod:`segment_store.protocol.event_frames` (one implementation
for the engine's Tier-2 chunk format and the Spark connector's reader).

Nothing storage-specific is left here: the names below are the codec's, kept for the engine code that still imports
them from this path (``segment_store.reading.event_starts``). New code imports the codec module.
"""

from __future__ import annotations

from segment_store.protocol.event_frames import EVENT_TYPE, HEADER, HEADER_BYTES, find_frames, walk_frames

__all__ = ["EVENT_TYPE", "HEADER", "HEADER_BYTES", "find_frames", "walk_frames"]
