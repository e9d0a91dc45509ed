"""What the table maintainer knows of each table after each pass (``segstore admin tables``, the metrics).

Definitions (one segment store's view: the segments of the stream in the containers running here):

* **snapshot** (``snapshot_id``, ``committed_at_ms``): the table's current snapshot as of this store's last good
  pass (committed by this store or another); None before the table has one.
* **data files**: the data files of that snapshot, as this store last read or committed them.
* **lag**: the chunk files of the stream's segments that are final in Tier-2 (journaled: they never change) and
  not in the table's current snapshot as this store knows it, nor skipped (chunks of format 1 are never
  registered): ``lag_chunks`` of them, ``lag_bytes`` segment bytes (the chunks' lengths, not their Parquet
  sizes), and ``oldest_unregistered_ms``, the ingestion time of the earliest event among them (from the chunk
  metadata; for a chunk without recorded times, when this maintainer first saw it), so the lag's age is *how
  long ago the oldest event that is final but not in the table was acknowledged*. Appends not yet flushed to
  Tier-2 (at most ``flush_max_age_ms`` old while the writer keeps up) are not lag: they are the storage writer's
  backlog (``segstore_tier2_backlog_bytes``). A healthy table's lag is 0 right after each pass and at most one
  commit interval of chunks between passes.
* **failures**: consecutive failed passes (0 after a good one), ``failed_passes`` all of them since start,
  ``last_error`` the last failure while failing ("" once a pass succeeds).

Computed in the maintainer's worker process after each pass (:mod:`.worker`) from what the pass collected on the
event loop and the sync's in-memory list of the table's files: a set difference, no catalog or file IO; tables not
due for an attempt (backing off a failing catalog) are measured too, so their lag keeps growing in the view. A
pass that never ends (the worker process died or hung: :mod:`.worker_process`) counts as a failed pass of every
table it was for, the rest of their status as before it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True, slots=True)
class TableStatus:
    """One table's state after a pass (see the module docstring for the definitions)."""

    scope: str
    stream: str
    snapshot_id: int | None = None
    committed_at_ms: int | None = None
    data_files: int = 0
    lag_bytes: int = 0
    lag_chunks: int = 0
    oldest_unregistered_ms: int | None = None
    last_pass_at_ms: int = 0
    failures: int = 0
    failed_passes: int = 0
    last_error: str = ""

    @property
    def name(self) -> str:
        """``scope/stream``."""
        return f"{self.scope}/{self.stream}"

    def failed(self, error: str, now_ms: int) -> TableStatus:
        """This status after one more failed pass at ``now_ms`` (``error``: what failed, one line)."""
        return replace(self, failures=self.failures + 1, failed_passes=self.failed_passes + 1, last_error=error,
                       last_pass_at_ms=now_ms)  # fmt: skip

    def lag_age_ms(self, now_ms: int) -> int:
        """How long ago the oldest event final in Tier-2 but not in the table was ingested (0: no lag)."""
        if self.oldest_unregistered_ms is None:
            return 0
        return max(now_ms - self.oldest_unregistered_ms, 0)


__all__ = ["TableStatus"]
