"""Find Pravega wire ``Event`` frames (int32 BE type 0, int32 BE length, payload) in segment bytes.

The frames of a chunk form a chain: each header says where the next one starts, so a plain
walk is one Python iteration per event (~250 ns: 10 ms per 4 MiB of 100 B events, too slow for
the storage writer). :func:`find_frames` walks, but hands long stretches to two vectorized
strategies and falls back to the walk wherever they do not apply:

* **equal runs** - consecutive events of one size: view the run as a (k, stride) matrix and
  compare all k headers with the first at once;
* **zero-run chains** - for small events of varying size: every header starts with four zero
  bytes, and in text-like payloads only headers do, so the starts of runs of >= 4 zero bytes
  are the candidate headers. Read all candidates' lengths at once and accept the longest prefix
  where each candidate's ``start + 8 + length`` is the next candidate. A candidate that is not
  a header (zeros inside a payload) or a header that is not a candidate (a payload ending in a
  zero byte, an empty event) just breaks the chain; the walk takes that event and the chain
  resumes. If breaks are frequent (binary payloads) the strategy switches itself off.

Only frames validated by the chain or the walk are returned, so the result is the same as the
plain walk's (property-tested against it).
"""

from __future__ import annotations

import struct

import numpy as np
import numpy.typing as npt

HEADER = struct.Struct(">ii")
HEADER_BYTES = 8
EVENT_TYPE = 0

_PROBE_EVENTS = 16  # first window of a vectorized check
_SAMPLE_EVENTS = 32  # walked events before deciding whether zero-run chains pay off
_CHAIN_MAX_STRIDE = 1024  # mean frame size above which the plain walk is cheap enough
_CHAIN_MAX_ZERO_SHARE = 4  # skip chains when more than 1/4 of the bytes are zero
_CHAIN_MIN_GAIN = 24  # keep chains while they accept >= 24 frames per lookup

IntArray = npt.NDArray[np.int64]
_EMPTY: IntArray = np.zeros(0, dtype=np.int64)


def find_frames(data: bytes | memoryview, arr: npt.NDArray[np.uint8] | None = None) -> tuple[IntArray, int]:
    """Return the start offsets of the whole frames at the head of ``data``, and where they end.

    Parsing stops at the first position that is not a whole valid frame (fewer than 8 bytes
    left, a type other than 0, a negative length, or a payload running past the end); the
    second value is that position (``len(data)`` if everything parsed). ``arr`` may pass
    ``data`` as a uint8 numpy array to save a conversion.
    """
    size = len(data)
    if arr is None:
        arr = np.frombuffer(data, dtype=np.uint8)
    unpack = HEADER.unpack_from
    parts: list[IntArray] = []
    singles: list[int] = []
    append = singles.append
    chain: _Chain | None = None
    chain_decided = False
    prev_length = -1
    pos = 0
    while pos + HEADER_BYTES <= size:
        kind, length = unpack(data, pos)
        stride = HEADER_BYTES + length
        if kind != EVENT_TYPE or length < 0 or pos + stride > size:
            break
        if (
            length == prev_length
            and pos + stride + HEADER_BYTES <= size
            and unpack(data, pos + stride) == (kind, length)
        ):
            count = _equal_run(arr, pos, stride)
            _flush(singles, parts)
            parts.append(np.arange(pos, pos + count * stride, stride, dtype=np.int64))
            pos += count * stride
            continue
        append(pos)
        prev_length = length
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
                chain = _Chain.build(data, arr)
    _flush(singles, parts)
    if not parts:
        return _EMPTY, pos
    return (parts[0] if len(parts) == 1 else np.concatenate(parts)), pos


def walk_frames(data: bytes | memoryview) -> tuple[IntArray, int]:
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


def _equal_run(arr: npt.NDArray[np.uint8], pos: int, stride: int) -> int:
    """Count consecutive whole frames from ``pos`` whose 8-byte header equals the one at ``pos``."""
    header = arr[pos : pos + HEADER_BYTES]
    count = 1
    window = _PROBE_EVENTS
    while True:
        start = pos + count * stride
        k = min((arr.size - start) // stride, window)
        if k <= 0:
            return count
        heads = arr[start : start + k * stride].reshape(k, stride)[:, :HEADER_BYTES]
        ok = (heads == header).all(axis=1)
        if not ok.all():
            return count + int(np.argmin(ok))
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
    def build(cls, data: bytes | memoryview, arr: npt.NDArray[np.uint8]) -> _Chain | None:
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
