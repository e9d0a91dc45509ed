"""``reader-group list|describe``: what the controller knows of reader groups.

The controller holds a reader group's configuration (its streams with start and end cuts, checkpoint
settings, retention type, generation) and, for a group whose retention type is not NONE, a subscriber record
on each stream it reads. Readers and their positions are not the controller's: Pravega's clients keep them in
the group's state (a table segment in the official client's format), which segstore's client does not read
yet (issue 25), so neither command shows per-reader positions or lag.

Listing: ``Controller.proto`` has no call that lists reader groups. Pravega's clients list the ``_RG<group>``
streams of a scope; segstore's controller leaves names starting with ``_`` out of ``listStreamsInScope``. So
``reader-group list`` shows the groups the controller names as subscribers of the scope's streams (those with
retention MANUAL or AUTOMATIC) and says so; ``reader-group describe`` finds any group by name.
"""

from __future__ import annotations

import argparse
import asyncio
from collections import defaultdict

from controller_client.errors import StreamNotFoundError
from controller_client.proto_convert import ReaderGroupRetention
from segment_store.admin.connection import Session
from segment_store.admin.progress import Activity
from segment_store.admin.views import GroupStream, ReaderGroupEntry, ReaderGroupList, ReaderGroupView


async def _subscribers(session: Session, scope: str, stream: str) -> list[str]:
    """The subscribers of ``scope/stream`` (none when it was deleted meanwhile)."""
    try:
        return await session.controller.list_subscribers(scope, stream)
    except StreamNotFoundError:
        return []


async def list_groups(session: Session, args: argparse.Namespace, activity: Activity) -> ReaderGroupList:
    """The reader groups subscribed to the streams of ``args.scope`` (module docstring). Raises
    ScopeNotFoundError."""
    scope = args.scope
    streams = await session.manager.list_streams(scope)
    found = await asyncio.gather(*(_subscribers(session, scope, stream) for stream in streams))
    groups: defaultdict[tuple[str, str], list[str]] = defaultdict(list)
    for stream, subscribers in zip(streams, found, strict=True):
        for subscriber in subscribers:
            group_scope, _, name = subscriber.partition("/")
            groups[(group_scope, name)].append(f"{scope}/{stream}")
    entries = (ReaderGroupEntry(s, n, tuple(sorted(streams))) for (s, n), streams in sorted(groups.items()))
    return ReaderGroupList(scope, tuple(entries))


async def describe_group(session: Session, args: argparse.Namespace, activity: Activity) -> ReaderGroupView:
    """The configuration the controller holds for ``args.group``, and on which streams it is a subscriber.
    Raises ReaderGroupNotFoundError."""
    scope, name = args.group
    config = await session.controller.get_reader_group_config(scope, name)
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
    )
