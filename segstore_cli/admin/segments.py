"""``segment info`` (one segment by its name) and ``controllers`` (the controllers of the cluster).

Which segment store runs which segment container is known to the controller (its container map in
ZooKeeper) but not exposed by ``Controller.proto``: ``getURI`` answers the segment store of one segment, which is
what ``segment info`` and ``stream describe`` show for each segment.
"""

from __future__ import annotations

import argparse

from controller_client.model import qualified_segment_name
from segment_store.client import NoSuchSegmentError
from segstore_cli.admin.connection import Session
from segstore_cli.admin.errors import AdminError
from segstore_cli.admin.parsing import endpoint_label
from segstore_cli.admin.progress import Activity
from segstore_cli.admin.views import ControllersView, SegmentInfoView, segment_state


async def segment_info(session: Session, args: argparse.Namespace, activity: Activity) -> SegmentInfoView:
    """A stream segment as its segment store holds it: start, length, last change; its state (active or sealed,
    as ``stream describe`` says) and its key range when it is active. Raises AdminError when the segment store has
    no such segment."""
    segment = args.segment
    scope, stream, segment_id = segment.scope, segment.stream, segment.segment_id
    name = qualified_segment_name(scope, stream, segment_id)
    host, port = await session.controller.get_uri(scope, stream, segment_id)
    try:
        info = await session.manager.segment_info(scope, stream, segment_id)
    except NoSuchSegmentError:
        info = None
    if info is None or not info.exists or info.deleted:
        raise AdminError(f"segment {name} does not exist")
    key_range = None
    if await session.controller.stream_exists(scope, stream):
        active = await session.controller.get_current_segments(scope, stream)  # none once the stream is sealed
        key_range = next(((s.key_start, s.key_end) for s in active if s.segment_id == segment_id), None)
    return SegmentInfoView(
        name=name,
        scope=scope,
        stream=stream,
        segment_id=segment_id,
        start_offset=info.start_offset,
        length=info.write_offset,
        sealed=info.sealed,
        last_modified_ms=info.last_modified_ms,
        endpoint=endpoint_label(host, port),
        key_range=key_range,
        state=segment_state(key_range is not None, info.sealed),
    )


async def list_controllers(session: Session, args: argparse.Namespace, activity: Activity) -> ControllersView:
    """The controllers of the cluster (``getControllerServerList``)."""
    found = await session.controller.get_controller_server_list()
    return ControllersView(tuple(endpoint_label(host, port) for host, port in found))
