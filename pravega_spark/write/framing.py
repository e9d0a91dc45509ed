"""The sink's hot path on Arrow batches, shared by both delivery modes: routing a batch's rows over segments
(:class:`Router`) and framing a segment's part column-wise into wire blocks (:func:`framed_blocks`), with no
Python object per row."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from controller_client.model import SegmentRange
from controller_client.writers.routing import KeyHasher, SegmentMap
from segment_store.protocol import HEADER_SIZE
from segment_store.protocol.constants import EVENT_TYPE_CODE

_MAX_CACHED_KEYS = 1_000_000


class Router:
    """Splits Arrow batches over a stream's segments: a row with a routing key goes to the segment owning the
    key's hash (Pravega's, cached per distinct key), rows without one in contiguous slices of the batch over
    all segments (a different segment first each batch). Deterministic: the same batches split the same way.
    """

    def __init__(self, segments: Sequence[SegmentRange], hasher: KeyHasher) -> None:
        self._hasher = hasher
        self._next = 0
        self._use(SegmentMap.of(segments))

    def _use(self, segment_map: SegmentMap) -> None:
        self.map = segment_map
        self.segments = segment_map.segments()
        self._index = {s.segment_id: i for i, s in enumerate(self.segments)}
        self._key_index: dict[str, int] = {}

    def replace(self, sealed: int, successors: Mapping[SegmentRange, Iterable[int]]) -> None:
        """Route ``sealed``'s key range to its successors from now on (``SegmentMap.replace``)."""
        self._use(self.map.replace(sealed, successors))

    def _slot_of(self, key: str) -> int:
        slot = self._key_index.get(key)
        if slot is None:
            if len(self._key_index) >= _MAX_CACHED_KEYS:
                self._key_index.clear()
            slot = self._key_index[key] = self._index[self.map.segment_for(self._hasher.position(key)).segment_id]
        return slot

    def split(self, events: pa.Array, keys: pa.Array | None) -> list[tuple[SegmentRange, pa.Array]]:
        """``(segment, events)`` pairs, each keeping the batch's order."""
        return [(segment, part) for segment, part, _ in self.split_with_keys(events, keys, False)]

    def split_with_keys(
        self, events: pa.Array, keys: pa.Array | None, with_keys: bool = True
    ) -> list[tuple[SegmentRange, pa.Array, pa.Array | None]]:
        """``(segment, events, keys)`` triples, each keeping the batch's order (keys None if ``keys`` is, or
        unless ``with_keys``)."""
        count = len(self.segments)
        rows = len(events)
        if count == 1:
            return [(self.segments[0], events, keys if with_keys else None)]
        if keys is None or keys.null_count == rows:
            step = math.ceil(rows / count)
            out = []
            for i in range(count):
                part = events.slice(i * step, step)
                if len(part):
                    key_part = keys.slice(i * step, step) if keys is not None and with_keys else None
                    out.append((self.segments[(self._next + i) % count], part, key_part))
            self._next = (self._next + 1) % count
            return out
        encoded = pc.dictionary_encode(keys)
        lut = np.fromiter((self._slot_of(k) for k in encoded.dictionary.to_pylist()), np.int64)
        codes = pc.fill_null(encoded.indices, -1).to_numpy(zero_copy_only=False)
        slots = np.where(codes >= 0, lut[np.maximum(codes, 0)], np.arange(rows) % count)
        order = pa.array(np.argsort(slots, kind="stable"))
        taken = events.take(order)
        taken_keys = keys.take(order) if with_keys else None
        bounds = np.concatenate(([0], np.cumsum(np.bincount(slots, minlength=count))))
        return [
            (
                self.segments[i],
                taken.slice(int(bounds[i]), int(bounds[i + 1] - bounds[i])),
                taken_keys.slice(int(bounds[i]), int(bounds[i + 1] - bounds[i])) if taken_keys is not None else None,
            )
            for i in range(count)
            if bounds[i + 1] > bounds[i]
        ]


_MAX_FRAMED_BYTES = 1 << 30  # framed in one Arrow binary array (int32 offsets) at a time


def framed_blocks(events: pa.Array, limit: int) -> Iterator[tuple[memoryview, int]]:
    """``events`` (binary, no nulls) framed as wire events back to back (``encode_events``), cut at event
    boundaries into ``(block, count)`` pieces of at most ``limit`` bytes (a larger event is a piece alone)."""
    rows = len(events)
    if rows == 0:
        return
    if not (pa.types.is_binary(events.type) or pa.types.is_large_binary(events.type)):
        events = events.cast(pa.large_binary())  # views, strings: 64-bit offsets until split below
    lengths = pc.binary_length(events).to_numpy(zero_copy_only=False)
    if rows > 1 and int(lengths.sum()) + rows * HEADER_SIZE > _MAX_FRAMED_BYTES:  # int32 offsets below
        half = rows // 2
        yield from framed_blocks(events.slice(0, half), limit)
        yield from framed_blocks(events.slice(half), limit)
        return
    if events.type != pa.binary():
        events = events.cast(pa.binary())
    headers = np.empty((rows, 2), dtype=">i4")
    headers[:, 0] = EVENT_TYPE_CODE
    headers[:, 1] = lengths
    framed_headers = pa.FixedSizeBinaryArray.from_buffers(pa.binary(HEADER_SIZE), rows, [None, pa.py_buffer(headers)])
    framed = pc.binary_join_element_wise(framed_headers.cast(pa.binary()), events, b"")
    offsets = np.frombuffer(framed.buffers()[1], dtype=np.int32, count=rows + 1, offset=framed.offset * 4)
    data = memoryview(framed.buffers()[2])
    start = 0
    while start < rows:
        end = int(np.searchsorted(offsets, offsets[start] + limit, side="right")) - 1
        end = min(max(end, start + 1), rows)
        yield data[offsets[start] : offsets[end]], end - start
        start = end
