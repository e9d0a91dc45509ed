"""Tier-1 on NATS JetStream streams, replicated by JetStream's Raft, fenced by epochs: the protocol and its claims.

The code: :mod:`.log` (the log), :mod:`.records` (what the stream holds and which entries count),
:mod:`.refence` (what a re-fence reads back), :mod:`.stream_setup`, :mod:`.metadata`, :mod:`.client`
(NATS), :mod:`.factory`, :mod:`.sync_check`, :mod:`.nats_server` (the servers segstore starts).

A log is one JetStream stream (file storage, ``replicas`` copies, one subject) holding
the records of :mod:`.records`, plus one metadata record in the coordination
store (:mod:`.metadata`: epoch, owner, truncation point) changed only by
versioned compare-and-set. No lease and no shared disk: the stream is the only copy of
the data, on a quorum of NATS servers.

Writing. ``append`` queues the entry and returns a future. A sender task publishes the
entries in call order, pipelined (no wait between them), each as the data record
``(epoch e, index i)`` with ``Nats-Expected-Last-Sequence`` = the sequence the owner's
previous record got (its fence record for ``i = 0``), so the ``i``-th entry is stored at
the fence's sequence + ``i`` + 1 or not at all. JetStream answers each publish on the
log's reply subject once a quorum of the stream's replicas stored it; answers are
matched to entries by sequence, and futures complete in call order: an entry is
acknowledged only after JetStream acknowledged it and every earlier entry. The first
rejection of the "no leader" or "wrong last sequence" kind, or an answer missing for
``refence_after_s``, makes the owner fence the log again in place (see "Re-fencing"). Any
other rejection, or an entry unacknowledged ``ack_timeout_s`` after it was appended, ends
the instance: every unacknowledged entry fails, with :class:`DataLogWriterNotPrimaryError`
if a linearized read of the metadata shows a newer epoch, else :class:`DataLogWriteError` /
:class:`DataLogNotAvailableError`. The container then restarts on a new instance, which
recovers whatever was stored.

Fencing. *New owner* ``initialize``: (a) reads the metadata and CASes it to epoch
``e+1`` with its owner id (a brand-new log: creates the stream, then the metadata at
epoch 1); (b) publishes the fence record of ``e+1`` and learns its sequence ``F`` from
JetStream's acknowledgement; (c) CASes ``acknowledged = F`` into the metadata over the
version (a) wrote, which succeeds only if the record still names ``e+1`` and us (else
:class:`DataLogWriterNotPrimaryError`): ZooKeeper linearizes it like the ``sync`` + ``get``
check it stands for. Recovery (``read``) then reads the stream from after the truncation
point up to ``F``.

Claim: every entry an older owner acknowledged is read by the new owner. Let the old
owner have epoch ``e`` and fence sequence ``Fe``. It acknowledged an entry only after
JetStream acknowledged it and every earlier one; each was stored only right after its
predecessor, so its acknowledged entries occupy ``Fe+1 .. Fe+m`` with no foreign record
among them. Its step (c) read epoch ``e`` and so is linearized before the CAS of (a)
(ZooKeeper is linearizable for writes, and ``sync`` + ``get`` for this read), which
precedes the new fence's publish: the new fence is not before ``Fe``, is foreign to the
old run, and so lies after ``Fe+m``: the new owner reads up to ``F`` > ``Fe+m``. The
records of the old run are accepted by :class:`~.jetstream_records.RecordFilter`: their
indexes follow one another, and no fence of a higher epoch precedes them (an owner of a
higher epoch CASed after the old owner's check (c), which came after ``Fe`` was stored,
so its fence follows ``Fe`` and, being foreign to the run, follows ``Fe+m``).

Claim: an older owner acknowledges nothing once the new fence is stored. Its next entry
expects the sequence of its own previous record, which the fence now follows: rejected,
and every later entry fails with it (completion in call order). A pipelined entry after
the rejected one may still be stored (its expected sequence now matches the fence's);
that record has the old epoch after a higher fence, so readers drop it, and it was
never acknowledged. The same holds within one owner's run: once one of its records is
rejected, a later one that realigns breaks the run of indexes and is dropped with every
later record of that epoch. An owner that published its fence after a higher one fails
its check (c) and acknowledges nothing; its fence (lower than the highest seen) is
ignored. Two initializers cannot both pass (a): the CAS admits one per version; an
ambiguous CAS (connection loss) is settled by reading the record back (it names the
owner).

Why the fence carries no expected last sequence: its position needs no condition (the
bound ``F`` is whatever sequence it got), and with one a zombie writing continuously
could make it lose every race. A fence published twice (an acknowledgement lost, then
a retry) is harmless: the second, not higher than the first, is ignored.

Durability. JetStream acknowledges a publish once a quorum of the stream's replicas has
it in its Raft log. Servers segstore starts run ``sync_interval: always``: that log is
fsync'd before the acknowledgement, meant to survive a power loss of every server (not
tested here; and Jepsen, NATS 2.12.1, lost writes to corrupted or truncated files on a
minority, which fsync does not prevent). With the NATS default (fsync every 2 minutes) it may be in memory
only: a power loss of a quorum, or an OS crash of one server with a pause or partition,
can lose acknowledged appends; the factory warns of such servers given their monitoring
endpoints (:mod:`.sync_check`).

Truncation CASes the new point into the metadata first (so a fenced owner cannot
truncate), then purges the stream below it; a purge that fails is redone by the next.
Recovery refuses a stream that is missing, starts after its first message, ends before
what the log knows was written, or skips a sequence: :class:`DataLogCorruptedError`.

Rollback. The metadata keeps ``acknowledged`` (``H``): a sequence JetStream acknowledged,
written only at the updates the log makes anyway: the fence ``F`` at (c), and at each
truncation the record of the last entry this owner had acknowledged by then (never a
sequence not yet acknowledged, so an intact stream always reaches it). ``initialize``
refuses, with :class:`DataLogCorruptedError` naming the log (``container-<id>``), the
stream and both sequences, a stream whose last sequence is below ``H`` (checked before
its fence is published; a short answer is read again for ``request_timeout_s``, since a
leader elected moments ago may not have applied every committed record yet:
:func:`.stream_setup.settled_state`), or whose new fence lands at or below ``H``. Covered: a stream
that comes back shorter than the previous owner's fence or than its last truncation's
mark (every NATS server lost its tail, a store restored from an older copy). A re-fence
records the owner's last acknowledged record too, and checks it (see "Re-fencing"): a
rollback under a running owner is caught when its next append is refused or unanswered
(every owner whose stream lost acknowledged records re-fences: its next record expects a
sequence the stream no longer reaches). Not covered: a loss confined to the entries
acknowledged after the last metadata update of the previous owner when that owner died
without a re-fence (a kill -9 of its process at the time of the rollback: at most what it
wrote since its last truncation, fence or re-fence); those are missed, as before. A
record without ``acknowledged`` (written by an older version) means unknown: no check, and
the next fence records one.

Re-fencing. An owner whose appends went unanswered for ``refence_after_s`` (a NATS server
lost with our in-flight publishes, a stream leader being elected) or were refused with "no
leader" or "wrong last sequence" (a record before them was lost) stops publishing, and:
(a') CASes epoch ``e+1`` over the metadata version it holds (failing means someone else
took the log: :class:`DataLogWriterNotPrimaryError` fails everything pending, as a fenced
owner), with ``acknowledged`` raised to the record of its last acknowledged entry ``A``;
(b') reads the stream's last sequence and refuses (:class:`DataLogCorruptedError`, the log
fails and the container's next owner refuses it too: the mark is in the metadata) a stream
that ends before ``A`` (it was rolled back under the running owner: a quorum of NATS
servers restored from an older copy or lost their tails), then publishes the fence of
``e+1``, retrying while a leader is elected, learns its sequence ``F`` and refuses ``F``
at or below ``A`` the same way; (c') CASes ``acknowledged = F``, as step (c). Records of epoch ``e``
stored after ``F`` are a fenced zombie's to every reader, so the records between its last
acknowledged one and ``F`` are final: it reads them back and acknowledges the pending
entries they hold in an unbroken run of its indexes (:func:`.refence.stored_run`: exactly
what readers accept), then publishes every other pending entry again, in call order, as
epoch ``e+1`` from index 0 after ``F``. Answers to epoch ``e``'s publishes are told apart
by their reply subject (it names the epoch) and ignored. Appends made meanwhile wait in
order. Both claims above hold as for a takeover by a new owner, which this is, by the same
process: acknowledged entries lie before ``F`` in ``e``'s run or after it in ``e+1``'s.
The cost is the stream's leader election plus three round trips, instead of a container
restart; ``ack_timeout_s`` still bounds an append's wait while the log is open (the
re-fence's own steps are bounded by ``stream_ready_timeout_s`` and ``request_timeout_s``,
a step that fails fails the log, and ``refence_timeout_s`` bounds the whole re-fence,
whatever step hangs).
"""
