"""The JetStream log: Tier-1 on NATS JetStream streams, replicated by JetStream's Raft, fenced by epochs.

A log is one JetStream stream (file storage, ``replicas`` copies, one subject) holding
the records of :mod:`.jetstream_records`, plus one metadata record in the coordination
store (:mod:`.jetstream_metadata`: epoch, owner, truncation point) changed only by
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
rejection (wrong last sequence: the stream moved under us) or an answer missing for
``ack_timeout_s`` ends the instance: every unacknowledged entry fails, with
:class:`DataLogWriterNotPrimaryError` if a linearized read of the metadata shows a newer
epoch, else :class:`DataLogWriteError` / :class:`DataLogNotAvailableError`. The container
then restarts on a new instance, which recovers whatever was stored.

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
its fence is published), or whose new fence lands at or below ``H``. Covered: a stream
that comes back shorter than the previous owner's fence or than its last truncation's
mark (every NATS server lost its tail, a store restored from an older copy). Not covered:
a loss confined to the entries acknowledged after the last metadata update of the
previous owner (at most what it wrote since its last truncation, or since its open);
those are missed, as before. A record without ``acknowledged`` (written by an older
version) means unknown: no check, and the next fence records one.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import os
import uuid
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from segment_store.tier1.jetstream.client import (
    STATUS,
    JetStreamClient,
    JetStreamError,
    JetStreamRequestError,
    JetStreamUnavailableError,
    StoredMessage,
    StreamMissingError,
    parse_ack,
)
from segment_store.tier1.jetstream.config import JetStreamLogConfig
from segment_store.tier1.jetstream.metadata import JetStreamLogMetadata
from segment_store.tier1.jetstream.records import (
    LENGTH_BYTES,
    RecordFilter,
    data_headers,
    fence_headers,
    group_body,
    parse_record,
)
from segment_store.tier1.jetstream.stream_setup import create_log_stream, while_electing
from segment_store.tier1.log import (
    MAX_ENTRY_ID,
    DataLogClosedError,
    DataLogCorruptedError,
    DataLogInitializationError,
    DataLogNotAvailableError,
    DataLogNotInitializedError,
    DataLogWriteError,
    DataLogWriterNotPrimaryError,
    DurableDataLogError,
    LogAddress,
    ReadItem,
    WriteTooLongError,
    complete_append,
    with_cause,
)
from segment_store.tier1.metadata_keeper import MetadataKeeper
from segment_store.tier1.owner_identity import machine_identity
from segstore_shared.coordination.store import CoordinationError, CoordinationStore, CoordinationUnavailableError

_log = logging.getLogger(__name__)
_T = TypeVar("_T")
MAX_GROUP = 4096
"""Most appends in one record (a group of tiny appends is bounded by count, not only by bytes)."""


class _State(enum.Enum):
    NEW = "new"
    INITIALIZING = "initializing"
    OPEN = "open"
    FAILING = "failing"  # an append was rejected; finding out why before failing everything
    FENCED = "fenced"
    FAILED = "failed"
    CLOSED = "closed"


@dataclass(slots=True)
class _Append:
    data: bytes
    future: asyncio.Future[LogAddress]
    accepted_at: float
    address: LogAddress | None = None
    stored: bool = False
    error: JetStreamError | None = None


def _settle(item: _Append, error: BaseException | None) -> None:
    complete_append(item.future, item.address, error)


class JetStreamLog:
    """``DurableDataLog`` over one JetStream stream and a coordination store (see module docstring)."""

    def __init__(
        self, name: str, config: JetStreamLogConfig, store: CoordinationStore, client: JetStreamClient
    ) -> None:
        if not name or not all(c.isalnum() or c in "-_" for c in name):
            raise ValueError(f"invalid log name {name!r}")
        self.name = name
        self._config = config
        self._client = client
        self._stream = config.stream_name(name)
        self._subject = config.subject(name)
        self._owner = f"{machine_identity()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"
        self._keeper = MetadataKeeper(
            store,
            f"{config.metadata_root}/{name}",
            self._owner,
            JetStreamLogMetadata,
            timeout_s=config.coordination_timeout_s,
            retry_delay_s=config.coordination_retry_delay_s,
        )
        self._state = _State.NEW
        self._failure: DurableDataLogError | None = None
        self._epoch = 0
        self._fence_seq = 0  # where this instance's fence record was stored
        self._last_seq = 0  # sequence of the last record this instance published (or its fence)
        self._next_index = 0
        self._queue: deque[_Append] = deque()  # accepted, not yet published
        self._outstanding: deque[_Append] = deque()  # accepted, not yet completed; call order
        self._published: dict[int, list[_Append]] = {}  # by the sequence their record must get; awaiting answers
        self._acked: LogAddress | None = None
        self._recovered: LogAddress | None = None  # last entry ``read`` found before this instance's own
        self._inbox = ""
        self._subscription: Subscription | None = None
        self._work = asyncio.Event()
        self._metadata_lock = asyncio.Lock()
        self._tasks: list[asyncio.Task[None]] = []

    # -- properties -----------------------------------------------------------------------

    @property
    def epoch(self) -> int:
        if self._epoch == 0:
            raise DataLogNotInitializedError(f"log {self.name} is not initialized")
        return self._epoch

    @property
    def max_append_length(self) -> int:
        return self._config.max_append_length_bytes

    @property
    def stream(self) -> str:
        """The JetStream stream holding this log's records."""
        return self._stream

    @property
    def metadata(self) -> JetStreamLogMetadata:
        """The metadata as this instance last wrote it (for tools and tests)."""
        return self._keeper.metadata

    # -- initialize -----------------------------------------------------------------------

    async def initialize(self, timeout: float = 60.0) -> None:
        """Take over (steps a-c of the module docstring) and open for appends."""
        if self._state is not _State.NEW:
            raise DataLogInitializationError(f"log {self.name}: initialize may be called once per instance")
        self._state = _State.INITIALIZING
        try:
            async with asyncio.timeout(timeout):
                await self._acquire()
        except BaseException as exc:
            self._state = _State.FAILED
            await self._unsubscribe()
            if isinstance(exc, TimeoutError):
                raise DataLogNotAvailableError(f"log {self.name}: initialize took over {timeout}s") from exc
            if isinstance(exc, CoordinationUnavailableError):
                raise DataLogNotAvailableError(f"log {self.name}: coordination unavailable") from exc
            if isinstance(exc, JetStreamUnavailableError):
                raise DataLogNotAvailableError(f"log {self.name}: JetStream unavailable: {exc}") from exc
            if isinstance(exc, StreamMissingError):
                raise DataLogCorruptedError(
                    f"log {self.name}: its JetStream stream {self._stream} is missing although the log exists "
                    f"(epoch {self._keeper.metadata.epoch} in the coordination store); its data is lost"
                ) from exc
            if isinstance(exc, JetStreamRequestError | CoordinationError):
                raise DataLogInitializationError(f"log {self.name}: {exc}") from exc
            raise
        self._state = _State.OPEN
        self._tasks = [
            asyncio.create_task(self._send_loop(), name=f"tier1-send-{self.name}"),
            asyncio.create_task(self._watch_loop(), name=f"tier1-watch-{self.name}"),
        ]
        _log.info("log %s initialized at epoch %d (stream %s, fence at %d)", self.name, self._epoch, self._stream,
                  self._fence_seq)  # fmt: skip

    async def _acquire(self) -> None:
        keeper = self._keeper
        previous = await keeper.acquire(before_create=self._create_stream)  # (a)
        self._epoch = keeper.metadata.epoch
        if previous is not None:
            state = await self._while_electing(lambda: self._client.stream_state(self._stream))
            if state.replicas != self._config.replicas:
                _log.warning("log %s: stream %s has %d replicas, the configuration asks for %d (kept as it is)",
                             self.name, self._stream, state.replicas, self._config.replicas)  # fmt: skip
            self._check_not_rolled_back(state.last_seq, "ends at")
        self._inbox = self._client.new_inbox()
        self._subscription = await self._client.subscribe(f"{self._inbox}.*", self._on_answer)
        fence = await self._publish_fence()  # (b)
        self._check_not_rolled_back(fence - 1, "stored our fence right after")
        # (c): a CAS over the version (a) wrote, so it fails if anyone took the epoch since; it records the fence
        await keeper.persist(keeper.metadata.acknowledged_up_to(fence))
        self._fence_seq = self._last_seq = fence

    def _check_not_rolled_back(self, last_seq: int, found: str) -> None:
        """Refuse a stream that ends before the sequence the metadata records as acknowledged (see "Rollback")."""
        recorded = self._keeper.metadata.acknowledged
        if recorded is not None and last_seq < recorded:
            raise DataLogCorruptedError(
                f"log {self.name}: stream {self._stream} {found} sequence {last_seq}, but sequence {recorded} "
                f"was acknowledged (recorded in the coordination store); the stream was rolled back (restored "
                f"from an older copy, or its servers lost their tails) and acknowledged entries may be lost"
            )

    async def _create_stream(self) -> None:
        await create_log_stream(self._client, self._config, self.name, self._stream)

    async def _publish_fence(self) -> int:
        # no leader yet, or the answer was lost: publishing again is harmless (a second fence is ignored)
        return await self._while_electing(
            lambda: self._client.publish_and_wait(self._subject, b"", fence_headers(self._epoch))
        )

    async def _while_electing(self, call: Callable[[], Awaitable[_T]]) -> _T:
        return await while_electing(self._config, call)

    # -- appends --------------------------------------------------------------------------

    def _check_open(self) -> None:
        state = self._state
        if state is _State.OPEN:
            return
        if state in (_State.NEW, _State.INITIALIZING):
            raise DataLogNotInitializedError(f"log {self.name} is not initialized")
        if state is _State.FENCED:
            raise DataLogWriterNotPrimaryError(str(self._failure))
        if state is _State.FAILING:
            raise DataLogNotAvailableError(f"log {self.name} is failing")
        if state is _State.FAILED:
            raise DataLogClosedError(f"log {self.name} failed: {self._failure}") from self._failure
        raise DataLogClosedError(f"log {self.name} is closed")

    def append(self, data: bytes | bytearray) -> asyncio.Future[LogAddress]:
        """Queue an entry; the future completes once JetStream stored it and every earlier entry.

        Order and failures as ``DurableDataLog.append``: call order = log order = completion
        order; a failure fails every later accepted append.
        """
        if self._state is not _State.FAILING:
            self._check_open()
        if len(data) > self._config.max_append_length_bytes:
            raise WriteTooLongError(len(data), self._config.max_append_length_bytes)
        loop = asyncio.get_running_loop()
        item = _Append(data if isinstance(data, bytes) else bytes(data), loop.create_future(), loop.time())
        self._outstanding.append(item)
        if self._state is _State.OPEN:
            self._queue.append(item)
            self._work.set()
        # FAILING: the entry is never published; the failure being established fails it too
        return item.future

    async def _send_loop(self) -> None:
        client, subject, epoch, inbox = self._client, self._subject, self._epoch, self._inbox
        try:
            while True:
                while not self._queue:
                    if self._state is not _State.OPEN:
                        return
                    self._work.clear()
                    await self._work.wait()
                if self._state is not _State.OPEN:
                    return
                group = self._take_group()
                if self._next_index + len(group) - 1 > MAX_ENTRY_ID:
                    raise DataLogWriteError(f"log {self.name}: epoch {epoch} wrote {MAX_ENTRY_ID + 1} entries; reopen")
                previous = self._last_seq
                sequence = previous + 1
                first = self._next_index
                for offset, item in enumerate(group):
                    item.address = LogAddress(ledger_id=sequence, entry_id=first + offset, epoch=epoch)
                self._published[sequence] = group
                self._last_seq = sequence
                self._next_index += len(group)
                body = group_body([item.data for item in group])
                headers = data_headers(epoch, first, previous, len(group))
                await client.publish(subject, body, f"{inbox}.{sequence}", headers)
        except DurableDataLogError as exc:
            self._fail(exc)
        except JetStreamUnavailableError as exc:
            self._fail(with_cause(DataLogNotAvailableError(f"log {self.name}: {exc}"), exc))
        except Exception as exc:
            self._fail(with_cause(DataLogWriteError(f"log {self.name}: internal error: {exc!r}"), exc))
            raise

    def _take_group(self) -> list[_Append]:
        """The queued appends that go out as the next record (group commit): at least one, then as many as fit
        in one record of ``max_append_length_bytes`` (each costs its length prefix)."""
        queue = self._queue
        group = [queue.popleft()]
        size = len(group[0].data) + LENGTH_BYTES
        limit = self._config.max_append_length_bytes
        while queue and len(group) < MAX_GROUP:
            size += len(queue[0].data) + LENGTH_BYTES
            if size > limit:
                break
            group.append(queue.popleft())
        return group

    async def _on_answer(self, msg: Msg) -> None:
        """JetStream's answer to one published entry (any order); completes entries at the head in call order."""
        try:
            sequence = int(msg.subject.rsplit(".", 1)[1])
        except ValueError:
            return
        group = self._published.pop(sequence, None)
        if group is None:
            return
        error: JetStreamError | None = None
        headers = msg.headers
        if headers and STATUS in headers:  # e.g. 503: no stream leader to store it
            error = JetStreamUnavailableError(f"record {sequence}: status {headers[STATUS]}")
        else:
            try:
                stored = parse_ack(msg.data)
            except JetStreamRequestError as exc:
                error = exc
            else:
                if stored != sequence:
                    error = JetStreamRequestError(f"record stored at {stored}, not at {sequence}")
        for item in group:
            item.stored, item.error = error is None, error
        self._complete_head()

    def _complete_head(self) -> None:
        outstanding = self._outstanding
        while outstanding and self._state is _State.OPEN:
            head = outstanding[0]
            if head.stored:
                outstanding.popleft()
                assert head.address is not None
                self._acked = head.address
                _settle(head, None)
            elif head.error is not None:
                self._begin_failure(head.error)
            else:
                return

    def _begin_failure(self, cause: JetStreamError) -> None:
        """Stop sending; find out (metadata read) whether we were fenced; then fail every unacknowledged entry."""
        self._state = _State.FAILING
        self._work.set()
        self._tasks.append(asyncio.create_task(self._diagnose(cause), name=f"tier1-diagnose-{self.name}"))

    async def _diagnose(self, cause: JetStreamError) -> None:
        error: DurableDataLogError
        if isinstance(cause, JetStreamUnavailableError):
            error = DataLogNotAvailableError(f"log {self.name}: JetStream did not store an entry: {cause}")
        else:
            try:
                await self._keeper.check_owner(self._epoch)
            except DurableDataLogError as exc:
                error = exc
            except CoordinationError as exc:
                error = DataLogNotAvailableError(f"log {self.name}: coordination failed: {exc}")
            else:
                error = DataLogWriteError(f"log {self.name}: stream {self._stream} refused an entry: {cause}")
        self._fail(with_cause(error, cause))

    async def _watch_loop(self) -> None:
        """Fail the log when the oldest unacknowledged entry waits longer than ``ack_timeout_s``."""
        loop = asyncio.get_running_loop()
        timeout = self._config.ack_timeout_s
        while self._state is _State.OPEN:
            if self._outstanding and loop.time() - self._outstanding[0].accepted_at > timeout:
                self._fail(
                    DataLogNotAvailableError(
                        f"log {self.name}: no acknowledgement from JetStream within {timeout}s (connected to "
                        f"{self._client.connected_url}); NATS or the quorum of stream {self._stream} is unavailable"
                    )
                )
                return
            await asyncio.sleep(min(0.5, timeout / 4))

    def _fail(self, error: DurableDataLogError) -> None:
        """Fail every accepted, unacknowledged append (in call order) and stop accepting."""
        if self._state in (_State.OPEN, _State.FAILING):
            self._state = _State.FENCED if isinstance(error, DataLogWriterNotPrimaryError) else _State.FAILED
            self._failure = error
            _log.warning("log %s stops at epoch %d: %s", self.name, self._epoch, error)
        self._queue.clear()
        self._published.clear()
        while self._outstanding:
            _settle(self._outstanding.popleft(), error)
        self._work.set()

    # -- read, truncate, close ------------------------------------------------------------

    async def read(self) -> AsyncIterator[ReadItem]:
        """Entries after the truncation point, in order, up to this instance's fence and then its own
        acknowledged entries. Raises DataLogCorruptedError, DataLogNotAvailableError."""
        if self._state in (_State.NEW, _State.INITIALIZING):
            raise DataLogNotInitializedError(f"log {self.name} is not initialized")
        if self._state is _State.CLOSED:
            raise DataLogClosedError(f"log {self.name} is closed")
        truncation = self._keeper.metadata.truncation
        start = truncation.ledger_id if truncation is not None else 1  # the record holding it may be kept
        end = max(self._fence_seq, self._acked.ledger_id if self._acked is not None else 0)
        records = RecordFilter(truncation)
        try:
            state = await self._while_electing(lambda: self._client.stream_state(self._stream))
        except StreamMissingError as exc:
            raise DataLogCorruptedError(f"log {self.name}: its stream {self._stream} is missing") from exc
        except JetStreamError as exc:
            raise DataLogNotAvailableError(f"log {self.name}: cannot read stream {self._stream}: {exc}") from exc
        if state.first_seq > start:
            raise DataLogCorruptedError(
                f"log {self.name}: stream {self._stream} starts at {state.first_seq}, but records from {start} on "
                f"were never truncated by the log (purged by someone else?)"
            )
        if state.last_seq < end:
            raise DataLogCorruptedError(
                f"log {self.name}: stream {self._stream} ends at {state.last_seq}, but the log wrote up to {end}"
            )
        own = self._acked
        sequence = start
        while sequence <= end:
            batch = await self._read_batch(sequence, end)
            for message in batch:
                if message.sequence != sequence:
                    raise DataLogCorruptedError(f"log {self.name}: record {sequence} of {self._stream} is missing")
                record = parse_record(message.sequence, message.headers, message.data)
                for address, payload in records.accept(record):
                    if sequence <= self._fence_seq:
                        self._recovered = address
                    yield ReadItem(address, payload)
                sequence += 1
            if own is not self._acked:  # appended while reading: readable up to the last acknowledged entry
                own = self._acked
                end = max(end, own.ledger_id if own is not None else 0)

    async def _read_batch(self, first: int, last: int) -> list[StoredMessage]:
        """The next messages from ``first``; a replica that is behind answers with fewer: ask again."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._config.request_timeout_s
        while True:
            try:
                batch = await self._client.read_range(self._stream, first, last, self._config.read_batch_bytes)
            except JetStreamUnavailableError as exc:
                if loop.time() >= deadline:
                    raise DataLogNotAvailableError(f"log {self.name}: reading {self._stream}: {exc}") from exc
                batch = []
            except JetStreamRequestError as exc:
                raise DataLogNotAvailableError(f"log {self.name}: reading {self._stream}: {exc}") from exc
            if batch:
                return batch
            if loop.time() >= deadline:
                raise DataLogNotAvailableError(f"log {self.name}: no replica of {self._stream} returned record {first}")
            await asyncio.sleep(0.05)

    def _last_known(self) -> LogAddress | None:
        candidates = [address for address in (self._recovered, self._acked) if address is not None]
        return max(candidates) if candidates else None

    async def truncate(self, upto: LogAddress) -> None:
        """CAS the new truncation point into the metadata, then purge the stream below it."""
        self._check_open()
        last = self._last_known()
        if (last is None and upto.ledger_id >= self._fence_seq) or (last is not None and upto > last):
            raise ValueError(f"log {self.name}: cannot truncate at {upto}, beyond the last entry {last}")
        async with self._metadata_lock:
            updated = self._keeper.metadata.truncated(upto)
            if updated == self._keeper.metadata:
                return
            if self._acked is not None:  # JetStream acknowledged it: the stream must keep reaching it
                updated = updated.acknowledged_up_to(self._acked.ledger_id)
            try:
                await self._keeper.persist(updated)
            except DurableDataLogError as exc:
                self._fail(exc)  # the metadata version we hold is no longer trustworthy
                raise
            try:  # the record holding ``upto`` stays (it may hold later entries); readers skip its first ones
                await self._client.purge_below(self._stream, upto.ledger_id)
            except StreamMissingError as exc:
                raise DataLogCorruptedError(f"log {self.name}: its stream {self._stream} is missing") from exc
            except JetStreamError as exc:  # the metadata moved on; the next truncation purges this part too
                raise DataLogNotAvailableError(f"log {self.name}: purging {self._stream}: {exc}") from exc

    async def _unsubscribe(self) -> None:
        subscription, self._subscription = self._subscription, None
        if subscription is not None:
            with contextlib.suppress(JetStreamError, Exception):
                await subscription.unsubscribe()

    async def close(self) -> None:
        """Fail unacknowledged appends, stop the tasks and the reply subscription; idempotent."""
        if self._state is _State.CLOSED:
            return
        if self._state in (_State.OPEN, _State.FAILING):
            self._state = _State.FAILED
        self._state = _State.CLOSED
        self._fail(DataLogClosedError(f"log {self.name} is closed"))
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._unsubscribe()
