"""The file ledger log: Tier-1 on local files, fenced through the coordination store.

A log is an ordered list of ledgers (files, see :mod:`.ledger_file`) plus one metadata
record in the coordination store (:mod:`.log_metadata`: epoch, owner, ledgers with the
end of each closed one, truncation point), changed only by versioned compare-and-set.

Writing (group commit). ``append`` queues the entry and returns a future. A writer task takes every queued entry
(up to ``max_batch_bytes``), and a dedicated writer thread writes them with one ``writev`` and one ``fdatasync``.
Ownership is then proven by a linearized metadata read (``sync`` + ``get``: the epoch is still ours;
:meth:`CoordinationStore.read_linearized` sends both at once, and the logs of one process share a sync sent after
all of them asked), and only then are the futures completed, in order. One check covers every group synced before
it started, and (the lease, below) every group synced in the half lease after it started: the writer task completes
such a group itself; else a confirmer task checks, overlapping the write of the next group. Halfway through the
lease a check runs in the background, so under steady load no acknowledgement waits for ZooKeeper.
Rollover (by size) creates and syncs the next ledger file and its directory entry, then
CASes the metadata (close the current ledger at its last entry, add the new one).

Fencing without BookKeeper. BookKeeper fences a ledger on its storage nodes; a local
file cannot refuse an old writer, so the acknowledgement waits for proof of ownership.

*Owner* (epoch ``e``, lease ``L`` recorded in the metadata) acknowledges a group G only
after (1) G's entries are written and fsync'd (event W), then (2) a linearized read of the
metadata shows epoch ``e`` (event C), where that read started after W, or started at a
time S (its own clock) with W's acknowledgement decided before S + L/2: one check covers
every group synced within half a lease of it, so under load ZooKeeper sees about two
checks per second per log, not one per group.
*New owner* ``initialize``: (a) reads the metadata and CASes it to epoch ``e+1`` with
its owner id and lease (event B; a CAS lost to the old owner's own rollover or truncation
is retried on the fresh record, one lost to another initializer fails); (a') waits, after
B, the longest ``L`` among the owners of the ledgers still open (each ledger records the
owner that created it and its lease, so an owner fenced by one that died before
recovering its ledger, or that ran with no lease, is still waited for), skipping an owner
whose process is known dead (same machine and pid namespace, its pid gone); leases are
measured on a clock that counts suspended time (``CLOCK_BOOTTIME``); (b) reads every
open ledger from the start up to its last whole entry ``n``; (c) creates its own ledger
file (synced, directory synced) and CASes the metadata: old ledger closed at ``n``, new
ledger open.

Claim: every entry a zombie acknowledged is readable by the new owner. C observed epoch
``e``, so C is linearized before B (ZooKeeper is linearizable for writes, and sync+get
for this read). Either W precedes C, and B precedes (b); or S precedes C and W precedes
S + L/2 < B + L, which precedes (b) by (a') as long as the two clocks' rates differ by
less than half (a dead process acknowledges nothing, so (a') may skip the wait); so W
precedes (b): the read sees G (in the
page cache of the same host, or on disk for a file system with close-to-open
consistency). Everything before G in the file was written before G by the same single
writer thread, so the scan does not stop before G, and ``n`` >= G's last entry; readers
read closed ledgers up to ``n``. Before (c), the new owner fsyncs the old ledger file,
so entries it saw but the old owner never synced are durable before the metadata
includes them.
Claim: the zombie acknowledges nothing more once the lease of its last check started
before B has run out: a later group needs a check started after B, which sees ``e+1``;
its rollover/truncate CAS fails (the version moved). Entries it appends
after the scan are beyond ``n`` and never read. Entries written between B and (b) may
be included in the log; they were never acknowledged, which a failed/unknown append
allows. A zombie's new ledger file carries its epoch in its name, so it never collides
with the new owner's file, and the new owner deletes such unreferenced files of older
epochs. Two initializers cannot both win: the epoch CAS admits one per version; an
ambiguous CAS (connection loss) is reconciled by reading back the record, which names
the owner.

Clock assumption. The lease claims need the zombie's clock to run while it is stopped:
boot time counts a suspend, but a hypervisor pause or a live migration that stops the
guest's clock does not. A zombie whose clock stood still past B resumes believing its
lease valid and may acknowledge groups synced after (b) without a check: those are lost
(``tests/.../test_file_ledger_lease.py`` shows it). ``ownership_lease_s = 0``
(``--tier1-lease-ms 0``) makes every group wait for a check started after its sync,
which needs no clock; it costs one coalesced ZooKeeper round trip per group.

Crashes. A crash mid-group leaves a torn tail: recovery keeps the last whole entry and
ignores the rest (never acknowledged: acks need the fsync). An invalid entry followed by
a valid one whose ``group_start`` is beyond it was synced, so it is reported as
:class:`DataLogCorruptedError`, as is any invalid entry at or before a closed ledger's
recorded end. Damage inside the *last* synced group of an open ledger cannot be told
from a torn tail (no replica to compare with).

Rollback (a ledger file truncated, or replaced by an older copy). What the log
acknowledged is recorded at the metadata updates it makes anyway: a closed ledger's end
(rollover, and (c), where the new owner closes the old ledgers at what it recovered and
synced), and at each truncation ``acknowledged``, the address of the last entry this owner
had acknowledged (synced and confirmed, so an intact file always holds it). (b) refuses an
open ledger whose file ends before ``acknowledged`` and ``read`` refuses a closed ledger
whose file ends before its recorded end, both with :class:`DataLogCorruptedError` naming
the log (``container-<id>``), the ledger file and both entries. Not covered: a loss
confined to entries the owner acknowledged after its last truncation or rollover (the
open ledger's tail past the mark), which looks like a torn tail. A record without
``acknowledged`` (written by an older version) means unknown: only the closed ends are
checked.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import os
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from segment_store.tier1.file.config import FileLedgerLogConfig
from segment_store.tier1.file.ledger_file import (
    LedgerReader,
    LedgerStorage,
    LedgerWriter,
    OsLedgerStorage,
    delete_ledger_files,
    ledger_file_name,
    recover_ledger,
    unreferenced_ledger_files,
)
from segment_store.tier1.file.serial_worker import SerialWorker
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
from segment_store.tier1.log_metadata import LedgerRecord, LogMetadata, lease_to_wait
from segment_store.tier1.metadata_keeper import MetadataKeeper
from segment_store.tier1.owner_identity import boot_clock, machine_identity
from segstore_shared.coordination.store import (
    CoordinationError,
    CoordinationStore,
    CoordinationUnavailableError,
)
from segstore_shared.loop_stalls import ACTIVITY

_log = logging.getLogger(__name__)
_T = TypeVar("_T")


class _State(enum.Enum):
    NEW = "new"
    INITIALIZING = "initializing"
    OPEN = "open"
    FENCED = "fenced"
    FAILED = "failed"
    CLOSED = "closed"


@dataclass(slots=True)
class _Append:
    data: bytes
    future: asyncio.Future[LogAddress]
    address: LogAddress | None = None


def _settle(item: _Append, error: BaseException | None) -> None:
    complete_append(item.future, item.address, error)


class FileLedgerLog:
    """``DurableDataLog`` over ledger files and a coordination store (see module docstring)."""

    def __init__(
        self,
        name: str,
        config: FileLedgerLogConfig,
        store: CoordinationStore,
        *,
        storage: LedgerStorage | None = None,
        clock: Callable[[], float] = boot_clock,
    ) -> None:
        if not name or "/" in name or name.startswith("."):
            raise ValueError(f"invalid log name {name!r}")
        self._clock = clock  # leases are measured on it: by default it counts time the machine spent suspended
        self.name = name
        self._config = config
        self._store = store
        self._storage = storage if storage is not None else OsLedgerStorage(fsync=config.fsync)
        self._dir = config.root_dir / name
        self._owner = f"{machine_identity()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"
        self._state = _State.NEW
        self._failure: DurableDataLogError | None = None
        self._epoch = 0
        self._keeper = MetadataKeeper(
            store,
            f"{config.metadata_root}/{name}",
            self._owner,
            LogMetadata,
            timeout_s=config.coordination_timeout_s,
            retry_delay_s=config.coordination_retry_delay_s,
            lease_ms=round(config.ownership_lease_s * 1000),
        )
        self._writer: LedgerWriter | None = None
        self._worker: SerialWorker | None = None  # the log's file work, in order, off the event loop
        self._queue: deque[_Append] = deque()  # accepted, not yet handed to the writer thread
        self._outstanding: deque[_Append] = deque()  # accepted, not yet completed; call order
        self._written: LogAddress | None = None  # last entry written and synced
        self._acked: LogAddress | None = None  # last entry acknowledged
        self._recovered: LogAddress | None = None  # last entry found by initialize
        self._lease_start: float | None = None  # loop time when the latest successful ownership check started
        self._renewal: asyncio.Task[None] | None = None  # a background ownership check (lease renewal)
        self._work = asyncio.Event()
        self._synced = asyncio.Event()
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
    def metadata(self) -> LogMetadata:
        """The metadata as this instance last wrote it (for tools and tests)."""
        return self._keeper.metadata

    # -- initialize -----------------------------------------------------------------------

    async def initialize(self, timeout: float = 60.0) -> None:
        """Fence, recover and open (steps a-c above); errors as ``DurableDataLog.initialize``."""
        if self._state is not _State.NEW:
            raise DataLogInitializationError(f"log {self.name}: initialize may be called once per instance")
        self._state = _State.INITIALIZING
        self._worker = SerialWorker(f"tier1-{self.name}")
        try:
            async with asyncio.timeout(timeout):
                await self._acquire()
        except BaseException as exc:
            self._state = _State.FAILED
            if isinstance(exc, TimeoutError):
                raise DataLogNotAvailableError(f"log {self.name}: initialize took over {timeout}s") from exc
            if isinstance(exc, CoordinationUnavailableError):
                raise DataLogNotAvailableError(f"log {self.name}: coordination unavailable") from exc
            if isinstance(exc, CoordinationError | OSError):
                raise DataLogInitializationError(f"log {self.name}: {exc}") from exc
            raise
        self._state = _State.OPEN
        self._tasks = [
            asyncio.create_task(self._write_loop(), name=f"tier1-write-{self.name}"),
            asyncio.create_task(self._confirm_loop(), name=f"tier1-confirm-{self.name}"),
        ]
        _log.info("log %s initialized at epoch %d: %s", self.name, self._epoch, self._keeper.metadata)

    async def _acquire(self) -> None:
        await asyncio.to_thread(self._storage.make_directory, self._dir)
        keeper = self._keeper
        previous = await keeper.acquire()  # (a) the fence
        self._epoch = keeper.metadata.epoch
        fenced_at = self._clock()
        wait_ms = lease_to_wait(previous) if previous is not None else 0
        if wait_ms:  # (a') owners of open ledgers may still acknowledge under their leases: let them run out
            _log.info("log %s: waiting %d ms for the leases of the open ledgers' owners", self.name, wait_ms)
            while (left := fenced_at + wait_ms / 1000 - self._clock()) > 0:
                await asyncio.sleep(left)
        metadata = keeper.metadata
        for ledger in metadata.ledgers:
            if ledger.is_open:  # (b) recover what the previous owner wrote
                last = await self._blocking(recover_ledger, self._storage, self._dir, ledger.ledger_id, ledger.epoch)
                self._check_not_rolled_back(ledger, last)
                metadata = metadata.with_ledger_closed(ledger.ledger_id, last)
        metadata, dropped = metadata.without_empty_ledgers()
        metadata, record = metadata.with_new_ledger()
        writer = await self._blocking(LedgerWriter.create, self._storage, self._dir, record.ledger_id, self._epoch)
        try:
            await keeper.persist(metadata)  # (c) close the old ledgers, open ours
        except BaseException:
            await self._discard_writer(writer)
            raise
        self._writer = writer
        self._recovered = metadata.last_closed_address()
        await self._collect_garbage(dropped)

    def _check_not_rolled_back(self, ledger: LedgerRecord, last: int) -> None:
        """Refuse an open ledger whose file ends before the entry the metadata records as acknowledged."""
        mark = self._keeper.metadata.acknowledged
        if mark is not None and mark[0] == ledger.ledger_id and last < mark[1]:
            path = self._dir / ledger_file_name(ledger.ledger_id, ledger.epoch)
            raise DataLogCorruptedError(
                f"log {self.name}: ledger file {path} ends at entry {last}, but entry {mark[1]} of ledger "
                f"{ledger.ledger_id} was acknowledged (recorded in the coordination store); the file was "
                f"truncated or replaced by an older copy and acknowledged entries may be lost"
            )

    def _blocking(self, function: Callable[..., _T], *args: Any) -> asyncio.Future[_T]:
        """Run ``function(*args)`` on the log's worker thread (after the file work queued before it)."""
        worker = self._worker
        if worker is None:
            raise DataLogClosedError(f"log {self.name} is closed")
        return worker.run(function, *args)

    async def _discard_writer(self, writer: LedgerWriter) -> None:
        def discard() -> None:
            writer.close()
            self._storage.delete(writer.path)

        try:
            await asyncio.to_thread(discard)
        except OSError as exc:
            _log.warning("log %s: could not delete unused ledger %s: %s", self.name, writer.path, exc)

    async def _collect_garbage(self, dropped: list[LedgerRecord]) -> None:
        """Delete ledger files nobody can need: not in the metadata and from older epochs."""
        referenced = {(ledger.ledger_id, ledger.epoch) for ledger in self._keeper.metadata.ledgers}

        def collect() -> None:
            files = unreferenced_ledger_files(self._storage, self._dir, referenced, self._epoch)
            delete_ledger_files(self._storage, files, self.name)

        try:
            await asyncio.to_thread(collect)
        except OSError as exc:
            _log.warning("log %s: ledger garbage collection failed (dropped %s): %s", self.name, dropped, exc)

    # -- appends --------------------------------------------------------------------------

    def _check_open(self) -> None:
        state = self._state
        if state is _State.OPEN:
            return
        if state in (_State.NEW, _State.INITIALIZING):
            raise DataLogNotInitializedError(f"log {self.name} is not initialized")
        if state is _State.FENCED:
            raise DataLogWriterNotPrimaryError(str(self._failure))
        if state is _State.FAILED:
            raise DataLogClosedError(f"log {self.name} failed: {self._failure}") from self._failure
        raise DataLogClosedError(f"log {self.name} is closed")

    def append(self, data: bytes | bytearray) -> asyncio.Future[LogAddress]:
        """Queue an entry; the future completes after its group is synced and ownership checked.

        Order and failures as ``DurableDataLog.append``: call order = log order = completion
        order; a failure fails every later accepted append.
        """
        self._check_open()
        if len(data) > self._config.max_append_length_bytes:
            raise WriteTooLongError(len(data), self._config.max_append_length_bytes)
        item = _Append(data if isinstance(data, bytes) else bytes(data), asyncio.get_running_loop().create_future())
        self._queue.append(item)
        self._outstanding.append(item)
        self._work.set()
        return item.future

    def _take_group(self, writer: LedgerWriter) -> list[_Append]:
        """Pop the next group from the queue and give its entries their addresses."""
        group: list[_Append] = []
        size = 0
        room = MAX_ENTRY_ID - writer.next_entry_id + 1
        queue = self._queue
        while queue and len(group) < room:
            length = len(queue[0].data)
            if group and size + length > self._config.max_batch_bytes:
                break
            item = queue.popleft()
            item.address = LogAddress(
                ledger_id=writer.ledger_id, entry_id=writer.next_entry_id + len(group), epoch=self._epoch
            )
            group.append(item)
            size += length
        return group

    async def _write_loop(self) -> None:
        try:
            while True:
                while not self._queue:
                    if self._state is not _State.OPEN:
                        return
                    self._work.clear()
                    await self._work.wait()
                if self._state is not _State.OPEN:
                    return
                writer = self._writer
                assert writer is not None
                if writer.size_bytes >= self._config.rollover_size_bytes or writer.next_entry_id > MAX_ENTRY_ID:
                    writer = await self._rollover(writer)
                group = self._take_group(writer)
                started = time.perf_counter()
                await self._blocking(writer.write_group, [item.data for item in group])
                ACTIVITY.note("tier1_group_commit", started, time.perf_counter())
                written = group[-1].address
                assert written is not None  # _take_group gave every entry its address
                self._written = written
                if not self._acknowledge_within_lease(written):
                    self._synced.set()  # the confirmer asks ZooKeeper first
        except Exception as exc:
            if self._fail_with(exc):
                raise

    async def _rollover(self, old: LedgerWriter) -> LedgerWriter:
        async with self._metadata_lock:
            updated = self._keeper.metadata.with_ledger_closed(old.ledger_id, old.next_entry_id - 1)
            updated, record = updated.with_new_ledger()
            new = await self._blocking(LedgerWriter.create, self._storage, self._dir, record.ledger_id, self._epoch)
            try:
                await self._keeper.persist(updated)
            except BaseException:
                await self._discard_writer(new)
                raise
        self._writer = new
        await self._blocking(old.close)
        _log.info("log %s rolled over to ledger %d", self.name, record.ledger_id)
        return new

    async def _confirm_loop(self) -> None:
        try:
            while True:
                while self._written is None or (self._acked is not None and self._written <= self._acked):
                    if self._state is not _State.OPEN:
                        return
                    self._synced.clear()
                    await self._synced.wait()
                if self._state is not _State.OPEN:
                    return
                target = self._written
                if self._acknowledge_within_lease(target):
                    continue
                if self._renewal is not None and not self._renewal.done():
                    await asyncio.shield(self._renewal)  # a renewal in flight may cover ``target``
                    if self._state is not _State.OPEN:
                        return
                    if self._acknowledge_within_lease(target):
                        continue
                started = self._clock()  # after ``target`` was synced
                await self._keeper.check_owner(self._epoch)
                self._renewed(started)
                if self._state is not _State.OPEN:
                    return
                self._acknowledge(target)
        except Exception as exc:
            if self._fail_with(exc):
                raise

    def _acknowledge_within_lease(self, target: LogAddress) -> bool:
        """Acknowledge the appends up to ``target`` (synced) at once if the lease holds (the writer does, saving the
        event-loop turn of waking the confirmer); False if the lease needs a check first (the confirmer's)."""
        lease = self._keeper.lease_ms / 2000  # half the lease: room for clocks that run at other rates
        if self._lease_expired(lease):
            return False
        if self._renewal is None or self._renewal.done():
            self._renew_if_halfway(lease)
        self._acknowledge(target)
        return True

    def _acknowledge(self, target: LogAddress) -> None:
        """Settle the appends up to ``target``, in order (the confirmer and the writer both call this)."""
        if self._acked is None or target > self._acked:
            self._acked = target
        outstanding = self._outstanding
        while outstanding and outstanding[0].address is not None and outstanding[0].address <= target:
            _settle(outstanding.popleft(), None)

    def _lease_expired(self, lease: float) -> bool:
        return self._lease_start is None or self._clock() - self._lease_start >= lease

    def _renew_if_halfway(self, lease: float) -> None:
        if self._lease_start is not None and self._clock() - self._lease_start >= lease / 2:
            self._renewal = asyncio.get_running_loop().create_task(self._renew(), name=f"tier1-lease-{self.name}")

    def _renewed(self, started: float) -> None:
        if self._lease_start is None or started > self._lease_start:
            self._lease_start = started

    async def _renew(self) -> None:
        """Renew the lease in the background, halfway through it, so acknowledgements under load do not wait
        for ZooKeeper; a failure fails the log as the confirmer's own check would."""
        started = self._clock()
        try:
            await self._keeper.check_owner(self._epoch)
        except Exception as exc:
            if self._fail_with(exc):
                _log.exception("log %s: lease renewal failed", self.name)
            return
        self._renewed(started)

    def _fail_with(self, exc: Exception) -> bool:
        """Fail the log with ``exc`` as the Tier-1 error it means (a disk or a coordination failure); True if it was
        unexpected (an internal error, which the caller lets propagate or logs)."""
        if isinstance(exc, DurableDataLogError):
            self._fail(exc)
        elif isinstance(exc, OSError):
            self._fail(with_cause(DataLogWriteError(f"log {self.name}: write failed: {exc}"), exc))
        elif isinstance(exc, CoordinationError):
            self._fail(with_cause(DataLogNotAvailableError(f"log {self.name}: coordination failed: {exc}"), exc))
        else:
            self._fail(with_cause(DataLogWriteError(f"log {self.name}: internal error: {exc!r}"), exc))
            return True
        return False

    def _fail(self, error: DurableDataLogError) -> None:
        """Fail every accepted, unacknowledged append (in call order) and stop accepting."""
        if self._state is _State.OPEN:
            self._state = _State.FENCED if isinstance(error, DataLogWriterNotPrimaryError) else _State.FAILED
            self._failure = error
            _log.warning("log %s stops at epoch %d: %s", self.name, self._epoch, error)
        self._queue.clear()
        while self._outstanding:
            _settle(self._outstanding.popleft(), error)
        self._work.set()
        self._synced.set()

    # -- read, truncate, close ------------------------------------------------------------

    def _last_known(self) -> LogAddress | None:
        candidates = [address for address in (self._recovered, self._acked) if address is not None]
        return max(candidates) if candidates else None

    def _readable_end(self, ledger_id: int) -> int:
        current = self._keeper.metadata.ledger(ledger_id)
        if current is None:
            return -1
        if current.last_entry is not None:
            return current.last_entry
        acked = self._acked
        return acked.entry_id if acked is not None and acked.ledger_id == ledger_id else -1

    async def read(self) -> AsyncIterator[ReadItem]:
        """Entries after the truncation point, in order; closed ledgers up to their recorded
        end, our own ledger up to the last acknowledged entry. Raises DataLogCorruptedError."""
        if self._state in (_State.NEW, _State.INITIALIZING):
            raise DataLogNotInitializedError(f"log {self.name} is not initialized")
        if self._state is _State.CLOSED:
            raise DataLogClosedError(f"log {self.name} is closed")
        metadata = self._keeper.metadata
        truncation = metadata.truncation_address()
        for ledger in metadata.ledgers:
            end = self._readable_end(ledger.ledger_id)
            if (ledger.ledger_id, end) <= truncation:
                continue
            path = self._dir / ledger_file_name(ledger.ledger_id, ledger.epoch)
            try:
                reader = await asyncio.to_thread(LedgerReader, self._storage, path, ledger.ledger_id, ledger.epoch)
            except DataLogCorruptedError as exc:
                raise DataLogCorruptedError(f"log {self.name}: {exc}") from exc
            try:
                while reader.next_entry_id <= end:
                    try:
                        batch = await asyncio.to_thread(reader.read_batch, end, self._config.read_batch_bytes)
                    except DataLogCorruptedError as exc:
                        raise DataLogCorruptedError(f"log {self.name}: {exc}") from exc
                    for entry_id, payload in batch:
                        if (ledger.ledger_id, entry_id) > truncation:
                            yield ReadItem(LogAddress(ledger.ledger_id, entry_id, ledger.epoch), payload)
            finally:
                reader.close()

    async def truncate(self, upto: LogAddress) -> None:
        """CAS the new truncation point, then delete the ledger files wholly at or below it."""
        self._check_open()
        last = self._last_known()
        if last is None or upto > last:
            raise ValueError(f"log {self.name}: cannot truncate at {upto}, beyond the last entry {last}")
        async with self._metadata_lock:
            updated, dropped = self._keeper.metadata.truncated(upto)
            if updated == self._keeper.metadata:
                return
            if self._acked is not None:  # synced and acknowledged: its ledger file must keep it
                updated = updated.acknowledged_up_to(self._acked)
            try:
                await self._keeper.persist(updated)
            except DurableDataLogError as exc:
                self._fail(exc)  # the metadata version we hold is no longer trustworthy
                raise

        files = [self._dir / ledger_file_name(ledger.ledger_id, ledger.epoch) for ledger in dropped]
        await asyncio.to_thread(delete_ledger_files, self._storage, files, self.name)

    async def close(self) -> None:
        """Fail unacknowledged appends, wait for a write in progress, release the files."""
        if self._state is _State.CLOSED:
            return
        self._state = _State.CLOSED
        self._fail(DataLogClosedError(f"log {self.name} is closed"))
        tasks = [*self._tasks, *([self._renewal] if self._renewal is not None else [])]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks = []
        self._renewal = None
        worker, self._worker = self._worker, None
        if worker is not None:
            await asyncio.to_thread(worker.shutdown)  # waits for a write in progress
        writer, self._writer = self._writer, None
        if writer is not None:
            with contextlib.suppress(OSError):
                writer.close()
