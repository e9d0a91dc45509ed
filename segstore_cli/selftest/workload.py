"""The self-tester's load: plain writers, a transactional writer and a reader following the tail.

Every event is encoded by ``events`` (its bytes derive from its id) and reported to the ``Checker``: a plain
event when its write is acknowledged, a transaction when it begins (its events) and when it ends (its
outcome). A writer that fails (its retries ran out during a fault) is closed and replaced by a new
incarnation with a new name; what it had not acknowledged may or may not be in the stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import uuid
from collections import Counter
from dataclasses import dataclass
from functools import partial

from controller_client.model import StreamCut, TxnState
from controller_client.readers.stream_reader import StreamReader
from controller_client.stream_manager import StreamManager
from controller_client.writers.event_writer import EventWriterConfig
from controller_client.writers.txn_writer import Transaction, TxnWriterConfig
from segstore_cli.selftest.checker import Checker, SequenceTracker, TxnOutcome
from segstore_cli.selftest.events import CorruptEvent, EventId, decode, encode
from segstore_shared.errors import SegstoreError

EXPECTED = (SegstoreError, OSError, TimeoutError)
"""What a fault may make a client call raise (anything else is a bug and ends the run)."""


@dataclass
class LoadStats:
    written: int = 0
    writer_failures: int = 0
    txns_begun: int = 0
    txn_failures: int = 0
    tail_read: int = 0
    tail_restarts: int = 0


class StallMeter:
    """The longest time without an acknowledgement of a plain event while the writers write: from :meth:`start` to
    :meth:`stop`, the longest gap between consecutive acknowledgements (of any writer), the first and last gaps
    included."""

    def __init__(self) -> None:
        self.longest_s = 0.0
        self.longest_from = 0.0
        """When (monotonic loop time) the longest gap began."""
        self._last: float | None = None

    def start(self, at: float) -> None:
        self._last = at

    def acked(self, at: float) -> None:
        if self._last is None:
            return
        if at - self._last > self.longest_s:
            self.longest_s, self.longest_from = at - self._last, self._last
        self._last = max(self._last, at)

    def stop(self, at: float) -> None:
        self.acked(at)
        self._last = None


class Pacer:
    """Spreads ``rate`` operations per second (a load generator's pacing, not a synchronization)."""

    def __init__(self, rate: float) -> None:
        self.interval = 1.0 / rate
        self._next = 0.0

    async def tick(self) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        self._next = max(self._next + self.interval, now - 1.0)
        if self._next > now:
            await asyncio.sleep(self._next - now)


class PlainWriter:
    """Writes events with ``keys`` routing keys at ``rate`` per second until ``stop``, then flushes."""

    def __init__(
        self, manager: StreamManager, scope: str, stream: str, name: str, checker: Checker, stats: LoadStats,
        keys: int, rate: float, seed: int, stalls: StallMeter | None = None,
    ) -> None:  # fmt: skip
        self.manager, self.scope, self.stream, self.name = manager, scope, stream, name
        self.stalls = stalls
        self.checker, self.stats = checker, stats
        self.keys = [f"k{i}" for i in range(keys)]
        self.pacer = Pacer(rate)
        self.rng = random.Random(seed)
        self.incarnation = 0
        self.last_error: BaseException | None = None
        self.last_acked: dict[str, tuple[EventId, float]] = {}
        """Per key, the last event of the current incarnation that was acknowledged, with the loop time it was
        handed to the writer."""

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            self.incarnation += 1
            source = f"{self.name}.{self.incarnation}"
            try:
                writer = await self.manager.create_writer(self.scope, self.stream, EventWriterConfig())
            except EXPECTED as exc:
                self._failed(exc)
                await asyncio.sleep(1.0)
                continue
            seqs = dict.fromkeys(self.keys, 0)
            self.last_acked = {}
            try:
                while not stop.is_set():
                    key = self.rng.choice(self.keys)
                    seqs[key] += 1
                    event = EventId("P", source, key, seqs[key])
                    sent_at = asyncio.get_running_loop().time()
                    future = await writer.write_event(encode(event), key)
                    future.add_done_callback(partial(self._on_ack, event, sent_at))
                    self.stats.written += 1
                    await self.pacer.tick()
                await writer.flush()
                await writer.close()
                return
            except EXPECTED as exc:
                self._failed(exc)
                with contextlib.suppress(*EXPECTED):
                    await writer.close()

    def _failed(self, exc: BaseException) -> None:
        self.stats.writer_failures += 1
        self.last_error = exc

    def _on_ack(self, event: EventId, sent_at: float, future: asyncio.Future[None]) -> None:
        if future.cancelled() or future.exception() is not None:
            return
        now = asyncio.get_running_loop().time()
        self.checker.acked(event, now)
        if self.stalls is not None:
            self.stalls.acked(now)
        last = self.last_acked.get(event.key)
        if event.source == f"{self.name}.{self.incarnation}" and (last is None or last[0].seq < event.seq):
            self.last_acked[event.key] = event, sent_at


class TxnWriter:
    """Transactions of a few events over several keys, committed (most) or aborted, one after another."""

    def __init__(
        self, manager: StreamManager, scope: str, stream: str, checker: Checker, stats: LoadStats, keys: int,
        rate: float, seed: int, lease_ms: int,
    ) -> None:  # fmt: skip
        self.manager, self.scope, self.stream = manager, scope, stream
        self.checker, self.stats = checker, stats
        self.keys = [f"k{i}" for i in range(keys)]
        self.pacer = Pacer(rate)
        self.rng = random.Random(seed)
        self.writer = manager.create_txn_writer(scope, stream, TxnWriterConfig(lease_ms=lease_ms))
        self.txns: dict[str, uuid.UUID] = {}
        self.last_error: BaseException | None = None

    async def run(self, stop: asyncio.Event) -> None:
        try:
            while not stop.is_set():
                await self._one()
                await self.pacer.tick()
        finally:
            with contextlib.suppress(*EXPECTED):
                await self.writer.close()

    async def _one(self) -> None:
        try:
            txn = await self.writer.begin()
        except EXPECTED as exc:
            self._failed(exc)
            await asyncio.sleep(1.0)
            return
        name = txn.txn_id.hex
        counts = {key: self.rng.randint(1, 4) for key in self.rng.sample(self.keys, 3)}
        self.txns[name] = txn.txn_id
        self.checker.txn_begun(name, counts)
        self.stats.txns_begun += 1
        commit = self.rng.random() < 0.8
        try:
            for key, count in counts.items():
                for seq in range(1, count + 1):
                    await txn.write_event(encode(EventId("T", name, key, seq)), key)
            if commit:
                await txn.commit()
                self.checker.txn_ended(name, TxnOutcome.COMMITTED)
            else:
                await txn.abort()
                self.checker.txn_ended(name, TxnOutcome.ABORTED)
        except EXPECTED as exc:
            self._failed(exc)
            self.checker.txn_ended(name, await self._abort_after_failure(txn, committing=commit))

    async def _abort_after_failure(self, txn: Transaction, committing: bool) -> TxnOutcome:
        if txn.is_open:
            with contextlib.suppress(*EXPECTED):
                await txn.abort()
                return TxnOutcome.ABORTED
        return TxnOutcome.UNKNOWN

    def _failed(self, exc: BaseException) -> None:
        self.stats.txn_failures += 1
        self.last_error = exc

    async def resolve(self, deadline_s: float) -> None:
        """Ask the controller how every transaction with an unknown outcome ended (an open one is aborted by its
        lease running out), and wait until every committed one is merged (COMMITTED, not COMMITTING). One the
        controller no longer knows (UNKNOWN: it forgets outcomes ``completed_txn_ttl_s`` after they completed) is
        resolved: :meth:`Checker.finish` then checks that the final reads hold all of its events or none."""
        loop = asyncio.get_running_loop()
        end = loop.time() + deadline_s
        waiting = set(self.checker.unresolved_txns()) | set(self.checker.committed_txns())
        last: dict[str, str] = {}  # what the controller last said of each, for the failure
        while waiting:
            for name in list(waiting):
                try:
                    state = await self.manager.controller.check_transaction_state(
                        self.scope, self.stream, self.txns[name]
                    )
                except EXPECTED as exc:
                    last[name] = type(exc).__name__
                    continue
                last[name] = state.name
                if state is TxnState.COMMITTED:
                    self.checker.txn_ended(name, TxnOutcome.COMMITTED)
                    waiting.discard(name)
                elif state is TxnState.ABORTED:
                    self.checker.txn_ended(name, TxnOutcome.ABORTED)
                    waiting.discard(name)
                elif state is TxnState.UNKNOWN:  # completed longer ago than the controller keeps outcomes
                    waiting.discard(name)  # (completed_txn_ttl_s, an hour): the final reads show it whole or absent
            if waiting and loop.time() > end:
                states = Counter(last.get(name, "not asked") for name in waiting)
                said = ", ".join(f"{state} {count}" for state, count in sorted(states.items()))
                raise TimeoutError(
                    f"{len(waiting)} transactions still not committed or aborted ({said}): {sorted(waiting)[:3]}"
                )
            if waiting:
                await asyncio.sleep(0.5)


class TailReader:
    """Follows the tail of a stream, checking that it reads each event once and each key in order. After a
    failure it starts again at the then tail (a new incarnation with fresh order checks)."""

    def __init__(self, manager: StreamManager, scope: str, stream: str, checker: Checker, stats: LoadStats) -> None:
        self.manager, self.scope, self.stream = manager, scope, stream
        self.checker, self.stats = checker, stats
        self.last_error: BaseException | None = None
        self.order = SequenceTracker()
        self.reader: StreamReader | None = None
        """The current incarnation's reader."""
        self.started_at = 0.0
        """Loop time at which the current incarnation had the tail it starts at: it reads every event handed to a
        writer after that (appended after the lengths in its start cut), none acknowledged before it asked."""

    async def describe(self) -> str:
        """Where the current incarnation's reader is, for a report that it stopped: per segment it reads, its
        offset and the segment's length now (``?`` if that cannot be asked), the successors it waits to start
        and the segments that ended without one."""
        reader = self.reader
        if reader is None:
            return "no reader"
        parts = []
        for segment_id, offset in sorted(reader.positions().items()):
            try:
                length: object = (await self.manager.segment_info(self.scope, self.stream, segment_id)).write_offset
            except EXPECTED:
                length = "?"
            parts.append(f"{segment_id} at {offset} of {length}")
        waiting = ", ".join(f"{s} after {sorted(p)}" for s, p in sorted(reader.waiting().items()))
        return (
            f"reading segments {'; '.join(parts) or 'none'}; waiting {waiting or 'none'}; ended without successors "
            f"{reader.ended_without_successors or 'none'}"
        )

    def has_read(self, event: EventId) -> bool:
        """Whether the current incarnation read ``event``."""
        return self.order.has(event)

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                start: StreamCut = await self.manager.tail_cut(self.scope, self.stream)
                self.started_at = asyncio.get_running_loop().time()
                await self._follow(start, stop)
                if not stop.is_set():  # the reader ended: it found no segment left to read (a restart too)
                    self.stats.tail_restarts += 1
                    self.last_error = EOFError("the reader ended: no segment left to read")
            except EXPECTED as exc:
                self.stats.tail_restarts += 1
                self.last_error = exc
                await asyncio.sleep(0.5)

    async def _follow(self, start: StreamCut, stop: asyncio.Event) -> None:
        self.order = order = SequenceTracker()
        async with self.manager.create_reader(self.scope, self.stream, start=start) as reader:
            self.reader = reader
            while not stop.is_set():
                try:
                    event = await reader.next_event(timeout_s=1.0)
                except TimeoutError:
                    continue
                if event is None:
                    return
                try:
                    breach = order.read(decode(event.data))
                except CorruptEvent as exc:
                    self.checker.live_breach("corrupted", f"tail reader: {exc}")
                    continue
                self.stats.tail_read += 1
                if breach is not None:
                    self.checker.live_breach(breach, f"tail reader: segment {event.segment_id} @{event.offset}")
