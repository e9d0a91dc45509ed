"""The self-tester's oracle: what was acknowledged against what was read (sans I/O, deterministic).

Invariants checked (each breach is counted and described; every count must end at 0):

- **lost**: a plain event acknowledged at time ``t`` is read in the first verification round whose end cut
  was taken after ``t`` (the verifier reads consecutive stream cuts, each taken after the acknowledgements it
  must cover); a committed transaction's events are all read by the end.
- **late** (instead of lost, once it is read after all): an event acknowledged before a tail cut was asked for
  was beyond that cut and read in a later round: nothing was lost, but the tail cut was stale (it did not
  include an acknowledged write), which breaks a reader's "everything written so far" as surely.
- **duplicated**: no event is read twice (the verifier's rounds partition the stream).
- **reordered**: per writer (or transaction) and routing key, events are read in the order they were written.
- **corrupted**: every event read decodes to exactly the bytes its writer wrote (see ``events``); a
  transaction id nobody began is corrupt too.
- **aborted visible**: no event of an aborted transaction is ever read.
- **partial transactions**: a committed transaction is read whole; one whose outcome is unknown (its commit
  or abort was cut by a fault) is read whole or not at all.

Events that were written but never acknowledged may be read or not (at most once, in order).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field

from segstore_cli.selftest.events import CorruptEvent, EventId, decode

MAX_EXAMPLES = 20


class TxnOutcome(enum.Enum):
    OPEN = "open"
    COMMITTED = "committed"
    ABORTED = "aborted"
    UNKNOWN = "unknown"


@dataclass
class Counts:
    """What the checker saw; the fields below ``read_txn`` are violations."""

    acked: int = 0
    read: int = 0
    read_txn: int = 0
    lost: int = 0
    duplicated: int = 0
    reordered: int = 0
    corrupted: int = 0
    aborted_visible: int = 0
    partial_txns: int = 0
    late: int = 0

    VIOLATIONS = ("lost", "duplicated", "reordered", "corrupted", "aborted_visible", "partial_txns", "late")

    def violations(self) -> int:
        return sum(getattr(self, name) for name in self.VIOLATIONS)


class _Bits:
    """A growable set of small positive ints."""

    __slots__ = ("_bits", "count")

    def __init__(self) -> None:
        self._bits = bytearray()
        self.count = 0

    def __contains__(self, n: int) -> bool:
        byte = n >> 3
        return byte < len(self._bits) and bool(self._bits[byte] & (1 << (n & 7)))

    def add(self, n: int) -> None:
        byte = n >> 3
        if byte >= len(self._bits):
            self._bits.extend(bytes(byte - len(self._bits) + 1 + len(self._bits) // 2))
        if not self._bits[byte] & (1 << (n & 7)):
            self._bits[byte] |= 1 << (n & 7)
            self.count += 1


@dataclass
class _KeyRun:
    """The events of one (writer or transaction, key) read so far."""

    last: int = 0
    seen: _Bits = field(default_factory=_Bits)


class SequenceTracker:
    """Exactly once and in order per (kind, source, key); returns what a read breaks."""

    def __init__(self) -> None:
        self._runs: dict[tuple[str, str, str], _KeyRun] = {}

    def read(self, event: EventId) -> str | None:
        """None if ``event`` is new and after every event of its key read so far; else "duplicated" or
        "reordered" (it is recorded either way)."""
        run = self._runs.setdefault((event.kind, event.source, event.key), _KeyRun())
        if event.seq in run.seen:
            return "duplicated"
        run.seen.add(event.seq)
        if event.seq < run.last:
            return "reordered"
        run.last = event.seq
        return None

    def has(self, event: EventId) -> bool:
        run = self._runs.get((event.kind, event.source, event.key))
        return run is not None and event.seq in run.seen

    def count(self, kind: str, source: str, key: str) -> int:
        run = self._runs.get((kind, source, key))
        return run.seen.count if run is not None else 0


@dataclass
class _Txn:
    keys: dict[str, int]
    outcome: TxnOutcome = TxnOutcome.OPEN


class Checker:
    """Feed it acknowledgements, verification rounds and transaction outcomes; read :attr:`counts`."""

    def __init__(self) -> None:
        self.counts = Counts()
        self.examples: list[str] = []
        self._order = SequenceTracker()
        self._unread_acks: dict[EventId, float] = {}
        self._missed: dict[EventId, str] = {}
        """Events counted lost, by the end cut of the round that missed them (:meth:`_read` makes them late)."""
        self._txns: dict[str, _Txn] = {}

    def _violation(self, kind: str, text: str, n: int = 1) -> None:
        setattr(self.counts, kind, getattr(self.counts, kind) + n)
        if len(self.examples) < MAX_EXAMPLES:
            self.examples.append(f"{kind}: {text}")

    # ---- writers --------------------------------------------------------------------------------------------

    def acked(self, event: EventId, at: float) -> None:
        """A plain event's write was acknowledged at (monotonic) time ``at``."""
        self.counts.acked += 1
        if not self._order.has(event):  # else it was read before its acknowledgement arrived
            self._unread_acks[event] = at

    def txn_begun(self, txn: str, keys: dict[str, int]) -> None:
        """Transaction ``txn`` holds ``keys[k]`` events of key ``k`` (numbered 1..n), written before it ends."""
        self._txns[txn] = _Txn(dict(keys))

    def txn_ended(self, txn: str, outcome: TxnOutcome) -> None:
        state = self._txns[txn]
        state.outcome = outcome
        if outcome is TxnOutcome.ABORTED:
            seen = sum(self._order.count("T", txn, key) for key in state.keys)
            if seen:
                self._violation("aborted_visible", f"transaction {txn} was aborted but {seen} of its events were read")

    def unresolved_txns(self) -> list[str]:
        return [t for t, s in self._txns.items() if s.outcome in (TxnOutcome.OPEN, TxnOutcome.UNKNOWN)]

    def committed_txns(self) -> list[str]:
        return [t for t, s in self._txns.items() if s.outcome is TxnOutcome.COMMITTED]

    # ---- the verifier ---------------------------------------------------------------------------------------

    def live_breach(self, kind: str, text: str) -> None:
        """A reader following the tail read an event twice, out of order, or corrupt."""
        self._violation(kind, text)

    def verified(self, round_events: Iterable[bytes], through: float | None, cut: str = "") -> None:
        """One verification round: the events between two consecutive stream cuts, the second (``cut``, for the
        report) taken at time ``through``; every plain event acknowledged before ``through`` has now been read
        (None: a stream of transactions only, nothing to check)."""
        for data in round_events:
            self._read(data)
        if through is None:
            return
        missing = [e for e, at in self._unread_acks.items() if at <= through]
        for event in missing:
            del self._unread_acks[event]
            self._missed[event] = cut
            self._violation("lost", f"{event} was acknowledged and is not in the stream (up to the tail cut {cut})")

    def _read(self, data: bytes) -> None:
        try:
            event = decode(data)
        except CorruptEvent as exc:
            self._violation("corrupted", str(exc))
            return
        if event.kind == "T":
            txn = self._txns.get(event.source)
            if txn is None or event.seq > txn.keys.get(event.key, 0):
                self._violation("corrupted", f"{event}: no transaction wrote it")
                return
            self.counts.read_txn += 1
            if txn.outcome is TxnOutcome.ABORTED:
                self._violation("aborted_visible", f"{event} of an aborted transaction was read")
        else:
            self.counts.read += 1
            self._unread_acks.pop(event, None)
            cut = self._missed.pop(event, None)
            if cut is not None:  # counted lost by an earlier round: it was there, beyond that round's cut
                self.counts.lost -= 1
                self.examples = [e for e in self.examples if not e.startswith(f"lost: {event} ")]  # not lost: late
                self._violation(
                    "late", f"{event} was acknowledged before the tail cut {cut} was taken, but is after it"
                )
        breach = self._order.read(event)
        if breach is not None:
            self._violation(breach, f"{event} was read {'again' if breach == 'duplicated' else 'out of order'}")

    def finish(self) -> None:
        """After the last round (everything healed, every transaction resolved): transactions are whole."""
        for txn, state in self._txns.items():
            expected = sum(state.keys.values())
            seen = sum(self._order.count("T", txn, key) for key in state.keys)
            if state.outcome is TxnOutcome.COMMITTED and seen != expected:
                self._violation("partial_txns", f"committed transaction {txn}: {seen} of {expected} events read")
            elif state.outcome in (TxnOutcome.UNKNOWN, TxnOutcome.OPEN) and seen not in (0, expected):
                self._violation("partial_txns", f"transaction {txn} ({state.outcome.value}): {seen} of {expected}")
