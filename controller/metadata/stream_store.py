"""The controller's stream metadata store over the coordination port (ZooKeeper or in-memory).

Invariants (read before using it from a workflow):

- **Atomicity.** Every method changes at most one node per write, with a create or a versioned
  compare-and-set; nothing spans two nodes atomically. A multi-step change (create, scale, rolling
  transaction, truncation, configuration update, commit batch, reader group update, delete) is a
  sequence of such writes whose *intent* is stored first (state record, epoch transition record,
  truncation record with ``updating``, committing transactions record, configuration record with
  ``updating``, reader group record with ``updating``), so a controller that dies midway resumes
  from what is in the store by calling the same step again.
- **Idempotency.** Every step is safe to repeat: creates are create-if-absent (an existing
  immutable record must be identical, else :class:`InconsistentMetadataError`), moves of
  ``current`` only go forward, merges (sealed sizes, history, retention set) skip what is there,
  completions are no-ops once done, and a request identical to the one in progress returns it.
- **Conflicts.** Mutable records are read with their version. Updates that are correct on any
  version (merges, forward moves, completions, seal/ping of a transaction) re-read and retry
  internally; updates that depend on what the caller saw take or check a version and raise
  :class:`WriteConflictError` (retriable: re-read, re-decide). A different operation of the same
  kind in progress raises :class:`OperationConflictError` / :class:`ScaleConflictError` and
  changes nothing.
- **Ordering.** Within one scale: ``submit_scale`` -> ``start_scale`` -> ``scale_create_new_epoch``
  -> (segment store work) -> ``record_sealed_sizes`` -> ``scale_complete``. Within a rolling
  transaction: ``start_commit_batch`` -> ``start_rolling_txn`` -> ``rolling_txn_create_duplicate_epochs``
  -> ``complete_rolling_txn`` -> ``complete_commit_batch``. ``current`` (the active epoch) moves
  only after the epoch record it points to exists; epoch records are never changed once written,
  and at most two epochs beyond ``current`` exist at any time. Transactions commit in the order of
  their ``commit_order`` (taken when sealed for commit), lowest epoch first.
- **State.** The stream state is a barrier the workflows use (one operation kind at a time);
  transitions follow :func:`~controller.metadata.records.is_transition_allowed` (Pravega's
  ``State``). The store itself checks state only where Pravega does (no scale or new transaction
  on a sealing/sealed stream).
- **Caching.** Only immutable epoch records are cached, keyed by the stream's incarnation id, so a
  deleted and re-created stream never sees its predecessor's epochs. Everything else is re-read.
- **Errors.** Typed errors of :mod:`controller.metadata.errors` name the scope and object;
  coordination outages (``CoordinationUnavailableError``, retriable, outcome unknown) propagate.
"""

from __future__ import annotations

from controller.metadata.reader_groups import ReaderGroupOps
from controller.metadata.scopes import ScopeOps
from controller.metadata.streams import StreamOps
from controller.metadata.transactions import TxnOps
from controller.metadata.truncation import TruncationOps
from controller.metadata.writers import WriterOps


class StreamMetadataStore(StreamOps, TruncationOps, TxnOps, ReaderGroupOps, ScopeOps, WriterOps):
    """Scopes, streams, epochs and segments, scale, truncation, retention, transactions, reader
    groups and writer marks, stored under ``root`` of a coordination store.

    ``StreamMetadataStore(coordination, root="/controller", config=..., clock_ms=...)``: the same
    class is the "ZooKeeper implementation" (over ``KazooCoordinationStore``) and the "in-memory
    implementation" (over ``MemoryCoordinationStore``). ``clock_ms`` gives wall-clock milliseconds
    for transaction leases and completion times (injectable for tests). Every method is a
    coroutine; see the module docstring for atomicity, idempotency and ordering.
    """
