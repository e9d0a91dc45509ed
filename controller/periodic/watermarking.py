"""Computing a stream's watermarks from its writers' marks (Pravega's ``PeriodicWatermarking``, seed 003).

Run by the owner of the stream's bucket every ``watermark_period_s`` (:mod:`controller.periodic.background`). A round:

1. reads the writers' marks (``noteTimestampFromWriter``: a time and a position, per writer) and the previous
   watermark (the last event of the mark segment ``<scope>/_MARK<stream>/0.#epoch.0``, read once per stream
   per controller, then followed in memory);
2. a writer *participates* when its time is after the previous watermark's lower bound. A writer that does not
   is tracked from the first round that sees it so; it is *inactive* once it has been so for the stream's
   ``timestamp_aggregation_timeout_ms`` (0: at once) or once it was removed (``removeWriter``): its mark is
   deleted and it no longer holds watermarks back;
3. when every active writer participates, the watermark is: time bounds = min and max of their times (emitted
   only if the lower bound is above the previous one's, so watermarks never move backwards); stream cut = the
   least upper bound of their positions, made a complete cut by filling missing key ranges with segments of the
   highest epoch at offset 0, and never below the previous watermark's cut;
4. it is appended to the mark segment with a conditional append at the end the previous read found, so two
   controllers that both believe they own the bucket cannot interleave (the loser re-reads the segment).

Invariants: lower bounds strictly increase along the mark segment; each cut is at or after the previous one on
every key; a writer's events after its noted position have times >= its noted time (its promise, as in
Pravega), and the cut is at or after every live writer's position, so every event after a watermark's cut by a
live writer has a time >= the lower bound.

Part of :mod:`controller.periodic`: imports the metadata store, :mod:`controller.policies.cuts`, the segment store
calls, the segment client and the wire codec, none of the other periodic rounds.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from controller.metadata import StreamMetadataStore
from controller.metadata import errors as md
from controller.metadata.records import WriterMark
from controller.policies.cuts import add_to_upper_bound, missing_ranges
from controller.segment_ops import SegmentStoreOps
from controller_client.model import ScalingPolicy, creation_epoch, qualified_segment_name
from controller_client.watermarks import SegmentWithRange, Watermark, WatermarkFormatError, mark_stream
from segment_store.client import ConditionalCheckFailedError, NoSuchSegmentError, SegmentClient
from segment_store.protocol import parse_events

log = logging.getLogger(__name__)

READ_CHUNK = 1 << 20


def mark_segment(scope: str, stream: str) -> str:
    return qualified_segment_name(scope, mark_stream(stream), 0)


@dataclass(slots=True)
class _StreamState:
    previous: Watermark | None
    end: int
    """The mark segment's length after ``previous`` (where the next watermark is appended)."""
    inactive_since: dict[str, int] = field(default_factory=dict)


class Watermarking:
    """The watermark rounds of the streams this controller owns; state per stream, in memory."""

    def __init__(self, store: StreamMetadataStore, ops: SegmentStoreOps, clock_ms: Callable[[], int]) -> None:
        self._store = store
        self._ops = ops
        self._clock_ms = clock_ms
        self._streams: dict[tuple[str, str], _StreamState] = {}
        self.emitted = 0

    def forget(self, scope: str, stream: str) -> None:
        self._streams.pop((scope, stream), None)

    async def run(self, scope: str, stream: str) -> Watermark | None:
        """One round for the stream; the watermark emitted, if any."""
        if stream.startswith("_"):
            return None  # internal streams (marks, reader groups, tables) have no watermarks
        marks = await self._store.list_writer_marks(scope, stream)
        if not marks:
            return None
        config = await self._store.get_configuration(scope, stream)
        state = await self._state(scope, stream)
        now = self._clock_ms()
        active: dict[str, WriterMark] = {}
        waiting = False
        for writer, mark in marks.items():
            if self._participates(state, mark.timestamp):
                state.inactive_since.pop(writer, None)
                active[writer] = mark
                continue
            since = state.inactive_since.setdefault(writer, now)
            if mark.alive and now - since < config.timestamp_aggregation_timeout_ms:
                active[writer] = mark
                waiting = True  # an active writer has not reported past the previous watermark yet
            else:
                await self._drop(scope, stream, writer, mark, state)
        if not active or waiting:
            return None
        lower = min(m.timestamp for m in active.values())
        if state.previous is not None and lower <= state.previous.lower_time_bound:
            return None
        upper = max(m.timestamp for m in active.values())
        cut = await self._stream_cut(scope, stream, active.values(), state.previous)
        return await self._emit(scope, stream, state, Watermark(lower, upper, cut))

    @staticmethod
    def _participates(state: _StreamState, time: int) -> bool:
        return state.previous is None or time > state.previous.lower_time_bound

    async def _drop(self, scope: str, stream: str, writer: str, mark: WriterMark, state: _StreamState) -> None:
        with contextlib.suppress(md.WriteConflictError, md.DataNotFoundError):
            await self._store.remove_writer(scope, stream, writer, mark)
            log.info("writer %s of %s/%s no longer holds watermarks back", writer, scope, stream)
        state.inactive_since.pop(writer, None)

    # ---- the stream cut -------------------------------------------------------------------------------------
    async def _stream_cut(
        self, scope: str, stream: str, marks: Iterable[WriterMark], previous: Watermark | None
    ) -> dict[SegmentWithRange, int]:
        ranges: dict[int, SegmentWithRange] = {}
        upper: dict[SegmentWithRange, int] = {}
        for mark in marks:
            position: dict[SegmentWithRange, int] = {}
            for segment_id, offset in mark.position.items():
                if segment_id not in ranges:
                    record = await self._store.get_segment(scope, stream, segment_id)
                    ranges[segment_id] = SegmentWithRange(segment_id, record.key_start, record.key_end)
                position[ranges[segment_id]] = offset
            add_to_upper_bound(position, upper)
        if previous is not None:
            add_to_upper_bound(previous.stream_cut, upper)
        while missing := missing_ranges(upper):
            highest = max(creation_epoch(s.segment_id) for s in upper) if upper else 0
            epoch = await self._store.get_epoch(scope, stream, highest)
            fillers = {
                SegmentWithRange(s.segment_id, s.key_start, s.key_end): 0
                for s in epoch.segments
                if any(s.key_start < high and s.key_end > low for low, high in missing)
            }
            before = dict(upper)
            add_to_upper_bound(fillers, upper)
            if upper == before:
                raise md.DataNotFoundError(f"epoch {highest} does not cover {missing}", scope=scope, name=stream)
        return upper

    # ---- the mark segment -----------------------------------------------------------------------------------
    async def _state(self, scope: str, stream: str) -> _StreamState:
        state = self._streams.get((scope, stream))
        if state is None:
            state = await self._read_previous(scope, stream)
            self._streams[(scope, stream)] = state
        return state

    async def _read_previous(self, scope: str, stream: str) -> _StreamState:
        """The last watermark of the mark segment (created empty if missing) and the segment's length."""
        name = mark_segment(scope, stream)
        await self._ops.create_named_segment(name, ScalingPolicy.fixed(1))
        client: SegmentClient = self._ops.client
        info = await client.get_segment_info(name)
        offset, end = info.start_offset, info.write_offset
        previous: Watermark | None = None
        data = bytearray()
        while offset + len(data) < end:
            chunk = await client.read_segment(name, offset + len(data), min(READ_CHUNK, end - offset - len(data)))
            data += chunk.data
        for event in parse_events(bytes(data), offset):
            with contextlib.suppress(WatermarkFormatError):
                previous = Watermark.decode(event.data)
        return _StreamState(previous, end)

    async def _emit(self, scope: str, stream: str, state: _StreamState, watermark: Watermark) -> Watermark | None:
        name = mark_segment(scope, stream)
        writer = self._ops.client.conditional_writer(name)
        try:
            await writer.open()
            state.end = await writer.append(watermark.encode(), state.end)
        except (ConditionalCheckFailedError, NoSuchSegmentError):
            self._streams.pop((scope, stream), None)  # someone else wrote (or deleted it): read it again
            return None
        finally:
            await writer.close()
        state.previous = watermark
        self.emitted += 1
        log.debug("watermark of %s/%s: [%d, %d]", scope, stream, watermark.lower_time_bound, watermark.upper_time_bound)
        return watermark
