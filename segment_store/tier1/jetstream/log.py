"""The JetStream log: ``DurableDataLog`` on one JetStream stream per log, fenced by epochs.

How it writes, fences, recovers, detects a rollback and fences again in place, and why nothing acknowledged is
lost: the package docstring (:mod:`segment_store.tier1.jetstream`).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import functools
import logging
import os
import uuid
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass

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
    Record,
    RecordFilter,
    data_headers,
    fence_headers,
    group_body,
    parse_record,
)
from segment_store.tier1.jetstream.refence import refenceable, stored_run
from segment_store.tier1.jetstream.stream_setup import create_log_stream, settled_state, while_electing
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
MAX_GROUP = 4096
"""Most appends in one record (a group of tiny appends is bounded by count, not only by bytes)."""


class _State(enum.Enum):
    NEW = "new"
    INITIALIZING = "initializing"
    OPEN = "open"
    REFENCING = "refencing"  # an append went unanswered or was refused: fencing again in place (appends wait)
    FAILING = "failing"  # an append was rejected; finding out why before failing everything
    FENCED = "fenced"
    FAILED = "failed"
    CLOSED = "closed"


@dataclass(slots=True)
class _Append:
    data: bytes
    future: asyncio.Future[LogAddress]
    accepted_at: float  # loop time; moved later by the time spent fencing again (not counted in ack_timeout_s)
    address: LogAddress | None = None
    stored: bool = False
    error: JetStreamError | None = None


def _settle(item: _Append, error: BaseException | None) -> None:
    complete_append(item.future, item.address, error)


class JetStreamLog:
    """``DurableDataLog`` over one JetStream stream and a coordination store (see the package docstring)."""

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
        self._keeper = MetadataKeeper(store, f"{config.metadata_root}/{name}", self._owner, JetStreamLogMetadata,
                                      timeout_s=config.coordination_timeout_s,
                                      retry_delay_s=config.coordination_retry_delay_s)  # fmt: skip
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
        self._send_task: asyncio.Task[None] | None = None
        self._refencing: asyncio.Task[None] | None = None
        self._progress_at = 0.0  # loop time the last re-fence began, then ended (an OPEN head's wait counts from it)
        self.refences = 0
        """How many times this instance fenced its log again in place (for tools and tests)."""

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
    def refencing(self) -> bool:
        """Whether the log is fencing itself again in place now (appends wait meanwhile)."""
        return self._state is _State.REFENCING

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
        """Take over (steps a-c of the package docstring) and open for appends."""
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
        self._start_sending()
        self._tasks.append(asyncio.create_task(self._watch_loop(), name=f"tier1-watch-{self.name}"))
        _log.info("log %s initialized at epoch %d (stream %s, fence at %d)", self.name, self._epoch, self._stream,
                  self._fence_seq)  # fmt: skip

    async def _acquire(self) -> None:
        keeper = self._keeper
        create = functools.partial(create_log_stream, self._client, self._config, self.name, self._stream)
        previous = await keeper.acquire(before_create=create)  # (a)
        self._epoch = keeper.metadata.epoch
        if previous is not None:
            state = await settled_state(self._config, self._client, self._stream, keeper.metadata.acknowledged)
            if state.replicas != self._config.replicas:
                _log.warning("log %s: stream %s has %d replicas, the configuration asks for %d (kept as it is)",
                             self.name, self._stream, state.replicas, self._config.replicas)  # fmt: skip
            self._check_not_rolled_back(state.last_seq, "ends at")
        self._inbox = self._client.new_inbox()
        self._subscription = await self._client.subscribe(f"{self._inbox}.*.*", self._on_answer)
        fence = await self._publish_fence(self._epoch)  # (b)
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

    async def _publish_fence(self, epoch: int) -> int:
        # no leader yet, or the answer was lost: publishing again is harmless (a second fence is ignored)
        headers = fence_headers(epoch)
        return await while_electing(self._config, lambda: self._client.publish_and_wait(self._subject, b"", headers))

    # -- appends --------------------------------------------------------------------------

    def _check_open(self) -> None:
        state = self._state
        if state in (_State.OPEN, _State.REFENCING):
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
        # REFENCING: queued when the re-fence ends; FAILING: never published, the failure being established fails it
        return item.future

    def _start_sending(self) -> None:
        self._tasks = [task for task in self._tasks if not task.done()]
        self._send_task = asyncio.create_task(self._send_loop(), name=f"tier1-send-{self.name}")
        self._tasks.append(self._send_task)

    async def _send_loop(self) -> None:
        client, subject, epoch, inbox = self._client, self._subject, self._epoch, f"{self._inbox}.{self._epoch}"
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
        except JetStreamUnavailableError as exc:  # the connection is down: fence again once NATS is back
            self._begin_refence(exc)
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
            epoch, sequence = (int(part) for part in msg.subject.rsplit(".", 2)[1:])
        except ValueError:
            return
        if epoch != self._epoch or self._state is not _State.OPEN:
            return  # an answer to an earlier epoch's publish, or one a re-fence is settling by reading the stream
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
                if refenceable(head.error):
                    self._begin_refence(head.error)
                else:
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

    def _begin_refence(self, cause: JetStreamError) -> None:
        """Stop sending and fence the log again in place (see "Re-fencing"), once."""
        if self._state is not _State.OPEN:
            return
        self._state = _State.REFENCING
        self._progress_at = asyncio.get_running_loop().time()
        self._work.set()
        _log.info("log %s: fencing again at epoch %d: %s", self.name, self._epoch + 1, cause)
        self._refencing = asyncio.create_task(self._refence(), name=f"tier1-refence-{self.name}")
        self._tasks.append(self._refencing)

    async def _refence(self) -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        if self._send_task is not None:  # it returns once it sees REFENCING: nothing more of this epoch goes out
            await asyncio.wait([self._send_task])
        try:
            async with self._metadata_lock:
                keeper = self._keeper
                fenced, acked = keeper.metadata.fenced_by(self._owner), self._acked  # (a') records what we acked
                await keeper.persist(fenced if acked is None else fenced.acknowledged_up_to(acked.ledger_id))
                epoch = keeper.metadata.epoch
                state = await settled_state(self._config, self._client, self._stream, keeper.metadata.acknowledged)
                self._check_not_rolled_back(state.last_seq, "ends at")  # before our fence could fill a gap
                fence = await self._publish_fence(epoch)
                self._check_not_rolled_back(fence - 1, "stored our fence right after")
                await keeper.persist(keeper.metadata.acknowledged_up_to(fence))  # as step (c): no one took it since
            published = [item for item in self._outstanding if item.address is not None]
            run: list[Record] = []
            if published:
                first = published[0].address
                assert first is not None
                records = [record async for record in self._records(first.ledger_id, fence - 1)]
                run = stored_run(records, self._epoch, first.entry_id)
        except DurableDataLogError as exc:
            self._fail(exc)
            return
        except CoordinationError as exc:
            self._fail(with_cause(DataLogNotAvailableError(f"log {self.name}: coordination failed: {exc}"), exc))
            return
        except JetStreamError as exc:
            self._fail(with_cause(DataLogNotAvailableError(f"log {self.name}: fencing again: {exc}"), exc))
            return
        if self._state is not _State.REFENCING:
            return  # failed (timed out) or closed meanwhile
        items = iter(published)
        for record in run:  # the entries JetStream stored for good: acknowledged where they are
            for offset in range(record.count):
                item = next(items)
                item.address = LogAddress(ledger_id=record.sequence, entry_id=record.index + offset, epoch=self._epoch)
                item.stored, item.error = True, None
        for item in items:  # not stored (or beyond a break): published again under the new epoch
            item.address, item.stored, item.error = None, False, None
        found = sum(record.count for record in run)
        self._epoch, self._fence_seq, self._last_seq, self._next_index = epoch, fence, fence, 0
        ended = loop.time()
        for item in self._outstanding:  # the re-fence's wait (a leader election) is not the append's
            item.accepted_at += ended - max(item.accepted_at, started)
        self._published.clear()
        self._queue = deque(item for item in self._outstanding if not item.stored)
        self._state = _State.OPEN
        self._progress_at = ended
        self.refences += 1
        self._complete_head()
        self._start_sending()
        self._work.set()
        _log.info("log %s fenced again at epoch %d (fence at %d) in %.2f s: %d pending entries were stored, %d "
                  "go out again", self.name, epoch, fence, loop.time() - started, found,
                  len(self._queue))  # fmt: skip

    async def _watch_loop(self) -> None:
        """Fence again when the oldest unacknowledged entry waits ``refence_after_s`` for an answer; fail the log
        when it waited ``ack_timeout_s`` since it was appended, not counting re-fences (each bounded as a whole by
        ``refence_timeout_s``, whatever step hangs; a step that fails fails the log)."""
        loop = asyncio.get_running_loop()
        timeout, suspect = self._config.ack_timeout_s, self._config.refence_after_s
        while self._state in (_State.OPEN, _State.REFENCING):
            now = loop.time()
            head = self._outstanding[0] if self._outstanding else None
            waited = now - max(head.accepted_at, self._progress_at) if head is not None else 0.0
            if self._state is _State.OPEN and waited > suspect:
                self._begin_refence(JetStreamUnavailableError(f"no answer from JetStream within {suspect}s"))
            why = ""
            if self._state is _State.OPEN and head is not None and now - head.accepted_at > timeout:
                why = (f"no acknowledgement from JetStream within {timeout}s (connected to {self._client.connected_url}"
                       f"); NATS or the quorum of stream {self._stream} is unavailable")  # fmt: skip
            elif self._state is _State.REFENCING and now - self._progress_at > self._config.refence_timeout_s:
                why = f"fencing again did not finish within {self._config.refence_timeout_s}s"
            if why:
                return self._fail(DataLogNotAvailableError(f"log {self.name}: {why}"))
            await asyncio.sleep(min(0.25, suspect / 4))

    def _fail(self, error: DurableDataLogError) -> None:
        """Fail every accepted, unacknowledged append (in call order) and stop accepting."""
        if self._state in (_State.OPEN, _State.REFENCING, _State.FAILING):
            self._state = _State.FENCED if isinstance(error, DataLogWriterNotPrimaryError) else _State.FAILED
            self._failure = error
            _log.warning("log %s stops at epoch %d: %s", self.name, self._epoch, error)
        refencing = self._refencing
        if refencing is not None and refencing is not asyncio.current_task():
            refencing.cancel()
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
            state = await while_electing(self._config, lambda: self._client.stream_state(self._stream))
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
        sequence = start
        while sequence <= end:
            async for record in self._records(sequence, end):
                for address, payload in records.accept(record):
                    if record.sequence <= self._fence_seq:
                        self._recovered = address
                    yield ReadItem(address, payload)
            sequence = end + 1  # appended while reading: readable up to the last acknowledged entry
            end = max(end, self._acked.ledger_id if self._acked is not None else 0)

    async def _records(self, first: int, last: int) -> AsyncIterator[Record]:
        """The records from sequence ``first`` to ``last``, decoded, every one present."""
        sequence = first
        while sequence <= last:
            for message in await self._read_batch(sequence, last):
                if message.sequence != sequence:
                    raise DataLogCorruptedError(f"log {self.name}: record {sequence} of {self._stream} is missing")
                yield parse_record(message.sequence, message.headers, message.data)
                sequence += 1

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
        self._state = _State.CLOSED
        self._fail(DataLogClosedError(f"log {self.name} is closed"))
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._unsubscribe()
