"""The system journal: the chunk metadata of one container, made durable in the chunk storage itself.

Seed 004 (SLTS "log structured snapshotting metadata store"), applied to every segment of the
container. The metadata (:class:`~segment_store.storage.journal.chunk_metadata.ChunkMetadata`) lives in
memory; every change is a journal record written as its own object (the no-append mode), and
the whole state is written as a snapshot object every ``snapshot_every_records`` records or
``snapshot_every_s`` seconds and at every boot. Objects and their format:
:mod:`segment_store.storage.journal.records`.

**The chain.** Each record and snapshot names its predecessor (``prev``); the durable history
is the chain that starts at the snapshot the :class:`SnapshotInfoStore` points at. When an
object has several successors, the one with the highest ``(epoch, seq)`` wins: within one
epoch a single writer adds successors to an object only until one write succeeds (a failed
attempt, landed or not, is superseded by the retry or by the next record), and across epochs
the newer owner's history wins. So boot ignores, without special cases:

- *zombie records*: an old owner keeps writing after a new one booted. The new owner's boot
  snapshot moved the pointer; the zombie's records are of a lower epoch than that snapshot
  or hang off objects that are not on the chain (alternative history);
- *partial or corrupt objects*: they fail the length/CRC/identity checks and are skipped;
- *duplicates*: a write that landed although the writer saw an error and retried under a new
  name is a sibling with a lower seq;
- *snapshots that failed validation*: a snapshot counts (becomes the chain tip, then the
  pointer) only after it was read back byte-exact and decoded.

Boot retries each object read on an outage ``read_attempts`` times, ``retry_delay_s`` apart
(seed 004: "failure during reads"). A change is acknowledged (:meth:`SystemJournal.commit`
returns) only once its record is durable; concurrent commits are group-committed into one record. The state changes only
then, so a failed commit changes nothing.

**Fencing.** Boot by epoch E refuses to run if the pointer or any journal object has an epoch
above E (:class:`StorageNotPrimaryError`: this instance is a zombie), writes a snapshot and
moves the pointer. The store must be fenced too: the container keeps the pointer in two core
attributes written through its fenced Tier-1 log, so a zombie cannot move it back.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from segment_store.storage.chunk_storage import (
    ChunkAlreadyExistsError,
    ChunkNotFoundError,
    ChunkStorage,
    ChunkStorageUnavailableError,
)
from segment_store.storage.journal.chunk_metadata import Change, ChunkEntry, ChunkMetadata, ChunkMetadataError
from segment_store.storage.journal.records import (
    INT64_MAX,
    JournalRecord,
    Record,
    RecordFormatError,
    SnapshotRecord,
    SystemName,
    decode_record,
    encode_record,
    parse_system_name,
    system_name,
    system_prefix,
)
from segment_store.storage.storage_config import ChunkedStorageConfig
from segstore_shared.contracts import ContainerOfflineError
from segstore_shared.errors import SegstoreError

log = logging.getLogger(__name__)


class StorageNotPrimaryError(SegstoreError):
    """A newer owner (higher epoch) of the container's Tier-2 metadata exists: this one is a zombie."""

    def __init__(self, container_id: int, epoch: int, newer: str) -> None:
        self.container_id = container_id
        self.epoch = epoch
        super().__init__(f"container {container_id}: epoch {epoch} is fenced out by {newer}")


class JournalCorruptedError(SegstoreError):
    """The journal cannot be replayed into a consistent state (the container must not start)."""


@dataclass(frozen=True, slots=True)
class SnapshotInfo:
    """The pointer to the latest snapshot: ``system/c{cid}/snapshot/e{epoch}-{snapshot_id}``.

    Both values are signed int64 (they are kept as segment attributes).
    """

    epoch: int
    snapshot_id: int

    def __post_init__(self) -> None:
        for key in ("epoch", "snapshot_id"):
            value = getattr(self, key)
            if type(value) is not int or not 0 <= value <= INT64_MAX:
                raise ValueError(f"{key}: {value!r} is not an int64 >= 0")


class SnapshotInfoStore(Protocol):
    """Where the pointer to the latest snapshot of one container is kept.

    The container implements it with the core attributes ``SLTS_LATEST_SNAPSHOT_ID`` and
    ``SLTS_LATEST_SNAPSHOT_EPOCH`` written through its fenced Tier-1 log. :meth:`save` must be
    durable when it returns and must fail for an owner that has been fenced out (raise
    :class:`StorageNotPrimaryError`, or any error: the journal then keeps its old pointer).
    """

    async def load(self) -> SnapshotInfo | None:
        """The saved pointer, or ``None`` for a container that never booted."""

    async def save(self, info: SnapshotInfo) -> None:
        """Durably replace the pointer."""


class InMemorySnapshotInfoStore:
    """A :class:`SnapshotInfoStore` in memory (tests); fenced like the real one.

    :meth:`save` with an epoch below the saved one raises :class:`StorageNotPrimaryError`.
    """

    def __init__(self, container_id: int = 0) -> None:
        self.container_id = container_id
        self.info: SnapshotInfo | None = None
        self.saves = 0

    async def load(self) -> SnapshotInfo | None:
        return self.info

    async def save(self, info: SnapshotInfo) -> None:
        if self.info is not None and info.epoch < self.info.epoch:
            raise StorageNotPrimaryError(self.container_id, info.epoch, f"pointer of epoch {self.info.epoch}")
        self.info = info
        self.saves += 1


_BOOT_ATTEMPTS = 5


class _ObjectVanishedError(Exception):
    """Internal: a journal object listed at boot was gone when read."""

    def __init__(self, name: str, *, root: bool) -> None:
        super().__init__(name)
        self.name = name
        self.root = root


@dataclass(eq=False, slots=True)
class _Pending:
    changes: tuple[Change, ...]
    orphans: tuple[str, ...]
    future: asyncio.Future[list[ChunkEntry]]


class SystemJournal:
    """Journal + snapshots of one container's chunk metadata (see the module docstring).

    Runs on the container's event loop; chunk I/O runs in worker threads. Use: :meth:`boot`
    once, then :meth:`commit` changes; :attr:`metadata` is the durable state.
    """

    def __init__(
        self,
        storage: ChunkStorage,
        container_id: int,
        info_store: SnapshotInfoStore,
        config: ChunkedStorageConfig | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._storage = storage
        self._cid = container_id
        self._info_store = info_store
        self._config = config or ChunkedStorageConfig()
        self._clock = clock
        self._sleep = sleep
        self._epoch = -1
        self._seq = 0
        self._metadata = ChunkMetadata()
        self._tip: str | None = None
        self._snapshot_info: SnapshotInfo | None = None
        self._records_since_snapshot = 0
        self._last_snapshot_at = 0.0
        self._cleanup_floor = (0, 0)
        self._queue: list[_Pending] = []
        self._chain_lock = asyncio.Lock()  # one writer of the chain at a time (records, snapshots)
        self._drainer: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[None]] = set()
        self._failure: SegstoreError | None = None
        self._booted = False
        self._closed = False
        self.booted_from_snapshot = False
        """Whether boot started from a saved pointer (``False``: a new, empty container)."""
        self.records_written = 0
        self.snapshots_written = 0

    @property
    def metadata(self) -> ChunkMetadata:
        return self._metadata

    @property
    def epoch(self) -> int:
        return self._epoch

    @property
    def tip(self) -> str | None:
        """Name of the last object of the chain (what the next record follows)."""
        return self._tip

    @property
    def snapshot_info(self) -> SnapshotInfo | None:
        """The last pointer this instance loaded or saved."""
        return self._snapshot_info

    def next_seq(self) -> int:
        """A fresh sequence number for a name of this instance (journal, snapshot or data chunk)."""
        seq = self._seq
        self._seq += 1
        return seq

    # -- boot -----------------------------------------------------------------------------

    async def boot(self, epoch: int, *, min_seq: int = 0) -> ChunkMetadata:
        """Load the snapshot the pointer names, replay the chain after it, snapshot, move the pointer.

        ``min_seq`` is where this instance's sequence starts at the earliest (above the seq of
        data chunks of this epoch already present).

        Raises:
            StorageNotPrimaryError: the pointer or a journal object has a higher epoch.
            JournalCorruptedError: the pointed-at snapshot is missing or invalid, or the chain
                does not apply to it.
            ChunkStorageUnavailableError: an outage; nothing was changed but leftovers that
                the next boot ignores.
            Whatever :meth:`SnapshotInfoStore.save` raises.
        """
        if self._booted:
            raise RuntimeError("the system journal is already booted")
        if type(epoch) is not int or not 0 <= epoch <= INT64_MAX:
            raise ValueError(f"epoch: {epoch!r} is not an int64 >= 0")
        self._epoch = epoch
        self._seq = max(self._seq, min_seq)
        for _ in range(_BOOT_ATTEMPTS):
            loaded = await self._load_state(epoch)
            if loaded is not None:
                break
        else:
            raise JournalCorruptedError(f"container {self._cid}: the snapshot pointer kept moving during boot")
        metadata, tip = loaded
        try:
            metadata.check()
        except ChunkMetadataError as exc:
            raise JournalCorruptedError(f"container {self._cid}: replayed metadata is inconsistent: {exc}") from exc
        self._metadata, self._tip = metadata, tip
        await self._write_snapshot(required=True)
        self._booted = True
        return metadata

    async def _load_state(self, epoch: int) -> tuple[ChunkMetadata, str | None] | None:
        """Fence check, then the replayed state and chain tip; ``None`` if the pointer moved meanwhile.

        The pointer moves under a booting owner only if the previous owner is still running (a
        zombie not fenced yet): its cleanup may then delete what this boot is reading, so the
        boot starts over from the new pointer.
        """
        info = await self._info_store.load()
        if info is not None and info.epoch > epoch:
            raise StorageNotPrimaryError(self._cid, epoch, f"snapshot pointer of epoch {info.epoch}")
        names = await asyncio.to_thread(self._list_system_objects)
        newer = [n for n in names if n.epoch > epoch]
        if newer:
            raise StorageNotPrimaryError(self._cid, epoch, newer[0].name)
        self._seq = max([self._seq, *(n.seq + 1 for n in names if n.epoch == epoch)])
        if info is None:
            if names:
                log.warning("container %s: no snapshot pointer; ignoring %d journal objects", self._cid, len(names))
            self._cleanup_floor = (epoch, 0)
            return ChunkMetadata(), None
        try:
            metadata, tip = await self._replay(info, names)
        except _ObjectVanishedError as exc:
            if await self._info_store.load() != info:
                log.info("container %s: snapshot pointer moved during boot; starting over", self._cid)
                return None
            if exc.root:
                raise JournalCorruptedError(f"container {self._cid}: pointed-at {exc.name!r} is missing") from None
            raise JournalCorruptedError(f"container {self._cid}: {exc.name!r} vanished during boot") from None
        if await self._info_store.load() != info:
            log.info("container %s: snapshot pointer moved during boot; starting over", self._cid)
            return None
        self._snapshot_info = info
        self._cleanup_floor = (0, 0)
        self.booted_from_snapshot = True
        return metadata, tip

    def _list_system_objects(self) -> list[SystemName]:
        names: list[SystemName] = []
        for kind in ("journal", "snapshot"):
            for name in self._storage.list(system_prefix(self._cid, kind)):
                parsed = parse_system_name(name)
                if parsed is None or parsed.container_id != self._cid:
                    log.warning("container %s: ignoring foreign object %r in the journal", self._cid, name)
                    continue
                names.append(parsed)
        return names

    async def _replay(self, info: SnapshotInfo, names: list[SystemName]) -> tuple[ChunkMetadata, str]:
        root_name = system_name(self._cid, "snapshot", info.epoch, info.snapshot_id)
        try:
            root = await self._fetch_record(root_name)
            if not isinstance(root, SnapshotRecord):
                raise RecordFormatError(f"{root_name!r} is not a snapshot")
            metadata = root.metadata()
        except ChunkNotFoundError:
            raise _ObjectVanishedError(root_name, root=True) from None
        except (RecordFormatError, ChunkMetadataError) as exc:
            raise JournalCorruptedError(f"container {self._cid}: pointed-at snapshot is invalid: {exc}") from exc
        later = [n for n in names if n.key > root.key]
        limit = asyncio.Semaphore(self._config.boot_read_concurrency)
        vanished: list[str] = []

        async def read(name: SystemName) -> Record | None:
            async with limit:
                try:
                    return await self._fetch_record(name.name)
                except ChunkNotFoundError:
                    vanished.append(name.name)  # retracted after a failed write, or a cleanup ran
                    return None
                except RecordFormatError as exc:
                    log.warning("container %s: ignoring unreadable journal object: %s", self._cid, exc)
                    return None

        records = [r for r in await asyncio.gather(*(read(n) for n in later)) if r is not None]
        if vanished and await self._info_store.load() != info:
            raise _ObjectVanishedError(vanished[0], root=False)
        successors: dict[str, list[Record]] = {}
        for record in records:
            if record.prev is not None:
                successors.setdefault(record.prev, []).append(record)
        current: Record = root
        on_chain = 0
        while True:
            options = [r for r in successors.get(current.name, ()) if r.key > current.key]
            if not options:
                break
            current = max(options, key=lambda r: r.key)
            on_chain += 1
            if isinstance(current, JournalRecord):
                for change in current.changes:
                    try:
                        metadata.apply(change)
                    except ChunkMetadataError as exc:
                        raise JournalCorruptedError(f"container {self._cid}: {current.name!r}: {exc}") from exc
        log.info(
            "container %s: booted from %s, %d objects on the chain, %d off it (zombie, duplicate or failed writes)",
            self._cid,
            root_name,
            on_chain,
            len(later) - on_chain,
        )
        return metadata, current.name

    async def _fetch_record(self, name: str) -> Record:
        """Read and decode one journal object, retrying an outage ``read_attempts`` times (seed 004)."""
        for attempt in range(1, self._config.read_attempts + 1):
            try:
                return await asyncio.to_thread(self._read_record, name)
            except ChunkStorageUnavailableError as exc:
                if attempt == self._config.read_attempts:
                    raise
                log.debug("container %s: read of %r failed, retrying: %r", self._cid, name, exc)
                await self._sleep(self._config.retry_delay_s)
        raise AssertionError("unreachable")

    def _read_record(self, name: str) -> Record:
        return decode_record(name, self._storage.read_all(name), self._cid)

    # -- commits --------------------------------------------------------------------------

    async def commit(self, changes: Sequence[Change], *, orphans: Sequence[str] = ()) -> list[ChunkEntry]:
        """Make ``changes`` durable as (part of) one journal record, then apply them to :attr:`metadata`.

        The caller validated ``changes`` against :attr:`metadata` and keeps the segments they
        touch from changing meanwhile. ``orphans`` are chunks written for this change: if the
        record fails and every attempt is known not to have landed, they are deleted (best
        effort; otherwise the next boot's sweep does it). Returns the chunk entries the changes
        released (truncated or deleted), for the caller to delete.

        Raises:
            ChunkStorageUnavailableError (or another chunk storage error): not durable, nothing changed.
            ContainerOfflineError: not booted, or closed.
            StorageNotPrimaryError: this instance learnt it has been fenced out.
        """
        try:
            self._check_usable()
        except SegstoreError:
            await asyncio.to_thread(self._delete_quietly, orphans)  # no record will reference them
            raise
        pending = _Pending(tuple(changes), tuple(orphans), asyncio.get_running_loop().create_future())
        self._queue.append(pending)
        if self._drainer is None or self._drainer.done():
            self._drainer = asyncio.create_task(self._drain(), name=f"system-journal-c{self._cid}")
        return await pending.future

    def _check_usable(self) -> None:
        if not self._booted or self._closed:
            raise ContainerOfflineError(f"container {self._cid}: Tier-2 metadata is not open")
        if self._failure is not None:
            raise self._failure

    async def _drain(self) -> None:
        while self._queue:
            async with self._chain_lock:
                await self._commit_batch()

    async def _commit_batch(self) -> None:
        batch, self._queue = self._queue, []
        try:
            if self._failure is not None:
                await asyncio.to_thread(self._delete_quietly, [o for p in batch for o in p.orphans])
                raise self._failure
            await self._append_record([c for p in batch for c in p.changes], [o for p in batch for o in p.orphans])
        except Exception as exc:
            for pending in batch:
                _fail(pending.future, exc)
            return
        for pending in batch:
            try:
                released = [entry for change in pending.changes for entry in self._metadata.apply(change)]
            except ChunkMetadataError as exc:  # a caller did not validate: memory and journal disagree now
                self._failure = JournalCorruptedError(f"container {self._cid}: {exc}")
                _fail(pending.future, self._failure)
                continue
            if not pending.future.done():
                pending.future.set_result(released)
        self._records_since_snapshot += 1
        due = self._clock() - self._last_snapshot_at >= self._config.snapshot_every_s
        if self._failure is None and (due or self._records_since_snapshot >= self._config.snapshot_every_records):
            await self._write_snapshot(required=False)

    async def _append_record(self, changes: list[Change], orphans: list[str]) -> None:
        attempts = self._config.journal_write_attempts
        all_retracted = True
        last: Exception | None = None
        for attempt in range(attempts):
            record = JournalRecord(self._cid, self._epoch, self.next_seq(), self._tip, tuple(changes))
            try:
                await asyncio.to_thread(self._storage.write_chunk, record.name, encode_record(record))
            except Exception as exc:
                last = exc
                if not isinstance(exc, ChunkAlreadyExistsError):  # that name is not ours to delete
                    all_retracted = await self._retract(record.name) and all_retracted
                log.warning("container %s: journal write %r failed: %r", self._cid, record.name, exc)
                if not getattr(exc, "retriable", False) or attempt + 1 == attempts:
                    break
                await self._sleep(self._config.retry_delay_s)
                continue
            self._tip = record.name
            self.records_written += 1
            return
        if all_retracted:
            await asyncio.to_thread(self._delete_quietly, orphans)
        elif orphans:
            log.warning("container %s: keeping %d chunks of a record that may have landed", self._cid, len(orphans))
        assert last is not None
        raise last

    async def _retract(self, name: str) -> bool:
        """Delete an object whose write reported an error; ``True`` if it is known to be absent now."""
        try:
            await asyncio.to_thread(self._storage.delete_if_exists, name)
        except Exception as exc:
            log.warning("container %s: cannot retract %r: %r", self._cid, name, exc)
            return False
        return True

    def _delete_quietly(self, names: Sequence[str]) -> int:
        """Delete ``names`` if present; log failures (boot sweeps leftovers). Runs in a worker thread."""
        deleted = 0
        for name in names:
            try:
                deleted += self._storage.delete_if_exists(name)
            except Exception as exc:
                log.warning("container %s: cannot delete %r (left for a later sweep): %r", self._cid, name, exc)
        return deleted

    async def wait_idle(self) -> None:
        """Wait until queued commits and the snapshot that may follow them are done."""
        while self._drainer is not None and not self._drainer.done():
            await asyncio.wait({self._drainer})

    # -- snapshots ------------------------------------------------------------------------

    async def snapshot(self) -> bool:
        """Write a snapshot now (between records); ``True`` if the pointer names it."""
        self._check_usable()
        async with self._chain_lock:
            return await self._write_snapshot(required=False)

    async def _write_snapshot(self, *, required: bool) -> bool:
        segments = self._metadata.to_json()
        self._records_since_snapshot = 0
        self._last_snapshot_at = self._clock()
        last: Exception | None = None
        for attempt in range(self._config.snapshot_attempts):
            if attempt:
                await self._sleep(self._config.retry_delay_s)
            record = SnapshotRecord(self._cid, self._epoch, self.next_seq(), self._tip, segments)
            try:
                data = await asyncio.to_thread(encode_record, record)
                await asyncio.to_thread(self._storage.write_chunk, record.name, data)
            except Exception as exc:
                last = exc
                log.warning("container %s: snapshot write %r failed: %r", self._cid, record.name, exc)
                if not isinstance(exc, ChunkAlreadyExistsError):
                    await self._retract(record.name)
                continue
            try:
                await asyncio.to_thread(self._validate_snapshot, record.name, data)
            except Exception as exc:
                last = exc
                log.warning("container %s: snapshot %r failed validation: %r", self._cid, record.name, exc)
                await self._retract(record.name)
                continue
            break
        else:
            if required:
                assert last is not None
                raise last
            log.warning("container %s: no snapshot this time: %r", self._cid, last)
            return False
        self._tip = record.name
        self.snapshots_written += 1
        info = SnapshotInfo(self._epoch, record.seq)
        try:
            await self._info_store.save(info)
        except Exception as exc:
            if required:
                raise
            if isinstance(exc, StorageNotPrimaryError):
                self._failure = exc
                log.error("container %s: fenced out, refusing further changes: %s", self._cid, exc)
            else:
                log.warning("container %s: cannot save snapshot pointer %s: %r", self._cid, info, exc)
            return False
        self._snapshot_info = info
        task = asyncio.create_task(self._cleanup(record.key), name=f"system-journal-cleanup-c{self._cid}")
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return True

    def _validate_snapshot(self, name: str, written: bytes) -> None:
        """Read the snapshot back: it must be the bytes written and decode to a consistent state."""
        back = self._storage.read_all(name)
        if back != written:
            raise RecordFormatError(f"{name!r}: read back {len(back)} bytes differing from the {len(written)} written")
        record = decode_record(name, back, self._cid)
        assert isinstance(record, SnapshotRecord)
        record.metadata()

    async def _cleanup(self, below: tuple[int, int]) -> None:
        """Delete journal objects before the snapshot the pointer now names (best effort)."""
        floor = self._cleanup_floor

        def run() -> int:
            doomed = [n.name for n in self._list_system_objects() if floor <= n.key < below]
            return self._delete_quietly(doomed)

        try:
            deleted = await asyncio.to_thread(run)
        except Exception as exc:
            log.warning("container %s: journal cleanup failed (retried after the next snapshot): %r", self._cid, exc)
            return
        log.debug("container %s: deleted %d journal objects below %s", self._cid, deleted, below)

    # -- shutdown -------------------------------------------------------------------------

    async def close(self) -> None:
        """Refuse new commits, finish queued ones and background cleanups. Idempotent."""
        self._closed = True
        if self._drainer is not None:
            await asyncio.gather(self._drainer, return_exceptions=True)
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)


def _fail(future: asyncio.Future[list[ChunkEntry]], exc: BaseException) -> None:
    if not future.done():
        future.set_exception(exc)
