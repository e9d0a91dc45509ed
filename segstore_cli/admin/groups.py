"""``reader-group list|describe|delete``: what the controller knows of reader groups.

The controller holds a reader group's configuration (its streams with start and end cuts, checkpoint
settings, retention type, generation) and, for a group whose retention type is not NONE, a subscriber record
on each stream it reads. Readers and their positions are not the controller's: Pravega's Rust/Python client keeps
them in the group's state, a table segment in its own format (``controller_client.reader_groups.format``), which
``reader-group describe`` reads to show each segment's reader, offset and lag in bytes behind the tail (a group no
such reader ever joined has no state; Java readers keep theirs elsewhere).

Listing: ``Controller.proto`` has no call that lists reader groups (Pravega's clients list the ``_RG<group>``
streams of a scope). ``reader-group list`` asks segstore's admin extension (``ScopeContents``: every group
registered with the controller, subscribed or not) and each group's configuration; from a controller without the
extension it shows the groups the controller names as subscribers of the scope's streams (retention MANUAL or
AUTOMATIC) and says so. ``reader-group describe`` finds any group by name.

Deleting: ``reader-group delete`` deletes the group's state and its controller record through the client library
(``StreamManager.delete_reader_group``); a group with a controller record and no state (created through the
controller alone, or by a Java client) loses its record, and a Java client's ``_RG<group>`` state stream is
sealed and deleted, so that neither keeps the scope from being deleted.
"""

from __future__ import annotations

import argparse
import asyncio
from collections import defaultdict

from controller_client.controller.api import ReaderGroupConfig
from controller_client.errors import ReaderGroupNotFoundError, StreamNotFoundError
from controller_client.model import ReaderGroupRetention
from controller_client.reader_groups.format import (
    ReaderGroupState,
    ScopedSegment,
    StreamCutV1,
    state_from_entries,
    table_segment_name,
)
from controller_client.reader_groups.group import ReaderGroupNotInitializedError
from segment_store.client import NoSuchSegmentError
from segstore_cli.admin.connection import Session
from segstore_cli.admin.extension import NoAdminExtensionError, scope_contents
from segstore_cli.admin.progress import Activity
from segstore_cli.admin.views import (
    GroupStream,
    Outcome,
    ReaderGroupEntry,
    ReaderGroupList,
    ReaderGroupView,
    ReaderPosition,
)

JAVA_STATE_PREFIX = "_RG"
"""A Java client's reader group ``G`` keeps its state in the stream ``_RG<G>`` of the group's scope."""


async def _subscribers(session: Session, scope: str, stream: str) -> list[str]:
    """The subscribers of ``scope/stream`` (none when it was deleted meanwhile)."""
    try:
        return await session.controller.list_subscribers(scope, stream)
    except StreamNotFoundError:
        return []


async def list_groups(session: Session, args: argparse.Namespace, activity: Activity) -> ReaderGroupList:
    """Every reader group registered in ``args.scope``, with its retention and streams (module docstring).
    Raises ScopeNotFoundError."""
    scope = args.scope
    try:
        contents = await scope_contents(session, scope)
    except NoAdminExtensionError:
        return await _subscribed_groups(session, scope)
    configs = await asyncio.gather(*(_config(session, scope, name) for name in contents.reader_groups))
    entries = tuple(
        ReaderGroupEntry(
            scope,
            name,
            tuple(sorted(f"{cut.scope}/{cut.stream}" for cut in config.starting_stream_cuts)),
            ReaderGroupRetention(config.retention_type).name,
        )
        for name, config in zip(contents.reader_groups, configs, strict=True)
        if config is not None
    )
    return ReaderGroupList(scope, entries, complete=True, hidden=contents.hidden.get("reader_groups", 0))


async def _config(session: Session, scope: str, name: str) -> ReaderGroupConfig | None:
    """The group's configuration; None when it was deleted meanwhile."""
    try:
        return await session.controller.get_reader_group_config(scope, name)
    except ReaderGroupNotFoundError:
        return None


async def _subscribed_groups(session: Session, scope: str) -> ReaderGroupList:
    """The reader groups subscribed to the streams of ``scope``: all a controller without segstore's admin
    extension tells."""
    streams = await session.manager.list_streams(scope)
    found = await asyncio.gather(*(_subscribers(session, scope, stream) for stream in streams))
    groups: defaultdict[tuple[str, str], list[str]] = defaultdict(list)
    for stream, subscribers in zip(streams, found, strict=True):
        for subscriber in subscribers:
            group_scope, _, name = subscriber.partition("/")
            groups[(group_scope, name)].append(f"{scope}/{stream}")
    entries = (ReaderGroupEntry(s, n, tuple(sorted(streams))) for (s, n), streams in sorted(groups.items()))
    return ReaderGroupList(scope, tuple(entries))


async def delete_group(session: Session, args: argparse.Namespace, activity: Activity) -> Outcome:
    """Delete a reader group: its state, its controller record, a Java client's ``_RG`` state stream (module
    docstring). Raises ReaderGroupNotFoundError when there is none of them."""
    scope, name = args.group
    java_state = JAVA_STATE_PREFIX + name
    with activity.step(f"deleting reader group {scope}/{name}"):
        try:
            await session.manager.delete_reader_group(scope, name)
            found = True
        except ReaderGroupNotInitializedError:  # no state in the client library's format: the record alone
            found = await _delete_record(session, scope, name)
        if await session.controller.stream_exists(scope, java_state):
            await session.manager.seal_stream(scope, java_state)
            await session.manager.delete_stream(scope, java_state)
            found = True
    if not found:
        raise ReaderGroupNotFoundError(scope, name)
    return Outcome("deleted", f"reader group {scope}/{name}")


async def _delete_record(session: Session, scope: str, name: str) -> bool:
    """Delete the group's controller record; False if there is none."""
    config = await _config(session, scope, name)
    if config is None:
        return False
    return await session.controller.delete_reader_group(scope, name, config.reader_group_id)


async def describe_group(session: Session, args: argparse.Namespace, activity: Activity) -> ReaderGroupView:
    """The configuration the controller holds for ``args.group``, and on which streams it is a subscriber.
    Raises ReaderGroupNotFoundError."""
    scope, name = args.group
    try:
        config = await session.controller.get_reader_group_config(scope, name)
    except ReaderGroupNotFoundError:
        return await _unregistered(session, scope, name)  # the official client's groups: only their state
    subscriber = f"{scope}/{name}"
    ends = {(cut.scope, cut.stream): cut.positions for cut in config.ending_stream_cuts}
    subscribed = await asyncio.gather(
        *(_subscribers(session, cut.scope, cut.stream) for cut in config.starting_stream_cuts)
    )
    streams = tuple(
        GroupStream(
            f"{cut.scope}/{cut.stream}",
            dict(cut.positions),
            dict(ends[(cut.scope, cut.stream)]) if (cut.scope, cut.stream) in ends else None,
            subscriber in names,
        )
        for cut, names in zip(config.starting_stream_cuts, subscribed, strict=True)
    )
    return ReaderGroupView(
        scope=scope,
        name=name,
        group_id=str(config.reader_group_id),
        generation=config.generation,
        retention=ReaderGroupRetention(config.retention_type).name,
        refresh_ms=config.group_refresh_time_ms,
        checkpoint_interval_ms=config.automatic_checkpoint_interval_ms,
        max_outstanding_checkpoints=config.max_outstanding_checkpoint_request,
        streams=streams,
        positions=await _positions(session, scope, name),
    )


async def _unregistered(session: Session, scope: str, name: str) -> ReaderGroupView:
    """A group the controller does not know (the official Rust/Python client registers none), from its state;
    ReaderGroupNotFoundError when there is no state either."""
    state = await _state(session, scope, name)
    if state is None:
        raise ReaderGroupNotFoundError(scope, name)
    starts = state.config.starting_stream_cuts if state.config is not None else {}
    streams = tuple(
        GroupStream(
            f"{stream.scope}/{stream.stream}",
            {s.segment.number: o for s, o in cut.positions.items()} if isinstance(cut, StreamCutV1) else {},
            None,
            False,
        )
        for stream, cut in starts.items()
    )
    refresh = state.config.group_refresh_time_millis if state.config is not None else 0
    return ReaderGroupView(
        scope, name, "", 0, "not registered with the controller", refresh, -1, 0, streams,
        await _positions(session, scope, name, state),
    )  # fmt: skip


async def _state(session: Session, scope: str, name: str) -> ReaderGroupState | None:
    segment = table_segment_name(scope, name)
    try:
        entries = [(entry.key, entry.value) async for entry in session.manager.client.iter_table_entries(segment)]
    except NoSuchSegmentError:
        return None
    return state_from_entries(entries)


async def _positions(
    session: Session, scope: str, name: str, state: ReaderGroupState | None = None
) -> tuple[ReaderPosition, ...] | None:
    """Per segment, its reader, offset and lag, from the group's state in the official client's format
    (``controller_client.reader_groups.format``); None when there is no such state."""
    state = state or await _state(session, scope, name)
    if state is None:
        return None
    held: list[tuple[str | None, ScopedSegment, int]] = [
        (reader, seg, offset)
        for reader, segments in state.assigned_segments.items()
        for seg, offset in segments.items()
    ]
    held += [(None, seg, offset) for seg, offset in state.unassigned_segments.items()]
    lengths = await asyncio.gather(
        *(session.manager.segment_info(s.scope, s.stream, s.segment.number) for _, s, _ in held)
    )
    return tuple(
        ReaderPosition(reader, s.scope, s.stream, s.segment.number, offset, max(0, info.write_offset - offset))
        for (reader, s, offset), info in sorted(
            zip(held, lengths, strict=True), key=lambda item: (item[0][0] or "~", item[0][1].segment.number)
        )
    )
