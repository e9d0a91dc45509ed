"""Reader groups: several readers, in any processes, sharing the reading of streams (issue 25).

A group's state lives in the table segment ``<scope>/<group>_kvtable/0.#epoch.0`` in the official Rust client's
format (:mod:`controller_client.reader_groups.format`), so readers of that client (the PyPI ``pravega`` package)
and ours can be members of one group. The group is also registered with the controller (``createReaderGroup``)
when we create it: that is where its retention type lives (a *subscriber* group holds back consumption-based
retention). Groups the official client made are not registered (it never calls the controller for them): they are
opened, read and checkpointed all the same, and deleting one deletes its table.

* :meth:`ReaderGroup.create_reader` brings a reader online (:class:`~controller_client.reader_groups.reader.
  EventStreamReader`); segments are balanced across the online readers, each read by one.
* :meth:`ReaderGroup.reader_offline` takes a reader offline (a dead process's, say), its segments resuming at its
  last reported positions or at the ones given.
* :meth:`ReaderGroup.initiate_checkpoint` returns a :class:`Checkpoint` once every online reader has passed it;
  :meth:`ReaderGroup.reset` starts the group over at a checkpoint or at stream cuts (online readers are taken
  offline: make new ones). Checkpoints are ours: the official client's readers never reach one, so a checkpoint
  completes only once they are offline.
* For a subscriber group with ``AUTOMATIC`` retention each completed checkpoint is published as the group's
  position (``updateSubscriberStreamCut``); with ``MANUAL`` the application publishes with
  :meth:`ReaderGroup.update_retention_stream_cut`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from controller_client.errors import ReaderGroupNotFoundError
from controller_client.model import ReaderGroupConfig as ControllerGroupConfig
from controller_client.model import ReaderGroupRetention, StreamCut
from controller_client.ports import ControllerApi
from controller_client.reader_groups.format import (
    BoundaryCut,
    ReaderGroupConfig,
    ScopedSegment,
    ScopedStream,
    Segment,
    StreamCutV1,
    table_segment_name,
)
from controller_client.reader_groups.reader import AutomaticCheckpoints, EventStreamReader, GroupReaderConfig
from controller_client.reader_groups.state import (
    CheckpointRecord,
    GroupView,
    ReaderGroupStateError,
    create_checkpoint,
    initialize,
    remove_reader,
    reset,
    view,
)
from controller_client.reader_groups.table import GroupTable, Update
from segment_store.client import NoSuchSegmentError, SegmentClient

_log = logging.getLogger(__name__)
_T = TypeVar("_T")

CHECKPOINT_POLL_S = 0.05


class GroupManager(Protocol):
    """What a reader group uses of its manager (:class:`~controller_client.stream_manager.StreamManager` has it)."""

    @property
    def controller(self) -> ControllerApi: ...

    @property
    def client(self) -> SegmentClient: ...

    @property
    def retry_timeout_s(self) -> float:
        """The budget of its calls (and of a reader's segment readers failing in a row)."""
        ...

    async def segment_call(self, segment: str, call: Callable[[], Awaitable[_T]]) -> _T:
        """Run ``call`` on ``segment``, retried after WrongHost or a lost connection."""
        ...

    def invalidate_segment(self, segment: str) -> None:
        """Forget the cached endpoint of ``segment``."""

    async def head_cut(self, scope: str, stream: str) -> StreamCut: ...


class CheckpointTimeoutError(ReaderGroupStateError, TimeoutError):
    """Some readers did not reach a checkpoint in time (it stays pending; they reach it when they next read)."""


class ReaderGroupNotInitializedError(ReaderGroupStateError):
    """The group's table holds no state (it does not exist, or its creator has not initialized it yet)."""


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A completed checkpoint: for every segment of the group, where reading after the checkpoint starts;
    ``future`` are successors waiting for predecessors at that point (they are not in ``positions``)."""

    name: str
    positions: Mapping[ScopedSegment, int]
    future: Mapping[ScopedSegment, tuple[Segment, ...]]

    @classmethod
    def of(cls, record: CheckpointRecord) -> Checkpoint:
        return cls(record.name, dict(record.positions), dict(record.future))

    def stream_cut(self, scope: str, stream: str) -> StreamCut:
        """The positions in one stream as a stream cut. While a merge is half done (a successor in ``future``)
        the cut lacks the predecessors already read: reset the group to the checkpoint itself, not to this cut."""
        return StreamCut(
            scope,
            stream,
            {s.segment.number: o for s, o in self.positions.items() if (s.scope, s.stream) == (scope, stream)},
        )

    def pending_merge(self, scope: str, stream: str) -> bool:
        return any((s.scope, s.stream) == (scope, stream) for s in self.future)


def _cut_to_format(cut: StreamCut) -> StreamCutV1:
    stream = ScopedStream(cut.scope, cut.stream)
    return StreamCutV1(stream, {ScopedSegment.of(cut.scope, cut.stream, s): o for s, o in cut.positions.items()})


class ReaderGroup:
    """A reader group (make one with ``StreamManager.create_reader_group`` or open it with
    ``StreamManager.reader_group``)."""

    def __init__(
        self,
        manager: GroupManager,
        scope: str,
        name: str,
        config: ReaderGroupConfig,
        registered: ControllerGroupConfig | None,
    ) -> None:
        self.scope = scope
        self.name = name
        self.config = config
        """The group's configuration as stored in its state (starting and ending cuts)."""
        self.registered = registered
        """The controller's record of the group (None for a group the official client made)."""
        self._manager = manager
        self._table = self._new_table()

    def _new_table(self) -> GroupTable:
        return GroupTable(self._manager.client, table_segment_name(self.scope, self.name), self._manager.segment_call)

    @property
    def streams(self) -> list[ScopedStream]:
        return list(self.config.starting_stream_cuts)

    def _end_positions(self) -> dict[ScopedSegment, int]:
        ends: dict[ScopedSegment, int] = {}
        for cut in self.config.ending_stream_cuts.values():
            if isinstance(cut, StreamCutV1):
                ends.update(cut.positions)
        return ends

    # ---- readers --------------------------------------------------------------------------------------------

    async def create_reader(self, reader: str, config: GroupReaderConfig | None = None) -> EventStreamReader:
        """Bring reader ``reader`` online (ReaderAlreadyOnlineError if one of that name is) and return it."""
        if not reader:
            raise ValueError("reader: a reader needs a name")
        member = EventStreamReader(
            reader,
            self._new_table(),
            self._manager.controller,
            self._manager.client,
            self._end_positions(),
            config,
            self._manager.invalidate_segment,
            self._automatic(),
            self._manager.retry_timeout_s,
        )
        await member.join()
        return member

    def _automatic(self) -> AutomaticCheckpoints | None:
        """A subscriber group with AUTOMATIC retention checkpoints itself every
        ``automatic_checkpoint_interval_ms`` (Pravega's default 30 s; -1: never) and publishes each checkpoint."""
        registered = self.registered
        if registered is None or registered.retention_type != ReaderGroupRetention.AUTOMATIC:
            return None
        if registered.automatic_checkpoint_interval_ms <= 0:
            return None

        async def publish(record: CheckpointRecord) -> None:
            await self._publish(Checkpoint.of(record))

        return AutomaticCheckpoints(registered.automatic_checkpoint_interval_ms, publish)

    async def reader_offline(self, reader: str, positions: Mapping[ScopedSegment, int] | None = None) -> bool:
        """Take ``reader`` offline; its segments resume at ``positions`` (default: its last reported ones). False
        if it was offline already."""
        return await self._table.update(lambda u: remove_reader(u, reader, positions))

    async def online_readers(self) -> list[str]:
        return sorted((await self.state()).assigned)

    async def state(self) -> GroupView:
        """The group's state now (every reader's segments and positions, unassigned and future segments,
        checkpoints)."""
        await self._table.fetch()
        return view(Update(self._table.entries))

    async def stream_cuts(self) -> dict[ScopedStream, StreamCut]:
        """Where the group is, per stream: each held or unassigned segment at its last reported position."""
        state = await self.state()
        cuts: dict[ScopedStream, dict[int, int]] = {s: {} for s in self.streams}
        for positions in [*state.assigned.values(), state.unassigned]:
            for segment, offset in positions.items():
                cuts.setdefault(ScopedStream(segment.scope, segment.stream), {})[segment.segment.number] = offset
        return {s: StreamCut(s.scope, s.stream, p) for s, p in cuts.items()}

    # ---- checkpoints ------------------------------------------------------------------------------------------

    async def initiate_checkpoint(self, name: str, timeout_s: float | None = 60.0) -> Checkpoint:
        """Create checkpoint ``name`` and return it once every reader online now has passed it.

        CheckpointExistsError if the name is taken; CheckpointTimeoutError (naming the readers still pending)
        after ``timeout_s``. A subscriber group with ``AUTOMATIC`` retention publishes it as its position.
        """
        if not name:
            raise ValueError("name: a checkpoint needs a name")
        await self._table.update(lambda u: create_checkpoint(u, name))
        loop = asyncio.get_running_loop()
        deadline = None if timeout_s is None else loop.time() + timeout_s
        while True:
            record = (await self.state()).checkpoints.get(name)
            if record is None:
                raise ReaderGroupStateError(f"checkpoint {name!r} was deleted (the group was reset) before completing")
            if record.complete:
                checkpoint = Checkpoint.of(record)
                await self._publish(checkpoint)
                return checkpoint
            if deadline is not None and loop.time() >= deadline:
                raise CheckpointTimeoutError(
                    f"checkpoint {name!r}: readers {list(record.pending)} did not reach it in {timeout_s} s "
                    "(it stays pending)"
                )
            await asyncio.sleep(CHECKPOINT_POLL_S)

    async def checkpoints(self) -> list[Checkpoint]:
        """The completed checkpoints kept in the state, oldest first."""
        records = sorted((await self.state()).checkpoints.values(), key=lambda c: (c.created_ms, c.name))
        return [Checkpoint.of(r) for r in records if r.complete]

    async def _publish(self, checkpoint: Checkpoint) -> None:
        registered = self.registered
        if registered is None or registered.retention_type != ReaderGroupRetention.AUTOMATIC:
            return
        for stream in self.streams:
            if checkpoint.pending_merge(stream.scope, stream.stream):
                _log.info(
                    "checkpoint %s of %s/%s: a merge is half done, not published",
                    checkpoint.name,
                    self.scope,
                    self.name,
                )
                continue
            await self.update_retention_stream_cut(checkpoint.stream_cut(stream.scope, stream.stream))

    async def update_retention_stream_cut(self, cut: StreamCut) -> None:
        """Publish ``cut`` as this subscriber group's position in its stream (consumption-based retention)."""
        registered = self.registered
        if registered is None or registered.retention_type == ReaderGroupRetention.NONE:
            raise ReaderGroupStateError(f"reader group {self.scope}/{self.name} is not a subscriber (retention NONE)")
        await self._manager.controller.update_subscriber_stream_cut(
            f"{self.scope}/{self.name}", registered.reader_group_id, registered.generation, cut
        )

    async def reset(self, to: Checkpoint | Sequence[StreamCut]) -> None:
        """Start the group over at a checkpoint or at one stream cut per stream (a cut with no positions: the
        stream's head). Every online reader is taken offline (its next call raises ReaderOfflineError)."""
        if isinstance(to, Checkpoint):
            positions, future = dict(to.positions), dict(to.future)
        else:
            positions, future = {}, {}
            for cut in to:
                if ScopedStream(cut.scope, cut.stream) not in self.config.starting_stream_cuts:
                    raise ValueError(f"reset: {cut.scope}/{cut.stream} is not a stream of the group")
                resolved = cut if cut.positions else await self._manager.head_cut(cut.scope, cut.stream)
                positions.update(_cut_to_format(resolved).positions)
        await self._table.update(lambda u: reset(u, positions, future))

    async def delete(self) -> None:
        """Delete the group: its controller record, then its state. Its readers go offline. With authentication on
        the controller asks READ_UPDATE on the group first, so a caller it refuses leaves the state as it was."""
        if self.registered is not None:
            await self._manager.controller.delete_reader_group(self.scope, self.name, self.registered.reader_group_id)
        with contextlib.suppress(NoSuchSegmentError):
            await self._table.delete()


async def create_reader_group(
    manager: GroupManager,
    scope: str,
    name: str,
    start: Sequence[StreamCut],
    end: Sequence[StreamCut] = (),
    retention: ReaderGroupRetention = ReaderGroupRetention.NONE,
    refresh_ms: int = 3000,
    automatic_checkpoint_ms: int = 30_000,
) -> ReaderGroup:
    """Create (or join, if it exists) group ``name`` reading the streams of ``start`` (a cut with no positions
    starts at the head) up to ``end`` (optional, per stream). Idempotent: an existing group keeps its state. A
    subscriber group with ``AUTOMATIC`` retention checkpoints itself every ``automatic_checkpoint_ms`` (-1: never)."""
    resolved = [c if c.positions else await manager.head_cut(c.scope, c.stream) for c in start]
    wanted = ControllerGroupConfig(
        scope,
        name,
        tuple(resolved),
        tuple(end),
        group_refresh_time_ms=refresh_ms,
        automatic_checkpoint_interval_ms=automatic_checkpoint_ms,
        retention_type=retention,
    )
    registered = await manager.controller.create_reader_group(wanted)
    if retention != ReaderGroupRetention.NONE and registered.reader_group_id == wanted.reader_group_id:
        for cut in resolved:
            await manager.controller.update_subscriber_stream_cut(
                f"{scope}/{name}", registered.reader_group_id, registered.generation, cut
            )
    config = ReaderGroupConfig(
        {ScopedStream(c.scope, c.stream): _cut_to_format(c) for c in resolved},
        {ScopedStream(c.scope, c.stream): _cut_to_format(c) for c in end},
        refresh_ms,
    )
    group = ReaderGroup(manager, scope, name, config, registered)
    await group._table.create()
    positions: dict[ScopedSegment, int] = {}
    for cut in resolved:
        positions.update(_cut_to_format(cut).positions)
    await group._table.update(lambda u: initialize(u, config, positions))
    return await open_reader_group(manager, scope, name)


async def open_reader_group(manager: GroupManager, scope: str, name: str) -> ReaderGroup:
    """An existing group (ours or the official client's). ReaderGroupNotInitializedError if it has no state."""
    registered: ControllerGroupConfig | None
    try:
        registered = await manager.controller.get_reader_group_config(scope, name)
    except ReaderGroupNotFoundError:
        registered = None
    table = GroupTable(manager.client, table_segment_name(scope, name), manager.segment_call)
    try:
        await table.fetch()
    except NoSuchSegmentError:
        raise ReaderGroupNotInitializedError(f"reader group {scope}/{name} does not exist") from None
    config = view(Update(table.entries)).config
    if config is None:
        raise ReaderGroupNotInitializedError(f"reader group {scope}/{name} has no state yet")
    for stream, cut in config.starting_stream_cuts.items():
        if isinstance(cut, BoundaryCut):
            _log.debug("group %s/%s starts %s at its %s", scope, name, stream, cut.value)
    return ReaderGroup(manager, scope, name, config, registered)
