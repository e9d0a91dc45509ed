"""Which recorded stream cut a retention policy truncates at (Pravega's retention from a retention set).

The controller records, every retention period, the stream's tail cut with the time it was recorded and
the stream's size up to it (a *reference*). Truncating at a reference discards everything before it.

- **By time** (keep at least ``min`` ms, at most ``max`` ms): truncate at the newest reference recorded
  at least ``min`` ms ago. ``max`` only matters when it is smaller than what ``min`` keeps, which it never
  is (``max >= min``), so it bounds nothing further here: the newest old-enough cut already keeps the
  least data that still honours ``min``.
- **By size** (keep at least ``min`` bytes): truncate at the newest reference whose distance to the
  current size is at least ``min`` bytes.

Only references after the current truncation point are candidates; none qualifying means "do not
truncate now". The chosen reference and every older one can then be dropped from the retention set.
"""

from __future__ import annotations

from collections.abc import Sequence

from controller.metadata.records import StreamCutReference
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
