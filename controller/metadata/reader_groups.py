"""Reader group configurations and the subscriber records they keep on the streams they read.

A reader group whose retention type is not NONE *subscribes* to each stream it reads: the stream
keeps a :class:`SubscriberRecord` named ``<scope>/<group>`` holding the group's generation and the
position it reported (consumption based retention truncates only below every subscriber's cut).
Create, update and delete change the group record and the subscriber records in separate
single-node writes; each is idempotent, and an interrupted update is finished by
:meth:`ReaderGroupOps.complete_reader_group_update` (the record says ``updating``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import uuid

from controller.metadata.epochs import CutLike, EpochOps
from controller.metadata.errors import (
    DataNotFoundError,
    GenerationMismatchError,
    InvalidStreamCutError,
    OperationConflictError,
    ReaderGroupExistsError,
    ReaderGroupNotFoundError,
    ScopeNotFoundError,
    StreamNotFoundError,
)
from controller.metadata.records import ReaderGroupConfigRecord, SubscriberRecord
from controller.metadata.scopes import ScopeOps
from controller.metadata.store_base import escape
from controller.metadata.stream_logic import cut_equal_or_after, positions_of
from controller_client.model import validate_stream_name
from segstore_shared.coordination.store import BadVersionError, NodeNotFoundError


def subscriber_name(scope: str, group: str) -> str:
    """The subscriber name of a reader group (its scoped name, as Pravega spells it)."""
    return f"{scope}/{group}"


def split_scoped(name: str) -> tuple[str, str]:
    scope, sep, rest = name.partition("/")
    if not sep or not scope or not rest:
        raise ValueError(f"not a scoped name: {name!r}")
    return scope, rest


class ReaderGroupOps(ScopeOps, EpochOps):
    # ---- reader group records ---------------------------------------------------------------------------------
    async def _rg(self, scope: str, group: str) -> tuple[ReaderGroupConfigRecord, int]:
        found = await self._get_opt(self._rg_path(scope, group), ReaderGroupConfigRecord)
        if found is None:
            raise ReaderGroupNotFoundError("reader group not found", scope=scope, name=group)
        return found

    async def get_reader_group(self, scope: str, group: str) -> ReaderGroupConfigRecord:
        return (await self._rg(scope, group))[0]

    async def create_reader_group(
        self, scope: str, group: str, config: ReaderGroupConfigRecord
    ) -> ReaderGroupConfigRecord:
        """Create the group at generation 0 with a new id and subscribe it to its streams.

        Idempotent for an identical configuration (the stored record, with its id, is returned and
        missing subscriptions are added); :class:`ReaderGroupExistsError` for a different one,
        :class:`ScopeNotFoundError`.
        """
        validate_stream_name(group)
        stored = dataclasses.replace(
            config, generation=0, reader_group_id=uuid.uuid4(), updating=False, removed_streams=frozenset()
        )
        try:
            created = await self._create(self._rg_path(scope, group), stored)
        except NodeNotFoundError:
            raise ScopeNotFoundError("scope not found", scope=scope) from None
        if not created:
            existing, _ = await self._rg(scope, group)
            if not existing.same_config(config):
                raise ReaderGroupExistsError("reader group exists with another configuration", scope=scope, name=group)
            stored = existing
            if existing.updating:
                return stored
        await self._apply_subscriptions(scope, group, stored)
        return stored

    async def update_reader_group(
        self, scope: str, group: str, config: ReaderGroupConfigRecord, expected_generation: int
    ) -> ReaderGroupConfigRecord:
        """Replace the configuration (generation + 1, same id) and adjust the subscriptions.

        :class:`GenerationMismatchError` unless the stored generation is ``expected_generation``;
        :class:`OperationConflictError` while another update is unfinished (the same update is
        resumed); :class:`WriteConflictError` on a lost race.
        """
        record, version = await self._rg(scope, group)
        if record.updating:
            if record.generation == expected_generation + 1 and record.same_config(config):
                return await self.complete_reader_group_update(scope, group)
            raise OperationConflictError("another reader group update is unfinished", scope=scope, name=group)
        if record.generation != expected_generation:
            raise GenerationMismatchError(
                f"generation is {record.generation}, not {expected_generation}", scope=scope, name=group
            )
        removed: frozenset[str] = frozenset()
        if record.is_subscriber:
            removed = record.streams if not config.is_subscriber else record.streams - config.streams
        update = dataclasses.replace(
            config,
            generation=record.generation + 1,
            reader_group_id=record.reader_group_id,
            updating=True,
            removed_streams=removed,
        )
        await self._cas(self._rg_path(scope, group), update, version, scope=scope, name=group, what="reader group")
        return await self.complete_reader_group_update(scope, group)

    async def complete_reader_group_update(self, scope: str, group: str) -> ReaderGroupConfigRecord:
        """Apply an unfinished update's subscription changes and clear ``updating`` (idempotent)."""
        record, _ = await self._rg(scope, group)
        if not record.updating:
            return record
        await self._apply_subscriptions(scope, group, record)
        return await self._update(
            self._rg_path(scope, group),
            ReaderGroupConfigRecord,
            lambda r: (
                dataclasses.replace(r, updating=False, removed_streams=frozenset())
                if r.updating and r.generation == record.generation
                else None
            ),
            scope=scope,
            name=group,
            what="reader group",
        )

    async def delete_reader_group(self, scope: str, group: str, reader_group_id: uuid.UUID | None = None) -> None:
        """Remove the group's subscriptions, then its record. :class:`ReaderGroupNotFoundError` if it
        does not exist or has another id than ``reader_group_id``."""
        record, _ = await self._rg(scope, group)
        if reader_group_id is not None and record.reader_group_id != reader_group_id:
            raise ReaderGroupNotFoundError(
                f"reader group has another id than {reader_group_id}", scope=scope, name=group
            )
        name = subscriber_name(scope, group)
        for scoped in sorted(record.streams | record.removed_streams):
            await self._unsubscribe(scoped, name, None)
        with contextlib.suppress(NodeNotFoundError):
            await self._coord.delete(self._rg_path(scope, group))

    async def _apply_subscriptions(self, scope: str, group: str, record: ReaderGroupConfigRecord) -> None:
        name = subscriber_name(scope, group)
        for scoped in sorted(record.removed_streams):
            await self._unsubscribe(scoped, name, record.generation)
        if record.is_subscriber:
            for scoped in sorted(record.streams):
                stream_scope, stream = split_scoped(scoped)
                try:
                    await self.add_subscriber(stream_scope, stream, name, record.generation)
                except StreamNotFoundError:
                    continue

    async def _unsubscribe(self, scoped: str, name: str, generation: int | None) -> None:
        stream_scope, stream = split_scoped(scoped)
        with contextlib.suppress(StreamNotFoundError):
            await self.remove_subscriber(stream_scope, stream, name, generation)

    # ---- subscribers ------------------------------------------------------------------------------------------
    def _subscriber_path(self, scope: str, stream: str, subscriber: str) -> str:
        return self._sp(scope, stream, "subscribers", escape(subscriber))

    async def add_subscriber(self, scope: str, stream: str, subscriber: str, generation: int) -> None:
        """Add (or raise to ``generation``) a subscriber record; its position stays as it was."""
        path = self._subscriber_path(scope, stream, subscriber)
        record = SubscriberRecord(subscriber, generation, {}, self._clock_ms())
        if await self._create_in_stream(scope, stream, path, record):
            return
        await self._update(
            path,
            SubscriberRecord,
            lambda r: dataclasses.replace(r, generation=generation) if r.generation < generation else None,
            scope=scope,
            name=stream,
            what=f"subscriber {subscriber}",
        )

    async def remove_subscriber(self, scope: str, stream: str, subscriber: str, generation: int | None = None) -> None:
        """Remove a subscriber record unless it is newer than ``generation`` (``None``: always)."""
        path = self._subscriber_path(scope, stream, subscriber)
        for _ in range(self._config.update_attempts):
            found = await self._get_opt(path, SubscriberRecord)
            if found is None:
                await self._stream(scope, stream)
                return
            record, version = found
            if generation is not None and record.generation > generation:
                return
            try:
                await self._coord.delete(path, version)
                return
            except NodeNotFoundError:
                return
            except BadVersionError:
                continue

    async def get_subscribers(self, scope: str, stream: str) -> list[SubscriberRecord]:
        try:
            names = await self._coord.children(self._sp(scope, stream, "subscribers"))
        except NodeNotFoundError:
            await self._stream(scope, stream)
            return []
        found = await asyncio.gather(
            *(self._get_opt(self._sp(scope, stream, "subscribers", n), SubscriberRecord) for n in names)
        )
        return sorted((f[0] for f in found if f is not None), key=lambda r: r.subscriber)

    async def list_subscribers(self, scope: str, stream: str) -> list[str]:
        """Names (``scope/group``) of the reader groups subscribed to the stream."""
        return [r.subscriber for r in await self.get_subscribers(scope, stream)]

    async def update_subscriber_stream_cut(
        self,
        scope: str,
        stream: str,
        subscriber: str,
        reader_group_id: uuid.UUID,
        generation: int,
        cut: CutLike,
    ) -> SubscriberRecord:
        """Record a subscriber's position. The cut must be valid and at or after the previous one
        (:class:`InvalidStreamCutError`); ``generation`` must not be older than the record's
        (:class:`GenerationMismatchError`); the group must exist with ``reader_group_id``
        (:class:`ReaderGroupNotFoundError`); :class:`DataNotFoundError` if it is no subscriber."""
        group_scope, group = split_scoped(subscriber)
        group_record = await self.get_reader_group(group_scope, group)
        if group_record.reader_group_id != reader_group_id:
            raise ReaderGroupNotFoundError(
                f"reader group has another id than {reader_group_id}", scope=group_scope, name=group
            )
        path = self._subscriber_path(scope, stream, subscriber)
        found = await self._get_opt(path, SubscriberRecord)
        if found is None:
            await self._stream(scope, stream)
            raise DataNotFoundError(f"{subscriber} is not a subscriber", scope=scope, name=stream)
        record, version = found
        if generation < record.generation:
            raise GenerationMismatchError(
                f"subscriber generation is {record.generation}, not {generation}", scope=scope, name=stream
            )
        uid = (await self._stream(scope, stream)).uid
        positions = positions_of(cut)
        records, _ = await self._valid_cut(scope, stream, uid, positions)
        if record.truncation_cut:
            previous = await self._known_cut(scope, stream, uid, record.truncation_cut)
            if not cut_equal_or_after(positions, records.values(), record.truncation_cut, previous.values()):
                raise InvalidStreamCutError(
                    "stream cut is behind the subscriber's previous one", scope=scope, name=stream
                )
        update = SubscriberRecord(subscriber, max(generation, record.generation), positions, self._clock_ms())
        await self._cas(path, update, version, scope=scope, name=stream, what=f"subscriber {subscriber}")
        return update
