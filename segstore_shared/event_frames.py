"""Find Pravega wire ``Event`` frames (int32 BE type 0, int32 BE length, payload) in segment bytes, fast.

The one scanner of segment bytes for event frames: the engine's Tier-2 chunk format
(:mod:`segment_store.storage.format.parquet_chunk`) and the Spark connector's reader both use it. Sans-I/O, numpy
only: it imports nothing of the codec (the header constants below are :mod:`segment_store.protocol.constants`'
``HEADER``, ``HEADER_SIZE`` and ``EVENT_TYPE_CODE``) and raises nothing for bad bytes; it says where parsing stopped,
and :func:`invalid_header` tells a bad header from a frame cut short (callers raise their own error).

The frames of a buffer form a chain: each header says where the next one starts, so a plain walk is one Python
iteration per event (~250 ns: 10 ms per 4 MiB of 100 B events, too slow for the storage writer and for a Spark
executor). :func:`find_frames` walks, but hands long stretches to two vectorized strategies and falls back to the
walk wherever they do not apply:

* **equal runs** - consecutive events of one size: after a few walked events of one size, view the headers of the
  rest of the run as a strided array of 8-byte words and compare them all with the first at once (in windows
  growing 8-fold);
* **zero-run chains** - for small events of varying size: every header starts with four zero
  bytes, and in text-like payloads only headers do, so the starts of runs of >= 4 zero bytes
  are the candidate headers. Read all candidates' lengths at once and accept the longest prefix
  where each candidate's ``start + 8 + length`` is the next candidate. A candidate that is not
  a header (zeros inside a payload) or a header that is not a candidate (a payload ending in a
  zero byte, an empty event) just breaks the chain; the walk takes that event and the chain
  resumes. If breaks are frequent (binary payloads) the strategy switches itself off.

Only frames validated by the chain, the run check or the walk are returned, so the result is the same as the
plain walk's (:func:`walk_frames`, property-tested against it).
"""

from __future__ import annotations

import struct

import numpy as np
import numpy.typing as npt

HEADER = struct.Struct(">ii")
HEADER_BYTES = 8
EVENT_TYPE = 0

_RUN_MIN = 8  # walked events of one size before the rest of their run is checked at once
_PROBE_EVENTS = 512  # first window of a vectorized run check
_SAMPLE_EVENTS = 32  # walked events before deciding whether zero-run chains pay off
_CHAIN_MAX_STRIDE = 1024  # mean frame size above which the plain walk is cheap enough
_CHAIN_MAX_ZERO_SHARE = 4  # skip chains when more than 1/4 of the bytes are zero
_CHAIN_MIN_GAIN = 24  # keep chains while they accept >= 24 frames per lookup

IntArray = npt.NDArray[np.int64]
Buffer = bytes | bytearray | memoryview
"""Segment bytes: anything with the buffer protocol and one byte per item."""
_EMPTY: IntArray = np.zeros(0, dtype=np.int64)


def find_frames(data: Buffer, arr: npt.NDArray[np.uint8] | None = None) -> tuple[IntArray, int]:
    """Return the start offsets of the whole frames at the head of ``data``, and where they end.

    Parsing stops at the first position that is not a whole valid frame (fewer than 8 bytes
    left, a type other than 0, a negative length, or a payload running past the end); the
    second value is that position (``len(data)`` if everything parsed). ``arr`` may pass
    ``data`` as a uint8 numpy array to save a conversion.
    """
    size = len(data)
    unpack = HEADER.unpack_from
    parts: list[IntArray] = []
    singles: list[int] = []
    append = singles.append
    chain: _Chain | None = None
    chain_decided = False
    prev_length = -1
    same = 0  # walked events in a row of length prev_length
    pos = 0
    while pos + HEADER_BYTES <= size:
        kind, length = unpack(data, pos)
        stride = HEADER_BYTES + length
        if kind != EVENT_TYPE or length < 0 or pos + stride > size:
            break
        if length != prev_length:
            prev_length = length
            same = 0
        elif same >= _RUN_MIN:
            count = _equal_run(data, pos, stride, size)
            _flush(singles, parts)
            parts.append(np.arange(pos, pos + count * stride, stride, dtype=np.int64))
            pos += count * stride
            same = 0
            continue
        append(pos)
        same += 1
        pos += stride
        if chain is not None:
            # chain mode: every walked frame is where a chain broke; resume after it
            found = chain.follow(pos)
            if found is not None:
                _flush(singles, parts)
                parts.append(found[0])
                pos = found[1]
                prev_length = -1
            elif not chain.worthwhile():
                chain = None
        elif not chain_decided and len(singles) >= _SAMPLE_EVENTS:
            chain_decided = True
            events = len(singles) + sum(p.size for p in parts)
            if pos < _CHAIN_MAX_STRIDE * events:
                chain = _Chain.build(data, np.frombuffer(data, dtype=np.uint8) if arr is None else arr)
    _flush(singles, parts)
    if not parts:
        return _EMPTY, pos
    return (parts[0] if len(parts) == 1 else np.concatenate(parts)), pos


def frame_lengths(starts: IntArray, end: int) -> IntArray:
    """The payload lengths of the frames :func:`find_frames` found at ``starts`` (ending at ``end``): frames lie back to
    back, so each runs up to the next one's start."""
    lengths = np.empty_like(starts)
    if starts.size:
        np.subtract(starts[1:], starts[:-1], out=lengths[:-1])
        lengths[-1] = end - starts[-1]
        lengths -= HEADER_BYTES
    return lengths


def invalid_header(data: Buffer, pos: int) -> tuple[int, int] | None:
    """``(type, length)`` of the header at ``pos`` if it can never start a frame (a type other than 0, a negative
    length); None if it can, or if fewer than 8 bytes are left (at the ``end`` :func:`find_frames` gives: None when it
    stopped at a frame cut short by the end of ``data``)."""
    if len(data) - pos < HEADER_BYTES:
        return None
    kind, length = HEADER.unpack_from(data, pos)
    return (kind, length) if kind != EVENT_TYPE or length < 0 else None


def walk_frames(data: Buffer) -> tuple[IntArray, int]:
    """The plain one-header-at-a-time walk; same result as :func:`find_frames` (reference)."""
    size = len(data)
    starts: list[int] = []
    pos = 0
    while pos + HEADER_BYTES <= size:
        kind, length = HEADER.unpack_from(data, pos)
        if kind != EVENT_TYPE or length < 0 or pos + HEADER_BYTES + length > size:
            break
        starts.append(pos)
        pos += HEADER_BYTES + length
    return np.array(starts, dtype=np.int64), pos


def _flush(singles: list[int], parts: list[IntArray]) -> None:
    if singles:
        parts.append(np.array(singles, dtype=np.int64))
        singles.clear()


def _equal_run(data: Buffer, pos: int, stride: int, size: int) -> int:
    """Count consecutive whole frames from ``pos`` (a valid frame) whose 8-byte header equals the one at ``pos``."""
    header = np.ndarray((1,), dtype=np.uint64, buffer=data, offset=pos)[0]
    count = 1
    window = _PROBE_EVENTS
    while True:
        start = pos + count * stride
        k = min((size - start) // stride, window)
        if k <= 0:
            return count
        # the next k headers, each read as one 8-byte word: a strided view over the buffer, no copy
        heads = np.ndarray((k,), dtype=np.uint64, buffer=data, offset=start, strides=(stride,))
        differ = np.flatnonzero(heads != header)
        if differ.size:
            return count + int(differ[0])
        count += k
        window *= 8


class _Chain:
    """Candidate headers (starts of zero runs) with their links precomputed, followed by lookup."""

    def __init__(self, heads: IntArray, lengths: IntArray) -> None:
        self.heads = heads
        nxt = heads + HEADER_BYTES + lengths
        linked = (nxt[:-1] == heads[1:]) & (lengths[:-1] >= 0)
        # ends[k]: a candidate that does not link to the following one; chains run up to an end
        self.ends = np.append(np.flatnonzero(~linked), np.int64(heads.size - 1))
        self.accepted = 0
        self.lookups = 0

    @classmethod
    def build(cls, data: Buffer, arr: npt.NDArray[np.uint8]) -> _Chain | None:
        """Find the candidates, or ``None`` if the data has too many zero bytes for this to pay."""
        size = arr.size
        is_zero = arr == 0
        if size < HEADER_BYTES or np.count_nonzero(is_zero) * _CHAIN_MAX_ZERO_SHARE > size:
            return None
        zeros = np.flatnonzero(is_zero)
        if zeros.size < 4:
            return None
        run_start = np.ones(zeros.size, dtype=np.bool_)
        run_start[1:] = zeros[1:] != zeros[:-1] + 1
        four = np.zeros(zeros.size, dtype=np.bool_)
        four[:-3] = zeros[3:] == zeros[:-3] + 3
        heads = zeros[run_start & four].astype(np.int64)
        heads = heads[heads <= size - HEADER_BYTES]
        if heads.size == 0:
            return None
        # big-endian int32 at every byte offset, without copying: a 1-byte-stride view
        be_int32 = np.ndarray((size - 3,), dtype=">i4", buffer=data, strides=(1,))
        return cls(heads, be_int32[heads + 4].astype(np.int64))

    def follow(self, pos: int) -> tuple[IntArray, int] | None:
        """Frames linked from ``pos`` and the position after them, or ``None``.

        Every returned frame is valid without further checks: type 0 (a zero run), length >= 0
        and a payload ending where the next candidate starts. The position after is the last
        candidate reached, whose own link is broken: the caller must walk (validate) it.
        """
        self.lookups += 1
        j = int(np.searchsorted(self.heads, pos))
        if j < self.heads.size and self.heads[j] == pos:
            end = int(self.ends[np.searchsorted(self.ends, j)])
            if end > j:
                self.accepted += end - j
                return self.heads[j:end], int(self.heads[end])
        return None

    def worthwhile(self) -> bool:
        """Whether lookups still pay: each costs about as much as walking ten frames."""
        return self.lookups <= _CHAIN_MIN_GAIN or self.accepted >= _CHAIN_MIN_GAIN * self.lookups
