"""Stream lifecycle records: creation, state machine, configuration updates, tag index, deletion."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterable

from controller.metadata.codec import encode
from controller.metadata.errors import (
    IllegalStateTransitionError,
    OperationConflictError,
    ScopeNotFoundError,
    StreamNotFoundError,
    WriteConflictError,
)
from controller.metadata.records import (
    EMPTY_COMMITTING,
    EMPTY_TRANSITION,
    EMPTY_TRUNCATION,
    ConfigurationRecord,
    CreateStreamResult,
    CreateStreamStatus,
    EpochRecord,
    HistoryEntry,
    RetentionSet,
    SegmentRecord,
    StreamRecord,
    StreamState,
    is_transition_allowed,
)
from controller.metadata.store_base import StoreBase
from controller_client.model import StreamConfiguration, even_ranges, segment_id, validate_stream_name
from segstore_shared.coordination.store import BadVersionError, NodeExistsError, NodeNotFoundError, NotEmptyError

# Containers created with the stream, so nothing below a stream ever needs ``make_parents``.
STREAM_CONTAINERS = ("epochs", "history", "sealed", "cuts", "txns", "completed", "writers", "subscribers")


def _tag_only_change(old: StreamConfiguration, new: StreamConfiguration) -> bool:
    return (
        old.scaling == new.scaling
        and old.retention == new.retention
        and old.timestamp_aggregation_timeout_ms == new.timestamp_aggregation_timeout_ms
        and old.rollover_size_bytes == new.rollover_size_bytes
        and old.tags != new.tags
    )


class StreamOps(StoreBase):
    # ---- creation ---------------------------------------------------------------------------------------------
    async def create_stream(
        self,
        scope: str,
        stream: str,
        config: StreamConfiguration,
        creation_time_ms: int,
        *,
        starting_segment_number: int = 0,
    ) -> CreateStreamResult:
        """Write a new stream's records: configuration, state CREATING, epoch 0 with
        ``config.scaling.min_num_segments`` segments over :func:`even_ranges`, numbered from
        ``starting_segment_number``, and the empty workflow records.

        Resumable: when the stream node exists and the stream is still CREATING, the missing records
        are written from the *stored* creation time and configuration. The status says whether this
        request owns the creation (``NEW``: same creation time), another one does
        (``EXISTS_CREATING``) or it completed (``EXISTS_ACTIVE``). Raises :class:`ScopeNotFoundError`.
        """
        validate_stream_name(stream)
        path = self._stream_path(scope, stream)
        record = StreamRecord(uuid.uuid4().hex, creation_time_ms, starting_segment_number)
        try:
            created = await self._create(path, record)
        except NodeNotFoundError:
            raise ScopeNotFoundError("scope not found", scope=scope) from None
        if not created:
            record = await self._stream(scope, stream)
            state = await self._get_opt(self._sp(scope, stream, "state"), StreamState)
            if state is not None and state[0] != StreamState.CREATING:
                stored = await self._get_opt(self._sp(scope, stream, "config"), ConfigurationRecord)
                stored_config = stored[0].config if stored is not None else config
                return CreateStreamResult(
                    CreateStreamStatus.EXISTS_ACTIVE,
                    stored_config,
                    record.creation_time_ms,
                    record.starting_segment_number,
                )

        for container in STREAM_CONTAINERS:
            await self._create_in_stream(scope, stream, self._sp(scope, stream, container), b"")
        config_path = self._sp(scope, stream, "config")
        if not await self._create_in_stream(scope, stream, config_path, ConfigurationRecord(config)):
            config = (await self._get(config_path, ConfigurationRecord))[0].config
        for tag in config.tags:
            await self._add_tag(scope, stream, tag)
        for sub, initial in (
            ("transition", EMPTY_TRANSITION),
            ("truncation", EMPTY_TRUNCATION),
            ("committing", EMPTY_COMMITTING),
            ("retention", RetentionSet()),
        ):
            await self._create_in_stream(scope, stream, self._sp(scope, stream, sub), initial)
        await self._create_in_stream(scope, stream, self._sp(scope, stream, "txn_order"), b"")
        await self._create_in_stream(scope, stream, self._sp(scope, stream, "state"), StreamState.CREATING)

        t = record.creation_time_ms
        segments = tuple(
            SegmentRecord(segment_id(record.starting_segment_number + i, 0), t, start, end)
            for i, (start, end) in enumerate(even_ranges(config.scaling.min_num_segments))
        )
        epoch0 = EpochRecord(0, 0, segments, t)
        if not await self._create_in_stream(scope, stream, self._sp(scope, stream, "epochs", 0), epoch0):
            epoch0 = await self._epoch(scope, stream, record.uid, 0)
        await self._append_history(scope, stream, HistoryEntry(0, 0, t))
        await self._create_in_stream(scope, stream, self._sp(scope, stream, "current"), epoch0)

        state_now = await self.get_state(scope, stream)
        if state_now != StreamState.CREATING:
            status = CreateStreamStatus.EXISTS_ACTIVE
        elif record.creation_time_ms == creation_time_ms:
            status = CreateStreamStatus.NEW
        else:
            status = CreateStreamStatus.EXISTS_CREATING
        return CreateStreamResult(status, config, record.creation_time_ms, record.starting_segment_number)

    async def get_creation_time(self, scope: str, stream: str) -> int:
        return (await self._stream(scope, stream)).creation_time_ms

    # ---- state ------------------------------------------------------------------------------------------------
    async def set_state(
        self, scope: str, stream: str, state: StreamState, *, expected_version: int | None = None
    ) -> int:
        """Move the stream to ``state``; returns the state node's new version.

        A transition to the current state is a no-op (returns the current version). An illegal
        transition raises :class:`IllegalStateTransitionError`. With ``expected_version`` the change
        applies only to that version (else :class:`WriteConflictError`); without it the current
        state is re-read and the transition re-checked after a lost race.
        """
        path = self._sp(scope, stream, "state")
        for _ in range(self._config.update_attempts):
            current, version = await self.get_state_versioned(scope, stream)
            if current == state:
                return version
            if expected_version is not None and version != expected_version:
                raise WriteConflictError(f"state changed (now {current.name})", scope=scope, name=stream)
            if not is_transition_allowed(current, state):
                raise IllegalStateTransitionError(current.name, state.name, scope=scope, name=stream)
            try:
                return await self._coord.compare_and_set(path, encode(state), version)
            except BadVersionError:
                if expected_version is not None:
                    raise WriteConflictError("state changed concurrently", scope=scope, name=stream) from None
        raise WriteConflictError("state: too many concurrent updates", scope=scope, name=stream)

    # ---- configuration ----------------------------------------------------------------------------------------
    async def get_configuration(self, scope: str, stream: str) -> StreamConfiguration:
        """The configuration (the new one while an update is pending)."""
        return (await self.get_configuration_record(scope, stream))[0].config

    async def get_configuration_record(self, scope: str, stream: str) -> tuple[ConfigurationRecord, int]:
        return await self._stream_get(scope, stream, "config", ConfigurationRecord)

    async def start_update_configuration(
        self, scope: str, stream: str, config: StreamConfiguration
    ) -> tuple[ConfigurationRecord, int]:
        """Record ``config`` as a pending update (``updating=True``, removed tags noted).

        Idempotent for the update already pending; a different pending update raises
        :class:`OperationConflictError`; a lost race :class:`WriteConflictError`.
        """
        record, version = await self.get_configuration_record(scope, stream)
        if record.updating:
            if record.config == config:
                return record, version
            raise OperationConflictError("another configuration update is in progress", scope=scope, name=stream)
        removed = tuple(sorted(set(record.config.tags) - set(config.tags)))
        update = ConfigurationRecord(config, True, _tag_only_change(record.config, config), removed)
        new_version = await self._cas(
            self._sp(scope, stream, "config"), update, version, scope=scope, name=stream, what="configuration"
        )
        return update, new_version

    async def complete_update_configuration(self, scope: str, stream: str) -> ConfigurationRecord:
        """Finish a pending update: index its tags, unindex the removed ones, clear ``updating``.
        A no-op when no update is pending."""
        record, _ = await self.get_configuration_record(scope, stream)
        if not record.updating:
            return record
        for tag in record.config.tags:
            await self._add_tag(scope, stream, tag)
        await self._remove_tags(scope, stream, record.removed_tags)
        return await self._update(
            self._sp(scope, stream, "config"),
            ConfigurationRecord,
            lambda r: ConfigurationRecord(r.config) if r.updating else None,
            scope=scope,
            name=stream,
            what="configuration",
        )

    # ---- tag index --------------------------------------------------------------------------------------------
    async def _add_tag(self, scope: str, stream: str, tag: str) -> None:
        container = self._tag_path(scope, tag)
        for _ in range(self._config.update_attempts):
            try:
                await self._coord.create(container, b"", make_parents=False)
            except NodeExistsError:
                pass
            except NodeNotFoundError:
                raise ScopeNotFoundError("scope not found", scope=scope) from None
            try:
                await self._coord.create(f"{container}/{stream}", b"", make_parents=False)
                return
            except NodeExistsError:
                return
            except NodeNotFoundError:
                continue  # the empty container was removed concurrently
        raise WriteConflictError(f"tag index {tag!r}: too many concurrent updates", scope=scope, name=stream)

    async def _remove_tags(self, scope: str, stream: str, tags: Iterable[str]) -> None:
        for tag in tags:
            container = self._tag_path(scope, tag)
            with contextlib.suppress(NodeNotFoundError):
                await self._coord.delete(f"{container}/{stream}")
            with contextlib.suppress(NodeNotFoundError, NotEmptyError):
                await self._coord.delete(container)

    # ---- deletion ---------------------------------------------------------------------------------------------
    async def delete_stream(self, scope: str, stream: str) -> None:
        """Remove every record of the stream, its tag index entries first and its root node last.

        Resumable: a retry after a crash midway finishes the job. Raises :class:`StreamNotFoundError`
        when the root node is gone already (a previous attempt completed). State is not checked
        here: the delete workflow requires SEALED first.
        """
        if not await self.stream_exists(scope, stream):
            raise StreamNotFoundError("stream not found", scope=scope, name=stream)
        found = await self._get_opt(self._sp(scope, stream, "config"), ConfigurationRecord)
        if found is not None:
            await self._remove_tags(scope, stream, (*found[0].config.tags, *found[0].removed_tags))
        await self._delete_tree(self._stream_path(scope, stream))
        for key in [k for k in self._epoch_cache if k[0] == scope and k[1] == stream]:
            del self._epoch_cache[key]
