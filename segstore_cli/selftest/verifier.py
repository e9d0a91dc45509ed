"""The self-tester's verifier: reads each stream in rounds, from the last cut it verified to a new tail cut.

A round takes the time ``t``, then the stream's tail cut (every event acknowledged before ``t`` is before it),
reads exactly the events between the previous cut and this one with a fresh ``StreamReader`` and hands them
to the ``Checker``. A round that fails (a fault cut it short) is read again whole, between the same two cuts,
so the rounds partition the stream: each event belongs to exactly one round. Cuts already verified are where
the fault schedule may truncate (nothing unread is ever truncated away).
"""

from __future__ import annotations

import asyncio
from collections import deque

from controller_client.model import StreamCut
from controller_client.stream_manager import StreamManager
from segment_store.client.errors import SegmentIsTruncatedError
from segstore_cli.selftest.checker import Checker
from segstore_cli.selftest.workload import EXPECTED

ROUND_ATTEMPT_TIMEOUT_S = 120.0


class Verifier:
    def __init__(
        self, manager: StreamManager, scope: str, streams: dict[str, bool], checker: Checker, interval_s: float
    ) -> None:
        """``streams``: stream name -> whether it holds plain events (whose acknowledgements are checked)."""
        self.manager, self.scope, self.streams, self.checker = manager, scope, streams, checker
        self.interval_s = interval_s
        self._last: dict[str, StreamCut | None] = dict.fromkeys(streams)
        self._verified: dict[str, deque[StreamCut]] = {s: deque(maxlen=4) for s in streams}
        self.rounds = 0
        self.retries = 0
        self.skipped_truncated = 0
        """Rounds that found their start truncated away and went on from the head (what was skipped is lost)."""
        self.last_error: BaseException | None = None

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await self.round()
            await asyncio.sleep(self.interval_s)

    async def round(self) -> None:
        """Verify every stream up to its current tail (retrying until it succeeds)."""
        for stream, plain in self.streams.items():
            await self._round(stream, plain)
        self.rounds += 1

    async def _round(self, stream: str, plain: bool) -> None:
        loop = asyncio.get_running_loop()
        while True:
            through = loop.time()
            try:
                async with asyncio.timeout(ROUND_ATTEMPT_TIMEOUT_S):
                    cut = await self.manager.tail_cut(self.scope, stream)
                    events = await self._read(stream, self._last[stream], cut)
            except SegmentIsTruncatedError as exc:  # data below the last verified cut was truncated away
                self.skipped_truncated += 1
                self.last_error = exc
                self._last[stream] = None  # the head
                continue
            except EXPECTED as exc:
                self.retries += 1
                self.last_error = exc
                await asyncio.sleep(1.0)
                continue
            self.checker.verified(events, through if plain else None, _describe(cut))
            self._last[stream] = cut
            self._verified[stream].append(cut)
            return

    async def _read(self, stream: str, start: StreamCut | None, end: StreamCut) -> list[bytes]:
        events: list[bytes] = []
        async with self.manager.create_reader(self.scope, stream, start=start, end=end) as reader:
            async for event in reader:
                events.append(event.data)
        return events

    def truncation_cut(self, stream: str) -> StreamCut | None:
        """A cut verified at least one round ago (None before there is one)."""
        cuts = self._verified[stream]
        return cuts[-2] if len(cuts) >= 2 else None


def _describe(cut: StreamCut) -> str:
    """``{segment id: offset}`` with segment ids as ``number.#epoch.e`` (as segment names spell them)."""
    positions = (f"{sid & 0xFFFFFFFF}.#epoch.{sid >> 32}: {offset}" for sid, offset in cut.positions.items())
    return "{" + ", ".join(positions) + "}"
