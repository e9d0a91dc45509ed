"""Which recorded stream cut a retention policy truncates at (Pravega's retention from a retention set).

The controller records, every retention period, the stream's tail cut with the time it was recorded and
the stream's size up to it (a *reference*). Truncating at a reference discards everything before it.

- **By time** (keep at least ``min`` ms, at most ``max`` ms): truncate at the newest reference recorded
  at least ``min`` ms ago. Without subscribers ``max`` bounds nothing further (the newest old-enough cut
  already keeps the least data that still honours ``min``); with subscribers it does (below).
- **By size** (keep at least ``min`` bytes): truncate at the newest reference whose distance to the
  current size is at least ``min`` bytes.

Only references after the current truncation point are candidates; none qualifying means "do not
truncate now". The chosen reference and every older one can then be dropped from the retention set.

**Consumption-based retention** (PDP-47, :func:`consumption_truncation`): when reader groups subscribe to the
stream and report their positions, the stream is truncated at their lower bound instead, held within the
policy's bounds: never keeping less than ``min`` (a subscriber ahead of that waits) and, when ``max`` is set,
never more than ``max`` (a subscriber lagging beyond it loses that data).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from controller.metadata.records import StreamCutReference
from controller.policies.cuts import Cut, Order, compare
from controller_client.model import RetentionPolicy, RetentionType


def truncation_point(
    policy: RetentionPolicy,
    references: Sequence[StreamCutReference],
    now_ms: int,
    current_size_bytes: int,
    truncated_size_bytes: int = 0,
) -> StreamCutReference | None:
    """The reference to truncate at now, or None. ``references`` may be in any order."""
    candidates = [r for r in references if r.recording_size_bytes > truncated_size_bytes]
    if policy.retention_type == RetentionType.TIME:
        eligible = [r for r in candidates if now_ms - r.recording_time_ms >= policy.retention_param]
        return max(eligible, key=lambda r: r.recording_time_ms, default=None)
    if policy.retention_type == RetentionType.SIZE:
        eligible = [r for r in candidates if current_size_bytes - r.recording_size_bytes >= policy.retention_param]
        return max(eligible, key=lambda r: r.recording_size_bytes, default=None)
    return None


@dataclass(frozen=True, slots=True)
class Recorded:
    """A reference of the retention set with its cut (segments with their key ranges)."""

    reference: StreamCutReference
    cut: Cut


@dataclass(frozen=True, slots=True)
class Truncation:
    """Where to truncate: ``cut``, which holds ``size`` bytes of the stream before it; ``recorded`` when it is a
    reference of the retention set (then it and the older references can be dropped)."""

    cut: Cut
    size: int
    recorded: StreamCutReference | None = None


def consumption_truncation(
    policy: RetentionPolicy,
    recorded: Sequence[Recorded],
    lower: Cut,
    lower_size: int,
    now_ms: int,
    current_size_bytes: int,
    truncated_size_bytes: int = 0,
) -> Truncation | None:
    """Where to truncate a stream with subscribers (PDP-47, Pravega's ``truncateInternal``): at ``lower`` (the
    subscribers' lower bound, ``lower_size`` bytes into the stream), but never keeping less than the policy's
    minimum (then at the newest reference that keeps it, or before ``lower`` if that one is past it) and, with a
    maximum (``retention_max`` > 0), never keeping more (a lagging subscriber then loses what is past it).
    None: do not truncate now. Only cuts past the current truncation (``truncated_size_bytes``) are chosen."""
    candidates = sorted(
        (r for r in recorded if r.reference.recording_size_bytes > truncated_size_bytes),
        key=lambda r: r.reference.recording_size_bytes,
    )
    at_lower = Truncation(lower, lower_size)
    fallback = _of(next((r for r in reversed(candidates) if _at_or_before(r, lower)), None))
    minimum = truncation_point(policy, [r.reference for r in candidates], now_ms, current_size_bytes)
    min_ref = next((r for r in candidates if r.reference == minimum), None)
    if policy.retention_type == RetentionType.TIME:
        if min_ref is None:
            return None
        order = compare(min_ref.cut, lower)
        if order is Order.BEFORE:
            return _of(min_ref)  # the subscribers are past what the minimum keeps: the minimum decides
        if order is Order.OVERLAPS:
            return fallback
        if policy.retention_max <= 0:
            return _forward(at_lower, truncated_size_bytes)
        aged = [r for r in candidates if now_ms - r.reference.recording_time_ms >= policy.retention_max]
        if not aged or compare(lower, aged[-1].cut) is Order.EQUAL_OR_AFTER:
            return _forward(at_lower, truncated_size_bytes)
        return _of(aged[-1])  # a lagging subscriber: keep no more than the maximum
    retained = current_size_bytes - lower_size
    if retained < policy.retention_param:
        if min_ref is not None and compare(min_ref.cut, lower) is Order.BEFORE:
            return _of(min_ref)
        return fallback
    if policy.retention_max <= 0 or retained <= policy.retention_max:
        return _forward(at_lower, truncated_size_bytes)
    within = [
        r
        for r in candidates
        if policy.retention_param <= current_size_bytes - r.reference.recording_size_bytes <= policy.retention_max
    ]
    return _of(within[0]) if within else _forward(at_lower, truncated_size_bytes)


def _at_or_before(recorded: Recorded, lower: Cut) -> bool:
    return compare(recorded.cut, lower) is Order.BEFORE or recorded.cut == lower


def _of(recorded: Recorded | None) -> Truncation | None:
    if recorded is None:
        return None
    return Truncation(recorded.cut, recorded.reference.recording_size_bytes, recorded.reference)


def _forward(truncation: Truncation, truncated_size_bytes: int) -> Truncation | None:
    return truncation if truncation.size > truncated_size_bytes else None
