"""``stream describe``: a stream's configuration, segments, cuts, size, subscribers and scale history.

Where each part comes from:

* configuration and subscribers: the controller (``getStreamConfiguration``, ``listSubscribers``);
* active segments and their key ranges: ``getCurrentSegments`` (a Pravega controller answers none for a sealed
  stream; then the segments of its last epoch, from ``getSegments`` at the end of time); sealed or not:
  ``isSegmentValid`` of an active segment (segstore's controller answers a sealed stream's last segments);
* head cut: ``getSegments`` at time 0 (the truncation point), each offset raised to the segment's start where
  the segment store truncated further (as ``StreamManager.head_cut``); tail cut: the active segments at their
  lengths (as ``StreamManager.tail_cut``);
* segments holding data: ``getSegmentsBetween`` the head and the tail; their start and length from their segment
  stores (``GetStreamSegmentInfo``), and which segment store serves each from ``getURI``;
* scale history: ``getEpochSegments`` for each epoch up to the current one (the highest creation epoch of the
  active segments), the last ``--history`` of them. The controller keeps no time of a scale that it answers.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Iterable, Mapping

from controller_client.model import SegmentRange, StreamCut, creation_epoch
from segment_store.client import SegmentStatus
from segstore_cli.admin.connection import Session
from segstore_cli.admin.parsing import endpoint_label
from segstore_cli.admin.progress import Activity
from segstore_cli.admin.streams import require_stream
from segstore_cli.admin.views import EpochView, SegmentView, StreamView

END_OF_TIME_MS = 2**63 - 1
CONCURRENT_SEGMENT_CALLS = 32
"""At most this many segments are asked about at once (a stream may have thousands)."""


async def last_segments(session: Session, scope: str, stream: str) -> list[SegmentRange]:
    """The active segments; for a sealed stream, those of its last epoch (it was sealed with them)."""
    active = await session.controller.get_current_segments(scope, stream)
    if active:
        return active
    last = await session.controller.get_segments_at_time(scope, stream, END_OF_TIME_MS)
    if not last.positions:
        return []
    epoch = max(creation_epoch(s) for s in last.positions)
    return await session.controller.get_epoch_segments(scope, stream, epoch)


async def _segment_views(
    session: Session, scope: str, stream: str, ids: Iterable[int], ranges: Mapping[int, tuple[float, float]]
) -> dict[int, SegmentView]:
    """Each segment as its segment store holds it, with the segment store's endpoint (asked concurrently, at most
    :data:`CONCURRENT_SEGMENT_CALLS` at a time)."""
    limit = asyncio.Semaphore(CONCURRENT_SEGMENT_CALLS)

    async def one(segment_id: int) -> SegmentView:
        async with limit:
            info: SegmentStatus = await session.manager.segment_info(scope, stream, segment_id)
            host, port = await session.controller.get_uri(scope, stream, segment_id)
        endpoint = endpoint_label(host, port)
        key_range = ranges.get(segment_id)
        return SegmentView(segment_id, key_range, info.start_offset, info.write_offset, info.sealed, endpoint)

    ordered = sorted(set(ids))
    views = await asyncio.gather(*(one(segment_id) for segment_id in ordered))
    return dict(zip(ordered, views, strict=True))


async def scale_history(session: Session, scope: str, stream: str, current: int, count: int) -> list[EpochView]:
    """The last ``count`` epochs up to ``current`` (0: all of them), each with what changed from the one before."""
    first = 0 if count <= 0 else max(0, current - count + 1)
    epochs = list(range(max(0, first - 1), current + 1))  # one more before the first: what the first changed
    fetched = await asyncio.gather(*(session.controller.get_epoch_segments(scope, stream, e) for e in epochs))
    segments = {
        e: {s.segment_id: (s.key_start, s.key_end) for s in found} for e, found in zip(epochs, fetched, strict=True)
    }
    history = []
    for epoch in range(first, current + 1):
        before = segments.get(epoch - 1, {})
        now = segments[epoch]
        sealed = tuple(sorted(s for s in before if s not in now))
        created = tuple(sorted(s for s in now if s not in before))
        history.append(EpochView(epoch, now, sealed, created))
    return history


async def describe_stream(session: Session, args: argparse.Namespace, activity: Activity) -> StreamView:
    """Everything :mod:`describe` lists about ``args.stream``. Raises StreamNotFoundError, ScopeNotFoundError."""
    scope, stream = args.stream
    await require_stream(session, scope, stream)
    controller = session.controller
    config, active, at_head = await asyncio.gather(
        controller.get_stream_configuration(scope, stream),
        controller.get_current_segments(scope, stream),
        controller.get_segments_at_time(scope, stream, 0),
    )
    sealed = not active or not await controller.is_segment_valid(scope, stream, active[0].segment_id)
    last = active or await last_segments(session, scope, stream)
    current_epoch = max((creation_epoch(s.segment_id) for s in last), default=0)
    head_cut, tail_cut = StreamCut(scope, stream, at_head.positions), StreamCut(scope, stream, {})
    between, history, subscribers = await asyncio.gather(
        controller.get_segments_between(head_cut, tail_cut),
        scale_history(session, scope, stream, current_epoch, args.history),
        controller.list_subscribers(scope, stream),
    )
    ranges = {s: key_range for epoch in history for s, key_range in epoch.segments.items()}
    ranges.update({s.segment_id: (s.key_start, s.key_end) for s in last})
    ids = [*between, *at_head.positions, *(s.segment_id for s in last)]
    views = await _segment_views(session, scope, stream, ids, ranges)
    head = {s: max(offset, views[s].start_offset) for s, offset in at_head.positions.items()}
    tail = {s.segment_id: views[s.segment_id].length for s in last}
    retained = tuple(views[s] for s in sorted(set(between) | set(head)))
    return StreamView(
        scope=scope,
        stream=stream,
        sealed=sealed,
        config=config,
        active=tuple(views[s.segment_id] for s in last),
        retained=retained,
        head=head,
        tail=tail,
        subscribers=tuple(subscribers),
        current_epoch=current_epoch,
        history=tuple(history),
    )
