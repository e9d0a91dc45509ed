"""Reads and versioned updates of one log's metadata node, with retries and reconciliation.

A Tier-1 log keeps its metadata record (the file ledger log's
:class:`~segment_store.tier1.log_metadata.LogMetadata`, the JetStream log's
:class:`~segment_store.tier1.jetstream.metadata.JetStreamLogMetadata`) in the coordination
store and changes it only by compare-and-set over the version it last wrote or read. A
lost connection makes a CAS ambiguous; :meth:`MetadataKeeper.persist` settles it by
reading the record back: the record names the owner (host, pid, random id), so finding
our exact bytes means our update applied, and anything else with a new version means
another owner moved on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, Protocol, TypeVar

from segment_store.tier1.log import DataLogNotAvailableError, DataLogWriterNotPrimaryError
from segstore_shared.coordination.store import (
    BadVersionError,
    CoordinationStore,
    CoordinationUnavailableError,
    NodeExistsError,
    NodeNotFoundError,
    Versioned,
)

_R = TypeVar("_R", bound="OwnedRecord")
_R_co = TypeVar("_R_co", bound="OwnedRecord", covariant=True)


class OwnedRecord(Protocol):
    """What the keeper needs of a metadata record: who owns the log at which epoch, and (de)serialization."""

    @property
    def epoch(self) -> int: ...

    @property
    def owner(self) -> str: ...

    def fenced_by(self: _R, owner: str, lease_ms: int = 0) -> _R:
        """The same log acquired by ``owner`` at the next epoch."""
        ...

    def serialize(self) -> bytes: ...


class RecordType(Protocol[_R_co]):
    """The class of a metadata record: builds a new log's record and parses stored ones."""

    def new(self, owner: str, lease_ms: int = 0) -> _R_co: ...

    def parse(self, data: bytes) -> _R_co: ...


class MetadataKeeper(Generic[_R]):
    """The metadata of one log as this instance last wrote or read it, and how to change it.

    All methods run on the event loop; none may be called concurrently with another
    mutating one (the log serializes them with a lock). Lost connections are retried for
    ``timeout_s``, starting ``retry_delay_s`` apart (doubling up to 1 s).
    """

    def __init__(
        self,
        store: CoordinationStore,
        path: str,
        owner: str,
        record_type: RecordType[_R],
        *,
        timeout_s: float,
        retry_delay_s: float,
        lease_ms: int = 0,
    ) -> None:
        self.path = path
        self.owner = owner
        self._type = record_type
        self.metadata: _R = record_type.new(owner)
        self.version = -1
        self._store = store
        self._timeout_s = timeout_s
        self._retry_delay_s = retry_delay_s
        self.lease_ms = lease_ms

    async def read(self) -> Versioned | None:
        """Linearized read (``sync`` + ``get``), retrying a lost connection; None if absent.

        Raises :class:`CoordinationUnavailableError` after ``coordination_timeout_s``.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeout_s
        delay = self._retry_delay_s
        while True:
            try:
                return await self._store.read_linearized(self.path)
            except CoordinationUnavailableError:
                if loop.time() + delay > deadline:
                    raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)

    async def load(self) -> bool:
        """Read the stored metadata into :attr:`metadata`; False when the log has none yet."""
        loaded = await self.read()
        if loaded is None:
            return False
        self.metadata, self.version = self._type.parse(loaded.data), loaded.version
        return True

    async def create(self) -> None:
        """Store a brand-new log's metadata (epoch 1, owned by us).

        Raises :class:`DataLogWriterNotPrimaryError` when another instance created it first,
        :class:`CoordinationUnavailableError`.
        """
        metadata = self._type.new(self.owner, self.lease_ms)
        data = metadata.serialize()
        try:
            self.version = await self._store.create(self.path, data)
        except NodeExistsError as exc:
            raise DataLogWriterNotPrimaryError(f"{self.path}: created concurrently by another owner") from exc
        except CoordinationUnavailableError:
            current = await self.read()  # did our create apply?
            if current is None or current.data != data:
                raise
            self.version = current.version
        self.metadata = metadata

    async def acquire(self, before_create: Callable[[], Awaitable[None]] | None = None) -> _R | None:
        """Take the log over: create its metadata (epoch 1) or CAS the next epoch with our owner id and
        lease; returns the record it replaced (None: created). ``before_create`` runs before a
        brand-new log's metadata is created (the JetStream log creates its stream there).

        A CAS lost to the current owner's own routine update (rollover, truncation) is
        retried on the fresh record; one lost to another instance taking the epoch raises
        :class:`DataLogWriterNotPrimaryError`. Also raises
        :class:`CoordinationUnavailableError`, :class:`DataLogNotAvailableError`.
        """
        while True:
            if not await self.load():
                if before_create is not None:
                    await before_create()
                await self.create()
                return None
            previous = self.metadata
            try:
                await self.persist(previous.fenced_by(self.owner, self.lease_ms))
                return previous
            except DataLogWriterNotPrimaryError:
                current = await self.read()
                if current is None or self._type.parse(current.data).epoch != previous.epoch:
                    raise

    async def persist(self, updated: _R) -> None:
        """CAS ``updated`` over :attr:`version`; on success it becomes :attr:`metadata`.

        Raises :class:`DataLogWriterNotPrimaryError` when someone else changed the record,
        :class:`DataLogNotAvailableError` when the store stays unreachable (the outcome is
        then unknown: the caller must stop using this instance).
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeout_s
        delay = self._retry_delay_s
        data = updated.serialize()
        while True:
            try:
                self.version = await self._store.compare_and_set(self.path, data, self.version)
                self.metadata = updated
                return
            except (BadVersionError, NodeNotFoundError, CoordinationUnavailableError):
                pass
            try:
                current = await self.read()
            except CoordinationUnavailableError as exc:
                raise DataLogNotAvailableError(f"{self.path}: metadata unreachable") from exc
            if current is not None and current.data == data:
                self.version = current.version
                self.metadata = updated
                return
            if current is None or current.version != self.version:
                raise DataLogWriterNotPrimaryError(
                    f"{self.path}: metadata changed by another owner (epoch {self.metadata.epoch} lost)"
                )
            if loop.time() + delay > deadline:
                raise DataLogNotAvailableError(f"{self.path}: metadata update kept failing")
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)

    async def check_owner(self, epoch: int) -> None:
        """Linearized check that the stored epoch is still ``epoch`` and ours.

        Raises :class:`DataLogWriterNotPrimaryError` (fenced, or metadata deleted),
        :class:`DataLogNotAvailableError`.
        """
        try:
            current = await self.read()
        except CoordinationUnavailableError as exc:
            raise DataLogNotAvailableError(f"{self.path}: cannot confirm ownership") from exc
        if current is None:
            raise DataLogWriterNotPrimaryError(f"{self.path}: metadata was deleted")
        stored = self._type.parse(current.data)
        if stored.epoch != epoch or stored.owner != self.owner:
            raise DataLogWriterNotPrimaryError(f"{self.path}: epoch {epoch} was fenced by epoch {stored.epoch}")
